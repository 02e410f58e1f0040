"""Data parallelism over ``torch.distributed`` (what ``accelerate launch`` and ``torchrun`` set
up): each process collects its own rollouts; these helpers make the update the same in every
process. In one process (no process group) every function is the identity, so the single-process
path runs exactly the code it ran before.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
import torch.distributed as dist


def world_size() -> int:
    """Processes in the job (1 without a process group)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if world_size() > 1 else 0


def is_main_process() -> bool:
    """Whether this process writes logs, curves and checkpoints (rank 0)."""
    return rank() == 0


def _sum(values: list[float]) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64)
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


def any_process(flag: bool) -> bool:
    """Whether ``flag`` is true in any process (a skipped step is skipped everywhere)."""
    if world_size() == 1:
        return flag
    return _sum([float(flag)])[0] > 0


def same_in_every_process(value: int, what: str) -> None:
    """Raise in every process (no hang) when ``value`` differs between them."""
    if world_size() == 1:
        return
    tensor = torch.tensor([float(value), -float(value)], dtype=torch.float64)
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
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
        param.grad /= world_size()
