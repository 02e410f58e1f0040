"""The episode so far as the observation: for policies that read whole conversations.

Games that state their rules and answer format on the first turn lose them from turn 2 on for a
policy that sees one observation at a time. :class:`ConversationWrapper` makes each observation
the episode's conversation (the env's texts as user turns, the replies as assistant turns) as a
JSON list of ``{"role", "content"}`` messages, which ``LLMPolicy`` renders with the model's chat
template (``gym_llm.policy.prompts.build_conversation``); its ``max_prompt_tokens`` drops the
oldest exchanges, always keeping the first observation and the latest one. A reply that carries
its sampled token ids (:class:`gym_llm.replies.Reply`, what ``LLMPolicy`` returns) keeps them in
the JSON, so the policy's later prompts hold its earlier replies exactly as sampled.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
from gymnasium import spaces

from gym_llm.replies import conversation_json
from gym_llm.spaces import TextObservations, TextWithActions, actions_of

#: Conversations are long: room for many turns (the policy's token budget decides what it reads).
CONVERSATION_MAX_LENGTH = 1_000_000


class ConversationWrapper(gym.Wrapper[str, str, str, str]):
    """Observations become the episode's conversation so far (a JSON message list), of at most
    ``max_length`` characters (the observation space's limit; the policy fits long conversations
    to its prompt budget by dropping the oldest exchanges).

    >>> import gymnasium as gym
    >>> from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper
    >>> env = ConversationWrapper(ActionParserWrapper(TextObservationWrapper(
    ...     gym.make("Blackjack-v1", sab=False))))
    >>> first, _ = env.reset(seed=0)
    >>> second = env.step("hit")[0]
    >>> [m["role"] for m in json.loads(second)]
    ['user', 'assistant', 'user']
    """

    def __init__(self, env: gym.Env[Any, Any], max_length: int = CONVERSATION_MAX_LENGTH) -> None:
        super().__init__(env)
        inner = env.observation_space
        if not isinstance(inner, spaces.Text):
            raise TypeError(
                f"ConversationWrapper needs text observations, got {inner}: wrap the env with "
                "TextObservationWrapper first (or use make_text_env(..., conversation=True))."
            )
        self.observation_space = TextObservations(
            max_length,
            charset=frozenset(inner.character_set) | set('[]{}":,\\'),
            instruction=getattr(inner, "instruction", None),
        )
        self.observation_space.conversation = True  # type: ignore[attr-defined]
        self.messages: list[dict[str, str]] = []
        # A text game that repeats its first turn (rules, task, history) in every observation
        # stops (gym_llm.envs.TextGameEnv.conversation): the conversation holds them once.
        if hasattr(env.unwrapped, "conversation"):
            env.unwrapped.conversation = True

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        text, info = self.env.reset(seed=seed, options=options)
        self.messages = [{"role": "user", "content": str(text)}]
        return self._observation(actions_of(text)), info

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        text, reward, terminated, truncated, info = self.env.step(action)
        self.messages += [
            {"role": "assistant", "content": action if isinstance(action, str) else str(action)},
            {"role": "user", "content": str(text)},
        ]
        return self._observation(actions_of(text)), reward, terminated, truncated, info

    def _observation(self, actions: tuple[str, ...] | None) -> str:
        """The conversation, carrying the last turn's valid actions where the env gives them."""
        text = conversation_json(self.messages)
        return text if actions is None else TextWithActions(text, actions)
