"""Run ``gym-llm train`` and SIGKILL this process at a chosen point (for the resume tests).

``python tests/kill_helper.py POINT N -- TRAIN_ARGS...`` where POINT is where the N-th event
kills the process without any cleanup (``os.kill(getpid(), SIGKILL)``, as the OOM killer or a
preempted machine would):

- ``rollout``: the N-th env step (inside a rollout);
- ``update``: the N-th optimizer step (inside an update);
- ``save``: the N-th ``torch.save`` of a checkpoint, after half the file is written;
- ``pointer``: the N-th move of ``checkpoints/latest``, after the checkpoint is complete.

Before dying it writes the env steps done so far to ``$KILL_REPORT`` (for the lost-steps figure).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch

from gym_llm.cli import commands
from gym_llm.experiments import checkpoints
from gym_llm.rl.common import vec_env

STEPS = {"done": 0}


def _die() -> None:
    report = os.environ.get("KILL_REPORT")
    if report:
        Path(report).write_text(str(STEPS["done"]))
    os.kill(os.getpid(), signal.SIGKILL)


def _counting(original: Any, n: int, before: Any = None) -> Any:
    calls = {"n": 0}

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == n:
            if before is not None:
                before(*args, **kwargs)
            _die()
        return original(*args, **kwargs)

    return wrapped


def main() -> None:
    point, n = sys.argv[1], int(sys.argv[2])
    train_args = sys.argv[sys.argv.index("--") + 1 :]
    step_wait = vec_env.TextVecEnv.step_wait

    def counted_step_wait(self: Any) -> Any:
        out = step_wait(self)
        STEPS["done"] += self.num_envs
        return out

    vec_env.TextVecEnv.step_wait = counted_step_wait
    if point == "rollout":
        vec_env.TextVecEnv.step_wait = _counting(counted_step_wait, n)
    elif point == "update":
        torch.optim.AdamW.step = _counting(torch.optim.AdamW.step, n)
    elif point == "save":
        save = torch.save

        def half_written(obj: Any, file: Any, *args: Any, **kwargs: Any) -> None:
            save(obj, file)
            data = Path(file).read_bytes()
            Path(file).write_bytes(data[: len(data) // 2])

        torch.save = _counting(save, n, before=half_written)
    elif point == "pointer":
        checkpoints.write_latest = _counting(checkpoints.write_latest, n)
    else:
        raise SystemExit(f"unknown kill point {point!r}")
    raise SystemExit(commands.main(train_args))


if __name__ == "__main__":
    main()
