"""JSON in a reply: every object found (fenced or bare), duplicate keys kept, and the reply with
its JSON blanked out so that rules reading free text never fire inside it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.IGNORECASE | re.DOTALL)


class _Object(dict[str, Any]):
    """A decoded JSON object that remembers every ``(key, value)`` pair, duplicates included
    (``{"action": "stick", "action": "hit"}`` states two actions; a dict keeps only the last)."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        self.pairs = pairs


def json_objects(text: str) -> Iterator[Any]:
    """Every JSON value found in fenced blocks, then every balanced ``{...}`` / ``[...]``."""
    for block in _FENCE.findall(text):
        try:
            value = json.loads(block, object_pairs_hook=_Object)
        except (ValueError, RecursionError):
            continue
        yield value
    decoder = json.JSONDecoder(object_pairs_hook=_Object)
    for i, char in enumerate(text):
        if char in "{[":
            try:
                value, _ = decoder.raw_decode(text, i)
            except (ValueError, RecursionError):
                continue
            yield value


def without_json(text: str) -> str:
    """``text`` with every balanced JSON object or list blanked out, so that rules reading free
    text never fire inside JSON (``{"action": [1, 2]}`` does not state ``action: 1``)."""
    decoder = json.JSONDecoder()
    out, i = [], 0
    while i < len(text):
        if text[i] in "{[":
            try:
                _, end = decoder.raw_decode(text, i)
            except (ValueError, RecursionError):
                end = 0
            if end > i:
                out.append(" " * (end - i))
                i = end
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


def json_actions(value: Any) -> list[Any]:
    """Every value of an ``action`` key (any case) of a decoded JSON object, duplicates too."""
    pairs = value.pairs if isinstance(value, _Object) else []
    return [item for key, item in pairs if key.strip().lower() == "action"]


def json_action(value: Any) -> tuple[bool, Any]:
    """``(found, action value)`` from a decoded JSON value with an ``action`` key."""
    items = json_actions(value)
    return (True, items[-1]) if items else (False, None)
