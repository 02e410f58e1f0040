"""Demonstration files: chat-messages JSONL records, read and checked (errors name the file and
line), for the supervised warm start (:mod:`gym_llm.rl.sft`)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gym_llm.policy.prompts import Message

ROLES: tuple[str, ...] = ("system", "user", "assistant")

#: A demonstration: ``{"messages": [{"role": ..., "content": ...}, ...]}`` (extra keys ignored).
Record = Mapping[str, Any]


class DemoError(ValueError):
    """A demonstration is malformed; the message says where and how to fix it."""


# --- reading and checking demonstrations ---------------------------------------------------------


def _check_record(record: Any, where: str) -> list[Message]:
    """The record's messages, or a :class:`DemoError` naming ``where`` and the problem."""
    fmt = 'each demonstration is {"messages": [{"role": "user", "content": "..."}, ...]}'
    if not isinstance(record, Mapping):
        raise DemoError(f"{where}: expected a JSON object, got {type(record).__name__}; {fmt}.")
    if "messages" not in record:
        raise DemoError(f'{where}: no "messages" key (keys: {sorted(record)}); {fmt}.')
    messages = record["messages"]
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise DemoError(f'{where}: "messages" must be a non-empty list; {fmt}.')
    checked: list[Message] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or "role" not in message or "content" not in message:
            raise DemoError(
                f'{where}: message {i} must be an object with "role" and "content", '
                f"got {message!r}."
            )
        role, content = message["role"], message["content"]
        if role not in ROLES:
            raise DemoError(
                f"{where}: message {i} has role {role!r}; roles are {', '.join(ROLES)}."
            )
        if not isinstance(content, str):
            raise DemoError(
                f"{where}: message {i} content must be a string, got {type(content).__name__}."
            )
        if role == "system" and i != 0:
            raise DemoError(f"{where}: message {i} is a system message; only the first may be.")
        if role == "assistant":
            if i == 0 or checked[-1]["role"] != "user":
                raise DemoError(
                    f"{where}: assistant message {i} must follow a user message (the prompt it "
                    "answers)."
                )
            if not content.strip():
                raise DemoError(f"{where}: assistant message {i} is empty; nothing to learn.")
        checked.append({"role": role, "content": content})
    if not any(m["role"] == "assistant" for m in checked):
        raise DemoError(f"{where}: no assistant message, so nothing to learn from this record.")
    return checked


def read_demos(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read chat-messages JSONL (one episode or one turn per line; blank lines skipped).

    Every record is checked: valid JSON, a ``"messages"`` list, roles ``system`` (first only) /
    ``user`` / ``assistant``, string contents, each assistant reply after a user turn. Errors are
    :class:`DemoError` (a ``ValueError``) naming the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"No demonstrations file {path}; write one with gym_llm.experiments.demos.make_demos or "
            "`gym-llm demos`."
        )
    records: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DemoError(
                    f"{where}: not valid JSON ({exc.msg} at column {exc.colno})."
                ) from None
            _check_record(record, where)
            records.append(record)
    if not records:
        raise DemoError(f"{path}: no demonstrations in the file.")
    return records


def _load_records(demos: str | os.PathLike[str] | Sequence[Record]) -> list[list[Message]]:
    if isinstance(demos, str | os.PathLike):
        return [_check_record(r, "") for r in read_demos(demos)]
    if isinstance(demos, Mapping) or not isinstance(demos, Sequence):
        raise TypeError(
            'demos must be a JSONL path or a list of {"messages": [...]} records, got '
            f"{type(demos).__name__}."
        )
    if not demos:
        raise DemoError("demos is empty: give at least one demonstration.")
    return [_check_record(r, f"demos[{i}]") for i, r in enumerate(demos)]
