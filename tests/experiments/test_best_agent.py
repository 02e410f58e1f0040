"""``gym_llm.experiments.best_agent``: which curve points replace the kept agent, without a model."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from gym_llm.evaluation.curve import CurvePoint, CurveRecorder
from gym_llm.evaluation.scores import Score
from gym_llm.experiments.best_agent import BEST_FILE, BestAgentKeeper, beats, read_best


def _point(steps: int, value: float, kind: str = "exact") -> CurvePoint:
    return CurvePoint(steps, 0.0, Score(value, 0.0, kind))


class _FakeAgent:
    """What the keeper touches of an algorithm: the step count, ``save`` and a logger."""

    def __init__(self) -> None:
        self.num_timesteps = 0
        self.logger = None
        self.saves: list[tuple[Path, dict[str, Any]]] = []

    def get_env(self) -> None:
        return None

    def save(self, path: Path, extra_json: dict[str, Any]) -> None:
        path.mkdir(parents=True, exist_ok=True)
        for name, data in extra_json.items():
            (path / name).write_text(json.dumps(data))
        self.saves.append((path, dict(extra_json[BEST_FILE])))


def _keeper(directory: Path) -> tuple[BestAgentKeeper, CurveRecorder, _FakeAgent]:
    curve = CurveRecorder(0, lambda agent: (Score(0.0, 0.0, "exact"), None))
    agent = _FakeAgent()
    keeper = BestAgentKeeper(directory, curve)
    keeper.init_callback(agent)
    return keeper, curve, agent


def _measure(curve: CurveRecorder, agent: _FakeAgent, steps: int, value: float) -> None:
    agent.num_timesteps = steps
    curve.points.append(_point(steps, value))


def test_beats_needs_a_finite_value_above_the_kept_one() -> None:
    assert beats(_point(0, -0.5), None)
    assert beats(_point(8, 0.6), {"value": 0.5})
    assert not beats(_point(8, 0.5), {"value": 0.5})  # a tie keeps the earlier agent
    assert not beats(_point(8, 0.4), {"value": 0.5})
    assert not beats(_point(8, math.nan), None)  # a point that measured nothing


def test_read_best_is_none_without_a_readable_record(tmp_path: Path) -> None:
    assert read_best(tmp_path) is None
    (tmp_path / BEST_FILE).write_text("{not json")
    assert read_best(tmp_path) is None
    (tmp_path / BEST_FILE).write_text(json.dumps({"value": "high"}))
    assert read_best(tmp_path) is None
    (tmp_path / BEST_FILE).write_text(json.dumps({"value": 0.25, "timesteps": 64}))
    assert read_best(tmp_path) == {"value": 0.25, "timesteps": 64}


def test_saves_each_new_best_and_only_those(tmp_path: Path) -> None:
    keeper, curve, agent = _keeper(tmp_path / "best")
    for steps, value in ((0, 0.1), (32, 0.5), (64, 0.3), (96, 0.5), (128, 0.7)):
        _measure(curve, agent, steps, value)
        keeper.update()
    assert [s["timesteps"] for _, s in agent.saves] == [0, 32, 128]
    assert keeper.best == {"timesteps": 128, "value": 0.7, "kind": "exact"}
    assert read_best(tmp_path / "best") == keeper.best
    # nothing new measured: nothing saved, however often it is asked
    keeper.update()
    assert len(agent.saves) == 3


def test_a_point_from_other_weights_is_never_saved(tmp_path: Path) -> None:
    keeper, curve, agent = _keeper(tmp_path / "best")
    _measure(curve, agent, 32, 0.9)
    agent.num_timesteps = 40  # trained on since: the saved weights would not be the point's
    assert not keeper.update() and not agent.saves


def test_a_resumed_run_keeps_a_better_agent_on_disk(tmp_path: Path) -> None:
    directory = tmp_path / "best"
    directory.mkdir()
    (directory / BEST_FILE).write_text(
        json.dumps({"timesteps": 512, "value": 0.8, "kind": "exact"})
    )
    keeper, curve, agent = _keeper(directory)
    _measure(curve, agent, 640, 0.6)
    assert not keeper.update()
    _measure(curve, agent, 768, 0.85)
    assert keeper.update() and agent.saves[-1][1]["timesteps"] == 768
