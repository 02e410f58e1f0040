"""``gym_llm.experiments.run.run``: one run leaves a complete, inspectable run directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch

from gym_llm import PPO
from gym_llm.evaluation.exact import exact_policy_value
from gym_llm.experiments.run import cpu_model, device_name, run
from gym_llm.spaces import TextActions, TextObservations
from tests.builders import small_run_config


def test_run_writes_config_result_agent_and_logs(tiny_model_dir: Path, tmp_path: Path) -> None:
    seen: list[int] = []
    result = run(
        small_run_config(tiny_model_dir),
        tmp_path / "run",
        progress_bar=False,
        on_point=lambda p: seen.append(p.timesteps),
    )
    # before, one point in the middle (32 steps), and the end
    assert seen == [0, 32, 64] and result.timesteps == 64
    assert result.before.exact is not None and -1.0 <= result.before.exact <= 1.0
    assert result.before.eval is None  # eval_episodes=0: exact only
    saved = json.loads((tmp_path / "run" / "result.json").read_text())
    assert saved["config"]["env"] == "Blackjack-v1" and saved["timesteps"] == 64
    assert [p["timesteps"] for p in saved["curve"]] == [0, 32, 64]
    assert saved["versions"]["torch"] and saved["device"].startswith("CPU")
    assert json.loads((tmp_path / "run" / "config.json").read_text())["n_envs"] == 4
    assert list(result.tensorboard_dir.rglob("events.out.tfevents*"))
    assert (tmp_path / "run" / "curve.png").read_bytes()[:4] == b"\x89PNG"
    agent = PPO.load(result.agent_path, device="cpu")
    reply, _ = agent.predict("Your hand totals 15. Usable ace: no.\nThe dealer shows a 10.")
    assert reply in ("stick", "hit")
    # best/ holds the agent of the first highest point, and its exact value is that point's
    values = [p.value for p in result.curve]
    top = values.index(max(values))
    assert result.best == {"timesteps": [0, 32, 64][top], "value": values[top], "kind": "exact"}
    assert saved["best"] == result.best
    assert json.loads((result.best_path / "best.json").read_text()) == result.best
    best = PPO.load(result.best_path, device="cpu")
    assert best.num_timesteps == result.best["timesteps"]
    value = exact_policy_value(best, "Blackjack-v1", {"sab": False})
    assert value == pytest.approx(result.best["value"], abs=1e-6)


def test_monte_carlo_curve_where_no_exact_evaluation(tiny_model_dir: Path, tmp_path: Path) -> None:
    config = small_run_config(
        tiny_model_dir,
        {"env": "CartPole-v1", "env_kwargs": {}, "eval_episodes": 4, "eval_points": 0},
    )
    result = run(config, tmp_path / "run", progress_bar=False)
    assert [p.timesteps for p in result.curve] == [0, 64]
    assert result.after.exact is None and result.after.eval is not None
    assert result.after.eval.episodes == 4 and 1.0 <= result.after.value <= 500.0


def test_config_errors_say_what_to_change(tiny_model_dir: Path) -> None:
    with pytest.raises(TypeError, match=r"'policy\.action_mode' must be one of 'choice'"):
        small_run_config(tiny_model_dir, {"policy.action_mode": "sample"})
    with pytest.raises(ValueError, match="timesteps must be >= 1"):
        small_run_config(tiny_model_dir, {"timesteps": 0})
    with pytest.raises(ValueError, match="exact evaluation"):
        small_run_config(
            tiny_model_dir, {"env": "CartPole-v1", "env_kwargs": {}, "eval_episodes": 0}
        )
    assert small_run_config(tiny_model_dir, {"policy.lora": None}).policy.lora is None


def test_learning_settings_reach_ppo_and_bad_ones_fail_early(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="advantage_estimator"):
        small_run_config(tiny_model_dir, {"ppo.advantage_estimator": "ppo"})
    with pytest.raises(ValueError, match="choice_calibration"):
        small_run_config(
            tiny_model_dir,
            {
                "policy.action_mode": "generate",
                "policy.reply_constraint": "off",
                "policy.choice_calibration": True,
            },
        )
    # generate mode takes the action head (on the actions' word tokens)
    generate_head = small_run_config(
        tiny_model_dir, {"policy.action_mode": "generate", "policy.action_head": True}
    )
    assert generate_head.policy_kwargs()["config"].action_head is True
    assert generate_head.policy.action_prior_scale == 1.0  # the policy's default
    even = small_run_config(
        tiny_model_dir,
        {
            "policy.action_mode": "generate",
            "policy.action_head": True,
            "policy.action_prior_scale": 0.0,
        },
    )
    assert even.policy.action_prior_scale == 0.0
    with pytest.raises(ValueError, match="action_head=True"):
        small_run_config(
            tiny_model_dir, {"policy.action_mode": "generate", "policy.action_prior_scale": 0.0}
        )
    with pytest.raises(ValueError, match="action_head=True"):  # generate mode needs the head
        small_run_config(tiny_model_dir, {"policy.action_mode": "generate", "ppo.ent_coef": "auto"})
    auto_head = small_run_config(
        tiny_model_dir,
        {"policy.action_mode": "generate", "policy.action_head": True, "ppo.ent_coef": "auto"},
    )
    assert auto_head.ppo.ent_coef == "auto"
    with pytest.raises(ValueError, match="DQN has none"):
        small_run_config(tiny_model_dir, {"algo": "dqn", "ppo.ent_coef": "auto"})
    with pytest.raises(ValueError, match="DQN has none"):
        small_run_config(tiny_model_dir, {"algo": "dqn", "ppo.min_action_prob": 0.05})
    with pytest.raises(ValueError, match="action_head=True"):
        small_run_config(
            tiny_model_dir, {"policy.action_mode": "generate", "ppo.min_action_prob": 0.05}
        )
    with pytest.raises(ValueError, match="min_action_prob must be 'auto' or a number in"):
        small_run_config(tiny_model_dir, {"ppo.min_action_prob": 0.7})
    with pytest.raises(ValueError, match="set ent_coef='auto' as well"):
        small_run_config(tiny_model_dir, {"ppo.target_entropy_of": "marginal"})
    config = small_run_config(
        tiny_model_dir,
        {
            "timesteps": 32,
            "ppo.advantage_estimator": "rloo",
            "policy.value_lr_scale": 10.0,
            "policy.value_normalization": True,
            "ppo.critic_warmup_steps": 32,
            "policy.choice_calibration": True,
            "policy.action_head": True,
            "ppo.ent_coef": "auto_0.02",
            "ppo.target_entropy_of": "marginal",
            "keep_best": False,
        },
    )
    run(config, tmp_path / "run")
    assert not (tmp_path / "run" / "best").exists()
    model = PPO.load(tmp_path / "run" / "agent", device="cpu")
    assert model.advantage_estimator == "rloo" and model.critic_warmup_steps == 32
    assert model.ent_coef_auto  # the entropy target, adapted from 0.02, saved with the agent
    assert model.target_entropy_of == "marginal"
    assert model.policy.value_lr_scale == 10.0
    assert model.policy.value_head.normalize and float(model.policy.value_head.count) > 0
    assert model.policy.choice_calibration is not None
    assert model.policy.action_head is not None and model.policy.action_head.is_calibrated


class _Echo:
    """A one-turn text game: it takes any reply."""

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, object]]:
        return "Say something.", {}

    def step(self, text: str) -> tuple[str, float, bool, dict[str, object]]:
        return "Done.", 0.0, True, {}


class _AnyText(gym.Env[str, str]):
    """A text env that takes any reply and reports no verdict on it."""

    observation_space = TextObservations(100)
    action_space = TextActions(None)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        return "Say something.", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "Done.", 0.0, True, False, {}


def test_invalid_penalty_needs_replies_that_gym_llm_parses(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from gym_llm.envs import TextGameEnv
    from gym_llm.experiments.run import judges_replies
    from gym_llm.rl.common.vec_env import make_text_env

    assert judges_replies(make_text_env("Blackjack-v1").envs[0])
    game = make_text_env(
        lambda: TextGameEnv(_Echo()), action_kwargs={"invalid_penalty": -1.0}
    ).envs[0]
    assert judges_replies(game)  # a text game reports its own verdicts
    assert not judges_replies(make_text_env(_AnyText).envs[0])  # takes any text, judges none
    gym.register("gym_llm_test/Echo-v0", entry_point=_AnyText)
    try:
        config = small_run_config(
            tiny_model_dir,
            {
                "env": "gym_llm_test/Echo-v0",
                "env_kwargs": {},
                "policy.action_mode": "generate",
                "eval_episodes": 1,
                "invalid_penalty": -1.0,
            },
        )
        with pytest.raises(ValueError, match="takes any text and judges none"):
            run(config, tmp_path / "run", progress_bar=False)
        assert not (tmp_path / "run" / "config.json").exists()
    finally:
        del gym.registry["gym_llm_test/Echo-v0"]


def test_invalid_penalty_reaches_the_training_reward_only(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with pytest.raises(ValueError, match=r"invalid_penalty .* must be <= 0"):
        small_run_config(tiny_model_dir, {"invalid_penalty": 0.5})
    config = small_run_config(
        tiny_model_dir,
        {
            "policy.action_mode": "generate",
            "policy.reply_constraint": "off",  # free text: replies can be invalid
            "policy.max_new_tokens": 4,
            "invalid_penalty": -100.0,
            "timesteps": 32,
            "eval_points": 0,
        },
    )
    result = run(config, tmp_path / "run", progress_bar=False)
    (events,) = result.tensorboard_dir.rglob("events.out.tfevents*")
    log = EventAccumulator(str(events))
    log.Reload()
    returns = [s.value for s in log.Scalars("rollout/ep_rew_mean")]
    rates = [s.value for s in log.Scalars("rollout/invalid_action_rate")]
    # A tiny random model's replies are almost never 'stick' or 'hit': each invalid one costs
    # 100 in training, while Blackjack pays -1 to +1.5 an episode...
    assert rates and min(rates) > 0.5
    assert returns and max(returns) < -40.0
    # ... and the evaluations score the game's own reward.
    assert result.after.exact is not None and -1.0 <= result.after.exact <= 1.5


def test_the_cpu_is_named_by_model_and_instruction_set() -> None:
    """Runs repeat bit for bit only on the same CPU model and vector instructions, so both are
    recorded with every result."""
    info = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14\nflags\t: fpu\n"
    assert cpu_model(info) == "AMD EPYC 9R14"
    assert cpu_model("processor\t: 0\n") is None
    name = device_name(torch.device("cpu"))
    assert name.startswith("CPU (") and name.endswith(" cores)")
    assert torch.backends.cpu.get_cpu_capability() in name
