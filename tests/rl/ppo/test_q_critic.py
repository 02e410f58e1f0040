"""PPO's action-value critic (``advantage_estimator="q"``): the advantage arithmetic, the replay
it learns from, and its place in a PPO run, save and load (tiny model)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gym_llm import PPO
from gym_llm.rl.ppo.q_critic import QCritic, state_advantages
from tests.builders import small_ppo, td_fit
from tests.models import tiny_model_fixture

WORDS = ["apple", "banana", "cherry"]

model_dir = tiny_model_fixture("model_dir", WORDS)


def _ppo(model_dir: Path, **kwargs: Any) -> PPO:
    policy = {"action_mode": "choice", **kwargs.pop("policy_kwargs", {})}
    settings: dict[str, Any] = {
        "n_steps": 4, "batch_size": 8, "n_epochs": 1, "learning_rate": 1e-3,
        "advantage_estimator": "q",
    }  # fmt: skip
    return small_ppo(model_dir, n_envs=4, policy=policy, **{**settings, **kwargs})


def test_state_advantages_are_centred_under_the_policy() -> None:
    rng = np.random.default_rng(0)
    q = rng.normal(size=(5, 3))
    probs = rng.dirichlet(np.ones(3), size=5)
    adv = state_advantages(q, probs)
    np.testing.assert_allclose((probs * adv).sum(-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(adv[:, 0] - adv[:, 1], q[:, 0] - q[:, 1])  # gaps unchanged
    with pytest.raises(ValueError, match="one shape"):
        state_advantages(q, probs[:, :2])


def test_turn_advantages_come_from_the_trained_action_values(model_dir: Path) -> None:
    model = _ppo(model_dir)
    model.learn(16)
    critic, buffer = model.q_critic, model.rollout_buffer
    assert critic is not None and critic.q_net.is_calibrated
    assert len(critic.replay) == 16  # every env step the run took, not only the last rollout
    assert td_fit(critic).td_steps == 8  # 16 env steps replayed 16 times each, 32 per TD step
    observations = [str(o) for o in buffer.observations_text.reshape(-1)]
    actions = np.array([int(a[0]) for a in buffer.action_tokens.reshape(-1)])
    # The baseline is the mean under what each move was sampled from (the policy mixed with
    # the default floor, recorded by the replay).
    _, _, sampled = critic.replay.latest(buffer.buffer_size)
    probs = sampled.reshape(-1, sampled.shape[-1])
    q = critic.values(observations)
    expected = q[np.arange(len(q)), actions] - (probs * q).sum(-1)
    np.testing.assert_allclose(buffer.advantages.reshape(-1), expected, rtol=1e-5, atol=1e-6)
    assert np.ptp(buffer.advantages) > 0
    assert np.isfinite(model.first_ratio_error) and model.first_ratio_error < 1e-5


def test_the_replay_holds_each_step_with_what_followed_it(model_dir: Path) -> None:
    model = _ppo(model_dir)
    model.learn(16)
    replay = model.q_critic.replay
    buffer = model.rollout_buffer
    rows = slice(replay.pos - buffer.buffer_size, replay.pos)  # the last rollout's steps
    assert list(replay.observations[rows].ravel()) == [
        str(o) for o in buffer.observations_text.ravel()
    ]
    np.testing.assert_array_equal(
        replay.actions[rows].ravel(), [int(a[0]) for a in buffer.action_tokens.ravel()]
    )
    np.testing.assert_allclose(replay.rewards[rows], buffer.rewards)
    assert replay.terminated[rows].all()  # KeywordBandit's episodes end after one reply


def test_the_target_update_tilts_every_action_by_its_value(model_dir: Path) -> None:
    model = _ppo(model_dir, policy_update="target", kl_step=0.05)
    model.learn(16)
    critic = model.q_critic
    assert critic is not None
    states = list(dict.fromkeys(str(o) for o in model.rollout_buffer.observations_text.ravel()))
    targets = model._choice_targets(0.0, 1.0)
    for state in states:
        q = critic.values([state])[0]
        shift = np.log(targets[state].numpy()) - np.log(model.rollout_action_probs[state])
        # log target - log old = Q / eta + a constant: the same order as Q, every action
        assert np.argsort(shift).tolist() == np.argsort(q).tolist()


def test_n_step_targets_sum_rewards_before_bootstrapping(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _ppo(model_dir, q_n_steps=3, q_cut=0.0)
    critic = model.q_critic
    assert critic is not None
    sampled: list[tuple[int, bool]] = []
    sample = critic.replay.sample

    def spy(
        batch: int,
        n_steps: int,
        gamma: float,
        rng: np.random.Generator,
        follows: Any = None,
        **kwargs: Any,
    ) -> Any:
        sampled.append((n_steps, follows is not None))
        return sample(batch, n_steps, gamma, rng, follows, **kwargs)

    monkeypatch.setattr(critic.replay, "sample", spy)
    model.learn(16)
    assert sampled and set(sampled) == {(3, True)}  # cut where the values' greedy action is not
    observations = [str(o) for o in model.rollout_buffer.observations_text.ravel()]
    q = critic.values(observations)
    best, worst = q.argmax(-1), q.argmin(-1)
    fit = td_fit(critic)
    assert fit.follows(critic.features, observations, best).all()
    spread = q.max(-1) - q.min(-1)
    assert not fit.follows(critic.features, observations, worst)[spread > 1e-6].any()
    middle = q.argsort(-1)[:, 1]  # 3 actions: the one between best and worst
    halfway = q[np.arange(len(q)), middle] >= q.max(-1) - 0.5 * spread
    fit.cut = 0.5
    np.testing.assert_array_equal(fit.follows(critic.features, observations, middle), halfway)
    fit.cut = 1.0  # the whole range: never cut, nothing to look up
    sampled.clear()
    model.learn(8, reset_num_timesteps=False)
    assert sampled and set(sampled) == {(3, False)}
    model.save(tmp_path / "agent")
    loaded = td_fit(PPO.load(tmp_path / "agent", device="cpu").q_critic)
    assert (loaded.n_steps, loaded.cut) == (3, 0.0)
    with pytest.raises(ValueError, match="q_n_steps must be >= 1"):
        _ppo(model_dir, q_n_steps=0)
    with pytest.raises(ValueError, match=r"q_cut must be a share in \[0, 1\]"):
        _ppo(model_dir, q_cut=1.5)
    assert td_fit(_ppo(model_dir, q_n_steps=3, q_cut=0.5).q_critic).cut == 0.5
    default = td_fit(
        _ppo(model_dir).q_critic
    )  # one step (measured on the family); a sum is never cut
    assert (default.n_steps, default.cut) == (1, 1.0)
    assert default.replay_ratio == 16  # twice DQN's: measured on the family


def test_the_replay_ratio_sets_the_td_steps_per_env_step(model_dir: Path, tmp_path: Path) -> None:
    steps = []
    for ratio in (8, 16):
        model = _ppo(model_dir, q_replay_ratio=ratio)
        assert td_fit(model.q_critic).replay_ratio == ratio
        model.learn(16)
        steps.append(td_fit(model.q_critic).td_steps)
    # 16 env steps replayed `ratio` times in batches of DQN's 32
    assert steps == [16 * 8 // 32, 16 * 16 // 32]
    model.save(tmp_path / "agent")
    assert td_fit(PPO.load(tmp_path / "agent", device="cpu").q_critic).replay_ratio == 16
    # an agent saved before the setting existed loads with the 8 replays it trained with
    config = tmp_path / "agent" / "config.json"
    saved = json.loads(config.read_text())
    del saved["hyperparameters"]["q_replay_ratio"]
    config.write_text(json.dumps(saved))
    assert td_fit(PPO.load(tmp_path / "agent", device="cpu").q_critic).replay_ratio == 8
    with pytest.raises(ValueError, match="q_replay_ratio must be > 0"):
        _ppo(model_dir, q_replay_ratio=0)


def test_the_values_have_their_own_discount(model_dir: Path, tmp_path: Path) -> None:
    assert _ppo(model_dir).q_critic.gamma == 0.95  # measured: RESULTS.md
    model = _ppo(model_dir, gamma=0.97, q_gamma=0.9)
    assert model.q_critic is not None and model.q_critic.gamma == 0.9
    assert model.rollout_buffer.gamma == 0.97  # the returns the value head learns keep gamma
    model.learn(16)
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu").q_critic
    assert loaded is not None and loaded.gamma == 0.9
    # an agent saved before the setting existed discounted its values by gamma
    config = tmp_path / "agent" / "config.json"
    saved = json.loads(config.read_text())
    del saved["hyperparameters"]["q_gamma"]
    config.write_text(json.dumps(saved))
    old = PPO.load(tmp_path / "agent", device="cpu").q_critic
    assert old is not None and old.gamma == 0.97
    with pytest.raises(ValueError, match=r"q_gamma must be a discount in \[0, 1\]"):
        _ppo(model_dir, q_gamma=1.5)


def test_the_values_loss_threshold_reaches_the_critic_and_is_saved(
    model_dir: Path, tmp_path: Path
) -> None:
    model = _ppo(model_dir)  # the squared error by default, not SB3's Huber loss
    assert td_fit(model.q_critic).settings.huber_delta == math.inf
    assert td_fit(_ppo(model_dir, q_huber_delta=1.0).q_critic).settings.huber_delta == 1.0
    model.save(tmp_path / "agent")
    loaded = td_fit(PPO.load(tmp_path / "agent", device="cpu").q_critic)
    assert loaded.settings.huber_delta == math.inf
    # an agent saved before the setting existed keeps SB3's Huber loss
    config = tmp_path / "agent" / "config.json"
    saved = json.loads(config.read_text())
    del saved["hyperparameters"]["q_huber_delta"]
    config.write_text(json.dumps(saved))
    assert td_fit(PPO.load(tmp_path / "agent", device="cpu").q_critic).settings.huber_delta == 1.0
    with pytest.raises(ValueError, match="q_huber_delta must be > 0"):
        _ppo(model_dir, q_huber_delta=0.0)


def test_the_values_start_at_zero_and_stay_there_until_a_reward(model_dir: Path) -> None:
    critic = _ppo(model_dir).q_critic
    assert critic is not None

    k = critic.replay.n_actions

    def steps(reward: float, n: int) -> None:
        for _ in range(n):
            critic.replay.add_step(
                ["apple"] * 4, ["banana"] * 4, np.array([0, 1, 2, 0]),
                np.full(4, reward, np.float32), np.zeros(4, bool), [{}] * 4,
                np.full((4, k), 1 / k, np.float32),
            )  # fmt: skip

    assert not critic.values(WORDS).any()
    steps(0.0, 16)
    critic.train(64, 64)
    assert (
        td_fit(critic).td_steps > 0 and not critic.values(WORDS).any()
    )  # no evidence, no preference
    steps(1.0, 16)
    critic.train(128, 64)
    assert np.abs(critic.values(WORDS)).max() > 1e-3


def test_saved_and_loaded_with_its_values(model_dir: Path, tmp_path: Path) -> None:
    model = _ppo(model_dir)
    model.learn(16)
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert loaded.advantage_estimator == "q" and loaded.q_critic is not None
    observations = ["apple", "banana"]
    np.testing.assert_allclose(
        loaded.q_critic.values(observations), model.q_critic.values(observations), atol=1e-6
    )
    assert td_fit(loaded.q_critic).td_steps == td_fit(model.q_critic).td_steps
    resumed = PPO.load(tmp_path / "agent", env=model.env, device="cpu")
    assert resumed.q_critic is not None and len(resumed.q_critic.replay) == 16  # saved with it
    resumed.learn(16, reset_num_timesteps=False)
    assert len(resumed.q_critic.replay) == 32
    # an agent saved before the replay was: loads with an empty one, which refills
    tensors = torch.load(tmp_path / "agent" / "policy.pt", weights_only=True)
    for key in ("replay", "features", "rng", "owed", "skipped_steps"):
        del tensors["q_critic"][key]
    torch.save(tensors, tmp_path / "agent" / "policy.pt")
    older = PPO.load(tmp_path / "agent", env=model.env, device="cpu")
    assert older.q_critic is not None and len(older.q_critic.replay) == 0
    older.learn(16, reset_num_timesteps=False)
    assert len(older.q_critic.replay) == 16
    plain = _ppo(model_dir, advantage_estimator="gae")
    plain.save(tmp_path / "plain")
    with pytest.raises(Exception, match="holds no action values"):
        PPO.load(tmp_path / "plain", device="cpu", advantage_estimator="q")


def test_auto_learns_action_values_where_they_apply_and_saves_what_it_chose(
    model_dir: Path, tmp_path: Path
) -> None:
    model = _ppo(model_dir, advantage_estimator="auto")
    assert (model.advantage_estimator, model.policy_update) == ("q", "target")
    assert model.q_critic is not None
    model.save(tmp_path / "agent")
    saved = json.loads((tmp_path / "agent" / "config.json").read_text())["hyperparameters"]
    assert (saved["advantage_estimator"], saved["policy_update"]) == ("q", "target")
    for policy_kwargs in ({"action_mode": "generate"}, {"lora": None}):
        other = _ppo(model_dir, advantage_estimator="auto", policy_kwargs=policy_kwargs)
        assert (other.advantage_estimator, other.policy_update) == ("gae", "clip")
        assert other.q_critic is None


def test_needs_choice_mode_and_lora(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="choice mode"):
        _ppo(model_dir, policy_kwargs={"action_mode": "generate"})
    with pytest.raises(ValueError, match="LoRA"):
        _ppo(model_dir, policy_kwargs={"lora": None})


def test_replay_balance_reaches_every_replay_draw_and_is_saved(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = _ppo(model_dir)
    assert td_fit(default.q_critic).replay_balance == 0.0  # every step alike by default
    with pytest.raises(ValueError, match="replay_balance >= 0"):
        QCritic(default.policy, 4, gamma=0.9, replay_balance=-0.5)
    with pytest.raises(ValueError, match="q_replay_balance must be >= 0"):
        _ppo(model_dir, q_replay_balance=-1)
    model = _ppo(model_dir, q_replay_balance=1)
    critic = model.q_critic
    assert td_fit(critic).replay_balance == 1.0
    draws: list[float] = []
    sample = critic.replay.sample

    def spy(*args: Any, **kwargs: Any) -> Any:
        draws.append(kwargs["balance"])
        return sample(*args, **kwargs)

    monkeypatch.setattr(critic.replay, "sample", spy)
    model.learn(16)
    assert draws and set(draws) == {1.0}
    assert td_fit(critic).td_steps == len(draws)
    model.save(tmp_path / "agent")
    assert td_fit(PPO.load(tmp_path / "agent", device="cpu").q_critic).replay_balance == 1.0
    config = tmp_path / "agent" / "config.json"
    saved = json.loads(config.read_text())
    del saved["hyperparameters"]["q_replay_balance"]  # saved before the setting: every step alike
    config.write_text(json.dumps(saved))
    assert td_fit(PPO.load(tmp_path / "agent", device="cpu").q_critic).replay_balance == 0.0
