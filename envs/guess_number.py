"""``GuessNumber``: find a secret number with higher/lower feedback, in a few guesses.

A task where a pretrained LM's prior helps (it knows what "higher than 4 and lower than 9" means
and that the middle is a good guess) while a classic agent must learn each of hundreds of states
from scratch. It is an MDP over what the feedback has revealed: the secret is uniform, so after
any feedback it is uniform over the remaining interval, and the observation ``(low, high, guesses
left)`` is a sufficient statistic. That makes the exact model in :attr:`GuessNumberEnv.P` (the
Gymnasium toy-text format) exact, and an exact evaluation asks the policy once per state.

Rewards: +1 for the guess that finds the number, ``-guess_cost`` (0.1) for every wrong guess; the
episode ends when the number is found or the guesses run out. With the defaults (1..16, 6
guesses) binary search always finds it and is optimal: 1 - 0.1 × 2.375 expected wrong guesses =
**+0.7625**; guessing uniformly at random earns **-0.1605**.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

#: ``(probability, next state, reward, terminated)``, as in Gymnasium's toy-text ``P``.
Transition = tuple[float, int, float, bool]


class GuessNumberEnv(gym.Env[np.int64, np.int64]):
    """Guess a secret whole number in ``1..max_number`` with higher/lower feedback.

    Observation: ``Discrete`` index of ``(low, high, guesses_left)``, the interval the feedback
    has narrowed the secret to (see :meth:`state_of`), plus one final "game over" state.
    Action: ``Discrete(max_number)``, action ``i`` guesses ``i + 1``; the action names are the
    numbers themselves (``"1"`` … ``"16"``), so a model replies with the number it guesses.
    A guess outside the interval is allowed (it wastes a guess).

    ``info`` after a step has ``guess``, ``feedback`` (``"correct"``, ``"higher"``: the secret is
    higher than the guess, ``"lower"``) and, when the episode ends, ``secret``.

    Implements :class:`gym_llm.envs.DescribesItself`, so the text wrappers need no arguments.

    Args:
        max_number: the secret is drawn uniformly from ``1..max_number`` (2 to 64).
        max_guesses: guesses per episode (>= 1).
        guess_cost: the reward for a wrong guess is ``-guess_cost``; finding the number earns 1.
        render_mode: ``None`` or ``"ansi"``.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}  # noqa: RUF012

    def __init__(
        self,
        max_number: int = 16,
        max_guesses: int = 6,
        guess_cost: float = 0.1,
        render_mode: str | None = None,
    ) -> None:
        if not 2 <= int(max_number) <= 64:
            raise ValueError(f"max_number must be between 2 and 64, got {max_number}.")
        if int(max_guesses) < 1:
            raise ValueError(f"max_guesses must be >= 1, got {max_guesses}.")
        if guess_cost < 0:
            raise ValueError(f"guess_cost must be >= 0 (a cost), got {guess_cost}.")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}.")
        self.max_number, self.max_guesses = int(max_number), int(max_guesses)
        self.guess_cost = float(guess_cost)
        self.render_mode = render_mode
        n = self.max_number
        #: Every non-terminal state ``(low, high, guesses_left)``, in index order.
        self.states: list[tuple[int, int, int]] = [
            (low, high, left)
            for left in range(self.max_guesses, 0, -1)
            for low in range(1, n + 1)
            for high in range(low, n + 1)
        ]
        self._index = {state: i for i, state in enumerate(self.states)}
        #: The "game over" state every episode ends in.
        self.terminal_state = len(self.states)
        self.observation_space = spaces.Discrete(len(self.states) + 1)
        self.action_space = spaces.Discrete(n)
        self.action_names: tuple[str, ...] = tuple(str(g) for g in range(1, n + 1))
        self.instruction = (
            f"I am thinking of a whole number from 1 to {n}. Find it in at most "
            f"{self.max_guesses} guesses. Each turn you see what my feedback has told you so far "
            "(the number is higher or lower than your earlier guesses) and how many guesses you "
            f"have left; reply with one number from 1 to {n}. Finding the number earns +1, "
            f"every wrong guess costs {self.guess_cost:g}. Goal: find it in as few guesses as "
            "possible; guessing the middle of the possible range is the fastest way."
        )
        #: Initial state distribution (the full interval, all guesses left), as in toy-text.
        self.initial_state_distrib = np.zeros(self.observation_space.n)
        self.initial_state_distrib[self.state_of(1, n, self.max_guesses)] = 1.0
        self._secret = 1
        self._state = self.terminal_state
        self._last: str | None = None

    # --- the model ---------------------------------------------------------------------------

    def state_of(self, low: int, high: int, guesses_left: int) -> int:
        """The observation index of ``(low, high, guesses_left)``."""
        try:
            return self._index[(low, high, guesses_left)]
        except KeyError:
            raise ValueError(
                f"({low}, {high}, {guesses_left}) is not a state: need 1 <= low <= high <= "
                f"{self.max_number} and 1 <= guesses_left <= {self.max_guesses}."
            ) from None

    def _after(self, low: int, high: int, left: int) -> tuple[int, bool]:
        """The next state after a wrong guess, and whether that ended the game."""
        return (
            (self.terminal_state, True)
            if left == 1
            else (self.state_of(low, high, left - 1), False)
        )

    @cached_property
    def P(self) -> dict[int, dict[int, list[Transition]]]:  # Gymnasium toy-text name
        """Exact transitions ``P[state][action] = [(prob, next, reward, terminated), ...]``."""
        table: dict[int, dict[int, list[Transition]]] = {}
        cost = -self.guess_cost
        for state, (low, high, left) in enumerate(self.states):
            size = high - low + 1
            moves: dict[int, list[Transition]] = {}
            for action in range(self.max_number):
                guess = action + 1
                if not low <= guess <= high:
                    nxt, done = self._after(low, high, left)
                    moves[action] = [(1.0, nxt, cost, done)]
                    continue
                outcomes: list[Transition] = [(1.0 / size, self.terminal_state, 1.0, True)]
                if guess > low:  # the secret is lower than the guess
                    nxt, done = self._after(low, guess - 1, left)
                    outcomes.append(((guess - low) / size, nxt, cost, done))
                if guess < high:  # the secret is higher
                    nxt, done = self._after(guess + 1, high, left)
                    outcomes.append(((high - guess) / size, nxt, cost, done))
                moves[action] = outcomes
            table[state] = moves
        table[self.terminal_state] = {
            a: [(1.0, self.terminal_state, 0.0, True)] for a in range(self.max_number)
        }
        return table

    @cached_property
    def _optimal_actions(self) -> np.ndarray:
        """An optimal action per state by backward induction over guesses left; among optimal
        guesses the one nearest the middle of the interval (binary search where that is
        optimal, which it is whenever the guesses suffice)."""
        values = np.zeros(self.terminal_state + 1)
        best = np.zeros(self.terminal_state + 1, dtype=np.int64)
        # self.states lists guesses_left from high to low: evaluate in reverse (fewest first).
        for state in reversed(range(len(self.states))):
            low, high, _ = self.states[state]
            q = np.array(
                [
                    sum(p * (r + (0.0 if done else values[nxt])) for p, nxt, r, done in outcomes)
                    for outcomes in (self.P[state][a] for a in range(self.max_number))
                ]
            )
            optimal = np.flatnonzero(q >= q.max() - 1e-12)
            middle = (low + high) / 2 - 1  # as an action index
            best[state] = int(optimal[np.argmin(np.abs(optimal - middle))])
            values[state] = q.max()
        return best

    @property
    def horizon(self) -> int:
        """The most steps an episode can take (the exact model's horizon): ``max_guesses``."""
        return self.max_guesses

    @property
    def optimal_return(self) -> float:
        """The best expected return (dynamic programming over :attr:`P`)."""
        from gym_llm.envs.tabular import TabularModel

        return TabularModel.of(self).optimum()

    # --- DescribesItself -------------------------------------------------------------------

    def describe(self, observation: Any) -> str:
        state = int(observation)
        if state == self.terminal_state:
            return "The game is over."
        low, high, left = self.states[state]
        guesses = f"You have {left} guess{'es' if left != 1 else ''} left."
        if low == 1 and high == self.max_number:
            return f"The number is between 1 and {self.max_number}. {guesses}"
        facts = []
        if low > 1:
            facts.append(f"higher than {low - 1}")
        if high < self.max_number:
            facts.append(f"lower than {high + 1}")
        where = f"it is {low}" if low == high else f"it is one of {low} to {high}"
        return f"The number is {' and '.join(facts)}, so {where}. {guesses}"

    def reference_action(self) -> int:
        """An optimal action in the current state (binary search with the defaults)."""
        if self._state == self.terminal_state:
            raise RuntimeError("The episode is over: call reset() first.")
        return int(self._optimal_actions[self._state])

    # --- Gymnasium API ---------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.int64, dict[str, Any]]:
        super().reset(seed=seed)
        self._secret = int(self.np_random.integers(1, self.max_number + 1))
        self._state = self.state_of(1, self.max_number, self.max_guesses)
        self._last = None
        return np.int64(self._state), {}

    def step(self, action: np.int64 | int) -> tuple[np.int64, float, bool, bool, dict[str, Any]]:
        if self._state == self.terminal_state:
            raise RuntimeError("The episode is over: call reset() before step().")
        if not self.action_space.contains(action):
            raise ValueError(f"action must be in 0..{self.max_number - 1}, got {action!r}.")
        guess = int(action) + 1
        low, high, left = self.states[self._state]
        info: dict[str, Any] = {"guess": guess}
        if guess == self._secret:
            info["feedback"], reward, done = "correct", 1.0, True
            self._state = self.terminal_state
        else:
            higher = self._secret > guess
            info["feedback"] = "higher" if higher else "lower"
            if low <= guess <= high:
                low, high = (guess + 1, high) if higher else (low, guess - 1)
            self._state, done = self._after(low, high, left)
            reward = -self.guess_cost
        if done:
            info["secret"] = self._secret
        self._last = f"Guess {guess}: {info['feedback']}."
        return np.int64(self._state), reward, done, False, info

    def render(self) -> str | None:
        if self.render_mode is None:
            gym.logger.warn("GuessNumberEnv.render() needs render_mode='ansi'.")
            return None
        text = self.describe(self._state)
        return text if self._last is None else f"{self._last}\n{text}"
