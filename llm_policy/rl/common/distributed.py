"""Data parallelism over ``torch.distributed`` (what ``accelerate launch`` and ``torchrun`` set
up): each process collects its own rollouts; these helpers make the update the same in every
process. In one process (no process group) every function is the identity, so the single-process
path runs exactly the code it ran before.
"""

from __future__ import annotations

import datetime
import logging
import os
import sys
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

#: How long a process waits for the others at a collective before the job fails: long enough for
#: the main process's evaluations and checkpoints between rollouts, which the others wait out.
COLLECTIVE_TIMEOUT = datetime.timedelta(hours=2)

#: On CPU, ``accelerate launch --cpu --num_processes N`` starts one process (its multi-CPU mode
#: needs MPI); these start N.
CPU_LAUNCH_HELP = (
    "on CPU, start N processes with `torchrun --nproc-per-node N -m gym_llm.cli train ...` or "
    "`accelerate launch --multi_gpu --num_processes N -m gym_llm.cli train ...` (accelerate's "
    "--cpu flag starts one process unless MPI is set up)"
)


def launched_world_size() -> int:
    """Processes the launcher (torchrun, ``accelerate launch``) started: ``WORLD_SIZE``."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def init_from_launcher() -> bool:
    """Join the process group a launcher set up (``WORLD_SIZE`` > 1 in the environment), once;
    whether this is a job of several processes. NCCL on CUDA (each process on the GPU of its
    ``LOCAL_RANK``), gloo otherwise. Without a launcher nothing happens, so one process runs the
    code it always ran."""
    if dist.is_available() and dist.is_initialized():
        return world_size() > 1
    if launched_world_size() == 1:
        if os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true":
            warnings.warn(
                "accelerate launch --cpu started a single process: " + CPU_LAUNCH_HELP + ".",
                stacklevel=2,
            )
        return False
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        backend = "nccl"
    else:
        backend = "gloo"
    dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT)
    return True


def world_size() -> int:
    """Processes in the job (1 without a process group)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if world_size() > 1 else 0


def is_main_process() -> bool:
    """Whether this process writes logs, curves and checkpoints (rank 0)."""
    return rank() == 0


def collective_device() -> torch.device:
    """Where the figures this module reduces must live: NCCL reduces CUDA tensors only (this
    process's GPU), gloo CPU ones."""
    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _sum(values: list[float]) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return [float(v) for v in tensor.tolist()]


def global_moments(values: np.ndarray) -> tuple[float, float, float]:
    """``(mean, variance, count)`` of ``values`` over every process (the advantage scale)."""
    array = values.astype(np.float64)
    moments = [float(array.sum()), float(np.square(array).sum()), float(array.size)]
    if world_size() > 1:
        moments = _sum(moments)
    total, squares, count = moments
    if count == 0:
        return 0.0, 0.0, 0.0
    mean = total / count
    return mean, max(squares / count - mean * mean, 0.0), count


def global_mean(value: float) -> float:
    """The mean of ``value`` over the processes (a logged statistic, the target-KL test)."""
    if world_size() == 1:
        return value
    return _sum([value])[0] / world_size()


def global_sums(values: Sequence[float]) -> list[float]:
    """Each of ``values`` summed over the processes (counts that are logged)."""
    if world_size() == 1:
        return [float(v) for v in values]
    return _sum([float(v) for v in values])


def every_process(flag: bool) -> bool:
    """Whether ``flag`` is true in every process (a rollout goes on only if no callback stopped
    it anywhere, so the processes stay in step)."""
    return not any_process(not flag)


def gather_objects(items: list[Any]) -> list[list[Any]]:
    """Every process's ``items`` (the episodes each one finished), in rank order."""
    if world_size() == 1:
        return [list(items)]
    gathered: list[Any] = [None] * world_size()
    dist.all_gather_object(gathered, items)
    return [list(part) for part in gathered]


def from_main_process(value: Any) -> Any:
    """The main process's ``value``, in every process (results only rank 0 measured)."""
    if world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def broadcast_parameters(parameters: Iterable[torch.Tensor]) -> None:
    """Copy the main process's values into every process (the trainable weights start equal even
    where their random initialisation differed)."""
    if world_size() == 1:
        return
    with torch.no_grad():
        for param in parameters:
            dist.broadcast(param.data, src=0)


def barrier() -> None:
    """Wait until every process is here (nothing in one process)."""
    if world_size() > 1:
        dist.barrier()


def leave_job() -> None:
    """End this process of a multi-process job that finished; in one process, return at once.

    Why not a plain exit: during the interpreter's shut-down, torch's gloo worker threads may
    still hold the last collective's tensors (``broadcast_object_list`` makes them in Python).
    Releasing one then needs the interpreter, and the process aborts after its work is done
    ("terminate called without an active exception", SIGABRT; the launcher then reports the
    job as failed). ``destroy_process_group()`` joins those threads only when nothing else holds
    the group, and FSDP keeps it. Measured with two processes that leave right after 20
    broadcasts (``benchmarks/RESULTS.md``): a plain exit aborted in 28 of 60 jobs;
    ``destroy_process_group()`` first, 0 of 60 with the group free and 10 of 40 with it held;
    this, 0 of 60 with it held. So every process meets the others (none leaves while another
    still needs it), flushes its output and leaves without the interpreter's shut-down (no
    destructors run, so none can abort). Write every file before calling it.
    """
    if world_size() == 1:
        return
    dist.barrier()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def global_max(value: int) -> int:
    """The largest ``value`` over the processes."""
    if world_size() == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.int64, device=collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def any_process(flag: bool) -> bool:
    """Whether ``flag`` is true in any process (a skipped step is skipped everywhere)."""
    if world_size() == 1:
        return flag
    return _sum([float(flag)])[0] > 0


def same_in_every_process(value: int, what: str) -> None:
    """Raise in every process (no hang) when ``value`` differs between them."""
    if world_size() == 1:
        return
    tensor = torch.tensor(
        [float(value), -float(value)], dtype=torch.float64, device=collective_device()
    )
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    high, low = float(tensor[0]), -float(tensor[1])
    if high != low:
        raise RuntimeError(
            f"{what} differs between the processes ({low:g} to {high:g}): every process must "
            "collect rollouts of the same size (same n_envs and n_steps) for a data-parallel "
            "update."
        )


def average_gradients(parameters: Iterable[torch.nn.Parameter]) -> None:
    """Replace each gradient by its mean over the processes (DDP's all-reduce, done once per
    optimizer step on the trainable parameters only: LoRA and the value head)."""
    if world_size() == 1:
        return
    for param in parameters:
        if isinstance(param, DTensor):  # sharded by FSDP: its backward already averaged them
            continue
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
        param.grad /= world_size()
