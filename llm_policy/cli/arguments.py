"""What every ``gym-llm`` command shares on its command line: usage errors, the help format,
``--env-kwargs`` (one syntax everywhere: :mod:`gym_llm.experiments.specs`), and flags generated
from a config dataclass (type, default and the field's ``#:`` comment as help) with JSON config
files checked against it."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gym_llm.experiments import specs
from gym_llm.experiments.specs import parse_value

PROG = "gym-llm"


class CLIError(Exception):
    """A usage error: reported as ``gym-llm <command>: error: ...`` with exit status 2."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every flag's default after its help (unless the help already states it or the flag is an
    on/off switch); descriptions and epilogs kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        switch = isinstance(action, argparse._StoreTrueAction | argparse._HelpAction)
        if "default" in text or switch or action.required or action.default is argparse.SUPPRESS:
            return text
        return text + (" (default: none)" if action.default is None else " (default: %(default)s)")


# --- values from the command line ----------------------------------------------------------


def parse_env_kwargs(text: str) -> dict[str, Any]:
    """``--env-kwargs``: :func:`gym_llm.experiments.specs.parse_env_kwargs`, whose errors are
    usage errors here."""
    try:
        return specs.parse_env_kwargs(text)
    except ValueError as exc:
        raise CLIError(str(exc)) from None


def _env_kwargs_arg(text: str) -> dict[str, Any]:
    try:
        return parse_env_kwargs(text)
    except CLIError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--env-kwargs: ")) from None


# --- flags generated from a config dataclass -----------------------------------------------


def field_docs(cls: type) -> dict[str, str]:
    """Each field's ``#:`` comment (the lines right above it), joined into one sentence."""
    return dict(_field_docs(cls))


@functools.cache
def _field_docs(cls: type) -> dict[str, str]:
    """Read once per process: ``inspect.getsource`` parses the whole module every call."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # no source (frozen app): flags still work, without help text
        return {}
    docs: dict[str, str] = {}
    pending: list[str] = []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip().replace("``", "`"))
            continue
        match = re.match(r"(\w+)\s*:", stripped)
        if match and pending:
            docs[match.group(1)] = " ".join(pending)
        pending = []
    return docs


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``, ``(hint, False)`` otherwise."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0], True
    return hint, False


def _converter(name: str, hint: Any) -> tuple[Callable[[str], Any], str]:
    """``(str -> value, metavar)`` for a field's type hint."""
    base, optional = _unwrap_optional(hint)
    origin = typing.get_origin(base) or base

    def convert(raw: str) -> Any:
        if optional and raw.strip().lower() in ("none", "null"):
            return None
        if origin is dict:
            return _env_kwargs_arg(raw)
        if typing.get_origin(base) is typing.Literal:
            choices = typing.get_args(base)
            value = parse_value(raw)
            if value not in choices:
                raise argparse.ArgumentTypeError(f"choose from {', '.join(map(str, choices))}")
            return value
        if base in (int, float, str):
            try:
                return base(raw)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{raw!r} is not a valid {base.__name__}"
                ) from None
        return parse_value(raw)  # lists and other types: JSON or a plain value

    convert.__name__ = getattr(base, "__name__", name)  # argparse names it in errors
    if origin is dict:
        metavar = "K=V,..."
    elif typing.get_origin(base) is typing.Literal:
        metavar = "{" + ",".join(map(str, typing.get_args(base))) + "}"
    else:
        metavar = getattr(base, "__name__", "VALUE").upper()
    return convert, metavar + ("|none" if optional else "")


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "none"
    return str(value)


def _field_default(item: dataclasses.Field[Any]) -> Any:
    if item.default is not dataclasses.MISSING:
        return item.default
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return dataclasses.MISSING


def add_dataclass_flags(parser: argparse.ArgumentParser, cls: type) -> list[str]:
    """One ``--field-name`` flag per field of ``cls`` (a dataclass), with its type, its default
    in the help, and its ``#:`` comment as help text. Flags default to "not given"
    (``argparse.SUPPRESS``) so that a config file's values survive unless overridden. Returns
    the field names."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    group = parser.add_argument_group(
        f"run settings (the fields of {cls.__module__}.{cls.__name__})"
    )
    names = []
    for item in dataclasses.fields(cls):
        hint = hints[item.name]
        default = _field_default(item)
        flag = "--" + item.name.replace("_", "-")
        help_text = docs.get(item.name, item.name.replace("_", " ").capitalize() + ".")
        if default is not dataclasses.MISSING and "(default:" not in help_text:
            help_text += f" (default: {_show(default)})"
        help_text = help_text.replace("%", "%%")
        base, _ = _unwrap_optional(hint)
        if base is bool:
            group.add_argument(
                flag,
                dest=item.name,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        else:
            convert, metavar = _converter(item.name, hint)
            group.add_argument(
                flag,
                dest=item.name,
                type=convert,
                default=argparse.SUPPRESS,
                metavar=metavar,
                help=help_text,
            )
        names.append(item.name)
    return names


def _check_type(name: str, value: Any, hint: Any, where: str) -> Any:
    """``value`` from a config file, checked against the field's type (ints accepted as
    floats); a ``CLIError`` naming the key otherwise."""
    base, optional = _unwrap_optional(hint)
    if value is None and optional:
        return None
    origin = typing.get_origin(base) or base
    ok = True
    if base is bool:
        ok = isinstance(value, bool)
    elif base is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif base is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif base is str:
        ok = isinstance(value, str)
    elif origin is dict:
        ok = isinstance(value, dict)
    if not ok:
        expected = getattr(base, "__name__", str(base)) + (" or null" if optional else "")
        raise CLIError(f"{where}: {name!r} must be {expected}, got {value!r}. Fix the file.")
    return value


def load_config_file(path: str | Path, cls: type) -> dict[str, Any]:
    """The settings in a ``config.json`` (or a ``result.json``, whose ``config`` is used),
    checked against ``cls``'s fields and types."""
    path = Path(path)
    if path.is_dir():
        if (path / "config.json").is_file():
            path = path / "config.json"
        else:
            raise CLIError(
                f"--config {path} is a directory without a config.json; pass the config.json "
                "a gym-llm train run wrote (runs/NAME/config.json)."
            )
    if not path.is_file():
        raise CLIError(
            f"--config {path}: no such file. Pass the config.json of an earlier run "
            "(runs/NAME/config.json)."
        )
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise CLIError(f"--config {path} is not valid JSON: {exc}. Fix or regenerate it.") from None
    if isinstance(data, dict) and isinstance(data.get("config"), dict) and "versions" in data:
        data = data["config"]  # a result.json holds the config it ran with
    if not isinstance(data, dict):
        raise CLIError(f"--config {path} must hold a JSON object of settings, got {data!r}.")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise CLIError(
            f"--config {path} has unknown keys {unknown}; known keys: {', '.join(known)}. "
            "Remove or rename them (a config from a newer gym_llm?)."
        )
    return {
        key: _check_type(key, value, hints[key], f"--config {path}") for key, value in data.items()
    }
