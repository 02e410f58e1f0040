"""Starting the multi-process tests' jobs: two processes under ``torchrun`` or ``accelerate
launch`` on the CPU, each running ``launch_helper.py`` (or the command line), with a hang guard."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.paths import ROOT

HELPER = Path(__file__).with_name("launch_helper.py")
#: A hang guard for the subprocesses (a hung collective would otherwise hold CI for hours), not
#: a speed assertion: each run takes seconds.
HANG_GUARD_S = 300


#: Two processes as each launcher starts them on a CPU (accelerate's --cpu flag would start one:
#: its multi-CPU mode needs MPI; --multi_gpu runs torchrun, with gloo where there is no GPU).
LAUNCHERS = {
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone",
                 "--nproc-per-node", "2"],
    "accelerate": [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
                   "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                   "--dynamo_backend", "no", "--main_process_port", "0"],
}  # fmt: skip


def run_job(command: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=ROOT
    )


def torchrun(*args: str, launcher: str = "torchrun") -> subprocess.CompletedProcess[str]:
    return run_job([*LAUNCHERS[launcher], *args])
