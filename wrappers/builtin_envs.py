"""Text for Gymnasium's toy-text and classic-control envs: formatters, instructions, action names.

Each table entry is looked up by the class of ``env.unwrapped`` (so ``FrozenLake8x8-v1`` and an env
built from the class directly both match). The formatters draw grids and name quantities with
units because that is what lets a pretrained LM use what it knows; the generic formatter would
give a bare state index.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from gym_llm.wrappers import minigrid_text
from gym_llm.wrappers.formatters import format_number

#: ``(obs, info) -> str``
ObsFormatter = Callable[[Any, dict[str, Any]], str]


@dataclass(frozen=True)
class EnvText:
    """How one built-in env is shown to and driven by a language model."""

    #: Builds the formatter from the unwrapped env (grids and maps live on it).
    formatter: Callable[[gym.Env[Any, Any]], ObsFormatter]
    #: Builds the default instruction (rules, goal, what a good outcome is).
    instruction: Callable[[gym.Env[Any, Any]], str]
    #: Names of the Discrete actions in index order, or ``None`` for continuous actions.
    action_names: tuple[str, ...] | None
    #: Other words models use for an action (``{"stick": ("stand", "stay")}``).
    action_aliases: Mapping[str, tuple[str, ...]] | None = None


def _grid_text(rows: list[list[str]]) -> str:
    return "\n".join("".join(row) for row in rows)


# --- Blackjack -------------------------------------------------------------------------------


def _blackjack_formatter(env: gym.Env[Any, Any]) -> ObsFormatter:
    def fmt(obs: Any, info: dict[str, Any]) -> str:
        player, dealer, usable_ace = (int(x) for x in obs)
        card = "an ace" if dealer == 1 else f"a {dealer}"
        ace = "yes (one ace counts as 11)" if usable_ace else "no"
        return f"Your hand totals {player}. Usable ace: {ace}.\nThe dealer shows {card}."

    return fmt


def _blackjack_instruction(env: gym.Env[Any, Any]) -> str:
    natural = bool(getattr(env.unwrapped, "natural", False))
    return (
        "You are playing blackjack against a dealer. Each turn you see the total of your hand, "
        "the dealer's face-up card and whether you hold a usable ace (an ace counted as 11 without "
        "going over 21). Choose 'hit' to take another card or 'stick' to stop; then the dealer "
        "draws until reaching 17 or more. Going over 21 loses at once. Otherwise the hand closer to "
        "21 wins: reward +1 for a win, -1 for a loss, 0 for a draw"
        + (", +1.5 for a natural blackjack" if natural else "")
        + ". Goal: the highest average reward. Good play sticks on high totals and hits on low ones, "
        "taking the dealer's card into account."
    )


# --- FrozenLake ------------------------------------------------------------------------------


def _frozenlake_formatter(env: gym.Env[Any, Any]) -> ObsFormatter:
    unwrapped: Any = env.unwrapped
    desc = [[c.decode() for c in row] for row in unwrapped.desc]
    ncol = int(unwrapped.ncol)

    def fmt(obs: Any, info: dict[str, Any]) -> str:
        row, col = divmod(int(obs), ncol)
        grid = [list(r) for r in desc]
        grid[row][col] = "@"
        return f"You (@) are at row {row}, column {col}.\n{_grid_text(grid)}"

    return fmt


def _frozenlake_instruction(env: gym.Env[Any, Any]) -> str:
    unwrapped: Any = env.unwrapped
    slippery = any(len(unwrapped.P[s][a]) > 1 for s in unwrapped.P for a in unwrapped.P[s])
    return (
        "You walk on a frozen lake drawn as a grid (row 0 at the top, column 0 on the left): "
        "S is the start, F frozen ice (safe), H a hole, G the goal, and @ is you. Move left, down, "
        "right or up; walking into the edge leaves you where you are. "
        + (
            "The ice is slippery: you move in the chosen direction only one time in three, "
            "otherwise to one of the two sides. "
            if slippery
            else "The ice is not slippery: you always move where you choose. "
        )
        + "Falling into a hole ends the episode with reward 0; reaching G gives reward 1. "
        "Goal: reach G without falling into a hole."
    )


# --- CliffWalking ----------------------------------------------------------------------------


def _cliffwalking_formatter(env: gym.Env[Any, Any]) -> ObsFormatter:
    nrow, ncol = (int(x) for x in env.unwrapped.shape)  # type: ignore[attr-defined]

    def fmt(obs: Any, info: dict[str, Any]) -> str:
        row, col = divmod(int(obs), ncol)
        grid = [["."] * ncol for _ in range(nrow)]
        grid[nrow - 1] = ["S"] + ["C"] * (ncol - 2) + ["G"]
        grid[row][col] = "@"
        return f"You (@) are at row {row}, column {col}.\n{_grid_text(grid)}"

    return fmt


def _cliffwalking_instruction(env: gym.Env[Any, Any]) -> str:
    slippery = bool(getattr(env.unwrapped, "is_slippery", False))
    return (
        "You walk on a grid (row 0 at the top, column 0 on the left): S is the start, G the goal, "
        "C the edge of a cliff, . safe ground, and @ is you. Move up, right, down or left. "
        "Every step costs -1; stepping onto the cliff costs -100 and sends you back to S. "
        + ("The ground is slippery: you sometimes move sideways. " if slippery else "")
        + "Goal: reach G with the highest total reward, i.e. in as few steps as possible "
        "without touching the cliff (the best path takes 13 steps, total -13)."
    )


# --- Taxi ------------------------------------------------------------------------------------

_TAXI_STATIONS = ("R", "G", "Y", "B")


def _taxi_formatter(env: gym.Env[Any, Any]) -> ObsFormatter:
    unwrapped: Any = env.unwrapped
    desc = [[c.decode() for c in row] for row in unwrapped.desc]
    locs = [tuple(int(v) for v in loc) for loc in unwrapped.locs]

    def fmt(obs: Any, info: dict[str, Any]) -> str:
        taxi_row, taxi_col, passenger, destination = unwrapped.decode(int(obs))
        grid = [list(r) for r in desc]
        grid[1 + taxi_row][2 * taxi_col + 1] = "@"
        if passenger == 4:
            where = "in the taxi"
        else:
            where = f"waiting at station {_TAXI_STATIONS[passenger]} {locs[passenger]}"
        dest = _TAXI_STATIONS[destination]
        return (
            f"The taxi (@) is at row {taxi_row}, column {taxi_col}. The passenger is {where}. "
            f"The destination is station {dest} {locs[destination]}.\n{_grid_text(grid)}"
        )

    return fmt


def _taxi_instruction(env: gym.Env[Any, Any]) -> str:
    return (
        "You drive a taxi on a 5x5 grid (row 0 at the top, column 0 on the left) with four "
        "stations R, G, Y and B. @ is the taxi; '|' is a wall that blocks east/west moves; ':' is "
        "open. Drive to the passenger, 'pickup', drive to the destination and 'dropoff'. Moves are "
        "south (down), north (up), east (right) and west (left). Each step costs -1, a successful "
        "drop-off gives +20, and a pickup or dropoff in the wrong place costs -10. "
        "Goal: deliver the passenger in as few steps as possible."
    )


# --- Classic control -------------------------------------------------------------------------


def _deg(radians: float) -> str:
    return format_number(math.degrees(radians), 3)


def _cartpole_formatter(env: gym.Env[Any, Any]) -> ObsFormatter:
    def fmt(obs: Any, info: dict[str, Any]) -> str:
        x, x_dot, theta, theta_dot = (float(v) for v in np.asarray(obs))
        lean = "leaning right" if theta > 0 else "leaning left" if theta < 0 else "upright"
        return (
            f"Cart position: {format_number(x)} m (the track ends at ±2.4 m)\n"
            f"Cart velocity: {format_number(x_dot)} m/s (positive = moving right)\n"
            f"Pole angle: {_deg(theta)}° from upright, {lean} (the episode ends beyond ±12°)\n"
            f"Pole angular velocity: {format_number(theta_dot)} rad/s (positive = falling right)"
        )

    return fmt


def _cartpole_instruction(env: gym.Env[Any, Any]) -> str:
    return (
        "You balance a pole hinged on a cart that moves along a track. Each step, push the cart "
        "left or right. Reward +1 for every step the pole stays up; the episode ends when the pole "
        "leans more than 12° or the cart leaves the track (±2.4 m), or after 500 steps. "
        "Tip: push the cart in the direction the pole is falling. Goal: keep it up for 500 steps."
    )


def _mountaincar_formatter(env: gym.Env[Any, Any]) -> ObsFormatter:
    def fmt(obs: Any, info: dict[str, Any]) -> str:
        position, velocity = (float(v) for v in np.asarray(obs))
        motion = "moving right" if velocity > 0 else "moving left" if velocity < 0 else "at rest"
        return (
            f"Car position: {format_number(position)} (valley bottom near -0.52, goal at 0.5, "
            f"left wall at -1.2)\n"
            f"Car velocity: {format_number(velocity)} ({motion}; range ±0.07)"
        )

    return fmt


def _mountaincar_instruction(env: gym.Env[Any, Any]) -> str:
    continuous = isinstance(env.action_space, gym.spaces.Box)
    control = (
        "Each step, reply with a force between -1 (left) and 1 (right); reward +100 on reaching "
        "the goal minus 0.1 times the squared force per step."
        if continuous
        else "Each step, push left, push right or do not push; every step costs -1."
    )
    return (
        "You drive an underpowered car in a valley and must reach the flag on the right hilltop "
        "(position 0.5). The engine is too weak to climb directly: build momentum by rocking back "
        "and forth, pushing in the direction you are already moving. "
        + control
        + " Goal: reach the flag as fast as possible (episodes end after 200 steps for the "
        "discrete car, 999 for the continuous one)."
    )


def _acrobot_formatter(env: gym.Env[Any, Any]) -> ObsFormatter:
    def fmt(obs: Any, info: dict[str, Any]) -> str:
        c1, s1, c2, s2, w1, w2 = (float(v) for v in np.asarray(obs))
        theta1, theta2 = math.atan2(s1, c1), math.atan2(s2, c2)
        tip_height = -math.cos(theta1) - math.cos(theta1 + theta2)
        return (
            f"Upper link angle: {_deg(theta1)}° (0° = hanging straight down)\n"
            f"Lower link angle relative to the upper link: {_deg(theta2)}°\n"
            f"Upper link angular velocity: {format_number(w1)} rad/s\n"
            f"Lower link angular velocity: {format_number(w2)} rad/s\n"
            f"Tip height: {format_number(tip_height)} (goal: above 1; range -2 to 2)"
        )

    return fmt


def _acrobot_instruction(env: gym.Env[Any, Any]) -> str:
    return (
        "You control a two-link pendulum (an acrobot) hanging down from a fixed joint. Only the "
        "joint between the two links has a motor: apply negative, no or positive torque. Every "
        "step costs -1 until the tip of the lower link swings above height 1 (one link length "
        "above the fixed joint), which ends the episode. Pump energy into the swing by pushing "
        "with the motion. Goal: reach the height in as few steps as possible (limit 500)."
    )


def _pendulum_formatter(env: gym.Env[Any, Any]) -> ObsFormatter:
    def fmt(obs: Any, info: dict[str, Any]) -> str:
        cos_t, sin_t, theta_dot = (float(v) for v in np.asarray(obs))
        theta = math.atan2(sin_t, cos_t)
        return (
            f"Pendulum angle: {_deg(theta)}° from upright (positive = counter-clockwise; "
            f"±180° = hanging down)\n"
            f"Angular velocity: {format_number(theta_dot)} rad/s (positive = counter-clockwise; "
            f"range ±8)"
        )

    return fmt


def _pendulum_instruction(env: gym.Env[Any, Any]) -> str:
    return (
        "You swing a pendulum up and keep it balanced upright. Each step, reply with a torque "
        "between -2 and 2 (positive = counter-clockwise). The reward is minus (angle² + 0.1·angular "
        "velocity² + 0.001·torque²), so 0 is best: upright and still. Episodes last 200 steps. "
        "The motor is weak: swing back and forth to gain height, then balance. "
        "Goal: get upright quickly and stay there (a good episode scores above -200)."
    )


#: Built-in text support, keyed by the class name of ``env.unwrapped``.
BUILTIN_ENVS: dict[str, EnvText] = {
    "BlackjackEnv": EnvText(
        _blackjack_formatter,
        _blackjack_instruction,
        ("stick", "hit"),
        {"stick": ("stand", "stay", "hold"), "hit": ("draw",)},
    ),
    "FrozenLakeEnv": EnvText(
        _frozenlake_formatter, _frozenlake_instruction, ("left", "down", "right", "up")
    ),
    "CliffWalkingEnv": EnvText(
        _cliffwalking_formatter, _cliffwalking_instruction, ("up", "right", "down", "left")
    ),
    "TaxiEnv": EnvText(
        _taxi_formatter,
        _taxi_instruction,
        ("south", "north", "east", "west", "pickup", "dropoff"),
        {"pickup": ("pick up",), "dropoff": ("drop off",)},
    ),
    "CartPoleEnv": EnvText(_cartpole_formatter, _cartpole_instruction, ("push left", "push right")),
    "MountainCarEnv": EnvText(
        _mountaincar_formatter, _mountaincar_instruction, ("push left", "no push", "push right")
    ),
    "Continuous_MountainCarEnv": EnvText(_mountaincar_formatter, _mountaincar_instruction, None),
    "AcrobotEnv": EnvText(
        _acrobot_formatter,
        _acrobot_instruction,
        ("negative torque", "no torque", "positive torque"),
    ),
    "PendulumEnv": EnvText(_pendulum_formatter, _pendulum_instruction, None),
}


def lookup(env: gym.Env[Any, Any]) -> EnvText | None:
    """The built-in text support for ``env``, or ``None`` when the env is not one we know."""
    found = BUILTIN_ENVS.get(type(env.unwrapped).__name__)
    if found is None and minigrid_text.is_minigrid(env):
        return MINIGRID
    return found


#: Every MiniGrid / BabyAI env (:mod:`gym_llm.wrappers.minigrid_text`).
MINIGRID = EnvText(
    minigrid_text.minigrid_formatter,
    minigrid_text.minigrid_instruction,
    minigrid_text.ACTION_NAMES,
    minigrid_text.ACTION_ALIASES,
)
