"""Data-parallel runs as users start them (issue 18): two processes under ``torchrun`` on gloo,
from Python and from the command line; a process that fails brings the job down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gym_llm import PPO
from gym_llm.experiments.run import TrainConfig
from gym_llm.rl.common import distributed
from tests.models import tiny_model_fixture
from tests.system.launch import HANG_GUARD_S, HELPER, LAUNCHERS, torchrun

model_dir = tiny_model_fixture("model_dir", ["apple", "banana", "cherry"])


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_the_same_python_script_trains_in_two_processes(
    model_dir: Path, tmp_path: Path, launcher: str
) -> None:
    done = torchrun(str(HELPER), "learn", str(model_dir), str(tmp_path), launcher=launcher)
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for report in reports:
        assert report["world_size"] == 2
        assert report["num_timesteps"] == 64  # both processes' env steps: 4 rollouts of 16
        assert report["episodes"] == 64  # one-step episodes, every process's in each one
    # Each process stepped envs of its own (seeds 0-1 and 2-3) ...
    assert reports[0]["observations"] != reports[1]["observations"]
    # ... and after 4 updates the weights are still the same in both.
    weights = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert weights[0].keys() == weights[1].keys()
    for key in weights[0]:
        assert torch.equal(weights[0][key], weights[1][key]), key
    # One agent written (by the main process), and it has trained.
    agent = PPO.load(tmp_path / "agent")
    assert agent.num_timesteps == 64
    saved = agent.policy.trainable_state_dict()
    assert all(torch.equal(saved[k], weights[0][k]) for k in saved)


def test_a_failing_process_brings_the_job_down_with_its_error(
    model_dir: Path, tmp_path: Path
) -> None:
    done = torchrun(str(HELPER), "fail", str(model_dir), str(tmp_path))
    assert done.returncode != 0
    assert "planted failure in process 1" in done.stdout + done.stderr
    assert not (tmp_path / "rank0.json").exists()  # the other process did not finish alone


def test_the_command_line_writes_one_run(model_dir: Path, tmp_path: Path) -> None:
    flags = [
        "--env", "gym_llm/KeywordBandit-v0", "--policy.model", str(model_dir), "--timesteps", "64",
        "--n-envs", "2", "--ppo.n-steps", "4", "--ppo.batch-size", "8", "--eval-episodes", "4",
        "--eval-points", "1", "--quiet",
    ]  # fmt: skip
    done = torchrun("-m", "gym_llm.cli", "train", *flags, "--out", str(tmp_path / "two"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("Training ") == 1  # one process reports
    assert "x 2 processes" in done.stdout
    one = subprocess.run(
        [sys.executable, "-m", "gym_llm.cli", "train", *flags, "--out", str(tmp_path / "one")],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert one.returncode == 0, one.stderr[-3000:]
    # The same artifacts as a single-process run: one result, one curve, one agent, one log.
    tree = {p.relative_to(tmp_path / "two").parts[0] for p in (tmp_path / "two").iterdir()}
    assert tree == {p.name for p in (tmp_path / "one").iterdir()}
    assert len(list((tmp_path / "two" / "tensorboard").iterdir())) == 1
    result = json.loads((tmp_path / "two" / "result.json").read_text())
    assert result["processes"] == 2 and result["timesteps"] == 64
    assert [p["timesteps"] for p in result["curve"]] == [0, 32, 64]
    assert PPO.load(tmp_path / "two" / "agent").num_timesteps == 64


def test_resume_and_sft_are_refused_under_several_processes(
    model_dir: Path, tmp_path: Path
) -> None:
    config = TrainConfig(env="gym_llm/KeywordBandit-v0").with_settings(
        {"policy.model": str(model_dir)}
    )
    (tmp_path / "config.json").write_text(json.dumps(config.as_dict()))
    done = torchrun("-m", "gym_llm.cli", "train", "--resume", str(tmp_path))
    assert done.returncode != 0
    assert "--resume runs in one process only" in done.stderr
    sft = torchrun(
        "-m", "gym_llm.cli", "train", "--env", "gym_llm/KeywordBandit-v0", "--policy.model",
        str(model_dir), "--sft-demos", str(tmp_path / "demos.jsonl"), "--out", str(tmp_path / "s"),
    )  # fmt: skip
    assert sft.returncode != 0
    assert "--sft-demos runs in one process only" in sft.stderr
    assert not (tmp_path / "s").exists()


def test_one_process_needs_no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    assert distributed.init_from_launcher() is False
    assert distributed.global_sums([1, 2.5]) == [1.0, 2.5]
    assert distributed.every_process(True) and not distributed.every_process(False)
    assert distributed.gather_objects([1, 2]) == [[1, 2]]
    assert distributed.from_main_process({"a": 1}) == {"a": 1}
    param = torch.nn.Parameter(torch.ones(2))
    distributed.broadcast_parameters([param])
    assert torch.equal(param.data, torch.ones(2))


def test_accelerate_cpu_launching_one_process_is_explained(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    with pytest.warns(UserWarning, match="torchrun --nproc-per-node N"):
        assert distributed.init_from_launcher() is False


def test_figures_are_reduced_where_the_backend_can_reduce_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """NCCL (GPUs) reduces CUDA tensors only; gloo CPU ones. (NCCL itself needs GPUs to test.)"""
    assert distributed.collective_device() == torch.device("cpu")  # no process group
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed.dist, "get_backend", lambda: "nccl")
    monkeypatch.setattr(distributed.torch.cuda, "current_device", lambda: 1)
    assert distributed.collective_device() == torch.device("cuda", 1)
    monkeypatch.setattr(distributed.dist, "get_backend", lambda: "gloo")
    assert distributed.collective_device() == torch.device("cpu")
