"""``ConfigField``: an algorithm's attribute that is a field of its config, so that SB3's habit of
reading and setting ``model.n_epochs`` keeps working while the config stays the one record of the
settings (what ``save`` writes)."""

from __future__ import annotations

from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


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
