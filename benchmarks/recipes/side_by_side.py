"""Run one command per seed, several at a time, each on one torch thread.

    python -m benchmarks.recipes.side_by_side --seeds 0-9 --jobs 2 --log runs/dice.jsonl \\
        --stop-launching-at 18:10 -- python -m benchmarks.recipes.family_sweep run \\
        --tasks dice-p0-s1 --seeds {seed} --steps 8192 --jsonl out/dice-s{seed}.jsonl

The recipes run their seeds one after another in one process; a 10-seed row on two CPU cores,
or twenty runs sharing one GPU, wants them side by side instead. Each run's output goes to
``LOG-s{seed}.out`` beside the log, and the log gets a line when a run starts and when it ends
(exit status, seconds), so a lease that ends mid-sweep says which seeds finished. A seed whose
command already ended with status 0 in the log is skipped: rerunning the same line resumes.
``--stop-launching-at`` starts no run after that time; runs under way go on (the recipes write
every point as they go, so one stopped later keeps its curve).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.cli_args import append_jsonl, new_parser, read_jsonl, seed_list

#: Seconds between looks at the running processes.
POLL_S = 0.2


def seed_command(command: Sequence[str], seed: int) -> list[str]:
    """``command`` with every ``{seed}`` replaced by the seed.

    >>> seed_command(["run", "--seeds", "{seed}", "--jsonl", "out-s{seed}.jsonl"], 3)
    ['run', '--seeds', '3', '--jsonl', 'out-s3.jsonl']
    """
    return [part.replace("{seed}", str(seed)) for part in command]


def finished_seeds(log: Path, command: Sequence[str]) -> set[int]:
    """The seeds whose run of this very command ended with status 0 in ``log``."""
    return {
        int(row["seed"])
        for row in read_jsonl(log)
        if row.get("event") == "end"
        and row.get("rc") == 0
        and row.get("command") == seed_command(command, row["seed"])
    }


def launch_deadline(text: str | None, now: dt.datetime) -> dt.datetime | None:
    """``HH:MM`` (today, or tomorrow if already past) or an ISO date-time, in local time.

    >>> launch_deadline("18:10", dt.datetime(2026, 11, 30, 16, 0))
    datetime.datetime(2026, 11, 30, 18, 10)
    >>> launch_deadline("01:00", dt.datetime(2026, 11, 30, 16, 0))
    datetime.datetime(2026, 12, 1, 1, 0)
    """
    if text is None:
        return None
    if len(text) <= 5 and ":" in text:
        hours, minutes = (int(part) for part in text.split(":"))
        at = now.replace(hour=hours, minute=minutes, second=0, microsecond=0)
        return at if at > now else at + dt.timedelta(days=1)
    return dt.datetime.fromisoformat(text)


def _environment(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    return env


def run_side_by_side(
    command: Sequence[str],
    seeds: Sequence[int],
    jobs: int,
    log: Path,
    *,
    threads: int = 1,
    stop_launching_at: dt.datetime | None = None,
) -> dict[int, int | None]:
    """Each seed's exit status (None: not launched, the deadline passed first); seeds already
    finished in ``log`` are left out."""
    if jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {jobs}")
    if len(seeds) > 1 and not any("{seed}" in part for part in command):
        raise ValueError(
            "the command has no {seed}: every run would be the same; put {seed} where the "
            "recipe takes its seed (e.g. --seeds {seed})"
        )
    log.parent.mkdir(parents=True, exist_ok=True)
    done = finished_seeds(log, command)
    queue = [seed for seed in seeds if seed not in done]
    status: dict[int, int | None] = {seed: None for seed in queue}
    running: dict[int, tuple[subprocess.Popen[bytes], float, Any]] = {}
    env = _environment(threads)
    try:
        while queue or running:
            late = stop_launching_at is not None and dt.datetime.now() >= stop_launching_at
            while queue and len(running) < jobs and not late:
                seed = queue.pop(0)
                argv = seed_command(command, seed)
                out = open(log.with_name(f"{log.stem}-s{seed}.out"), "ab")  # noqa: SIM115
                try:
                    process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
                except OSError as error:
                    out.close()
                    raise ValueError(f"cannot start {argv[0]!r}: {error}") from error
                running[seed] = (process, time.monotonic(), out)
                append_jsonl(log, {"event": "start", "seed": seed, "command": argv,
                                   "at": dt.datetime.now().isoformat(timespec="seconds")})  # fmt: skip
            if late:
                queue.clear()
            for seed in [seed for seed, run in running.items() if run[0].poll() is not None]:
                status[seed] = _ended(log, command, seed, *running.pop(seed))
            time.sleep(POLL_S)
    finally:  # interrupted: the runs under way stop too, and say so
        for seed, (process, started, out) in running.items():
            process.terminate()
            process.wait()
            status[seed] = _ended(log, command, seed, process, started, out)
    return status


def _ended(
    log: Path,
    command: Sequence[str],
    seed: int,
    process: subprocess.Popen[bytes],
    started: float,
    out: Any,
) -> int:
    """Close a finished run's output and log its end; its exit status."""
    out.close()
    rc = int(process.returncode)
    append_jsonl(log, {
        "event": "end", "seed": seed, "command": seed_command(command, seed), "rc": rc,
        "seconds": round(time.monotonic() - started, 1),
        "at": dt.datetime.now().isoformat(timespec="seconds"),
    })  # fmt: skip
    return rc


def main(argv: Sequence[str] | None = None) -> int:
    parser = new_parser("python -m benchmarks.recipes.side_by_side", __doc__)
    parser.epilog = "Everything after -- is the command, with {seed} where the seed goes."
    parser.add_argument("--seeds", type=seed_list, required=True, help="e.g. 0-9 or 0,3,7")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument(
        "--log", type=Path, required=True,
        help="JSONL of starts and ends (resumes from it); each run's output beside it",
    )  # fmt: skip
    parser.add_argument(
        "--stop-launching-at", metavar="HH:MM|ISO",
        help="start no run after this local time (runs under way go on)",
    )  # fmt: skip
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --, with {seed} where the seed goes")
    try:
        deadline = launch_deadline(args.stop_launching_at, dt.datetime.now())
        status = run_side_by_side(
            command, args.seeds, args.jobs, args.log,
            threads=args.threads, stop_launching_at=deadline,
        )  # fmt: skip
    except ValueError as error:
        parser.error(str(error))
    for seed, rc in status.items():
        print(f"seed {seed}: {'not launched' if rc is None else f'exit {rc}'}")
    skipped = sorted(set(args.seeds) - set(status))
    if skipped:
        print(f"already finished in {args.log}: seeds {', '.join(map(str, skipped))}")
    print(f"command: {shlex.join(command)}")
    return 0 if all(rc == 0 for rc in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
