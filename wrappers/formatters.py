"""Generic observation → text formatting for any (nested) Gymnasium space.

The goal is text a person can read, because a pretrained LM reads it the way a person would:
named features where the caller knows them, floats rounded to a few significant digits, plain
Python-looking numbers (never ``np.float32(0.1)`` or ``array([...])``), one ``key: value`` per line
for dicts.
"""

from __future__ import annotations

import contextlib
import copy
import math
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

#: Spaces the generic formatter understands (nesting allowed through Tuple and Dict).
SUPPORTED_SPACES: tuple[type[spaces.Space[Any]], ...] = (
    spaces.Discrete,
    spaces.MultiDiscrete,
    spaces.MultiBinary,
    spaces.Box,
    spaces.Tuple,
    spaces.Dict,
    spaces.Text,
)

#: Arrays with more elements than this are summarised instead of listed in full.
MAX_LISTED_ELEMENTS = 256


def is_text_space(space: spaces.Space[Any]) -> bool:
    """Whether the space's samples are strings: ``Text``, or any space that samples ``str``
    (MiniGrid's ``MissionSpace``); sampled from a copy, so the space's own generator is untouched."""
    if isinstance(space, spaces.Text):
        return True
    if isinstance(space, SUPPORTED_SPACES):
        return False
    try:
        known = _TEXT_SPACES.get(space)
    except TypeError:  # an unhashable space (Graph): ask every time
        known = None
    if known is None:
        try:
            known = isinstance(copy.deepcopy(space).sample(), str)
        except Exception:  # a space that cannot sample on its own is not known to be text
            known = False
        with contextlib.suppress(TypeError):
            _TEXT_SPACES[space] = known
    return known


#: Spaces already checked by :func:`is_text_space` (formatting asks on every step).
_TEXT_SPACES: weakref.WeakKeyDictionary[spaces.Space[Any], bool] = weakref.WeakKeyDictionary()


def check_supported(space: spaces.Space[Any], path: str = "observation_space") -> None:
    """Raise a ``TypeError`` naming the first unsupported (sub)space and what to do about it."""
    if isinstance(space, spaces.Tuple):
        for i, sub in enumerate(space.spaces):
            check_supported(sub, f"{path}[{i}]")
        return
    if isinstance(space, spaces.Dict):
        for key, sub in space.spaces.items():
            check_supported(sub, f"{path}[{key!r}]")
        return
    if not isinstance(space, SUPPORTED_SPACES) and not is_text_space(space):
        names = ", ".join(t.__name__ for t in SUPPORTED_SPACES)
        raise TypeError(
            f"{path} is {space!r}, which the generic formatter cannot write as text "
            f"(it handles {names} and spaces of strings, nested). Pass "
            "formatter=callable(obs) -> str."
        )


def format_number(x: Any, precision: int = 3) -> str:
    """A number as a short plain string: ints as ints, floats to ``precision`` significant digits."""
    if isinstance(x, bool | np.bool_):
        return "1" if x else "0"
    if isinstance(x, int | np.integer):
        return str(int(x))
    value = float(x)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    text = f"{value:.{precision}g}"
    if "e" in text:  # 1.5e-05 -> 1.5e-5
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def format_array(values: Any, precision: int = 3) -> str:
    """Nested list syntax with plain numbers; very large arrays are summarised."""
    array = np.asarray(values)
    if array.ndim == 0:
        return format_number(array.item(), precision)
    if array.size > MAX_LISTED_ELEMENTS:
        flat = array.astype(np.float64).ravel()
        return (
            f"array of shape {tuple(array.shape)} (min {format_number(flat.min(), precision)}, "
            f"mean {format_number(flat.mean(), precision)}, "
            f"max {format_number(flat.max(), precision)})"
        )
    return _format_nested(array.tolist(), precision)


def _format_nested(value: Any, precision: int) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_format_nested(v, precision) for v in value) + "]"
    return format_number(value, precision)


def format_observation(
    space: spaces.Space[Any],
    obs: Any,
    *,
    names: Sequence[str] | None = None,
    precision: int = 3,
) -> str:
    """Write ``obs`` (an element of ``space``) as readable text.

    ``names`` labels the elements of a 1-D Box/MultiDiscrete/MultiBinary observation (or the items
    of a Tuple); each named value goes on its own ``name: value`` line. ``precision`` is the
    number of significant digits of floats.

    >>> from gymnasium import spaces
    >>> format_observation(spaces.Box(-1, 1, (2,)), [0.123456, -1.0], names=["x", "y"])
    'x: 0.123\\ny: -1'
    >>> format_observation(spaces.Dict({"pos": spaces.Discrete(3), "ok": spaces.MultiBinary(2)}),
    ...                    {"pos": 2, "ok": [1, 0]})
    'ok: [1, 0]\\npos: 2'
    """
    if is_text_space(space):
        return str(obs)
    if isinstance(space, spaces.Discrete):
        return format_number(int(obs))
    if isinstance(space, spaces.Dict):
        return "\n".join(
            _labelled(key, format_observation(sub, obs[key], precision=precision))
            for key, sub in space.spaces.items()
        )
    if isinstance(space, spaces.Tuple):
        parts = [
            format_observation(sub, item, precision=precision)
            for sub, item in zip(space.spaces, obs, strict=True)
        ]
        if names is not None:
            return "\n".join(_labelled(n, p) for n, p in zip(names, parts, strict=True))
        if all("\n" not in p for p in parts):
            return "(" + ", ".join(parts) + ")"
        return "\n".join(_labelled(str(i), p) for i, p in enumerate(parts))
    if isinstance(space, spaces.Box | spaces.MultiDiscrete | spaces.MultiBinary):
        array = np.asarray(obs)
        if names is not None and array.ndim == 1 and len(names) == array.size:
            return "\n".join(
                f"{n}: {format_number(v, precision)}"
                for n, v in zip(names, array.tolist(), strict=True)
            )
        return format_array(array, precision)
    check_supported(space)
    return str(obs)  # pragma: no cover - check_supported raised


def _labelled(label: str, text: str) -> str:
    """``label: text`` on one line, or the label followed by the indented block for multi-line text."""
    if "\n" not in text:
        return f"{label}: {text}"
    return f"{label}:\n" + "\n".join("  " + line for line in text.splitlines())
