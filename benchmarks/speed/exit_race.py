"""How often a process of a finished two-process gloo job aborts at exit, by how it leaves.

Each job: two fresh Python processes join a gloo group (a file store), make 20
``broadcast_object_list`` calls, and rank 1 leaves at once (rank 0 waits 0.3 s). A process that
dies by a signal (SIGABRT: "terminate called without an active exception") counts as aborted.
The measurements behind :func:`gym_llm.rl.common.distributed.leave_job` (``benchmarks/RESULTS.md``)::

    python -m benchmarks.speed.exit_race --jobs 60 --how plain leave-held
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

#: How rank 1 leaves: the code run after the broadcasts.
HOW = {
    "plain": "",
    "destroy": "dist.barrier(); dist.destroy_process_group()",
    "destroy-held": "held = dist.group.WORLD; dist.barrier(); dist.destroy_process_group()",
    # SystemExit(3): leave_job returned, which it must not do in a job of two processes.
    "leave-held": "held = dist.group.WORLD; leave_job(); raise SystemExit(3)",
}

_JOB = """
import sys, time
import torch.distributed as dist
from gym_llm.rl.common.distributed import leave_job
rank, store = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
for _ in range(20):
    box = [{"x": list(range(100))}] if rank == 0 else [None]
    dist.broadcast_object_list(box, src=0)
print("done", box[0]["x"][-1], flush=True)
if rank == 0:
    time.sleep(0.3)
"""


def run_job(how: str, store: Path) -> list[tuple[int, str]]:
    """One job: each process's exit status (negative: the signal that ended it) and output."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    code = _JOB + HOW[how] + "\n"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(rank), str(store)], env=env,
                         text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        for rank in (0, 1)
    ]  # fmt: skip
    return [(p.wait(timeout=300), p.communicate()[0]) for p in procs]


def one_job(how: str, store: Path) -> bool:
    """Whether a process of one job ended by a signal."""
    return any(status < 0 for status, _ in run_job(how, store))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=60, help="jobs per way of leaving")
    parser.add_argument("--how", nargs="+", choices=sorted(HOW), default=sorted(HOW))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for how in args.how:
            aborted = sum(one_job(how, Path(tmp) / f"{how}-{i}") for i in range(args.jobs))
            print(f"{how:<13} aborted in {aborted} of {args.jobs} jobs", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
