"""``HighLow``: one step, the right word depends on a number in the observation.

The observation reads ``"The number is 7."``; replying ``high`` for a number of at least
``threshold`` (default 5) and ``low`` below it earns 1, anything else 0. Unlike KeywordBandit, the
answer is not written in the prompt: the policy must learn a rule over its input. An untrained LM
answers the same word for every number (SmolLM2-135M: ``low`` at about 0.98 in every state), so
its success starts at 0.5 and only a state-dependent policy beats it; a policy that learns a bias
instead ("always high") stays at 0.5. Exact evaluation: every number is equally likely, so one
question per number gives the exact expected reward (:meth:`HighLowEnv.observation_for`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from gym_llm.spaces import TextActions, TextObservations
from gym_llm.wrappers.parsing import DiscreteParser

ACTIONS: tuple[str, str] = ("low", "high")
INSTRUCTION = (
    "You are shown a number from 0 to 9. Reply 'high' if it is 5 or more, 'low' otherwise. "
    "Reward 1 for the right word, 0 otherwise."
)


class HighLowEnv(gym.Env[str, str]):
    """One-step text env: say whether a number 0..9 is ``high`` (>= ``threshold``) or ``low``.

    Args:
        threshold: the smallest ``high`` number, 1..9 (the instruction states 5; another value
            makes a task the instruction gets wrong, for testing that a policy learns from reward).
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012
    optimal_return: float = 1.0
    random_return: float = 0.5
    numbers: tuple[int, ...] = tuple(range(10))

    def __init__(self, threshold: int = 5) -> None:
        if not 1 <= threshold <= 9:
            raise ValueError(f"threshold must be in 1..9 (both words must occur), got {threshold}.")
        self.threshold = threshold
        self._parser = DiscreteParser(ACTIONS)
        self.observation_space = TextObservations(max_length=32, instruction=INSTRUCTION)
        self.action_space = TextActions(ACTIONS, description="Answer with 'low' or 'high'.")
        self._number: int | None = None

    def observation_for(self, number: int) -> str:
        """The observation of an episode showing ``number`` (exact evaluation asks each once)."""
        return f"The number is {number}."

    def answer(self, number: int) -> str:
        """The word that earns the reward for ``number``."""
        return "high" if number >= self.threshold else "low"

    def score(self, reply: str, number: int) -> float:
        """The reward ``reply`` earns for ``number`` (what ``step`` pays)."""
        result = self._parser(reply)
        return 1.0 if result.valid and ACTIONS[result.action] == self.answer(number) else 0.0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._number = int(self.np_random.integers(len(self.numbers)))
        return self.observation_for(self._number), {"number": self._number}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not isinstance(action, str):
            raise TypeError(f"HighLowEnv.step takes the reply as str, got {type(action).__name__}.")
        if self._number is None:
            raise RuntimeError("HighLowEnv episodes last one step: call reset() before step().")
        number, self._number = self._number, None
        result = self._parser(action)
        info: dict[str, Any] = {"number": number, **result.info(action)}
        return self.observation_for(number), self.score(action, number), True, False, info


def exact_success(predict: Any, env: HighLowEnv | None = None) -> float:
    """Exact expected reward of a greedy ``predict(list_of_observations) -> replies``."""
    env = env or HighLowEnv()
    replies = predict([env.observation_for(n) for n in env.numbers])
    return sum(env.score(str(r), n) for r, n in zip(replies, env.numbers, strict=True)) / len(
        env.numbers
    )
