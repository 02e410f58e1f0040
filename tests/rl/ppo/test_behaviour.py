"""``floor_mode="behaviour"``: the rollout samples from the policy mixed with the floor, and the
loss holds no floor (pure functions, then PPO on a tiny model)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from gym_llm import PPO
from gym_llm.policy.outputs import PolicyStep
from gym_llm.rl.ppo.behaviour import check_behaviour_floor, explore, floored, rare_first
from tests.builders import small_ppo
from tests.models import tiny_model_fixture


def test_the_module_examples_hold() -> None:
    import doctest

    from gym_llm.rl.ppo import behaviour

    assert doctest.testmod(behaviour).failed == 0


def test_floored_keeps_every_action_at_the_floor_and_the_order() -> None:
    probs = np.array([[0.7, 0.3, 0.0], [0.2, 0.2, 0.6]], dtype=np.float32)
    mixed = floored(probs, 0.1)
    assert mixed.dtype == np.float32
    np.testing.assert_allclose(mixed.sum(-1), 1.0, rtol=1e-6)
    assert mixed.min() == pytest.approx(0.1)
    assert (mixed.argmax(-1) == probs.argmax(-1)).all()
    assert floored(probs, 0.0) == pytest.approx(probs)
    with pytest.raises(ValueError, match="less than 1/3"):
        floored(probs, 0.34)


def _step(probs: np.ndarray, drawn: int) -> PolicyStep:
    n = len(probs)
    return PolicyStep(
        replies=[f"r{drawn}"] * n,
        actions=[np.array([drawn])] * n,
        token_log_probs=[np.array([np.log(probs[0, drawn])], dtype=np.float32)] * n,
        values=torch.zeros(n),
        action_probs=probs,
    )


def test_explore_samples_the_mixture_and_keeps_the_policys_log_probs() -> None:
    torch.manual_seed(0)
    n, floor = 40_000, 0.05
    probs = np.tile(np.array([[0.99, 0.01, 0.0, 0.0]], dtype=np.float32), (n, 1))
    step = explore(_step(probs, 0), floor, ["r0", "r1", "r2", "r3"])
    played = np.array([int(a[0]) for a in step.actions])
    share = np.bincount(played, minlength=4) / n
    # The policy drew action 0 everywhere; the behaviour is (1 - 4 * 0.05) * pi + 0.05.
    np.testing.assert_allclose(share, [0.85, 0.05, 0.05, 0.05], atol=0.006)
    assert step.replies == [f"r{a}" for a in played]
    np.testing.assert_allclose(step.action_probs, floored(probs, floor))
    log_probs = np.array([float(lp[0]) for lp in step.token_log_probs])
    kept = played == 0
    assert log_probs[kept] == pytest.approx(np.log(0.99), abs=1e-6)  # the policy's draw
    assert log_probs[played == 1] == pytest.approx(np.log(0.01), abs=1e-6)  # not the floor's
    assert (log_probs[played >= 2] < -80).all()  # the policy gives them nothing: finite, tiny
    assert np.isfinite(log_probs).all()


def test_rare_first_shares_the_floor_toward_the_least_played_moves() -> None:
    plays = np.array([[99, 9, 0], [5, 5, 5], [0, 0, 0]])
    assert rare_first(plays, 0.0) == pytest.approx(np.full((3, 3), 1 / 3))  # evenly
    shares = rare_first(plays, 1.0)
    np.testing.assert_allclose(shares.sum(-1), 1.0)
    assert shares[0, 2] > shares[0, 1] > shares[0, 0]  # fewer plays, more of the floor
    assert shares[0, 1] / shares[0, 0] == pytest.approx(100 / 10)  # (n + 1)^-1
    assert shares[1] == pytest.approx([1 / 3] * 3) and shares[2] == pytest.approx([1 / 3] * 3)
    assert rare_first(plays, 2.0)[0, 2] > shares[0, 2]  # a larger beta leans further
    with pytest.raises(ValueError, match="floor_balance must be >= 0"):
        rare_first(plays, -1.0)


def test_explore_draws_the_floors_moves_by_their_shares() -> None:
    torch.manual_seed(0)
    n, floor = 40_000, 0.05
    probs = np.tile(np.array([[1.0, 0.0, 0.0]], dtype=np.float32), (n, 1))
    shares = np.tile(np.array([[0.0, 0.2, 0.8]]), (n, 1))
    step = explore(_step(probs, 0), floor, ["r0", "r1", "r2"], shares)
    share = np.bincount([int(a[0]) for a in step.actions], minlength=3) / n
    # (1 - 3 * 0.05) * pi + 3 * 0.05 * shares: 0.85, 0.03, 0.12
    np.testing.assert_allclose(share, [0.85, 0.03, 0.12], atol=0.006)
    assert step.action_probs is not None
    np.testing.assert_allclose(step.action_probs, floored(probs, floor, shares), rtol=1e-6)
    np.testing.assert_allclose(step.action_probs[0], [0.85, 0.03, 0.12], rtol=1e-6)


def test_explore_checks_its_input() -> None:
    probs = np.array([[0.5, 0.5]], dtype=np.float32)
    with pytest.raises(ValueError, match="2 actions but 3 replies"):
        explore(_step(probs, 0), 0.1, ["a", "b", "c"])
    no_probs = _step(probs, 0)
    no_probs.action_probs = None
    with pytest.raises(ValueError, match="choice among listed actions"):
        explore(no_probs, 0.1, ["a", "b"])


def test_the_behaviour_floor_needs_one_scored_list_and_the_target_update() -> None:
    choice = SimpleNamespace(scores_listed_actions=True, per_state=False)
    check_behaviour_floor("behaviour", "target", choice)
    check_behaviour_floor("barrier", "clip", choice)  # the barrier works with either update
    with pytest.raises(ValueError, match='needs policy_update="target"'):
        check_behaviour_floor("behaviour", "clip", choice)
    for policy in (
        SimpleNamespace(scores_listed_actions=False, per_state=False),  # generate mode
        SimpleNamespace(scores_listed_actions=True, per_state=True),  # lists of its own
    ):
        with pytest.raises(ValueError, match="one fixed list of scored actions"):
            check_behaviour_floor("behaviour", "target", policy)


model_dir = tiny_model_fixture("model_dir", ["low", "high"])


def _ppo(model_dir: Path, **kwargs: Any) -> PPO:
    policy = kwargs.pop("policy", {})
    return small_ppo(
        model_dir, "gym_llm/HighLow-v0", policy=policy, n_steps=8, batch_size=16, **kwargs
    )


def test_ppo_explores_with_the_floor_and_leaves_the_loss_without_it(
    model_dir: Path, tmp_path: Path
) -> None:
    # Near-certain choices (temperature 0.01, uncalibrated): the policy corners one action.
    policy = {"temperature": 0.01, "choice_calibration": False}
    model = _ppo(model_dir, floor_mode="behaviour", min_action_prob=0.1, policy=policy)
    assert (model.advantage_estimator, model.policy_update) == ("q", "target")
    model.learn(32)
    assert "train/floor_loss" not in model.logger.name_to_value  # nothing in the loss
    critic = model.q_critic
    assert critic is not None
    _, _, behaviour = critic.replay.latest(16)  # every step of the run, as sampled
    assert behaviour.min() >= 0.1 - 1e-6  # the replay records the behaviour
    # The last rollout (8 vector steps): the replay holds the floored policy each move was drawn
    # from, while what the diagnostics, the target update and the stored log-probs read is the
    # policy itself.
    observations, played, behaviour = critic.replay.latest(8)
    policy = model.rollout_action_probs
    stored = model.rollout_buffer.token_log_probs
    for t, e in np.ndindex(observations.shape):
        own: np.ndarray = policy[str(observations[t, e])]
        np.testing.assert_allclose(behaviour[t, e], floored(own[None], 0.1)[0], rtol=1e-5)
        assert np.exp(float(stored[t, e][0])) == pytest.approx(
            float(own[int(played[t, e])]), rel=1e-4, abs=1e-6
        )
    assert min(p.min() for p in policy.values()) < 0.1  # a policy below the floor somewhere
    # Its KL to the rollout policy is read from the whole distributions, not estimated (k3)
    # from moves the policy did not draw: the passes' figure is sum_a p_old (log p_old - log p).
    old = model._rollout_policy_probs()
    assert old is not None
    batch = next(model.rollout_buffer.minibatches(16, np.random.default_rng(0)))
    stats: defaultdict[str, list[float]] = defaultdict(list)
    model.passes.accumulate(
        batch, batch.advantages, model._loss_settings(0.2), 1.0, None, stats, old
    )
    model.policy.optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        ev = model.policy.evaluate_actions(batch.observations, batch.actions, batch.states)
    assert ev.choice_log_probs is not None
    p_old = np.stack([old[str(o)].cpu().numpy() for o in batch.observations]).astype(np.float64)
    log_new = ev.choice_log_probs.double().numpy()
    exact = float(np.mean(np.sum(p_old * (np.log(np.maximum(p_old, 1e-300)) - log_new), -1)))
    assert len(stats["approx_kl"]) == 1  # one pass: its figure is the minibatch's mean
    assert stats["approx_kl"][0] == pytest.approx(exact, rel=1e-4, abs=1e-9)
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert (loaded.floor_mode, loaded.min_action_prob) == ("behaviour", 0.1)


def test_floor_mode_is_checked_where_it_is_set(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="floor_mode must be 'auto'"):
        _ppo(model_dir, floor_mode="sampling")
    with pytest.raises(ValueError, match='needs policy_update="target"'):
        _ppo(model_dir, floor_mode="behaviour", min_action_prob=0.05, policy_update="clip")
    # The default samples the floor where it can (the action values and their target) and
    # holds it by the barrier where it cannot (the clipped surrogate, a floor set by hand).
    default = _ppo(model_dir)
    assert (default.floor_mode, default.floor_in_rollout) == ("behaviour", True)
    clipped = _ppo(model_dir, min_action_prob=0.05, policy_update="clip")
    assert (clipped.floor_mode, clipped.min_action_prob) == ("barrier", 0.05)
    assert _ppo(model_dir, floor_mode="barrier").floor_mode == "barrier"  # named, kept
    # A floor of 0 leaves the rollout the policy's.
    assert not _ppo(model_dir, floor_mode="behaviour", min_action_prob=0).floor_in_rollout
    on_its_own = _ppo(model_dir, floor_mode="behaviour")  # the "auto" floor, now sampled
    assert on_its_own.floor_in_rollout and on_its_own.min_action_prob == 0.05


def test_floor_balance_shares_the_rollouts_floor_by_the_replays_plays(
    model_dir: Path, tmp_path: Path
) -> None:
    assert _ppo(model_dir).floor_balance == 0.0  # evenly by default
    with pytest.raises(ValueError, match="floor_balance must be >= 0"):
        _ppo(model_dir, floor_balance=-1)
    with pytest.raises(ValueError, match='needs floor_mode="behaviour"'):
        _ppo(model_dir, floor_balance=1, floor_mode="barrier")
    policy = {"temperature": 0.01, "choice_calibration": False}  # one move near-certain
    model = _ppo(model_dir, min_action_prob=0.1, floor_balance=2, policy=policy)
    model.learn(32)
    critic = model.q_critic
    assert critic is not None
    # Each move of the last rollout was drawn from the floor shared by the plays held just
    # before it: recount them from the replay and rebuild the behaviour.
    observations, _, behaviour = critic.replay.latest(8)
    first = critic.replay.held_rows - 8
    for t, e in np.ndindex(observations.shape):
        o = str(observations[t, e])
        rows = slice(0, first + t)
        counts = [
            int(
                ((critic.replay.observations[rows] == o) & (critic.replay.actions[rows] == a)).sum()
            )
            for a in range(2)
        ]
        own = model.rollout_action_probs[o]
        expected = floored(own[None], 0.1, rare_first(np.array([counts]), 2.0))[0]
        np.testing.assert_allclose(behaviour[t, e], expected, rtol=1e-5)
    assert behaviour.min() < 0.1 - 1e-3  # somewhere the well-played move got less than even
    model.save(tmp_path / "agent")
    assert PPO.load(tmp_path / "agent", device="cpu").floor_balance == 2.0
    config = tmp_path / "agent" / "config.json"
    saved = json.loads(config.read_text())
    del saved["hyperparameters"]["floor_balance"]  # saved before the setting: evenly
    config.write_text(json.dumps(saved))
    assert PPO.load(tmp_path / "agent", device="cpu").floor_balance == 0.0


def test_the_resolved_floor_mode_is_saved_and_older_agents_keep_the_barrier(
    model_dir: Path, tmp_path: Path
) -> None:
    _ppo(model_dir).save(tmp_path / "agent")
    assert PPO.load(tmp_path / "agent", device="cpu").floor_mode == "behaviour"
    config = tmp_path / "agent" / "config.json"
    saved = json.loads(config.read_text())
    assert saved["hyperparameters"]["floor_mode"] == "behaviour"  # as resolved, not "auto"
    del saved["hyperparameters"]["floor_mode"]  # saved before the setting existed
    config.write_text(json.dumps(saved))
    old = PPO.load(tmp_path / "agent", device="cpu")
    assert (old.floor_mode, old.floor_in_rollout) == ("barrier", False)
