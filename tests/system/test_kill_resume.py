"""Kill -9 at any moment loses at most the rollout in progress (issue 17, item 2).

A ``gym-llm train`` subprocess is SIGKILLed at a chosen point (``tests/kill_helper.py``: inside
a rollout, inside an update, halfway through writing a checkpoint, between a complete checkpoint
and the move of ``latest``), then ``gym-llm train --resume`` finishes the run. The run must end at
the requested env steps with a loadable agent, no checkpoint directory may ever be half-written,
and, the env's episodes being one step long, the resumed run's weights must equal those of a run
that was never killed, bit for bit.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gym_llm import PPO
from gym_llm.cli import commands as cli

ROLLOUT = 8  # --n-envs 2 x --n-steps 4
TIMESTEPS = 32
HELPER = Path(__file__).with_name("kill_helper.py")


def _args(model_dir: Path, out: Path) -> list[str]:
    return [
        "train", "--env", "gym_llm/KeywordBandit-v0", "--policy.model", str(model_dir),
        "--timesteps", str(TIMESTEPS), "--n-envs", "2", "--ppo.n-steps", "4", "--ppo.batch-size", "4",
        "--ppo.n-epochs", "2", "--ppo.micro-batch-size", "4", "--eval-episodes", "0",
        "--eval-points", "0", "--device", "cpu", "--quiet", "--seed", "5", "--policy.lora", '{"r": 4, "lora_alpha": 8}',
        "--ppo.learning-rate", "0.003", "--out", str(out),
    ]  # fmt: skip


def _weights(agent_dir: Path) -> dict[str, torch.Tensor]:
    return PPO.load(agent_dir, device="cpu").policy.trainable_state_dict()


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("whole") / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the killed subprocess runs (OMP_NUM_THREADS=1)
    try:
        assert cli.main(_args(tiny_model_dir, out)) == 0
    finally:
        torch.set_num_threads(threads)
    return out


def _kill_and_resume(
    point: str,
    n: int,
    model_dir: Path,
    out: Path,
    uninterrupted: Path,
    capsys: pytest.CaptureFixture[str],
) -> int:
    """Returns the env steps lost (done before the kill, not in the checkpoint resumed from)."""
    report = out.parent / "steps.txt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "KILL_REPORT": str(report)}
    command = [sys.executable, str(HELPER), point, str(n), "--", *_args(model_dir, out)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == -9, done.stderr[-3000:]
    steps_at_kill = int(report.read_text())
    checkpoints = out / "checkpoints"
    for directory in checkpoints.iterdir() if checkpoints.is_dir() else []:
        if directory.name.isdigit():  # every visible checkpoint is complete and loads
            assert PPO.load(directory, device="cpu").num_timesteps == int(directory.name)

    capsys.readouterr()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert cli.main(["train", "--resume", str(out), "--quiet"]) == 0
    finally:
        torch.set_num_threads(threads)
    printed = capsys.readouterr().out
    found = re.search(r"checkpoints/(\d+) up to", printed)
    resumed_from = int(found.group(1)) if found else 0  # none yet: the run starts over

    result = (out / "result.json").read_text()
    assert f'"timesteps": {TIMESTEPS}' in result
    assert PPO.load(out / "agent", device="cpu").num_timesteps == TIMESTEPS
    assert (checkpoints / "latest").read_text().strip() == str(TIMESTEPS)
    assert not [p for p in checkpoints.iterdir() if p.name.startswith(".") and p.is_dir()]
    whole, resumed = _weights(uninterrupted / "agent"), _weights(out / "agent")
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
    lost = steps_at_kill - resumed_from
    print(f"killed at {point} #{n}: {steps_at_kill} env steps done, resumed from {resumed_from}")
    assert 0 <= lost <= ROLLOUT
    return lost


def test_killed_while_writing_a_checkpoint(
    tiny_model_dir: Path, uninterrupted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fast version (in make test): the hardest point, a policy.pt half on disk."""
    lost = _kill_and_resume("save", 2, tiny_model_dir, tmp_path / "run", uninterrupted, capsys)
    assert lost == ROLLOUT  # the rollout whose checkpoint was being written


@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "n", "max_lost"),
    [
        ("rollout", 1, 0),  # the first env step: no checkpoint yet, the run starts again
        ("rollout", 7, ROLLOUT),  # mid-rollout after one checkpoint
        ("update", 3, ROLLOUT),  # inside the second update
        ("save", 1, ROLLOUT),  # writing the first checkpoint
        ("save", 3, ROLLOUT),
        ("pointer", 2, 0),  # checkpoint complete, latest not moved yet
    ],
)
def test_killed_anywhere(
    tiny_model_dir: Path,
    uninterrupted: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    point: str,
    n: int,
    max_lost: int,
) -> None:
    lost = _kill_and_resume(point, n, tiny_model_dir, tmp_path / "run", uninterrupted, capsys)
    assert lost <= max_lost
