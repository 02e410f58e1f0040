"""MiniGrid / BabyAI as text, in the spirit of BabyAI-Text (GLAM, Carta et al. 2023).

The agent sees a 7 x 7 window in front of it (minigrid's egocentric ``image``: object, colour and
state per cell, the agent at the bottom middle facing up). The text says what a person would want
to know to act: the mission, which way the agent faces, what is directly in front, each visible
object with its colour and position relative to the agent ("a green key 2 steps ahead and 1 to
the right"), how far the walls are straight ahead and to each side, doors open/closed/locked, and
what it carries. ``minigrid`` itself is not imported here: its encoding tables are copied below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

#: minigrid.core.constants (3.x): object, colour and door-state indices in the image encoding.
OBJECTS = (
    "unseen",
    "empty",
    "wall",
    "floor",
    "door",
    "key",
    "ball",
    "box",
    "goal",
    "lava",
    "agent",
)
COLORS = ("red", "green", "blue", "purple", "yellow", "grey")
DOOR_STATES = ("open", "closed", "locked")
#: The agent's direction (0: +x) as a compass heading on minigrid's map (y grows downwards).
HEADINGS = ("east", "south", "west", "north")

ACTION_NAMES = ("left", "right", "forward", "pickup", "drop", "toggle", "done")
ACTION_ALIASES: Mapping[str, tuple[str, ...]] = {
    "left": ("turn left",),
    "right": ("turn right",),
    "forward": ("move forward", "go forward", "ahead"),
    "pickup": ("pick up", "pick it up"),
    "drop": ("put down",),
    "toggle": ("open", "open the door"),
}
_WHAT_ACTIONS_DO = (
    "'left' turns you left, 'right' turns you right, 'forward' moves you one step ahead, "
    "'pickup' picks up the object in front of you, 'drop' drops what you carry in front of you, "
    "'toggle' opens or closes the door (or opens the box) in front of you, and 'done' says the "
    "mission is complete."
)


def is_minigrid(env: gym.Env[Any, Any]) -> bool:
    """Whether ``env`` is a MiniGrid/BabyAI env (any subclass of ``MiniGridEnv``)."""
    return any(cls.__name__ == "MiniGridEnv" for cls in type(env.unwrapped).__mro__)


def _steps(n: int, ahead: bool) -> str:
    unit = "step" if n == 1 else "steps"
    return f"{n} {unit} ahead" if ahead else f"{n} {unit}"


def relative_position(x: int, y: int, size: int = 7) -> str:
    """A cell of the agent's view as words: the agent is at ``(size // 2, size - 1)`` facing
    ``-y``; ``(x, y)`` is ``size - 1 - y`` steps ahead and ``x - size // 2`` to the right."""
    ahead, right = size - 1 - y, x - size // 2
    parts = []
    if ahead:
        parts.append(_steps(ahead, ahead=True))
    if right:
        parts.append(f"{abs(right)} to the {'right' if right > 0 else 'left'}")
    return " and ".join(parts) if parts else "where you stand"


def _thing(obj: int, color: int, state: int) -> str:
    name = OBJECTS[obj]
    if name in ("wall", "empty", "floor", "unseen"):
        return {"empty": "nothing", "unseen": "something you cannot see"}.get(name, f"a {name}")
    if name == "goal":
        return "the goal"
    if name == "lava":
        return "lava"
    if name == "door":
        words = f"{DOOR_STATES[state]} {COLORS[color]} door"
        return ("an " if words[0] in "aeiou" else "a ") + words
    return f"a {COLORS[color]} {name}"


def _wall_distance(image: np.ndarray, cells: list[tuple[int, int]]) -> int | None:
    for distance, (x, y) in enumerate(cells, start=1):
        if OBJECTS[int(image[x, y, 0])] == "wall":
            return distance
    return None


def describe_view(image: np.ndarray, direction: int, mission: str, carrying: Any = None) -> str:
    """The text of one MiniGrid observation (``image``: the agent's ``(7, 7, 3)`` view)."""
    size = image.shape[0]
    cx, cy = size // 2, size - 1
    lines = [f"Mission: {mission}.", f"You face {HEADINGS[int(direction) % 4]}."]
    front = image[cx, cy - 1]
    lines.append(f"Directly in front of you: {_thing(*(int(v) for v in front))}.")
    seen = []
    for y in range(size - 1, -1, -1):  # nearest rows first
        for x in range(size):
            obj = OBJECTS[int(image[x, y, 0])]
            if obj in ("unseen", "empty", "wall", "floor", "agent") or (x, y) == (cx, cy):
                continue
            thing = _thing(*(int(v) for v in image[x, y]))
            seen.append(f"{thing} {relative_position(x, y, size)}")
    lines.append("You see: " + ("; ".join(seen) if seen else "no objects") + ".")
    walls = {
        "ahead": _wall_distance(image, [(cx, y) for y in range(cy - 1, -1, -1)]),
        "to the left": _wall_distance(image, [(x, cy) for x in range(cx - 1, -1, -1)]),
        "to the right": _wall_distance(image, [(x, cy) for x in range(cx + 1, size)]),
    }
    known = [f"{_steps(d, ahead=False)} {where}" for where, d in walls.items() if d is not None]
    if known:
        lines.append("Walls: " + ", ".join(known) + ".")
    held = "nothing" if carrying is None else f"a {carrying.color} {carrying.type}"
    lines.append(f"You carry {held}.")
    return "\n".join(lines)


def minigrid_formatter(env: gym.Env[Any, Any]) -> Callable[[Any, dict[str, Any]], str]:
    """The formatter of a MiniGrid env's dict observation (``carrying`` read off the env)."""
    unwrapped = env.unwrapped

    def format_obs(obs: Any, info: dict[str, Any]) -> str:
        return describe_view(
            np.asarray(obs["image"]),
            int(obs["direction"]),
            str(obs["mission"]),
            getattr(unwrapped, "carrying", None),
        )

    return format_obs


def minigrid_instruction(env: gym.Env[Any, Any]) -> str:
    return (
        "You are an agent in a grid world. You see the cells in front of you and to your sides; "
        "walls and closed doors block your way and your view. Complete the mission in as few "
        f"steps as you can. {_WHAT_ACTIONS_DO} Answer with one action."
    )
