"""Helpers several test modules share: a small PPO on a tiny model, a small training run's
config, the check that an action head calibrates, trains and keeps the update's ratio exact,
and the TD fit of an action-value critic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stable_baselines3.common.vec_env import VecEnv

from gym_llm import PPO, LLMPolicy, make_text_env
from gym_llm.experiments.train_config import TrainConfig
from gym_llm.policy.action_head import ActionHead
from gym_llm.rl.ppo.td_values import TDFit


def small_ppo(
    model_dir: Path,
    env: str | VecEnv = "gym_llm/KeywordBandit-v0",
    n_envs: int = 2,
    *,
    policy: dict[str, Any] | None = None,
    **settings: Any,
) -> PPO:
    """``PPO(LLMPolicy, ...)`` on a tiny model: LoRA r=4 on the CPU, seed 0, every other setting
    the library's unless given (``policy``: more policy kwargs; ``settings``: PPO's). ``env``:
    an env id (``n_envs`` of them, seed 0) or a text vec env."""
    if isinstance(env, str):
        env = make_text_env(env, n_envs=n_envs, seed=0)
    policy_kwargs = {"model": str(model_dir), "lora": {"r": 4}, **(policy or {})}
    return PPO(
        LLMPolicy, env, policy_kwargs=policy_kwargs, **{"seed": 0, "device": "cpu", **settings}
    )


def small_run_config(model_dir: Path, settings: dict[str, Any] | None = None) -> TrainConfig:
    """A training run small enough for a test: Blackjack, 64 env steps, one evaluation, with
    dotted ``settings`` over it (``{"ppo.n_epochs": 2}``)."""
    small: dict[str, Any] = {
        "env": "Blackjack-v1",
        "env_kwargs": {"sab": False},
        "timesteps": 64,
        "n_envs": 4,
        "eval_episodes": 0,
        "eval_points": 1,
        "device": "cpu",
        "policy.model": str(model_dir),
        "ppo.n_steps": 8,
        "ppo.batch_size": 16,
        "ppo.n_epochs": 1,
        "ppo.micro_batch_size": 16,
    }
    return TrainConfig().with_settings({**small, **(settings or {})})


def learn_and_check_head(model: PPO) -> ActionHead:
    """One short ``learn``: the head calibrates before its first step, then trains, and the
    update's first ratio is the rollout's (invariant 1). Choice and generate mode's tests share it."""
    head = model.policy.action_head
    assert isinstance(head, ActionHead) and not head.is_calibrated
    model.learn(16)
    assert head.is_calibrated
    assert float(head.linear.weight.detach().abs().sum()) > 0  # it trained
    assert model.first_ratio_error < 1e-5  # the rollout's log-probs are the update's (invariant 1)
    return head


#: The words of :class:`Rooms`' commands, for a tiny model's vocabulary.
ROOM_WORDS = ["go", "north", "south", "wait", "take", "gold", "sleep"]
HALL = ["go north", "wait"]
VAULT = ["take gold", "go south", "sleep"]


class Rooms:
    """A text game with per-state actions: a hall (two commands) and a vault (three); the
    gold is worth 1."""

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.room = "hall"
        return "You are in the hall.", {"valid_actions": HALL}

    def step(self, text: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self.room == "hall":
            if text == "go north":
                self.room = "vault"
                return "You are in the vault.", 0.0, False, {"valid_actions": VAULT}
            return "You are in the hall.", 0.0, False, {"valid_actions": HALL}
        return "The end.", float(text == "take gold"), True, {"valid_actions": []}


def td_fit(critic: Any) -> TDFit:
    """The TD fit of a :class:`~gym_llm.rl.ppo.q_critic.QCritic` (``q_fit="td"``): its settings
    and step counts."""
    assert critic is not None and isinstance(critic.fit, TDFit), "a critic fitted by TD steps"
    return critic.fit
