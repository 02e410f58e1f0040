"""Action values fitted in closed form (``PPO(q_fit="ridge")``): the regression and the fitted Q
iteration on hand-made data, then the fit in a PPO run, saved and loaded (tiny model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gym_llm import PPO
from gym_llm.rl.ppo.ridge_values import RidgeFit, check_q_fit, fitted_q, loo_ridge
from tests.builders import small_ppo
from tests.models import tiny_model_fixture


def test_the_module_examples_hold() -> None:
    import doctest

    from gym_llm.rl.ppo import ridge_values

    assert doctest.testmod(ridge_values).failed == 0


def test_leave_one_out_shrinks_noise_and_keeps_a_signal() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 8))
    w = rng.integers(1, 20, size=40).astype(float)
    signal = x @ np.arange(8.0)
    beta, intercept, penalty = loo_ridge(x, signal + 3.0, w)
    np.testing.assert_allclose(x @ beta + intercept, signal + 3.0, atol=0.5)
    assert penalty <= 3.2  # little shrinkage where the data are a clean linear function
    noise = rng.normal(size=40) / np.sqrt(w)  # a mean of w draws of unit noise per row
    beta, intercept, penalty = loo_ridge(x, noise, w)
    assert penalty >= 1_000  # nothing to learn: shrunk to the weighted mean
    assert np.abs(beta).max() < 0.05
    assert intercept == pytest.approx(np.average(noise, weights=w), abs=1e-3)


def test_fitted_q_iteration_bootstraps_through_the_next_states_values() -> None:
    # Five states on a line (feature: the position). Move 0 steps right and pays 0, and from the
    # last state pays 1 and ends: Q*(s, 0) = 0.9^(4 - s), nearly linear in s. Move 1 pays 0.2
    # and ends everywhere. Each (state, move) played 200 times.
    x = np.arange(5.0)[:, None]
    states = np.tile(np.repeat(np.arange(5), 200), 2)
    moves = np.repeat([0, 1], 1000)
    rewards = np.where(moves == 1, 0.2, np.where(states == 4, 1.0, 0.0))
    nxt = np.where((moves == 0) & (states < 4), states + 1, states)
    ended = (moves == 1) | (states == 4)
    weights, bias, chosen = fitted_q(
        x, (states, moves, rewards, nxt, ended), 2, 0.9, sweeps=30, start=np.zeros((5, 2))
    )
    q = x @ weights + bias
    np.testing.assert_allclose(q[:, 0], 0.9 ** (4 - np.arange(5)), atol=0.03)  # bootstrapped
    np.testing.assert_allclose(q[:, 1], 0.2, atol=1e-6)
    assert (q.argmax(1) == 0).all() and all(c >= 1 for c in chosen)


def test_ridge_fit_checks_its_settings() -> None:
    assert check_q_fit("ridge") == "ridge"
    with pytest.raises(ValueError, match="q_fit must be 'td'"):
        check_q_fit("closed")
    with pytest.raises(ValueError, match="sweeps must be >= 1"):
        RidgeFit(8, 2, 0.9, sweeps=0)


model_dir = tiny_model_fixture("model_dir", ["apple", "banana", "cherry"])


def _ppo(model_dir: Path, **kwargs: Any) -> PPO:
    settings: dict[str, Any] = {
        "n_steps": 4, "batch_size": 8, "n_epochs": 1, "learning_rate": 1e-3,
        "advantage_estimator": "q",
    }  # fmt: skip
    return small_ppo(
        model_dir, n_envs=4, policy={"action_mode": "choice"}, **{**settings, **kwargs}
    )


def test_ppo_fits_its_values_in_closed_form_and_saves_them(model_dir: Path, tmp_path: Path) -> None:
    assert _ppo(model_dir).q_fit == "td"  # the TD-trained head by default
    with pytest.raises(ValueError, match="q_fit must be 'td'"):
        _ppo(model_dir, q_fit="closed")
    with pytest.raises(ValueError, match=r"q_n_steps \(3\) and q_replay_balance"):
        _ppo(model_dir, q_fit="ridge", q_n_steps=3)
    model = _ppo(model_dir, q_fit="ridge")
    model.learn(32)
    critic = model.q_critic
    assert critic is not None and isinstance(critic.fit, RidgeFit)  # no TD head: a fit
    assert critic.q_net is critic.fit.q_net and critic.fit.q_net.is_calibrated
    figures = critic.train(model.num_timesteps, 0)  # what each update logs as train/q_*
    assert set(figures) == {"q_mean", "q_ridge_penalty"} and figures["q_ridge_penalty"] >= 1
    observations = list(dict.fromkeys(str(o) for o in critic.replay.observations[:8].ravel()))
    values = critic.values(observations)
    assert np.isfinite(values).all() and np.abs(values).max() > 0  # fitted to the rewards seen
    # the rollout's advantages are read from these values
    _, played, probs = critic.replay.latest(4)
    table = critic.values(list(critic.replay.latest(4)[0].ravel()))
    expected = table[np.arange(16), played.ravel()] - (probs.reshape(16, -1) * table).sum(-1)
    np.testing.assert_allclose(critic.rollout_advantages(4).ravel(), expected, rtol=1e-5)
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert loaded.q_fit == "ridge" and loaded.q_critic is not None
    np.testing.assert_allclose(loaded.q_critic.values(observations), values, rtol=1e-6)
    _ppo(model_dir).save(tmp_path / "older")
    config = tmp_path / "older" / "config.json"
    saved = json.loads(config.read_text())
    del saved["hyperparameters"]["q_fit"]  # saved before the setting: the TD-trained head
    config.write_text(json.dumps(saved))
    assert PPO.load(tmp_path / "older", device="cpu").q_fit == "td"


@pytest.mark.parametrize("rows", [12, 60])
def test_both_forms_of_the_regression_agree(rows: int) -> None:
    rng = np.random.default_rng(rows)
    x = rng.normal(size=(rows, 20))
    w = rng.integers(1, 9, size=rows).astype(float)
    y = x[:, :3] @ np.array([1.0, -2.0, 0.5]) + rng.normal(size=rows)
    dual, primal = loo_ridge(x, y, w, dual=True), loo_ridge(x, y, w, dual=False)
    assert dual[2] == primal[2]  # the same penalty chosen
    np.testing.assert_allclose(dual[0], primal[0], atol=1e-8)
    assert dual[1] == pytest.approx(primal[1], abs=1e-8)
