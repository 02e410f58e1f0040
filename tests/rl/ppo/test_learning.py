"""A tiny model trained from scratch with PPO climbs from chance on KeywordBandit.

The model is randomly initialised, so it cannot already solve the task: success starts near
chance (measured, not assumed) and must reach >= 0.9, and must still be far above chance at
the end.

Generate mode samples from the whole vocabulary, so a random model must first discover the
option words at all. Its tokenizer is therefore limited to the characters the prompts use (about
60 tokens instead of about 300), and an entropy bonus keeps it exploring once it has found one
word. Replies are one token: with two, the entropy bonus pays for a junk first token and the
word moves to the second, where one target at a time got stuck on a wrong word (measured,
seeds 2 and 3: 0.67 for 10,000 steps). A pretrained model brings these priors itself.

**Robust to the machine, not to one lucky random stream.** Float rounding differs between
CPUs (AVX2 vs AVX-512) and thread counts, so the same seed follows another trajectory on another
machine: a test that passes for one seed passes by luck. Every setting here was checked over
seeds 0-19 (model initialisation, envs and sampling all seeded; ``python -m
benchmarks.learning_sweep``, table in benchmarks/RESULTS.md): all forty runs reached 0.9 by half
the steps given here and ended at 1.0; one generate run dipped to 0.66 for one evaluation on the
way, so the end is checked against 0.6 (far above chance), not 0.9. ``test_learning_sweep``
re-runs seeds 0-9 (``make test-slow``). Choice mode runs with the library's defaults as they
are now (choice calibration on; every layer trains here, so no action head): re-checked over
seeds 0-19, all 20 reached 1.0 by 1,000 env steps and ended at 1.0
(``results/learning-sweep-cpu-defaults-calibrated.json``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stable_baselines3.common.evaluation import evaluate_policy

from gym_llm import PPO, LLMPolicy, TextObservations, make_text_env
from gym_llm.envs.keyword_bandit import KeywordBanditEnv
from gym_llm.policy.prompts import system_text, user_text
from gym_llm.testing import save_tiny_model

WORDS = ["apple", "banana", "cherry"]
#: Env steps, learning rate, entropy bonus and evaluation points per mode (see the sweep).
SETTINGS = {
    "choice": {"steps": 2000, "lr": 5e-4, "ent_coef": 0.0, "points": 4},
    "generate": {"steps": 6000, "lr": 5e-4, "ent_coef": 0.05, "points": 4},
}


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


def train_keyword_bandit(tmp_path: Path, mode: str, seed: int = 0) -> tuple[float, list[float]]:
    """Success before training and at evenly spaced points of it (the last at the end), for
    a model, envs and sampling all seeded with ``seed``."""
    settings = SETTINGS[mode]
    alphabet = _prompt_alphabet() if mode == "generate" else None
    model_dir = save_tiny_model(
        tmp_path / "model", words=WORDS, hidden_size=64, alphabet=alphabet, seed=seed
    )
    env = make_text_env(_make_env, n_envs=16, seed=seed)
    model = PPO(
        LLMPolicy,
        env,
        policy_kwargs={
            "model": str(model_dir),
            "lora": None,
            "action_mode": mode,
            "max_new_tokens": 1,
        },
        n_steps=4,
        batch_size=32,
        n_epochs=4,
        learning_rate=settings["lr"],
        ent_coef=settings["ent_coef"],
        seed=seed,
        device="cpu",
    )
    eval_env = make_text_env(_make_env, n_envs=16, seed=123 + seed)
    before, _ = evaluate_policy(model, eval_env, n_eval_episodes=200)
    curve = []
    points = int(settings["points"])
    for _ in range(points):
        model.learn(int(settings["steps"]) // points, reset_num_timesteps=False)
        curve.append(float(evaluate_policy(model, eval_env, n_eval_episodes=200)[0]))
    return float(before), curve


def _check(before: float, curve: list[float]) -> None:
    assert before < 0.6, (before, curve)  # chance is 1/3 (choice); a random model rarely names one
    assert max(curve) >= 0.9, (before, curve)
    assert curve[-1] >= 0.6, (before, curve)  # learned, and still far above chance at the end


@pytest.mark.parametrize("mode", ["choice", "generate"])
def test_keyword_bandit_is_learned(tmp_path: Path, mode: str) -> None:
    _check(*train_keyword_bandit(tmp_path, mode))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("mode", ["choice", "generate"])
def test_learning_sweep(tmp_path: Path, mode: str, seed: int) -> None:
    """The same check on seeds 0-9: what keeps the default test honest on other machines."""
    _check(*train_keyword_bandit(tmp_path, mode, seed))


@pytest.mark.slow
def test_embedded_smollm2_learns_keyword_bandit(tmp_path: Path) -> None:
    """The real model (what `make demo` trains): it answers the first option whatever the
    target before training (exact success 0.25); measured 1.0 after 256 env steps on 2 CPU cores."""
    from gym_llm.cli.demo import DEMO_SETTINGS
    from gym_llm.experiments.run import TrainConfig, run

    settings = {**DEMO_SETTINGS, "timesteps": 384, "eval_points": 0}
    config = TrainConfig(env="gym_llm/KeywordBandit-v0", eval_episodes=0, device="cpu", **settings)
    result = run(config, tmp_path / "run", progress_bar=False)
    assert result.before.exact is not None and result.after.exact is not None
    assert result.before.exact <= 0.5
    assert result.after.exact >= 0.75 and result.after.exact > result.before.exact
