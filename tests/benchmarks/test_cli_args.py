"""The helpers every benchmark script shares: ``--json``'s writer and ``--jsonl``'s appender."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchmarks.cli_args import append_jsonl, write_json


def test_write_json_makes_the_folder_and_writes_numpy_numbers(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "result.json"
    write_json(path, {"ratio": np.float32(1.5), "steps": [np.int64(3), 4]}, indent=1)
    text = path.read_text()
    assert text.endswith("\n")
    assert json.loads(text) == {"ratio": 1.5, "steps": [3.0, 4]}


def test_write_json_without_a_path_writes_nothing(tmp_path: Path) -> None:
    write_json(None, {"a": 1})
    assert not any(tmp_path.iterdir())


def test_append_jsonl_makes_the_folder_appends_one_line_per_row_and_skips_no_path(
    tmp_path: Path,
) -> None:
    path = tmp_path / "new" / "rows.jsonl"
    append_jsonl(path, {"a": 1})
    append_jsonl(path, {"b": 2}, {"c": 3})
    append_jsonl(None, {"d": 4})
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"a": 1}, {"b": 2}, {"c": 3},
    ]  # fmt: skip
