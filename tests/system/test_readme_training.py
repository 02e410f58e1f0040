"""The training examples of the README and the guides run as written, on the default model made a
tiny one (``tiny_default_model``) and with their ``learn``/``distill`` budgets cut to a few env
steps; and what their comments promise holds (``PPO.load("agent", env=env)`` continues the run)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.paths import ROOT

#: Steps each example's learn() gets here (the pages ask for thousands).
STEPS = 64


def _blocks(page: str) -> list[str]:
    text = (ROOT / page).read_text()
    return [b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if "learn(" in b]


def _shortened(block: str) -> str:
    """The block with every budget cut: ``learn(N)``, ``learn(total_timesteps=N, ...)``,
    ``distill(steps=N)``; nothing else changes."""
    block = re.sub(r"learn\((?:total_timesteps=)?[\d_]+", f"learn({STEPS}", block)
    return re.sub(r"distill\(steps=[\d_]+", "distill(steps=4", block)


def _run(block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(_shortened(block), "docs", "exec"), namespace)
    return namespace


def test_every_training_example_is_run_here() -> None:
    """The pages below are the ones with a training example; a new one must be added here."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    with_learn = {str(p.relative_to(ROOT)) for p in pages if _blocks(str(p.relative_to(ROOT)))}
    # scaling.md's block is the tail of a multi-process job; tests/system/test_distributed.py makes its calls.
    assert with_learn == {*RUN, "docs/guides/scaling.md"}


def _readme(ns: dict[str, Any]) -> None:
    from gym_llm import PPO

    model = ns["model"]
    resumed = PPO.load("agent", env=ns["env"])  # the comment: "PPO.load(...) continues it"
    assert resumed.num_timesteps == model.num_timesteps == STEPS
    resumed.learn(STEPS, reset_num_timesteps=False)
    assert resumed.num_timesteps == 2 * STEPS


def _training(ns: dict[str, Any]) -> None:
    replies = ns["replies"]
    assert len(replies) == 1 and replies[0] in ("stick", "hit")
    assert any(Path("runs").iterdir()), "tensorboard_log='runs' wrote no logs"


def _dqn(ns: dict[str, Any]) -> None:
    assert ns["replies"][0] in ("stick", "hit") and ns["alone"][0] in ("stick", "hit")


def _sft(ns: dict[str, Any]) -> None:
    assert ns["model"].num_timesteps >= STEPS
    assert len(Path("bj.jsonl").read_text().splitlines()) == 280  # the comment's count


RUN = {
    "README.md": _readme,
    "docs/guides/training.md": _training,
    "docs/guides/dqn.md": _dqn,
    "docs/guides/sft.md": _sft,
}


@pytest.mark.parametrize("page", sorted(RUN))
def test_training_example_runs_and_keeps_its_promises(
    page: str,
    tiny_default_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    one_torch_thread: None,
) -> None:
    (block,) = _blocks(page)
    RUN[page](_run(block, tmp_path, monkeypatch))
