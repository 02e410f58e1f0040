"""Per-state action sets: a text game's admissible actions reach the policy with each observation.

Text games (TextWorld, TextWorld-Express, ScienceWorld, Jericho, ALFWorld) offer the valid
commands of the current state, and the strongest choice-style agents (GLAM, TWOSOME) score exactly
those. :class:`ValidActionsWrapper` reads them from ``info`` (``info["valid_actions"]`` by
default), lists them at the end of the observation text, and returns the observation as a
:class:`gym_llm.spaces.TextWithActions`; its action space says so (``TextActions(per_state=True)``),
and ``LLMPolicy`` in choice mode then scores each state's own list, with exact log-probs over
it. In generate mode the list is in the prompt and the reply is free text, judged by the game.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym

from gym_llm.spaces import TextActions, TextObservations, TextWithActions

#: How the list closes the observation text (so the same text always means the same list).
LIST_LINE = "Valid actions: {}"


def with_actions(text: str, actions: Sequence[str]) -> TextWithActions:
    """``text`` followed by the list of ``actions``, carrying them."""
    listed = ", ".join(f"'{a}'" for a in actions)
    return TextWithActions(f"{text}\n\n{LIST_LINE.format(listed)}", actions)


class ValidActionsWrapper(gym.Wrapper[str, str, str, str]):
    """A text env whose ``info[key]`` lists the valid actions of each state, as observations
    carrying them (:class:`gym_llm.spaces.TextWithActions`).

    Args:
        env: an env with text observations and text actions (a ``TextGameEnv``, or one built
            with the text wrappers).
        key: the ``info`` key with the list of valid action strings.
        sort: list the actions sorted (games often shuffle the same set from step to step; a
            sorted list keeps the same state's prompt, and cache entries, the same).

    A state with no list in ``info`` (some games leave it out of the last step) gets an empty
    one: a policy can still value it, not act in it.

    >>> from gym_llm.envs import TextGameEnv
    >>> class Door:
    ...     def reset(self): return "A door.", {"valid_actions": ["open door", "wait"]}
    ...     def step(self, text): return "Open.", float(text == "open door"), True, {}
    >>> env = ValidActionsWrapper(TextGameEnv(Door()))
    >>> obs, _ = env.reset()
    >>> obs.actions
    ('open door', 'wait')
    >>> print(obs)
    A door.
    <BLANKLINE>
    Valid actions: 'open door', 'wait'
    """

    def __init__(self, env: gym.Env[Any, Any], key: str = "valid_actions", sort: bool = True):
        super().__init__(env)
        if not isinstance(env.observation_space, gym.spaces.Text):
            raise TypeError(
                f"ValidActionsWrapper needs text observations, got {env.observation_space}: "
                "wrap the env with TextObservationWrapper first."
            )
        self.key, self.sort = key, sort
        inner = env.observation_space
        self.observation_space = TextObservations(
            inner.max_length + 4096,
            charset=frozenset(inner.character_set) | set("',"),
            instruction=getattr(inner, "instruction", None),
        )
        self.action_space = TextActions(
            None,
            per_state=True,
            description="Answer with one of the valid actions listed.",
            max_length=getattr(env.action_space, "max_length", 4096),
        )

    def _observation(self, text: str, info: dict[str, Any]) -> TextWithActions:
        actions = [str(a) for a in (info.get(self.key) or [])]
        actions = list(dict.fromkeys(sorted(actions) if self.sort else actions))
        return with_actions(str(text), actions)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[TextWithActions, dict[str, Any]]:
        text, info = self.env.reset(seed=seed, options=options)
        return self._observation(text, info), info

    def step(
        self, action: str
    ) -> tuple[TextWithActions, SupportsFloat, bool, bool, dict[str, Any]]:
        text, reward, terminated, truncated, info = self.env.step(action)
        return self._observation(text, info), reward, terminated, truncated, info
