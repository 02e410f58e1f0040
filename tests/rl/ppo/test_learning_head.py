"""The action head turns a rule over the input into learning where LoRA alone does not move.

A tiny randomly initialised model on HighLow (10 numbers, the right word depends on the
number): the untrained policy answers the same word everywhere (success 0.5, measured). With
the library's LoRA policy alone it stays at 0.5 for 4,096 env steps on 7 of 10 seeds (2 epochs;
the LoRA gradient is nearly the same in every state, so states that need different words
cancel); with ``action_head=True`` (and ``choice_calibration=True``) every seed climbs, 10 of 10
to >= 0.9 with PPO's default 4 epochs (8 of 10 with 2). Settings checked over seeds 0-9 (``python -m
benchmarks.learning_sweep --modes head``, RESULTS.md): the test asserts the worst seed's best
success with a margin below it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gym_llm import PPO, LLMPolicy, make_text_env
from gym_llm.envs.high_low import exact_success
from gym_llm.testing import save_tiny_model

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


def check(before: float, curve: list[float]) -> None:
    assert before <= 0.7  # the untrained policy cannot already do it
    assert max(curve) >= BEST_AT_LEAST and max(curve) >= before + GAIN_AT_LEAST


@pytest.mark.parametrize("seed", [0, 1])
def test_the_head_learns_a_rule_over_the_input(
    tmp_path: Path, seed: int, one_torch_thread: None
) -> None:
    check(*train_high_low(tmp_path, seed))
