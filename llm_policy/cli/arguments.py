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

from gym_llm.configs import is_section, setting_fields, unwrap_optional
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
            text = re.sub(r":\w+:`~?([^`]+)`", r"\1", stripped[2:].strip())  # Sphinx roles
            pending.append(text.replace("``", "`"))
            continue
        match = re.match(r"(\w+)\s*:", stripped)
        if match and pending:
            docs[match.group(1)] = " ".join(pending)
        pending = []
    return docs


def _converter(name: str, hint: Any) -> tuple[Callable[[str], Any], str]:
    """``(str -> value, metavar)`` for a field's type hint."""
    base, optional = unwrap_optional(hint)
    origin = typing.get_origin(base) or base

    union = (
        typing.get_args(base) if typing.get_origin(base) in (typing.Union, types.UnionType) else ()
    )
    as_text = str in union and Any in union  # a name or path (a model object only from code)

    def convert(raw: str) -> Any:
        if optional and raw.strip().lower() in ("none", "null"):
            return None
        if as_text:
            return raw
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


def add_dataclass_flags(
    parser: argparse.ArgumentParser, cls: type, defaults: Any = None
) -> list[str]:
    """One flag per setting of ``cls`` (a config dataclass), with its type, its default in the
    help, and its ``#:`` comment as help text; a field that is itself a config (a section such
    as ``ppo``) gets dotted flags in a group of its own: ``--ppo.n-epochs``. Flags default to
    "not given" (``argparse.SUPPRESS``) so that a config file's values survive unless
    overridden; ``defaults`` (an instance) is what the help shows as each default, where a
    caller starts from other settings than ``cls()``. Returns the dotted names (the flags'
    ``dest``)."""
    group = parser.add_argument_group(f"run settings ({cls.__module__}.{cls.__name__})")
    return _add_fields(parser, group, cls, "", defaults or _defaults(cls))


def _defaults(cls: type) -> Any:
    """An instance of ``cls`` with its defaults (a section's defaults are the owner's), or
    ``None`` where a field has none."""
    try:
        return cls()
    except TypeError:
        return None


def _add_fields(
    parser: argparse.ArgumentParser, group: Any, cls: type, prefix: str, defaults: Any
) -> list[str]:
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    names = []
    for item in setting_fields(cls):
        hint = hints[item.name]
        default = getattr(defaults, item.name) if defaults is not None else _field_default(item)
        if is_section(hint):
            section = parser.add_argument_group(
                f"--{prefix}{item.name}.*", docs.get(item.name, "").replace("%", "%%")
            )
            names += _add_fields(parser, section, hint, f"{prefix}{item.name}.", default)
            continue
        help_text = docs.get(item.name, item.name.replace("_", " ").capitalize() + ".")
        if default is not dataclasses.MISSING and "(default:" not in help_text:
            help_text += f" (default: {_show(default)})"
        help_text = help_text.replace("%", "%%")
        dest = prefix + item.name
        flag = "--" + dest.replace("_", "-")  # --ppo.n_epochs works too: dashed_flags
        base, _ = unwrap_optional(hint)
        if base is bool:
            group.add_argument(
                flag,
                dest=dest,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        else:
            convert, metavar = _converter(item.name, hint)
            group.add_argument(
                flag,
                dest=dest,
                type=convert,
                default=argparse.SUPPRESS,
                metavar=metavar,
                help=help_text,
            )
        names.append(dest)
    return names


def given_settings(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    """The settings given on the command line, by dotted name."""
    return {name: getattr(args, name) for name in names if hasattr(args, name)}


def add_renamed_flags(parser: argparse.ArgumentParser, renamed: dict[str, str]) -> None:
    """Flags that were renamed: using one is a usage error that names the new flag (hidden
    from ``--help``)."""
    for old, new in renamed.items():
        parser.add_argument(old, nargs="?", action=_Renamed, help=argparse.SUPPRESS, new=new)


class _Renamed(argparse.Action):
    def __init__(self, *args: Any, new: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.new = new

    def __call__(self, parser: Any, namespace: Any, values: Any, option: str | None = None) -> None:
        parser.error(f"{option} is now {self.new}.")


def dashed_flags(argv: list[str]) -> list[str]:
    """``--ppo.n_epochs 2`` as ``--ppo.n-epochs 2``: a dotted flag may be written the way its
    field is."""
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        if name.startswith("--") and "." in name:
            arg = name.replace("_", "-") + eq + value
        out.append(arg)
    return out


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The JSON object in a ``config.json`` (or a ``result.json``, whose ``config`` is used),
    not yet checked against a config: usage errors for a missing or unreadable file."""
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
    return data
