"""A training run's checkpoints: taken between rollouts, rotated, with a ``latest`` pointer, and
holding what ``gym-llm train --resume`` needs to continue the run (the agent with its random
state, and the learning curve so far).

Checkpoints are taken at the start of a rollout, after the previous update: the buffer is empty
there, so a resumed run repeats nothing and loses nothing of what the checkpoint saw. A run killed
at any moment loses at most the rollouts since its last checkpoint (one, with the default of a
checkpoint after every rollout).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from stable_baselines3.common.callbacks import BaseCallback

from gym_llm.evaluation.curve import CurveRecorder
from gym_llm.rl.common.checkpoint_files import latest_checkpoint, prune_checkpoints, write_latest
from gym_llm.rl.common.distributed import from_main_process, is_main_process

if TYPE_CHECKING:
    from gym_llm.rl.ppo import PPO

#: The file of a run's checkpoint that holds the learning curve so far.
RUN_STATE = "run_state.json"


class CheckpointCallback(BaseCallback):
    """``PPO.save`` to ``directory/<env steps>/`` at the first rollout start at or after every
    ``every`` env steps and at the end of training (SB3's own counts calls, mid-rollout, and
    names files ``.zip``); then
    ``latest`` moves to it and all but the ``keep`` newest are removed. ``curve``'s points
    and clock are saved with each checkpoint."""

    def __init__(
        self,
        directory: Path,
        every: int,
        keep: int,
        curve: CurveRecorder,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.directory, self.every, self.keep = directory, every, keep
        self.curve, self.extra = curve, extra or {}
        self._next = every

    def _on_training_start(self) -> None:
        # A resumed run continues the schedule from its step count.
        self._next = (self.num_timesteps // self.every + 1) * self.every

    def _on_step(self) -> bool:
        return True

    def _on_rollout_start(self) -> None:
        if self.num_timesteps >= self._next:
            self._next = (self.num_timesteps // self.every + 1) * self.every
            self.save()

    def _on_training_end(self) -> None:
        # The end of learn() is a rollout boundary too: a run extended later starts from here.
        # The main process's view decides for all: a save under FSDP is a collective.
        if not from_main_process((self.directory / str(self.num_timesteps)).is_dir()):
            self.save()

    def save(self) -> Path | None:
        """The checkpoint directory (``None`` in processes other than the main one: it writes
        for them all)."""
        name = str(self.num_timesteps)
        run_state = {"curve": self.curve.state(), **self.extra}
        model = cast("PPO", self.model)
        # Called in every process: only the main one writes, the others join a sharded gather.
        model.save(self.directory / name, extra_json={RUN_STATE: run_state})
        if not is_main_process():
            return None
        write_latest(self.directory, name)
        prune_checkpoints(self.directory, self.keep)
        return self.directory / name


def resumable_checkpoint(run_dir: Path) -> Path:
    """The checkpoint ``--resume`` continues from, or an error that says why there is none."""
    found = latest_checkpoint(run_dir / "checkpoints")
    if found is None:
        raise FileNotFoundError(
            f"{run_dir} has no complete checkpoint in checkpoints/ (the run stopped before its "
            "first one, or ran with --checkpoint-every 0): start it again without --resume."
        )
    if not (found / RUN_STATE).is_file():
        raise FileNotFoundError(
            f"{found} has no {RUN_STATE}: it was not written by `gym-llm train`, so the run "
            "cannot be continued from it. Load it with PPO.load instead."
        )
    return found


def read_run_state(checkpoint: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads((checkpoint / RUN_STATE).read_text())
    return state
