"""Runs with either algorithm: ``TrainConfig(algo=...)`` builds it, ``load_agent`` reads it back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_llm import DQN, PPO
from gym_llm.experiments.agents import load_agent
from gym_llm.experiments.run import TrainConfig, run
from tests.builders import small_run_config

BLACKJACK_TEXT = "Your hand totals 15. Usable ace: no.\nThe dealer shows a 10."


def test_a_dqn_run_leaves_the_same_run_directory_and_resumes(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    config = small_run_config(
        tiny_model_dir, {"algo": "dqn", "timesteps": 96, "dqn.learning_starts": 16, "dqn.train_freq": 2, "dqn.distill_interval": 48, "dqn.distill_steps": 2},
    )  # fmt: skip
    seen: list[int] = []
    result = run(
        config, tmp_path / "run", progress_bar=False, on_point=lambda p: seen.append(p.timesteps)
    )
    # points at the chunk boundaries (4 envs x train_freq 2 = 8 env steps) nearest the middle
    assert seen[0] == 0 and seen[-1] == 96 and len(seen) == 3
    assert isinstance(result.model, DQN) and result.model._n_updates > 0
    assert result.model.distill_interval == 48 and result.model._next_distill > 48  # it ran
    assert list(result.tensorboard_dir.rglob("events.out.tfevents*"))
    saved = json.loads((result.agent_path / "config.json").read_text())
    assert saved["format"] == "gym_llm.DQN/1" and saved["hyperparameters"]["train_freq"] == [
        2,
        "step",
    ]
    agent = load_agent(result.agent_path, device="cpu")
    assert isinstance(agent, DQN)
    reply, _ = agent.predict(BLACKJACK_TEXT, deterministic=True)
    assert reply in ("stick", "hit")
    resumed = run(
        TrainConfig.from_dict({**json.loads((tmp_path / "run" / "config.json").read_text()), "timesteps": 128}),
        tmp_path / "run", progress_bar=False, resume=True,
    )  # fmt: skip
    assert resumed.timesteps == 128 and resumed.curve[0].timesteps == 0


def test_load_agent_reads_a_ppo_agent_too(tiny_model_dir: Path, tmp_path: Path) -> None:
    result = run(
        small_run_config(tiny_model_dir, {"eval_points": 0}), tmp_path / "run", progress_bar=False
    )
    assert isinstance(load_agent(result.agent_path, device="cpu"), PPO)


def test_dqn_config_errors_say_what_to_change(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="algo must be"):
        small_run_config(tiny_model_dir, {"algo": "sac"})
    with pytest.raises(ValueError, match="mode='choice' and LoRA"):
        small_run_config(tiny_model_dir, {"algo": "dqn", "policy.action_mode": "generate"})
    with pytest.raises(ValueError, match="mode='choice' and LoRA"):
        small_run_config(tiny_model_dir, {"algo": "dqn", "policy.lora": None})
    with pytest.raises(ValueError, match="sft_demos"):
        small_run_config(tiny_model_dir, {"algo": "dqn", "sft_demos": "demos.jsonl"})
