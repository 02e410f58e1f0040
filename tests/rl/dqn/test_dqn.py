"""gym_llm.DQN on a tiny model: it learns a rule over its input, saves and loads, is exact about
what it stored, and keeps a non-finite TD error away from the weights."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.evaluation import evaluate_policy

from benchmarks.recipes.learning_recipes import (
    check_dqn_high_low,
    dqn_high_low,
    dqn_success,
    train_dqn_high_low,
)
from gym_llm import DQN, make_text_env
from gym_llm.rl.common.checkpoint_files import CheckpointError
from gym_llm.rl.dqn.config import SB3_DEFAULTS
from tests.models import tiny_model_fixture

HIGH_LOW = "gym_llm/HighLow-v0"


model_dir = tiny_model_fixture("model_dir", ["low", "high"])


def _states() -> tuple[list[str], list[str]]:
    raw: Any = gym.make(HIGH_LOW).unwrapped
    return [raw.observation_for(n) for n in raw.numbers], [
        "high" if n >= 5 else "low" for n in raw.numbers
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dqn_learns_a_rule_over_its_input(model_dir: Path, seed: int) -> None:
    # Recorded sweep (benchmarks/RESULTS.md): seeds 0-9 all at 1.0 after 256 env steps, from 0.5.
    check_dqn_high_low(*train_dqn_high_low(model_dir, seed))


def test_save_load_gives_identical_values_and_keeps_learning(
    model_dir: Path, tmp_path: Path
) -> None:
    model = dqn_high_low(model_dir)
    model.learn(256)
    observations, _ = _states()
    path = tmp_path / "agent"
    model.save(path)
    loaded = DQN.load(path)
    _, features = model.prior_and_features(observations)
    with torch.no_grad():
        torch.testing.assert_close(loaded.q_net(features), model.q_net(features))
        torch.testing.assert_close(loaded.q_net_target(features), model.q_net_target(features))
    torch.testing.assert_close(
        loaded.action_logits(observations), model.action_logits(observations)
    )
    assert loaded.num_timesteps == model.num_timesteps and loaded.alpha == model.alpha
    # with an env it trains on: the replay refills before training resumes
    resumed = DQN.load(path, env=make_text_env(HIGH_LOW, n_envs=4, seed=1))
    updates = resumed._n_updates
    resumed.learn(128, reset_num_timesteps=False)
    assert resumed._n_updates > updates and dqn_success(resumed) == 1.0
    with pytest.raises(CheckpointError, match="not a saved gym_llm PPO agent but a DQN"):
        from gym_llm import PPO

        PPO.load(path)


def test_stored_behaviour_probabilities_are_the_ones_sampled_with(model_dir: Path) -> None:
    model = dqn_high_low(
        model_dir, learning_starts=0, gradient_steps=0, exploration_initial_eps=0.5,
        exploration_final_eps=0.5, beta=1.0, alpha=0.3,
    )  # fmt: skip
    model.learn(64)  # no gradient step: the values and the posterior stay as they are
    buffer = model.replay_buffer
    rows = len(buffer) // buffer.n_envs
    stored = buffer.behaviour_probs[:rows].reshape(-1, buffer.n_actions)
    observations = list(buffer.observations[:rows].ravel())
    np.testing.assert_allclose(stored, model.behaviour_probs(observations), rtol=1e-5)
    assert not np.allclose(stored, 0.5)  # the posterior, not uniform, shares the draw
    np.testing.assert_allclose(stored.sum(-1), 1.0, rtol=1e-5)


def test_a_non_finite_td_error_never_reaches_the_weights(model_dir: Path) -> None:
    model = dqn_high_low(model_dir, learning_starts=16)
    model.learn(32)
    model.replay_buffer.rewards[:] = np.nan
    before = [p.detach().clone() for p in model.q_net.parameters()]
    model.train(gradient_steps=3, batch_size=8)
    assert model.skipped_steps == 3
    for old, new in zip(before, model.q_net.parameters(), strict=True):
        torch.testing.assert_close(old, new)


def test_sb3_evaluation_and_clear_errors(model_dir: Path) -> None:
    model = dqn_high_low(model_dir)
    mean, _ = evaluate_policy(model, make_text_env(HIGH_LOW, n_envs=2, seed=3), n_eval_episodes=4)
    assert 0.0 <= mean <= 1.0
    with pytest.raises(ValueError, match="alpha"):
        dqn_high_low(model_dir, alpha=0.0)
    with pytest.raises(ValueError, match="beta"):
        dqn_high_low(model_dir, beta=-1.0)
    with pytest.raises(ValueError, match="choice mode"):
        dqn_high_low(model_dir, policy_kwargs={"action_mode": "generate"})


def test_distillation_moves_the_lm_towards_the_posterior(model_dir: Path) -> None:
    # Recorded (benchmarks/results/dqn/distill-test-sweep.json, seeds 0-9): the cross-entropy
    # fell from 0.693 to 0.41-0.65 in 60 steps on every seed, and the values stayed at 1.0.
    model = dqn_high_low(model_dir, seed=1)
    model.learn(512)
    observations, _ = _states()
    before = [p.detach().clone() for p in model.policy.parameters() if p.requires_grad]
    first = model.distill(steps=1)
    last = model.distill(steps=60)
    assert last < first - 0.02
    after = [p for p in model.policy.parameters() if p.requires_grad]
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    # the values did not move: distillation trains the LM only
    assert dqn_success(model) == 1.0
    replies, _ = model.policy.predict(observations, deterministic=True)
    assert set(replies) <= {"low", "high"}


def test_learn_ends_with_a_distillation_round_on_the_final_values(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int | None] = []
    original = DQN.distill

    def record(self: DQN, steps: int | None = None, batch_size: int | None = None) -> float:
        calls.append(steps)
        return original(self, steps=1, batch_size=batch_size)  # one real step: quick

    monkeypatch.setattr(DQN, "distill", record)
    # An interval past the budget: no round during learning, only the last one.
    dqn_high_low(model_dir, distill_interval=10_000, distill_final_steps=7).learn(128)
    assert calls == [7]
    calls.clear()
    dqn_high_low(model_dir, distill_interval=0).learn(128)  # distillation off: no round at all
    dqn_high_low(model_dir, distill_interval=10_000, distill_final_steps=0).learn(128)
    assert calls == []
    with pytest.raises(ValueError, match="distill_final_steps"):
        dqn_high_low(model_dir, distill_final_steps=-1)


def test_the_averaged_head_follows_the_online_one_and_greedy_actions_read_it(
    model_dir: Path,
) -> None:
    model = dqn_high_low(model_dir, average_tau=0.25)
    model.learn(128)  # calibrated, a few TD steps in
    before = [p.detach().clone() for p in model.q_net_average.parameters()]
    model.train(gradient_steps=1, batch_size=16)
    for old, online, averaged in zip(
        before, model.q_net.parameters(), model.q_net_average.parameters(), strict=True
    ):
        torch.testing.assert_close(averaged, 0.75 * old + 0.25 * online.detach())
    observations, _ = _states()
    _, features = model.prior_and_features(observations)
    with torch.no_grad():
        averaged_q, online_q = model.q_net_average(features), model.q_net(features)
    assert not torch.allclose(averaged_q, online_q)  # two heads, not one
    torch.testing.assert_close(model.action_logits(observations, averaged=True), averaged_q / 0.01)
    greedy, _ = model.predict(observations, deterministic=True)
    assert list(greedy) == [model.action_names[int(i)] for i in averaged_q.argmax(-1)]


def test_the_averaged_head_is_saved_and_an_older_agent_acts_with_its_online_head(
    model_dir: Path, tmp_path: Path
) -> None:
    model = dqn_high_low(model_dir, average_tau=0.1)
    model.learn(192)
    observations, _ = _states()
    model.save(tmp_path / "agent")
    loaded = DQN.load(tmp_path / "agent")
    assert loaded.average_tau == 0.1
    torch.testing.assert_close(
        loaded.action_logits(observations, averaged=True),
        model.action_logits(observations, averaged=True),
    )
    # an agent saved before the averaged head existed: its greedy actions are its online head's
    file = tmp_path / "agent" / "policy.pt"
    state = torch.load(file, weights_only=True)
    del state["q_net_average"]
    torch.save(state, file)
    older = DQN.load(tmp_path / "agent")
    torch.testing.assert_close(
        older.action_logits(observations, averaged=True), model.action_logits(observations)
    )


def test_average_tau_outside_zero_to_one_is_refused(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="average_tau must be in"):
        dqn_high_low(model_dir, average_tau=0.0)
    with pytest.raises(ValueError, match="huber_delta must be > 0"):
        dqn_high_low(model_dir, huber_delta=0.0)


def test_by_default_each_env_gets_one_td_step_per_phase(model_dir: Path) -> None:
    from gym_llm.rl.dqn.config import DQNConfig

    config = DQNConfig()
    model = dqn_high_low(model_dir, config=config)  # 4 envs
    assert model.gradient_steps == 4 and config.gradient_steps is None  # the caller's is kept
    assert dqn_high_low(model_dir, gradient_steps=1).gradient_steps == 1
    with pytest.raises(ValueError, match="gradient_steps must be None, -1 or >= 0"):
        DQNConfig(gradient_steps=-2)


def test_the_rate_decays_with_env_steps_and_learn_in_pieces_reads_the_same(
    model_dir: Path, tmp_path: Path
) -> None:
    whole = dqn_high_low(model_dir, learning_rate_decay=128)
    whole.learn(256)
    pieces = dqn_high_low(model_dir, learning_rate_decay=128)
    for _ in range(4):
        pieces.learn(64, reset_num_timesteps=False)
    # the last TD phase ran after the 256th env step: 1e-3 / (1 + 256 / 128) in both
    expected = 1e-3 / 3
    for model in (whole, pieces):
        assert model.q_optimizer.param_groups[0]["lr"] == pytest.approx(expected)
    constant = dqn_high_low(model_dir, learning_rate_decay=0)
    constant.learn(256)
    assert constant.q_optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)
    whole.save(tmp_path / "agent")
    assert DQN.load(tmp_path / "agent").learning_rate_decay == 128
    with pytest.raises(ValueError, match="learning_rate_decay must be >= 0"):
        dqn_high_low(model_dir, learning_rate_decay=-1)


def test_the_squared_error_is_the_default_and_older_agents_keep_huber(
    model_dir: Path, tmp_path: Path
) -> None:
    model = dqn_high_low(model_dir)
    assert model.huber_delta == math.inf
    assert dqn_high_low(model_dir, **SB3_DEFAULTS).huber_delta == 1.0  # SB3's Huber loss
    model.save(tmp_path / "agent")
    loaded = DQN.load(tmp_path / "agent")
    assert loaded.huber_delta == math.inf and loaded.learning_rate_decay == 1024
    config = tmp_path / "agent" / "config.json"
    saved = json.loads(config.read_text())
    for setting in ("huber_delta", "learning_rate_decay"):  # saved before the settings existed
        del saved["hyperparameters"][setting]
    config.write_text(json.dumps(saved))
    older = DQN.load(tmp_path / "agent")
    assert older.huber_delta == 1.0 and older.learning_rate_decay == 0  # as they trained then
