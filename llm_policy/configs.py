"""What every component's config dataclass shares.

Building one from keyword arguments (:func:`with_settings`); ``ConfigField``, an attribute that is
a field of the config, so that SB3's habit of reading and setting ``model.n_epochs`` keeps working
while the config stays the one record of the settings; and configs nested as sections of a run's
config (``TrainConfig.ppo``): one dotted syntax to change any setting (:func:`override`:
``{"ppo.n_epochs": 2}``, what ``--ppo.n-epochs 2`` and ``ppo.n_epochs=2`` in a recipe become),
and the JSON a run file holds (:func:`to_dict`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")
C = TypeVar("C")


def with_settings(
    config_type: type[C], config: C | None, settings: dict[str, Any], owner: str
) -> C:
    """``config`` (or ``config_type``'s defaults) with ``settings`` replacing fields, refusing a
    name that is not one with the list of those that are (``owner``: whose settings they are)."""
    known = {f.name for f in dataclasses.fields(config_type)}  # type: ignore[arg-type]
    unknown = sorted(set(settings) - known)
    if unknown:
        hint = "" if owner == "LLMPolicy" else ", and the policy's go in policy_kwargs"
        raise TypeError(
            f"{owner} got unknown settings {unknown}; its settings are {sorted(known)} (see "
            f"gym_llm.{config_type.__name__}){hint}."
        )
    return dataclasses.replace(config or config_type(), **settings)  # type: ignore[type-var]


class ConfigField(Generic[T]):
    """``model.NAME`` reads and writes ``model.config.NAME``."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> ConfigField[T]: ...

    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> T: ...

    def __get__(self, obj: object | None, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(obj.config, self.name)  # type: ignore[attr-defined]

    def __set__(self, obj: object, value: T) -> None:
        setattr(obj.config, self.name, value)  # type: ignore[attr-defined]


# --- a config as a run file holds it: nested sections, dotted overrides ------------------------

#: Field metadata of a setting that only code can give (a model object, a class): a run file and
#: the command line leave it out. ``tokenizer: Any = field(default=None, metadata=RUNTIME_ONLY)``.
RUNTIME_ONLY: Mapping[str, bool] = {"runtime_only": True}


def setting_fields(config_type: type) -> list[dataclasses.Field[Any]]:
    """The fields of ``config_type`` a run file and the command line can set."""
    return [f for f in dataclasses.fields(config_type) if not f.metadata.get("runtime_only")]


def is_section(hint: Any) -> bool:
    """Whether a field's type is itself a config (a nested section such as ``ppo``)."""
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def to_dict(config: Any) -> dict[str, Any]:
    """The settings of ``config``, sections nested, runtime-only fields left out: what a run
    file holds."""
    out: dict[str, Any] = {}
    for item in setting_fields(type(config)):
        value = getattr(config, item.name)
        out[item.name] = to_dict(value) if dataclasses.is_dataclass(value) else value
    return out


def unwrap_optional(hint: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``, ``(hint, False)`` otherwise."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0], True
    return hint, False


def check_value(name: str, value: Any, hint: Any) -> Any:
    """``value`` checked against a field's type hint (ints accepted as floats); a
    ``TypeError`` naming the field otherwise. Unions other than ``X | None`` pass unchecked
    (the config's own validation reads them)."""
    base, optional = unwrap_optional(hint)
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
    elif origin is typing.Literal:
        ok = value in typing.get_args(base)
    if not ok:
        if origin is typing.Literal:
            expected = "one of " + ", ".join(map(repr, typing.get_args(base)))
        else:
            expected = getattr(base, "__name__", str(base))
        raise TypeError(
            f"{name!r} must be {expected}{' or null' if optional else ''}, got {value!r}."
        )
    return value


def override(config: C, settings: Mapping[str, Any], _prefix: str = "") -> C:
    """``config`` with dotted settings replacing fields: ``{"ppo.n_epochs": 2, "seed": 1}``, a
    section as a whole (``{"ppo": {"n_epochs": 2}}``) or both. Names are checked (the known
    ones listed), values against the fields' types, and each config validates itself.

    Raises:
        TypeError: a name that is no setting, or a value of the wrong type.
        ValueError: what a config's own validation refuses.
    """
    config_type = type(config)
    hints = typing.get_type_hints(config_type)
    fields = {f.name: f for f in setting_fields(config_type)}
    own: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in settings.items():
        name, _, rest = key.partition(".")
        if name not in fields:
            raise TypeError(
                f"{_prefix + key!r} is not a setting of {config_type.__name__}; its settings "
                f"are {', '.join(_prefix + n for n in _dotted_names(config_type))}."
            )
        if is_section(hints[name]):
            if rest:
                nested.setdefault(name, {})[rest] = value
            elif isinstance(value, Mapping):
                nested.setdefault(name, {}).update(value)
            else:
                raise TypeError(
                    f"{_prefix + name!r} is a section: give a JSON object or "
                    f"{_prefix + name}.NAME=VALUE."
                )
        elif rest:
            raise TypeError(f"{_prefix + key!r}: {name!r} is a value, not a section.")
        else:
            own[name] = check_value(_prefix + key, value, hints[name])
    for name, section_settings in nested.items():
        own[name] = override(getattr(config, name), section_settings, f"{_prefix}{name}.")
    return dataclasses.replace(config, **own)  # type: ignore[type-var]


def _dotted_names(config_type: type) -> list[str]:
    hints = typing.get_type_hints(config_type)
    names = []
    for item in setting_fields(config_type):
        if is_section(hints[item.name]):
            names.append(f"{item.name}.*")
        else:
            names.append(item.name)
    return names


def dotted(config: Any, _prefix: str = "") -> dict[str, Any]:
    """Every setting of ``config`` by its dotted name (``{"ppo.n_epochs": 4, ...}``): what
    :func:`override` takes."""
    out: dict[str, Any] = {}
    for item in setting_fields(type(config)):
        value = getattr(config, item.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out.update(dotted(value, f"{_prefix}{item.name}."))
        else:
            out[_prefix + item.name] = value
    return out


def by_section(settings: Mapping[str, Any], sections: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Dotted settings grouped by their section, for code that passes each group to its own
    component: ``{"ppo.n_epochs": 2, "policy.action_head": False}`` -> ``{"ppo": {"n_epochs":
    2}, "policy": {"action_head": False}}`` (every section present). A name outside
    ``sections`` is a ``ValueError`` naming them."""
    groups: dict[str, dict[str, Any]] = {section: {} for section in sections}
    for key, value in settings.items():
        section, _, name = key.partition(".")
        if section not in groups or not name:
            raise ValueError(
                f"{key!r}: give settings as {' or '.join(s + '.NAME' for s in sections)}."
            )
        groups[section][name] = value
    return groups
