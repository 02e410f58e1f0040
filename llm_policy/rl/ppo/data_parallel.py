"""What changes for ``PPO`` when a launcher started several processes (``torchrun``,
``accelerate launch``): each process seeds its own envs and sampling, the trainable weights start
equal everywhere, only the main process writes (TensorBoard, progress bar, ``save``), and full
fine-tuning may be sharded (FSDP). In one process every method here leaves things as SB3 has them.

The update itself (averaged gradients, global advantage moments) goes through
:mod:`gym_llm.rl.common.distributed`; the rollout counts env steps and episodes over every process.
"""

from __future__ import annotations

from typing import Any

import torch

from gym_llm.rl.common.distributed import (
    barrier,
    broadcast_parameters,
    is_main_process,
    rank,
    world_size,
)
from gym_llm.rl.common.sharding import (
    check_can_shard,
    full_optimizer_state,
    is_sharded,
    requested_by_launcher,
    shard_policy,
)


class DataParallel:
    """A part of :class:`gym_llm.PPO`: per-process seeds, equal starting weights, main-process
    output and FSDP sharding."""

    def __init__(self, fsdp: bool | None) -> None:
        #: Shard full fine-tuning over the processes from the first ``learn()`` on.
        self.fsdp = requested_by_launcher() if fsdp is None else bool(fsdp)

    @staticmethod
    def process_seed(seed: int | None, n_envs: int) -> int | None:
        """Process ``r`` uses ``seed + r * n_envs``: its envs get the seeds the envs
        ``r * n_envs ...`` of one process with every env would get, and its sampling differs
        from the others'. (Rank 0, and a single process, use ``seed`` itself.)"""
        if seed is None or world_size() == 1:
            return seed
        return seed + rank() * n_envs

    @staticmethod
    def start_equal(policy: torch.nn.Module) -> None:
        """The main process's trainable weights in every process: seeds differ between
        processes, and so would randomly initialised adapters."""
        broadcast_parameters(p for p in policy.parameters() if p.requires_grad)

    @staticmethod
    def resumes_exactly() -> bool:
        """A checkpoint holds one process's random state: only one process can resume it."""
        return world_size() == 1

    def setup_learn(self, policy: Any, resuming: bool) -> bool:
        """Before ``learn``: refuse an exact resume in several processes, shard when asked;
        whether this process writes (TensorBoard, progress bar)."""
        if world_size() > 1 and resuming:
            raise ValueError(
                "Resuming a checkpoint exactly (learn(..., reset_num_timesteps=False) after "
                "PPO.load) works in one process only: a checkpoint holds one process's random "
                "state. Resume in one process, or start a new data-parallel run from the "
                "loaded weights with reset_num_timesteps=True."
            )
        if self.fsdp and not is_sharded(policy.lm):
            check_can_shard(policy.uses_lora, policy.first_trainable_layer)
            shard_policy(policy)
        return is_main_process()

    @staticmethod
    def optimizer_state(policy: Any) -> dict[str, Any]:
        """The optimizer's state as one process holds it whole (gathered under FSDP)."""
        if is_sharded(policy.lm):
            return full_optimizer_state(policy.optimizer)
        return policy.optimizer.state_dict()  # type: ignore[no-any-return]

    def save(self, policy: Any, write: Any) -> None:
        """Only the main process calls ``write`` (the weights are the same in every process), so
        a script that saves in each process writes one directory, not a race of N. Sharded
        (FSDP), every process must call it (the optimizer's moments are gathered from all), and
        it returns in each once the directory is written."""
        if is_main_process():
            write()
        elif is_sharded(policy.lm):
            self.optimizer_state(policy)  # this process's part of the main process's gather
        if is_sharded(policy.lm):  # collective anyway: return once the directory is there
            barrier()
