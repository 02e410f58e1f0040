"""``TextMaze``: walk out of a small maze that is described in words.

The map is in the instruction; each turn says where you are and which directions are open. A
language model can read the map and the open directions; a classic agent sees a cell index and
must find the walls by bumping into them. Every move costs -1 (bumping into a wall too: you stay
put), reaching the goal ends the episode, and the registered env stops after 50 moves. Episodes
start in a uniformly random open cell, so the optimum is minus the mean shortest path to the goal:
**-100/17 ≈ -5.882** on the default maze; uniformly random moves earn **-43.28**.

The dynamics are deterministic and listed in :attr:`TextMazeEnv.P` (Gymnasium's toy-text format),
so :class:`gym_llm.evaluation.exact.TabularModel` evaluates any policy exactly over the 50-step horizon.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

#: ``(probability, next state, reward, terminated)``, as in Gymnasium's toy-text ``P``.
Transition = tuple[float, int, float, bool]

#: The default maze: ``.`` floor, ``#`` wall, ``G`` the goal (rows top to bottom, north up).
DEFAULT_LAYOUT: tuple[str, ...] = (
    "...#G",
    ".#.#.",
    ".#...",
    ".##.#",
    ".....",
)
#: Moves per episode in the registered env (``gym.make(..., max_episode_steps=...)`` changes it).
DEFAULT_MAX_STEPS = 50
ACTION_NAMES: tuple[str, ...] = ("north", "east", "south", "west")
_MOVES: tuple[tuple[int, int], ...] = ((-1, 0), (0, 1), (1, 0), (0, -1))


def _validated_layout(layout: Sequence[str]) -> tuple[str, ...]:
    rows = (layout,) if isinstance(layout, str) else tuple(layout)
    if not rows or any(not isinstance(r, str) for r in rows):
        raise ValueError(f"layout must be a sequence of strings (one per row), got {layout!r}.")
    if len({len(r) for r in rows}) != 1 or not rows[0]:
        raise ValueError(f"layout rows must all have the same, non-zero length, got {rows!r}.")
    bad = sorted(set("".join(rows)) - set(".#G"))
    if bad:
        raise ValueError(f"layout may only use '.', '#' and 'G', found {bad!r} in {rows!r}.")
    if "".join(rows).count("G") != 1:
        raise ValueError(f"layout needs exactly one goal 'G', got {rows!r}.")
    if "".join(rows).count(".") < 1:
        raise ValueError(f"layout needs at least one open cell '.' to start from, got {rows!r}.")
    return rows


class TextMazeEnv(gym.Env[np.int64, np.int64]):
    """Find the goal of a small grid maze; the map is in the instruction.

    Observation: ``Discrete(rows * cols)``, the index ``row * cols + col`` of your cell.
    Action: ``Discrete(4)``: north, east, south, west. Reward -1 per move; the episode ends
    (terminated) on the goal. Register/make with ``max_episode_steps`` for the step limit
    (``gym_llm/TextMaze-v0``: 50), which is also the horizon of the exact model.

    Implements :class:`gym_llm.envs.DescribesItself`, so the text wrappers need no arguments.

    Args:
        layout: rows of ``.`` (floor), ``#`` (wall) and one ``G`` (goal); every floor cell must
            reach the goal.
        render_mode: ``None`` or ``"ansi"`` (the map with you drawn as ``@``).
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}  # noqa: RUF012

    #: The exact model's horizon when the env is built without a registered step limit.
    horizon: int = DEFAULT_MAX_STEPS

    def __init__(
        self, layout: Sequence[str] = DEFAULT_LAYOUT, render_mode: str | None = None
    ) -> None:
        self.layout = _validated_layout(layout)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}.")
        self.render_mode = render_mode
        self.nrow, self.ncol = len(self.layout), len(self.layout[0])
        self.goal = "".join(self.layout).index("G")
        self.distances = self._distances()
        unreachable = [
            self._cell(s)
            for s in range(self.nrow * self.ncol)
            if self._open(s) and s not in self.distances
        ]
        if unreachable:
            raise ValueError(
                f"These open cells (row, column) cannot reach the goal: {unreachable}. "
                "Open a path or wall them off."
            )
        #: Where episodes start: every open cell but the goal, uniformly.
        self.starts = [s for s in range(self.nrow * self.ncol) if self._open(s) and s != self.goal]
        self.observation_space = spaces.Discrete(self.nrow * self.ncol)
        self.action_space = spaces.Discrete(len(ACTION_NAMES))
        self.action_names: tuple[str, ...] = ACTION_NAMES
        goal_row, goal_col = self._cell(self.goal)
        self.instruction = (
            "You are in a maze. Map (north is up; '#' is a wall, '.' open floor, 'G' the goal; "
            f"rows 0-{self.nrow - 1} from the top, columns 0-{self.ncol - 1} from the left):\n"
            + "\n".join(self.layout)
            + f"\nThe goal is at row {goal_row}, column {goal_col}. Each turn you are told where "
            "you are and which directions are open; reply with one direction: north, east, "
            "south or west. Every move costs -1 (walking into a wall too: you stay where you "
            "are); reaching the goal ends the game. Goal: reach G in as few moves as possible."
        )
        self.initial_state_distrib = np.zeros(self.observation_space.n)
        self.initial_state_distrib[self.starts] = 1.0 / len(self.starts)
        self._state = self.goal

    # --- geometry ----------------------------------------------------------------------------

    def _cell(self, state: int) -> tuple[int, int]:
        return divmod(int(state), self.ncol)

    def _open(self, state: int) -> bool:
        row, col = self._cell(state)
        return self.layout[row][col] != "#"

    def _move(self, state: int, action: int) -> int:
        """The cell after moving ``action`` from ``state`` (the same cell into a wall)."""
        row, col = self._cell(state)
        d_row, d_col = _MOVES[action]
        row, col = row + d_row, col + d_col
        if 0 <= row < self.nrow and 0 <= col < self.ncol and self.layout[row][col] != "#":
            return row * self.ncol + col
        return int(state)

    def open_directions(self, state: int) -> list[str]:
        """The names of the moves that leave ``state``."""
        return [name for a, name in enumerate(ACTION_NAMES) if self._move(state, a) != state]

    def _distances(self) -> dict[int, int]:
        """Shortest-path length to the goal from every cell that can reach it (BFS)."""
        distances = {self.goal: 0}
        queue = deque([self.goal])
        while queue:
            state = queue.popleft()
            for action in range(len(_MOVES)):
                nxt = self._move(state, action)  # moves are reversible, so BFS from the goal
                if nxt not in distances:
                    distances[nxt] = distances[state] + 1
                    queue.append(nxt)
        return distances

    @cached_property
    def P(self) -> dict[int, dict[int, list[Transition]]]:  # Gymnasium toy-text name
        """Exact transitions ``P[state][action] = [(1.0, next, -1.0, reached goal)]``; the goal
        and wall cells (never occupied) loop on themselves with reward 0."""
        table: dict[int, dict[int, list[Transition]]] = {}
        for state in range(self.nrow * self.ncol):
            if state == self.goal or not self._open(state):
                table[state] = {a: [(1.0, state, 0.0, True)] for a in range(len(_MOVES))}
                continue
            table[state] = {}
            for action in range(len(_MOVES)):
                nxt = self._move(state, action)
                table[state][action] = [(1.0, nxt, -1.0, nxt == self.goal)]
        return table

    @property
    def optimal_return(self) -> float:
        """Minus the mean shortest path over the start cells (when it fits the step limit)."""
        return -float(np.mean([self.distances[s] for s in self.starts]))

    # --- DescribesItself -------------------------------------------------------------------

    def describe(self, observation: Any) -> str:
        state = int(observation)
        row, col = self._cell(state)
        if state == self.goal:
            return f"You are at row {row}, column {col}: you reached the goal."
        directions = self.open_directions(state)
        return f"You are at row {row}, column {col}. Open directions: {', '.join(directions)}."

    def reference_action(self) -> int:
        """An optimal move from the current cell: the first (north, east, south, west) that
        brings you one step closer to the goal."""
        if self._state == self.goal:
            raise RuntimeError("The episode is over: call reset() first.")
        here = self.distances[self._state]
        return next(
            a for a in range(len(_MOVES)) if self.distances[self._move(self._state, a)] == here - 1
        )

    # --- Gymnasium API ---------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.int64, dict[str, Any]]:
        super().reset(seed=seed)
        self._state = self.starts[int(self.np_random.integers(len(self.starts)))]
        return np.int64(self._state), {"distance_to_goal": self.distances[self._state]}

    def step(self, action: np.int64 | int) -> tuple[np.int64, float, bool, bool, dict[str, Any]]:
        if self._state == self.goal:
            raise RuntimeError("The episode is over: call reset() before step().")
        if not self.action_space.contains(action):
            raise ValueError(f"action must be in 0..3 ({', '.join(ACTION_NAMES)}), got {action!r}.")
        nxt = self._move(self._state, int(action))
        info = {"hit_wall": nxt == self._state, "distance_to_goal": self.distances[nxt]}
        self._state = nxt
        return np.int64(nxt), -1.0, nxt == self.goal, False, info

    def render(self) -> str | None:
        if self.render_mode is None:
            gym.logger.warn("TextMazeEnv.render() needs render_mode='ansi'.")
            return None
        rows = [list(r) for r in self.layout]
        row, col = self._cell(self._state)
        rows[row][col] = "@"
        return "\n".join("".join(r) for r in rows) + "\n" + self.describe(self._state)
