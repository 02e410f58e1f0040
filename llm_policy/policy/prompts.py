"""Chat prompts from what the spaces carry: instruction (system), observation (user).

One place builds prompts so that the zero-shot demo, the PPO policy and the Agent API all show the
model exactly the same text for the same observation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from gym_llm.replies import parse_messages
from gym_llm.spaces import TextActions, TextObservations

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
