"""The seed launcher on commands that take a moment: every seed runs once, the log says how
each ended, a rerun resumes, the deadline stops launching, and a command without {seed} is
refused."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import pytest

from benchmarks.recipes import side_by_side
from benchmarks.recipes.side_by_side import finished_seeds, main, run_side_by_side


def test_the_module_examples_hold() -> None:
    import doctest

    assert doctest.testmod(side_by_side).failed == 0


def _command(tmp_path: Path) -> list[str]:
    """Writes its seed and thread count to a file; seed 1 fails."""
    script = (
        "import os, sys, time; time.sleep(0.3); "
        f"open(r'{tmp_path}/ran-{{seed}}', 'w').write(os.environ['OMP_NUM_THREADS']); "
        "sys.exit(int('{seed}') == 1)"
    )
    return [sys.executable, "-c", script]


def _rows(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_every_seed_runs_once_and_the_log_says_how_it_ended(tmp_path: Path) -> None:
    log = tmp_path / "sweep.jsonl"
    status = run_side_by_side(_command(tmp_path), [0, 1, 2], 2, log, threads=1)
    assert status == {0: 0, 1: 1, 2: 0}
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == ["ran-0", "ran-1", "ran-2"]
    assert (tmp_path / "ran-2").read_text() == "1"  # one thread per run
    ends = {row["seed"]: row["rc"] for row in _rows(log) if row["event"] == "end"}
    assert ends == {0: 0, 1: 1, 2: 0}
    assert (tmp_path / "sweep-s1.out").exists()
    # Runs overlap: the second starts before the first ends.
    events = [(row["event"], row["seed"]) for row in _rows(log)]
    assert events[:2] == [("start", 0), ("start", 1)]


def test_a_rerun_runs_only_the_seeds_that_did_not_finish(tmp_path: Path) -> None:
    log = tmp_path / "sweep.jsonl"
    command = _command(tmp_path)
    run_side_by_side(command, [0, 1, 2], 2, log)
    assert finished_seeds(log, command) == {0, 2}
    for path in tmp_path.glob("ran-*"):
        path.unlink()
    assert run_side_by_side(command, [0, 1, 2], 2, log) == {1: 1}
    assert [p.name for p in tmp_path.glob("ran-*")] == ["ran-1"]
    # Another command is another sweep: nothing of it is finished.
    assert finished_seeds(log, [*command, "--other"]) == set()


def test_no_run_starts_after_the_deadline(tmp_path: Path) -> None:
    log = tmp_path / "sweep.jsonl"
    past = dt.datetime.now() - dt.timedelta(minutes=1)
    status = run_side_by_side(_command(tmp_path), [0, 2], 1, log, stop_launching_at=past)
    assert status == {0: None, 2: None}
    assert not list(tmp_path.glob("ran-*"))


def test_bad_input_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "sweep.jsonl"
    with pytest.raises(ValueError, match="no \\{seed\\}"):
        run_side_by_side([sys.executable, "-c", "pass"], [0, 1], 2, log)
    with pytest.raises(ValueError, match="cannot start 'no-such-program-here'"):
        run_side_by_side(["no-such-program-here", "{seed}"], [0], 1, log)
    with pytest.raises(ValueError, match="--jobs must be at least 1"):
        run_side_by_side(_command(tmp_path), [0], 0, log)
    with pytest.raises(SystemExit):
        main(["--seeds", "0-1", "--log", str(log)])
    assert "give the command after --" in capsys.readouterr().err


def test_the_command_line_reports_each_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "sweep.jsonl"
    rc = main(["--seeds", "0,2", "--jobs", "2", "--log", str(log), "--", *_command(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "seed 0: exit 0" in out and "seed 2: exit 0" in out
    assert main(["--seeds", "0-2", "--log", str(log), "--", *_command(tmp_path)]) == 1
    assert "already finished in" in capsys.readouterr().out
