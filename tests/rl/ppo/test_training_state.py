"""Resuming and determinism (issue 17, items 1 and 3): same seed -> same run; a run saved and
loaded between rollouts continues exactly as if it had never stopped (bit for bit on the CPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback

from gym_llm import PPO, make_text_env
from gym_llm.policy.trunk_cache import clear_shared_trunk_caches
from tests.builders import small_ppo
from tests.models import tiny_model_fixture

WORDS = ["apple", "banana", "cherry", "grape"]


model_dir = tiny_model_fixture("model_dir", WORDS)


class Record(BaseCallback):
    """Every reply the envs were sent, and the losses of every update."""

    def __init__(self) -> None:
        super().__init__()
        self.replies: list[str] = []
        self.losses: list[float] = []

    def _on_step(self) -> bool:
        self.replies.extend(str(r) for r in self.locals["step"].replies)
        return True

    def _on_rollout_start(self) -> None:
        loss = self.model.logger.name_to_value.get("train/policy_gradient_loss")
        if loss is not None:
            self.losses.append(float(loss))


def _env(env_id: str, seed: int = 0) -> Any:
    return make_text_env(env_id, n_envs=2, seed=seed)


def _ppo(model_dir: Path, mode: str, env_id: str, **kwargs: Any) -> PPO:
    policy: dict[str, Any] = {"action_mode": mode}
    if mode == "generate":
        policy["max_new_tokens"] = 3
    return small_ppo(
        model_dir, _env(env_id), policy=policy, n_steps=4, batch_size=4, n_epochs=2, seed=3,
        learning_rate=3e-3, **kwargs,
    )  # fmt: skip


def _weights(model: PPO) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.policy.trainable_state_dict().items()}


def _assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, different


@pytest.mark.parametrize("mode", ["choice", "generate"])
def test_same_seed_same_run(model_dir: Path, mode: str, one_torch_thread: None) -> None:
    runs = []
    for _ in range(2):
        # Each run starts as a fresh process does: with no frozen-trunk states of the other run
        # (a cached trunk state skips the whole-model pass, whose float sums differ in the last
        # bits, so a warm cache is a different, equally valid, run).
        clear_shared_trunk_caches()
        model, record = _ppo(model_dir, mode, "gym_llm/KeywordBandit-v0"), Record()
        model.learn(24, callback=record)
        runs.append((record.replies, record.losses, _weights(model)))
    (replies_a, losses_a, weights_a), (replies_b, losses_b, weights_b) = runs
    assert len(replies_a) == 24 and replies_a == replies_b
    assert losses_a == losses_b and len(losses_a) == 2
    _assert_same_weights(weights_a, weights_b)


@pytest.mark.parametrize(
    "mode, estimator", [("choice", "gae"), ("generate", "gae"), ("choice", "q")]
)
def test_resumed_run_equals_uninterrupted(
    model_dir: Path, mode: str, estimator: str, tmp_path: Path, one_torch_thread: None
) -> None:
    """One-step episodes: every checkpoint between rollouts is between episodes, so the
    resumed run must be the same run, bit for bit (with the action values: their replay and
    sampling state travel with the checkpoint)."""
    env_id = "gym_llm/KeywordBandit-v0"
    clear_shared_trunk_caches()  # both runs start from the same (empty) trunk cache
    whole, whole_record = _ppo(model_dir, mode, env_id, advantage_estimator=estimator), Record()
    whole.learn(32, callback=whole_record)

    clear_shared_trunk_caches()
    first = _ppo(model_dir, mode, env_id, advantage_estimator=estimator)
    first_record = Record()
    first.learn(16, callback=first_record)
    first.save(tmp_path / "ckpt")
    del first
    torch.manual_seed(12345)  # whatever ran in between must not matter
    np.random.seed(12345)
    # A fresh env with another seed: the checkpoint decides what the envs show next.
    resumed = PPO.load(tmp_path / "ckpt", env=_env(env_id, seed=99), device="cpu")
    second_record = Record()
    resumed.learn(16, callback=second_record, reset_num_timesteps=False)

    assert resumed.num_timesteps == whole.num_timesteps == 32
    assert resumed._n_updates == whole._n_updates
    assert resumed.restarted_episodes == 0
    assert first_record.replies + second_record.replies == whole_record.replies
    _assert_same_weights(_weights(resumed), _weights(whole))
    if estimator == "q":
        assert whole.q_critic is not None and resumed.q_critic is not None
        _assert_same_weights(resumed.q_critic.q_net.state_dict(), whole.q_critic.q_net.state_dict())
    whole_opt = whole.policy.optimizer.state_dict()["state"]
    resumed_opt = resumed.policy.optimizer.state_dict()["state"]
    for key, state in whole_opt.items():
        assert torch.equal(state["exp_avg"], resumed_opt[key]["exp_avg"])


def test_resume_mid_episode_restarts_that_episode(
    model_dir: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    """Multi-step episodes: an episode in progress at the checkpoint starts over from the same
    reset (its recorded generator state), and is counted."""
    env_id = "gym_llm/GuessNumber-v0"
    model = _ppo(model_dir, "choice", env_id)
    model.learn(16)
    mid_episode = [not s for s in model._last_episode_starts]
    assert any(mid_episode)  # the rollout ended inside an episode
    secrets = [e.unwrapped._secret for e in model.env.envs]
    model.save(tmp_path / "ckpt")
    resumed = PPO.load(tmp_path / "ckpt", env=_env(env_id, seed=99), device="cpu")
    resumed.learn(8, reset_num_timesteps=False)
    assert resumed.restarted_episodes == sum(mid_episode)
    assert resumed.num_timesteps == 24
    # The same episodes began again: the replayed resets drew the same secret numbers.
    replayed = PPO.load(tmp_path / "ckpt", env=_env(env_id, seed=99), device="cpu")
    replayed._setup_learn(8, None, reset_num_timesteps=False)
    assert [e.unwrapped._secret for e in replayed.env.envs] == secrets


def test_checkpoint_holds_only_json_and_tensors(model_dir: Path, tmp_path: Path) -> None:
    import json

    model = _ppo(model_dir, "choice", "gym_llm/KeywordBandit-v0")
    model.learn(8)
    model.save(tmp_path / "ckpt")
    state = json.loads((tmp_path / "ckpt" / "training_state.json").read_text())
    assert set(state) >= {"rng", "shuffle_rng", "env_rngs", "last_obs", "ep_info_buffer"}
    assert state["last_obs"] is not None and len(state["env_rngs"]) == 2
