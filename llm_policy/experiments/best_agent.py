"""Keep the agent of a run's best curve point: ``run_dir/best/``.

Online RL does not climb monotonically. A policy that has reached the target keeps sampling,
and a few updates can flip its move in a state or two: on the task family's held-out grid, five
of ten runs that reached 90 % of the gap ended below it. The final agent is then not the best
one the run produced, and the run's own curve says which one was. This keeper saves the agent
whenever a curve point beats every earlier one, so ``best/`` always holds the best policy
measured so far (written all or nothing, like every checkpoint).

Where a point is scored exactly, its value is the policy's true expected return. Where it is a
Monte-Carlo mean, picking the largest of several noisy means favours lucky ones: evaluate
``best/`` again on fresh episodes (``gym-llm eval --load RUN_DIR/best --seed N``) before you
quote its score.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from stable_baselines3.common.callbacks import BaseCallback

from gym_llm.evaluation.curve import CurvePoint, CurveRecorder
from gym_llm.rl.common.distributed import from_main_process

if TYPE_CHECKING:
    from gym_llm.rl.ppo import PPO

#: The file in ``best/`` that says which curve point the agent is, and its value.
BEST_FILE = "best.json"


def read_best(directory: Path) -> dict[str, Any] | None:
    """What ``directory/best.json`` records, or ``None`` where no best agent was kept yet (or its
    record cannot be read: the next improvement rewrites it)."""
    try:
        record = json.loads((directory / BEST_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("value"), int | float):
        return None
    return record


def beats(point: CurvePoint, best: dict[str, Any] | None) -> bool:
    """Whether ``point`` should replace the kept agent: a finite value above the kept one (ties
    keep the earlier agent, which reached the value in fewer env steps)."""
    if not math.isfinite(point.value):
        return False
    return best is None or point.value > float(best["value"])


class BestAgentKeeper(BaseCallback):
    """Save the agent to ``directory`` whenever the newest curve point is the best so far.

    Checked at each rollout's start (after ``curve``, which must come first in the callback
    list, has measured), at the training's start (the point before training, or after the SFT
    warm start) and by :meth:`update` after training (the final point). Only a point taken at the
    agent's current step count describes the weights being saved. Every process must call it: the
    main process decides, and a save is collective where the weights are sharded.
    """

    def __init__(self, directory: Path, curve: CurveRecorder) -> None:
        super().__init__()
        self.directory, self.curve = directory, curve
        #: What ``best.json`` holds; a resumed run continues from the record on disk.
        self.best = read_best(directory)

    def _on_training_start(self) -> None:
        self.update()

    def _on_rollout_start(self) -> None:
        self.update()

    def _on_step(self) -> bool:
        return True

    def update(self) -> bool:
        """Save the agent if the newest point is the best so far; whether it did. Asking again
        without a new point saves nothing: a point already kept no longer beats the record."""
        record = from_main_process(self._candidate())
        if record is None:
            return False
        cast("PPO", self.model).save(self.directory, extra_json={BEST_FILE: record})
        self.best = record
        return True

    def _candidate(self) -> dict[str, Any] | None:
        if not self.curve.points:
            return None
        last = self.curve.points[-1]
        if last.timesteps != self.model.num_timesteps or not beats(last, self.best):
            return None
        return {"timesteps": last.timesteps, "value": last.value, "kind": last.score.kind}
