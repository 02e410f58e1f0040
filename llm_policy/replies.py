"""Replies that remember the tokens they were sampled as, and conversations that keep them.

A conversation prompt holds the policy's earlier replies. Decoding a reply and encoding the text
again does not give back the sampled tokens (one string has many BPE tokenisations, and the reply
text is stripped), so a prompt rebuilt from text would not be the context the model actually
produced, and the update would train on log-probs of a sequence it never sampled. A
:class:`Reply` is the reply text (a ``str``, so every env and parser takes it unchanged) carrying
its sampled token ids; conversations written as JSON keep them under ``"token_ids"`` next to the
text, and :func:`parse_messages` gives them back as :class:`Reply` contents, so
``LLMPolicy`` can put the exact ids back into the prompt.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

#: The key of an assistant message's sampled token ids in a JSON conversation.
REPLY_IDS_KEY = "token_ids"


class Reply(str):
    """Reply text with the token ids it was sampled as (the closing stop token left out: the chat
    template writes the end of the turn).

    String methods return plain ``str``: a stripped or lowered reply is no longer what was sampled.

    >>> r = Reply("hit", [5, 17])
    >>> r == "hit", r.token_ids
    (True, (5, 17))
    """

    token_ids: tuple[int, ...]

    def __new__(cls, text: str, token_ids: Iterable[int]) -> Reply:
        reply = super().__new__(cls, text)
        reply.token_ids = tuple(int(t) for t in token_ids)
        return reply

    def __reduce__(self) -> tuple[Any, ...]:
        # str's own pickling would call Reply(text) and lose the ids (subprocess envs pickle it).
        return (Reply, (str(self), self.token_ids))


def message_record(message: dict[str, str]) -> dict[str, Any]:
    """The JSON form of a chat message: a :class:`Reply` content keeps its token ids."""
    record: dict[str, Any] = {"role": message["role"], "content": str(message["content"])}
    ids = getattr(message["content"], "token_ids", None)
    if ids is not None:
        record[REPLY_IDS_KEY] = [int(t) for t in ids]
    return record


def conversation_json(messages: Sequence[dict[str, str]]) -> str:
    """A conversation as the JSON message list policies read (see :func:`parse_messages`)."""
    return json.dumps([message_record(m) for m in messages], ensure_ascii=False)


def parse_messages(value: Any) -> list[dict[str, str]] | None:
    """The messages of a decoded JSON conversation (a list of ``{"role", "content"}`` objects,
    optionally with ``"token_ids"``: a list of ints, returned as a :class:`Reply` content), or
    ``None`` when ``value`` is not one."""
    if not isinstance(value, list) or not value:
        return None
    messages: list[dict[str, str]] = []
    for m in value:
        if not (
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
        ):
            return None
        content: str = m["content"]
        ids = m.get(REPLY_IDS_KEY)
        if ids is not None:
            if not isinstance(ids, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids
            ):
                return None
            content = Reply(content, ids)
        messages.append({"role": m["role"], "content": content})
    return messages
