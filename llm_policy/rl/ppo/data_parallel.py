"""What changes for ``PPO`` when a launcher started several processes (``torchrun``,
``accelerate launch``): each process seeds its own envs and sampling, the trainable weights start
equal everywhere, and only the main process writes (TensorBoard, progress bar, ``save``).

The update itself (averaged gradients, global advantage moments) is in
:mod:`gym_llm.rl.ppo.update` via :mod:`gym_llm.rl.common.distributed`; the rollout counts env steps and
episodes over every process (:mod:`gym_llm.rl.ppo.rollout`). In one process each method here does
exactly what SB3's does.
"""

from __future__ import annotations

import os
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

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
    shard_policy,
)
from gym_llm.rl.ppo.checkpointing import PPOCheckpointing


class DataParallel(PPOCheckpointing):
    """Per-process seeds, equal starting weights and main-process-only output."""

    def set_random_seed(self, seed: int | None = None) -> None:
        """Process ``r`` uses ``seed + r * n_envs``: its envs get the seeds the envs
        ``r * n_envs ...`` of one process with every env would get, and its sampling differs
        from the others'. (Rank 0, and a single process, use ``seed`` itself.)"""
        if seed is None or world_size() == 1:
            super().set_random_seed(seed)
            return
        n_envs = self.env.num_envs if self.env is not None else self.n_envs
        super().set_random_seed(seed + rank() * n_envs)

    fsdp: bool

    def _start_equal(self) -> None:
        """The main process's trainable weights in every process (``_setup_model`` calls it):
        seeds differ between processes, and so would randomly initialised adapters."""
        broadcast_parameters(p for p in self.policy.parameters() if p.requires_grad)

    def restore_training_state(self, state: dict[str, Any]) -> None:
        if world_size() == 1:
            super().restore_training_state(state)
            return
        # The saved generators are one process's: every process would sample the same replies.
        # Keep this process's own seeds; learn(reset_num_timesteps=False) refuses (see below).
        self._pending_resume = state

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: Any = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ) -> tuple[int, BaseCallback]:
        if world_size() > 1:
            if self._pending_resume is not None and not reset_num_timesteps:
                raise ValueError(
                    "Resuming a checkpoint exactly (learn(..., reset_num_timesteps=False) after "
                    "PPO.load) works in one process only: a checkpoint holds one process's random "
                    "state. Resume in one process, or start a new data-parallel run from the "
                    "loaded weights with reset_num_timesteps=True."
                )
            if not is_main_process():  # one TensorBoard log, one progress bar
                self.tensorboard_log, self.verbose, progress_bar = None, 0, False
        if self.fsdp and not is_sharded(self.policy.lm):
            check_can_shard(self.policy.uses_lora, self.policy.first_trainable_layer)
            shard_policy(self.policy)
        return super()._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
        )

    def save(  # type: ignore[override]
        self,
        path: str | os.PathLike[str],
        exclude: Any = None,
        include: Any = None,
        **kwargs: Any,
    ) -> None:
        """Only the main process writes (the weights are the same in every process), so a script
        that calls ``save`` in each process writes one directory, not a race of N. Sharded
        (FSDP), every process must call it (the optimizer's moments are gathered from all), and
        it returns in each once the directory is written."""
        if is_main_process():
            super().save(path, exclude, include, **kwargs)
        elif is_sharded(self.policy.lm):
            self._optimizer_state()  # this process's part of the main process's gather
        if is_sharded(self.policy.lm):  # collective anyway: return once the directory is there
            barrier()

    def _optimizer_state(self) -> dict[str, Any]:
        if is_sharded(self.policy.lm):
            return full_optimizer_state(self.policy.optimizer)
        return super()._optimizer_state()
