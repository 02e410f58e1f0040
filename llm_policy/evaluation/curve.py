"""Learning curves: one point type and one recorder, for gym_llm's PPO and SB3's baselines alike.

A point is a :class:`~gym_llm.evaluation.scores.Score` (exact or Monte-Carlo) after some env steps
and some training wall time (evaluation time excluded), plus the Monte-Carlo details where the
policy was played through text.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback

from gym_llm.evaluation.monte_carlo import EvalStats
from gym_llm.evaluation.scores import Score


@dataclass
class CurvePoint:
    """The greedy policy's quality after ``timesteps`` env steps (``wall_s`` of training)."""

    timesteps: int
    wall_s: float
    score: Score
    #: The Monte-Carlo evaluation through text, where one was made.
    eval: EvalStats | None = None

    @property
    def value(self) -> float:
        """The best estimate: exact where available, else the Monte-Carlo mean."""
        return self.score.value

    @property
    def exact(self) -> float | None:
        """The exact expected return (``None`` where the env has no exact evaluation)."""
        return self.score.value if self.score.kind == "exact" else None

    def describe(self) -> str:
        parts = []
        if self.exact is not None:
            parts.append(f"exact expected return {self.exact:+.4f}")
        if self.eval is not None:
            parts.append(f"Monte-Carlo {self.eval}")
        return "; ".join(parts) or f"{self.value:+.4f} ({self.score.kind})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "timesteps": self.timesteps,
            "wall_s": self.wall_s,
            "exact": self.exact,
            "monte_carlo": self.eval.as_dict() if self.eval is not None else None,
        }


def point_from_dict(data: dict[str, Any]) -> CurvePoint:
    """Undo :meth:`CurvePoint.as_dict` (for a resumed run's curve)."""
    stats = EvalStats(**data["monte_carlo"]) if data.get("monte_carlo") is not None else None
    if data.get("exact") is not None:
        score = Score(float(data["exact"]), 0.0, "exact")
    else:
        score = stats.score() if stats is not None else no_score()
    return CurvePoint(int(data["timesteps"]), float(data["wall_s"]), score, stats)


#: What a recorder measures: the score, and the Monte-Carlo details if it played episodes.
Measure = Callable[[BaseAlgorithm], tuple[Score, EvalStats | None]]


class CurveRecorder(BaseCallback):
    """Measures the model every ``every`` env steps (0: only when :meth:`record` is called),
    timing the measurements apart from training.

    With ``per_rollout`` (on-policy algorithms) a due point is measured at the next rollout's
    start, not mid-rollout: the policy only changes between rollouts, and a point measured during
    one would carry the policy from before the update that its step count includes.
    """

    def __init__(
        self,
        every: int,
        measure: Measure,
        *,
        per_rollout: bool = True,
        on_point: Callable[[CurvePoint], None] | None = None,
    ) -> None:
        super().__init__()
        self.every, self.measure, self.per_rollout = every, measure, per_rollout
        self.on_point = on_point
        self.points: list[CurvePoint] = []
        self._next = every
        self.restart_clock()

    def restart_clock(self, elapsed: float = 0.0) -> None:
        """Count training time from now, plus ``elapsed`` seconds already trained (a resumed
        run); evaluations made so far are not subtracted."""
        self.start = time.perf_counter() - elapsed
        self.eval_s = 0.0

    def train_seconds(self) -> float:
        """Wall time since the clock started, without the time spent measuring."""
        return time.perf_counter() - self.start - self.eval_s

    def state(self) -> dict[str, Any]:
        """The points so far, the next due step and the training time: JSON for a checkpoint."""
        return {
            "points": [p.as_dict() for p in self.points],
            "next": self._next,
            "train_s": self.train_seconds(),
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state` (a resumed run)."""
        self.points = [point_from_dict(p) for p in state["points"]]
        self._next = int(state["next"])
        self.restart_clock(float(state["train_s"]))

    def _on_step(self) -> bool:
        if not self.per_rollout:
            self._maybe_record()
        return True

    def _on_rollout_start(self) -> None:
        if self.per_rollout and self.num_timesteps > 0:
            self._maybe_record()

    def _maybe_record(self) -> None:
        if self.every > 0 and self.num_timesteps >= self._next:
            while self._next <= self.num_timesteps:
                self._next += self.every
            self.record()

    def record(self) -> CurvePoint:
        """Measure now and add the point (also to the logger's ``eval/*`` when it has one)."""
        wall = max(0.0, self.train_seconds())
        start = time.perf_counter()
        score, stats = self.measure(self.model)
        self.eval_s += time.perf_counter() - start
        point = CurvePoint(int(self.num_timesteps), wall, score, stats)
        self.points.append(point)
        if getattr(self.model, "_logger", None) is not None:  # not before the first learn()
            if stats is not None:
                self.logger.record("eval/mean_return", stats.mean)
                self.logger.record("eval/sem", stats.sem)
                self.logger.record("eval/invalid_action_rate", stats.invalid_action_rate)
            if score.kind == "exact":
                self.logger.record("eval/exact_return", score.value)
        if self.on_point is not None:
            self.on_point(point)
        return point


def no_score() -> Score:
    """The score of a point that measured nothing (no episodes, no exact evaluation)."""
    return Score(math.nan, math.nan, "none")
