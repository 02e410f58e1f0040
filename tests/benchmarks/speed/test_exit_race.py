"""The exit-race benchmark's mechanics: one job per way of leaving, counted from exit signals."""

from __future__ import annotations

import pytest

from benchmarks.speed import exit_race


def test_a_job_that_leaves_through_leave_job_is_counted_clean(
    capsys: pytest.CaptureFixture[str],
) -> None:
    exit_race.main(["--jobs", "1", "--how", "leave-held"])
    assert " ".join(capsys.readouterr().out.split()) == "leave-held aborted in 0 of 1 jobs"
    with pytest.raises(SystemExit):
        exit_race.main(["--how", "nonsense"])
