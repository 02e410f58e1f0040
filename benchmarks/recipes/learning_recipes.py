"""The training recipes of the learning tests, shared with the seed sweep that checks them.

``tests/rl/ppo/test_learning*.py`` assert that these runs learn on a seed or two; ``python -m
benchmarks.recipes.learning_sweep`` runs the very same functions over seeds 0-9 (or more) and records how
robust each assertion is. Each recipe returns the success before training and at points of it;
each ``check_*`` is the assertion the test makes.

* KeywordBandit from scratch (:func:`train_keyword_bandit`): a randomly initialised tiny model,
  every layer trained, in choice mode, generate mode writing free text, or generate mode with
  its default replies among the listed actions (``"constrained"``).
* HighLow with the action head (:func:`train_high_low`): a rule over the input, which LoRA alone
  does not learn.
* HighLow out of the softmax corner (:func:`train_corner`): the better arm starts at p ~ 0.003.
* ``gym_llm.DQN`` on HighLow (:func:`train_dqn_high_low`): the library's defaults, a rule over
  the input learned from replayed values (``python -m benchmarks.recipes.dqn_learning_test_sweep``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stable_baselines3.common.evaluation import evaluate_policy

from gym_llm import DQN, PPO, LLMPolicy, TextObservations, make_text_env
from gym_llm.envs.high_low import exact_success
from gym_llm.envs.keyword_bandit import KeywordBanditEnv
from gym_llm.policy.prompts import system_text, user_text
from gym_llm.testing import save_tiny_model

# --- KeywordBandit from scratch --------------------------------------------------------------

#: The KeywordBandit options of the KeywordBandit recipe.
WORDS = ["apple", "banana", "cherry"]
#: Env steps, learning rate, entropy bonus and evaluation points per mode (see the sweep).
SETTINGS = {
    "choice": {"steps": 2000, "lr": 5e-4, "ent_coef": 0.0, "points": 4},
    "generate": {"steps": 6000, "lr": 5e-4, "ent_coef": 0.05, "points": 4},
    "constrained": {"steps": 2000, "lr": 5e-4, "ent_coef": 0.0, "points": 4},
}


def keyword_bandit_env() -> KeywordBanditEnv:
    env = KeywordBanditEnv(options=WORDS)
    # A short instruction keeps the byte-level prompts short, so the test runs in about a minute.
    env.observation_space = TextObservations(64, instruction="Say the target.")
    return env


def _prompt_alphabet() -> str:
    """Every character the policy's prompts can contain (ChatML roles included)."""
    env = keyword_bandit_env()
    texts = [system_text(env.observation_space), "systemuserassistant\n"]
    for word in WORDS:
        observation = f"Options: {', '.join(WORDS)}. Target: {word}."
        texts.append(user_text(observation, env.action_space))
    return "".join(sorted(set("".join(texts))))


