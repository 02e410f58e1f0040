from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from gym_llm.wrappers.formatters import (
    check_supported,
    format_array,
    format_number,
    format_observation,
)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (3, "3"),
        (np.int64(-2), "-2"),
        (np.float32(0.1), "0.1"),
        (2.0, "2"),
        (-0.0, "0"),
        (0.123456, "0.123"),
        (12345.678, "1.23e4"),
        (1.5e-5, "1.5e-5"),
        (True, "1"),
        (float("nan"), "nan"),
        (float("-inf"), "-inf"),
    ],
)
def test_format_number_is_plain_and_rounded(value: object, text: str) -> None:
    assert format_number(value) == text


def test_arrays_have_no_numpy_repr() -> None:
    text = format_array(np.array([[0.5, 1.0], [2.25, -3.0]], dtype=np.float32))
    assert text == "[[0.5, 1], [2.25, -3]]"
    assert "array" not in text and "float32" not in text


def test_large_arrays_are_summarised() -> None:
    text = format_array(np.zeros((32, 32)))
    assert text.startswith("array of shape (32, 32)")


def test_named_box_features_one_per_line() -> None:
    space = spaces.Box(-1, 1, (3,))
    text = format_observation(space, np.array([0.1, -0.25, 1.0]), names=["x", "y", "z"])
    assert text == "x: 0.1\ny: -0.25\nz: 1"


def test_nested_dict_and_tuple() -> None:
    space = spaces.Dict(
        {
            "position": spaces.Box(0, 10, (2,)),
            "inventory": spaces.MultiDiscrete([3, 3]),
            "flags": spaces.MultiBinary(2),
            "room": spaces.Discrete(5),
            "nested": spaces.Tuple((spaces.Discrete(2), spaces.Text(10))),
            "deeper": spaces.Dict({"hp": spaces.Box(0, 100, (1,))}),
        }
    )
    obs = {
        "position": np.array([1.23456, 2.0], dtype=np.float32),
        "inventory": np.array([2, 0]),
        "flags": np.array([1, 0], dtype=np.int8),
        "room": 4,
        "nested": (1, "door"),
        "deeper": {"hp": np.array([99.5], dtype=np.float32)},
    }
    assert space.contains(obs)
    text = format_observation(space, obs)
    assert text.splitlines() == [
        "deeper: hp: [99.5]",
        "flags: [1, 0]",
        "inventory: [2, 0]",
        "nested: (1, door)",
        "position: [1.23, 2]",
        "room: 4",
    ]


def test_tuple_with_names() -> None:
    space = spaces.Tuple((spaces.Discrete(32), spaces.Discrete(11)))
    assert format_observation(space, (15, 10), names=["sum", "dealer"]) == "sum: 15\ndealer: 10"


def test_unsupported_space_names_the_path_and_the_fix() -> None:
    space = spaces.Dict({"ok": spaces.Discrete(2), "graph": spaces.Graph(spaces.Discrete(2), None)})
    with pytest.raises(TypeError, match=r"observation_space\['graph'\].*formatter="):
        check_supported(space)
