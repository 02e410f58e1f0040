"""Chat prompts from what the spaces carry: instruction (system), observation (user).

One place builds prompts so that the zero-shot demo, the PPO policy and the Agent API all show the
model exactly the same text for the same observation; :class:`PromptBuilder` turns them into the
policy's token ids.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from typing import Any

from gym_llm.replies import conversation_json, parse_messages
from gym_llm.spaces import TextActions, TextObservations
from gym_llm.text import cut_middle

Message = dict[str, str]


def system_text(observation_space: Any, system_prompt: str | None = None) -> str:
    """The static head of every prompt: optional persona, then the task instruction."""
    parts = [system_prompt] if system_prompt else []
    if isinstance(observation_space, TextObservations) and observation_space.instruction:
        parts.append(observation_space.instruction)
    return "\n\n".join(parts)


def user_text(observation: str, action_space: Any) -> str:
    """The observation, then what to reply. Small chat models follow a question at the end of
    the user turn far more reliably than the same words in the system message."""
    if isinstance(action_space, TextActions) and action_space.description:
        return f"{observation}\n\n{action_space.description}"
    return observation


def build_messages(
    observation: str, observation_space: Any, action_space: Any, system_prompt: str | None = None
) -> list[Message]:
    """System message (if any) then the observation with the reply instructions as user turn."""
    messages: list[Message] = []
    system = system_text(observation_space, system_prompt)
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": user_text(observation, action_space)})
    return messages


def parse_conversation(observation: str) -> list[Message] | None:
    """The messages of an observation that is a JSON list of ``{"role", "content"}`` objects
    (user/assistant turns, oldest first; replies may carry their sampled ``"token_ids"``, see
    :mod:`gym_llm.replies`), or ``None`` when it is a plain observation string."""
    if not observation.lstrip().startswith("["):
        return None
    try:
        value = json.loads(observation)
    except ValueError:
        return None
    return parse_messages(value)


def build_conversation(
    observation: str, observation_space: Any, action_space: Any, system_prompt: str | None = None
) -> list[Message]:
    """Messages for a whole conversation: the system message (as :func:`build_messages` builds
    it), then the turns of ``observation`` (see :func:`parse_conversation`); the reply
    instructions go at the end of the last user turn. A plain string is one user turn, so a
    conversation policy and a single-turn policy show the same first prompt."""
    turns = parse_conversation(observation)
    if turns is None:
        return build_messages(observation, observation_space, action_space, system_prompt)
    messages: list[Message] = []
    system = system_text(observation_space, system_prompt)
    if system:
        messages.append({"role": "system", "content": system})
    if turns[-1]["role"] == "user":
        last = {"role": "user", "content": user_text(turns[-1]["content"], action_space)}
        turns = [*turns[:-1], last]
    return [*messages, *turns]


def render_prompt(tokenizer: Any, messages: list[Message]) -> str:
    """The prompt string ending where the assistant's reply starts.

    Falls back gracefully for templates that reject a system role (the system text is prepended to
    the first user turn) and for tokenizers without any chat template (plain ``Role: text`` lines).
    """
    if getattr(tokenizer, "chat_template", None):
        try:
            return str(
                tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            )
        except Exception:  # jinja2 TemplateError: e.g. "System role not supported"
            if messages and messages[0]["role"] == "system" and len(messages) > 1:
                merged = [
                    {
                        "role": "user",
                        "content": messages[0]["content"] + "\n\n" + messages[1]["content"],
                    },
                    *messages[2:],
                ]
                return str(
                    tokenizer.apply_chat_template(
                        merged, tokenize=False, add_generation_prompt=True
                    )
                )
            raise
    lines = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join([*lines, "Assistant:"])


#: Stands in for a reply's text while the template renders: private-use characters, which
#: neither chat templates nor env texts use.
_PLACEHOLDER = "\ue000{}\ue001"
_PLACEHOLDER_PATTERN = re.compile("\ue000(\\d+)\ue001")


class RepliesLostError(ValueError):
    """The chat template did not write every reply placeholder back exactly once."""


def spliced_prompt_ids(
    tokenizer: Any, messages: list[Message], encode: Callable[[str], list[int]]
) -> list[int] | None:
    """Prompt token ids with each earlier reply's tokens exactly as sampled.

    The conversation is rendered by the chat template as a whole (so templates that rewrite
    earlier turns are honoured: the prompt is not assumed to extend the previous one), with a
    placeholder for the text of every reply that carries token ids; the text between
    placeholders is encoded and the sampled ids go in the placeholders' place. The template's
    scaffolding around a reply is kept; edits it would make to the reply text itself (stripping,
    dropping reasoning) are not, since those tokens are what the model produced.

    ``None`` when no message carries ids (the caller encodes the rendered text as usual);
    :class:`RepliesLostError` when the template did not write each placeholder once, in order.
    """
    marked: list[Message] = []
    replies: list[tuple[int, ...]] = []
    for message in messages:
        sampled = getattr(message["content"], "token_ids", None)
        if message["role"] == "assistant" and sampled is not None:
            marked.append({"role": "assistant", "content": _PLACEHOLDER.format(len(replies))})
            replies.append(sampled)
        else:
            marked.append({"role": message["role"], "content": str(message["content"])})
    if not replies:
        return None
    pieces = _PLACEHOLDER_PATTERN.split(render_prompt(tokenizer, marked))
    if [int(i) for i in pieces[1::2]] != list(range(len(replies))):
        raise RepliesLostError(
            f"the chat template wrote the placeholders of {len(replies)} replies as "
            f"{pieces[1::2]!r}"
        )
    prompt: list[int] = []
    for k, text in enumerate(pieces[0::2]):
        if text:
            prompt.extend(encode(text))
        if k < len(replies):
            prompt.extend(replies[k])
    return prompt


#: Shorter shared prefixes are not worth a separate pass.
_MIN_SHARED_PREFIX = 8
#: The memoised prompt token ids are dropped when they hold more tokens than this (~40 MB).
PROMPT_CACHE_MAX_TOKENS = 1_000_000


def check_max_prompt_tokens(max_prompt_tokens: int | None) -> None:
    if max_prompt_tokens is not None and max_prompt_tokens < 16:
        raise ValueError(f"max_prompt_tokens must be >= 16 (or None), got {max_prompt_tokens}.")


class PromptBuilder:
    """Observation (or conversation) -> the prompt's token ids: memoised, fitted to
    ``max_prompt_tokens``, and the prefix every prompt shares (a part of
    :class:`gym_llm.LLMPolicy`; the same ids in rollouts and updates, a function of the text)."""

    def __init__(
        self,
        tokenizer: Any,
        observation_space: Any,
        action_space: Any,
        *,
        system_prompt: str | None,
        conversation: bool,
        max_prompt_tokens: int | None,
    ) -> None:
        check_max_prompt_tokens(max_prompt_tokens)
        self.tokenizer = tokenizer
        self.observation_space, self.action_space = observation_space, action_space
        self.system_prompt = system_prompt
        #: Observations may be whole conversations (JSON lists of user/assistant turns).
        self.conversation = conversation
        self.max_prompt_tokens = max_prompt_tokens
        #: Prompts cut to ``max_prompt_tokens`` so far (distinct observations).
        self.truncated_prompts = 0
        #: Token ids every prompt starts with (set by :meth:`find_shared_prefix`; ``[]``: none).
        self.shared_prefix: list[int] = []
        self._cache: dict[str, list[int]] = {}
        self._cache_tokens = 0

    def prompt_text(self, observation: str) -> str:
        """The exact prompt the model sees for ``observation``."""
        build = build_conversation if self.conversation else build_messages
        messages = build(observation, self.observation_space, self.action_space, self.system_prompt)
        return render_prompt(self.tokenizer, messages)

    def prompt_ids(self, observation: str) -> list[int]:
        """Token ids of the prompt, memoised: envs revisit the same observations constantly."""
        ids = self._cache.get(observation)
        if ids is None:
            ids = self._whole_prompt_ids(observation)
            budget = self.max_prompt_tokens
            if budget is not None and len(ids) > budget:
                ids = self._fitted(observation, budget)
                self.truncated_prompts += 1
            # Bounded by the tokens it holds: text games and conversations rarely repeat a
            # prompt, and 100,000 long prompts held as Python ints were gigabytes.
            self._cache_tokens += len(ids)
            if self._cache_tokens > PROMPT_CACHE_MAX_TOKENS:
                self._cache.clear()
                self._cache_tokens = len(ids)
            self._cache[observation] = ids
        return ids

    def _whole_prompt_ids(self, observation: str) -> list[int]:
        """Token ids of the prompt, uncut; in a conversation the earlier replies that carry
        their sampled ids (:class:`gym_llm.replies.Reply`) keep them exactly."""
        build = build_conversation if self.conversation else build_messages
        messages = build(observation, self.observation_space, self.action_space, self.system_prompt)
        if self.conversation:
            try:
                ids = spliced_prompt_ids(self.tokenizer, messages, self.encode)
            except RepliesLostError as error:
                warnings.warn(
                    f"Earlier replies are re-encoded from their text in this prompt, so they may "
                    f"not be the tokens the model sampled: {error}. Use a chat template that "
                    "writes each message's content unchanged.",
                    stacklevel=2,
                )
                ids = None
            if ids is not None:
                return ids
        return self.encode(render_prompt(self.tokenizer, messages))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _fitted(self, observation: str, budget: int) -> list[int]:
        """Prompt ids of ``observation`` within ``budget`` tokens (see ``max_prompt_tokens``):
        a conversation drops its oldest exchanges after the first observation; what is still too
        long has its latest observation's middle cut (head: rules; tail: latest state)."""
        turns = parse_conversation(observation) if self.conversation else None
        if turns is not None:
            while len(turns) > 3:
                turns = [turns[0], *turns[3:]]  # drop the oldest exchange after the first turn
                ids = self._whole_prompt_ids(conversation_json(turns))
                if len(ids) <= budget:
                    return ids
        else:
            turns = [{"role": "user", "content": observation}]
        for _ in range(8):  # shrink the latest text until the prompt fits
            text = conversation_json(turns) if self.conversation else turns[-1]["content"]
            ids = self._whole_prompt_ids(text)
            if len(ids) <= budget:
                return ids
            content = turns[-1]["content"]
            keep = max(1, int(len(content) * budget / len(ids) * 0.9))
            turns[-1] = {**turns[-1], "content": cut_middle(content, max(keep, 80))}
            if keep < 80:
                break
        raise ValueError(
            f"max_prompt_tokens={budget} cannot hold even the system prompt and a cut "
            f"observation ({len(ids)} tokens): raise it."
        )

    def find_shared_prefix(self) -> list[int]:
        """Token ids every prompt starts with (system message, instruction, chat scaffolding),
        kept as :attr:`shared_prefix`.

        Found as the common prefix of two prompts with different observations; each batch still
        checks that its prompts really start with it (BPE may merge across the boundary), so a
        wrong guess only costs speed, never correctness.
        """
        first, second = self.prompt_ids("0 a"), self.prompt_ids("1 b")
        length = 0
        for a, b in zip(first, second, strict=False):
            if a != b:
                break
            length += 1
        self.shared_prefix = list(first[:length]) if length >= _MIN_SHARED_PREFIX else []
        return self.shared_prefix

    def stop_token_ids(self, lm: Any) -> list[int]:
        """The tokens that end a reply: the tokenizer's end of sequence and the model's."""
        ids = {self.tokenizer.eos_token_id}
        configured = getattr(getattr(lm, "generation_config", None), "eos_token_id", None)
        if isinstance(configured, int):
            ids.add(configured)
        elif isinstance(configured, list | tuple):
            ids.update(configured)
        return sorted(i for i in ids if i is not None)