def train_keyword_bandit(tmp_path: Path, mode: str, seed: int = 0) -> tuple[float, list[float]]:
    """Success before training and at evenly spaced points of it (the last at the end), for
    a model, envs and sampling all seeded with ``seed``."""
    settings = SETTINGS[mode]
    writes = mode in ("generate", "constrained")
    alphabet = _prompt_alphabet() if writes else None
    model_dir = save_tiny_model(
        tmp_path / "model", words=WORDS, hidden_size=64, alphabet=alphabet, seed=seed
    )
    env = make_text_env(keyword_bandit_env, n_envs=16, seed=seed)
    model = PPO(
        LLMPolicy,
        env,
        policy_kwargs={
            "model": str(model_dir),
            "lora": None,
            "action_mode": "generate" if writes else "choice",
            "max_new_tokens": 1,
            # "generate": free text, as its recorded sweeps; "constrained": the default.
            **({"reply_constraint": "off"} if mode == "generate" else {}),
        },
        n_steps=4,
        batch_size=32,
        n_epochs=4,
        learning_rate=settings["lr"],
        ent_coef=settings["ent_coef"],
        seed=seed,
        device="cpu",
    )
    eval_env = make_text_env(keyword_bandit_env, n_envs=16, seed=123 + seed)
    before, _ = evaluate_policy(model, eval_env, n_eval_episodes=200)
    curve = []
    points = int(settings["points"])
    for _ in range(points):
        model.learn(int(settings["steps"]) // points, reset_num_timesteps=False)
        curve.append(float(evaluate_policy(model, eval_env, n_eval_episodes=200)[0]))
    return float(before), curve


def check_keyword_bandit(before: float, curve: list[float]) -> None:
    assert before < 0.6, (before, curve)  # chance is 1/3 (choice); a random model rarely names one
    assert max(curve) >= 0.9, (before, curve)
    assert curve[-1] >= 0.6, (before, curve)  # learned, and still far above chance at the end


# --- HighLow: the action head learns a rule over the input -----------------------------------

STEPS, EVERY = 4096, 512
#: Seeds 0-9 with PPO's default 4 epochs: the worst best success was 0.9 and the worst gain over
#: the start 0.3 (results/learning-sweep-ep4.json; with 2 epochs 0.8 and 0.2; calibration moves
#: the start to 0.5-0.7; RESULTS.md); the test asks for 0.7 and 0.1.
BEST_AT_LEAST, GAIN_AT_LEAST = 0.7, 0.1


def train_high_low(
    tmp_path: Path,
    seed: int,
    head: bool = True,
    calibration: bool | None = None,
    words: tuple[str, ...] = ("low", "high"),
    **ppo: Any,
) -> tuple[float, list[float]]:
    """Exact success before training and every ``EVERY`` env steps (tiny model, 1 thread).

    ``head=False``: the plain LoRA policy (neither the head nor, unless ``calibration`` says
    otherwise, the calibration; both are on by default). ``words``: the tokenizer's whole words;
    an action spelled from several tokens starts rare. ``ppo``: more PPO arguments."""
    model_dir = save_tiny_model(tmp_path / "model", words=list(words), seed=seed)
    env = make_text_env("gym_llm/HighLow-v0", n_envs=8, seed=seed)
    policy: dict[str, Any] = {
        "model": str(model_dir),
        "lora": {"r": 4},
        "action_head": head,
        "choice_calibration": head if calibration is None else calibration,
    }
    model = PPO(LLMPolicy, env, policy_kwargs=policy, n_steps=8, batch_size=64, seed=seed,
                device="cpu", **ppo)  # fmt: skip

    def success() -> float:
        return exact_success(lambda obs: model.predict(obs, deterministic=True)[0])

    before, curve = success(), []
    while model.num_timesteps < STEPS:
        model.learn(EVERY, reset_num_timesteps=False)
        curve.append(success())
    return before, curve


def check_high_low(before: float, curve: list[float]) -> None:
    assert before <= 0.7  # the untrained policy cannot already do it
    assert max(curve) >= BEST_AT_LEAST and max(curve) >= before + GAIN_AT_LEAST


# --- HighLow: out of the softmax corner ------------------------------------------------------

CORNER_WORDS = ("low", "hig")
#: The plain policy's greedy success on every seed of the sweep, start and end (it never picks
#: ``high``); the test allows a little above it.
CORNER_AT_MOST = 0.6


def train_corner(
    tmp_path: Path, seed: int, arm: str = "defaults", **ppo: Any
) -> tuple[float, list[float]]:
    """``arm``: ``defaults`` (head and calibration), ``plain`` (neither), ``head`` (the head
    without the calibration), ``target`` (neither, with ``policy_update="target"``) or
    ``head-target`` (the head, no calibration, ``policy_update="target"``). ``ppo``: more PPO
    arguments."""
    head = arm in ("defaults", "head", "head-target")
    if arm.endswith("target"):
        ppo = {"policy_update": "target", **ppo}
    return train_high_low(
        tmp_path, seed, head=head, calibration=arm == "defaults", words=CORNER_WORDS, **ppo
    )


# --- gym_llm.DQN on HighLow ------------------------------------------------------------------

#: DQN's settings in its tests (HighLow, 4 envs, LoRA rank 4), sized for a few hundred env steps.
DQN_SETTINGS: dict[str, Any] = {
    "learning_starts": 64,
    "target_update_interval": 64,
    "exploration_fraction": 0.3,
    "learning_rate": 1e-3,
}
#: The learning test's budget.
DQN_STEPS = 512


def dqn_high_low(
    model_dir: Path, seed: int = 0, env_id: str = "gym_llm/HighLow-v0", **kwargs: Any
) -> DQN:
    """The tests' DQN: :data:`DQN_SETTINGS` with ``kwargs`` on top (``policy_kwargs`` merged)."""
    env = make_text_env(env_id, n_envs=4, seed=seed)
    settings: dict[str, Any] = {**DQN_SETTINGS, "seed": seed, **kwargs}
    policy = {"model": str(model_dir), "lora": {"r": 4}, **settings.pop("policy_kwargs", {})}
    return DQN("LLMPolicy", env, policy_kwargs=policy, **settings)


def dqn_success(model: DQN) -> float:
    """The share of HighLow's numbers the greedy values answer right."""
    return exact_success(lambda observations: model.predict(observations, deterministic=True)[0])


def train_dqn_high_low(model_dir: Path, seed: int, steps: int = DQN_STEPS) -> tuple[float, float]:
    """Exact success before and after one ``learn(steps)`` call."""
    model = dqn_high_low(model_dir, seed)
    before = dqn_success(model)
    model.learn(steps)
    assert model._n_updates > 0 and model.skipped_steps == 0
    return before, dqn_success(model)


def check_dqn_high_low(before: float, after: float) -> None:
    assert before <= 0.6  # the untrained agent answers (almost) one word everywhere
    assert after == 1.0
