"""``gym_llm.rl.common.learn_logger``: ``learn()`` logs as SB3's does (stdout when verbose,
TensorBoard when asked, a logger the user set kept) without leaving an empty ``SB3-<time>``
folder in the temp directory at every call."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from stable_baselines3.common.logger import Logger

from gym_llm import DQN, LLMPolicy, make_text_env
from tests.builders import small_ppo


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temp directory SB3 would write its folders to, empty."""
    folder = tmp_path / "temp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    return folder


def test_learn_leaves_nothing_in_the_temp_directory(
    tiny_model_dir: Path, temp_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    quiet = small_ppo(tiny_model_dir, n_steps=4, batch_size=8)
    quiet.learn(8)
    verbose = small_ppo(tiny_model_dir, n_steps=4, batch_size=8, verbose=1)
    verbose.learn(8)
    assert "rollout/" in capsys.readouterr().out  # verbose still prints SB3's table
    env = make_text_env("gym_llm/KeywordBandit-v0", n_envs=2, seed=0)
    policy_kwargs = {"model": str(tiny_model_dir), "lora": {"r": 4}}
    dqn = DQN(LLMPolicy, env, learning_starts=2, policy_kwargs=policy_kwargs, device="cpu")
    dqn.learn(8)
    assert list(temp_dir.iterdir()) == []  # SB3's own logger makes SB3-<time> here every call
    logged = small_ppo(
        tiny_model_dir, n_steps=4, batch_size=8, tensorboard_log=str(tmp_path / "tb")
    )
    logged.learn(8, tb_log_name="run")
    logged.learn(8, tb_log_name="run", reset_num_timesteps=False)  # continues run_1
    assert [p.name for p in (tmp_path / "tb").iterdir()] == ["run_1"]
    assert list((tmp_path / "tb" / "run_1").glob("events.out.tfevents*"))


def test_a_logger_the_user_set_is_kept(tiny_model_dir: Path, temp_dir: Path) -> None:
    model = small_ppo(tiny_model_dir, n_steps=4, batch_size=8)
    mine = Logger(folder=None, output_formats=[])
    model.set_logger(mine)
    model.learn(8)
    model.learn(8, reset_num_timesteps=False)
    assert model.logger is mine and "train/turns_per_pass" in mine.name_to_value
    assert list(temp_dir.iterdir()) == []
