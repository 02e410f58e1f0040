"""What every component's config dataclass shares: building one from keyword arguments
(:func:`with_settings`), and ``ConfigField``, an attribute that is a field of the config, so that
SB3's habit of reading and setting ``model.n_epochs`` keeps working while the config stays the one
record of the settings (what ``save`` writes)."""

from __future__ import annotations

import dataclasses
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
