"""A tiny model trained from scratch with PPO climbs from chance on KeywordBandit.

The model is randomly initialised, so it cannot already solve the task: success starts near
chance (measured, not assumed) and must reach >= 0.9 after training.

Generate mode samples from the whole vocabulary, so a random model must first discover the
option words at all. Its tokenizer is therefore limited to the characters the prompts use (about
60 tokens instead of about 300), and an entropy bonus keeps it exploring once it has found one
word: without them it settles on a wrong word for one target (measured: stuck at 0.67 after
8000 steps). A pretrained model brings both priors itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stable_baselines3.common.evaluation import evaluate_policy

from gym_llm import PPO, LLMPolicy, TextObservations, make_text_env
from gym_llm.envs.keyword_bandit import KeywordBanditEnv
from gym_llm.prompts import system_text, user_text
from gym_llm.testing import save_tiny_model

WORDS = ["apple", "banana", "cherry"]


def _make_env() -> KeywordBanditEnv:
    env = KeywordBanditEnv(options=WORDS)
    # A short instruction keeps the byte-level prompts short, so the test runs in about a minute.
    env.observation_space = TextObservations(64, instruction="Say the target.")
    return env


def _prompt_alphabet() -> str:
    """Every character the policy's prompts can contain (ChatML roles included)."""
    env = _make_env()
    texts = [system_text(env.observation_space), "systemuserassistant\n"]
    for word in WORDS:
        observation = f"Options: {', '.join(WORDS)}. Target: {word}."
        texts.append(user_text(observation, env.action_space))
    return "".join(sorted(set("".join(texts))))


def _train(
    tmp_path: Path, mode: str, steps: int, lr: float, ent_coef: float = 0.0, points: int = 1
) -> tuple[float, list[float]]:
    """Success before training and at ``points`` evenly spaced points of it (the last at the end)."""
    alphabet = _prompt_alphabet() if mode == "generate" else None
    model_dir = save_tiny_model(tmp_path / "model", words=WORDS, hidden_size=64, alphabet=alphabet)
    env = make_text_env(_make_env, n_envs=16, seed=0)
    model = PPO(
        LLMPolicy,
        env,
        policy_kwargs={
            "model": str(model_dir),
            "lora": None,
            "action_mode": mode,
            "max_new_tokens": 2,
        },
        n_steps=4,
        batch_size=32,
        n_epochs=4,
        learning_rate=lr,
        ent_coef=ent_coef,
        micro_batch_size=64,
        seed=0,
        device="cpu",
    )
    eval_env = make_text_env(_make_env, n_envs=16, seed=123)
    before, _ = evaluate_policy(model, eval_env, n_eval_episodes=200)
    curve = []
    for _ in range(points):
        model.learn(steps // points, reset_num_timesteps=False)
        curve.append(float(evaluate_policy(model, eval_env, n_eval_episodes=200)[0]))
    return float(before), curve


def test_choice_mode_learns_keyword_bandit(tmp_path: Path) -> None:
    before, (after,) = _train(tmp_path, "choice", steps=2000, lr=3e-3)
    assert before < 0.6  # chance is 1/3
    assert after >= 0.9, (before, after)


def test_generate_mode_learns_keyword_bandit(tmp_path: Path) -> None:
    """Free-text learning on a random model is noisy: once all three words are found, the word for
    one target can still flip for a while (success 1.0 <-> 0.67) before it settles. Measured over
    seeds 0-4 (evaluated every 1000 steps): every run reached 1.0 within 6000 steps (after
    2000-6000) and none ended below 0.64. So: it must reach 0.9, and end far above chance."""
    before, curve = _train(tmp_path, "generate", steps=6000, lr=1e-3, ent_coef=0.05, points=6)
    assert before < 0.5  # a random model rarely even names an option
    assert max(curve) >= 0.9, (before, curve)
    assert curve[-1] >= 0.6, (before, curve)


@pytest.mark.slow
def test_embedded_smollm2_learns_keyword_bandit(tmp_path: Path) -> None:
    """The real model (what `make demo` trains): it answers the first option whatever the
    target before training (exact success 0.25); measured 1.0 after 256 env steps on 2 CPU cores."""
    from gym_llm.demo import DEMO_SETTINGS
    from gym_llm.training import TrainConfig, run

    settings = {**DEMO_SETTINGS, "timesteps": 384, "eval_points": 0}
    config = TrainConfig(env="gym_llm/KeywordBandit-v0", eval_episodes=0, device="cpu", **settings)
    result = run(config, tmp_path / "run", progress_bar=False)
    assert result.before.exact is not None and result.after.exact is not None
    assert result.before.exact <= 0.5
    assert result.after.exact >= 0.75 and result.after.exact > result.before.exact
