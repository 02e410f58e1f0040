"""The golden iterations: two seeded PPO iterations per action mode (generate mode with free and
with constrained replies) and one DQN iteration on a tiny model, recorded number for number, so
that a change meant to keep behaviour (a refactor, a move) proves it did.

What is recorded: the rollout's log-probs, values, rewards, advantages and returns (PPO), every
``train/*`` figure the learner logs, and each trainable tensor after the update (its sum, its sum
of squares and a SHA-256 of its bytes). ``GYM_LLM_GOLDEN_EXACT=1`` demands bit-identical numbers
(for a refactor on the machine that recorded them); by default the floats must agree to 1e-5
relative, since another CPU may round float32 sums differently. ``GYM_LLM_RECORD_GOLDEN=1``
rewrites the record: only when behaviour is meant to change, said in the commit.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import KVWriter, Logger

from gym_llm import DQN, PPO, LLMPolicy, make_text_env
from tests.models import tiny_model_fixture
from tests.paths import FIXTURES

RECORD = FIXTURES / "golden_iteration.json"
EXACT = os.environ.get("GYM_LLM_GOLDEN_EXACT") == "1"
WORDS = ["apple", "banana", "cherry", "grape", "high", "low"]


class _Figures(KVWriter):
    """Keeps every logged figure, in the order the learner logged them."""

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []

    def write(self, key_values: dict[str, Any], key_excluded: Any, step: int = 0) -> None:
        row = {k: float(v) for k, v in key_values.items() if k.startswith("train/")}
        row = {k: v for k, v in row.items() if not k.endswith(("_time", "/time"))}
        if row:
            self.rows.append(row)

    def close(self) -> None:
        pass


class _Rollout(BaseCallback):
    """Copies the rollout buffer at the end of each rollout (advantages are computed by then)."""

    def __init__(self) -> None:
        super().__init__()
        self.rollouts: list[dict[str, list[float]]] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        buffer = self.model.rollout_buffer
        self.rollouts.append(
            {
                name: np.asarray(getattr(buffer, name), dtype=np.float64).ravel().tolist()
                for name in ("log_probs", "values", "rewards", "advantages", "returns")
            }
        )


def _tensors(model: Any) -> dict[str, dict[str, Any]]:
    out = {}
    for name, param in sorted(model.policy.named_parameters()):
        if not param.requires_grad:
            continue
        data = param.detach().float().cpu().contiguous()
        out[name] = {
            "sum": float(data.double().sum()),
            "sumsq": float((data.double() ** 2).sum()),
            "sha256": hashlib.sha256(data.numpy().tobytes()).hexdigest(),
        }
    return out


model_dir = tiny_model_fixture("model_dir", WORDS)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one reduction order, whatever the machine's core count
    yield
    torch.set_num_threads(threads)


def _ppo_iteration(
    model_dir: Path,
    mode: str,
    constraint: str = "off",
    estimator: str = "gae",
    **settings: Any,
) -> dict[str, Any]:
    # Free text from the untrained model is invalid: a penalty makes rewards differ.
    free_text = mode == "generate" and constraint == "off"
    penalty = {"invalid_penalty": -1.0} if free_text else None
    env = make_text_env("gym_llm/KeywordBandit-v0", n_envs=4, seed=0, action_kwargs=penalty)
    policy_kwargs = {"model": str(model_dir), "lora": {"r": 4}, "action_mode": mode}
    if mode == "generate":
        policy_kwargs["max_new_tokens"] = 3
        policy_kwargs["reply_constraint"] = constraint
    model = PPO(
        LLMPolicy, env, n_steps=4, batch_size=8, n_epochs=2, seed=0, device="cpu",
        learning_rate=1e-3, ent_coef=0.01, policy_kwargs=policy_kwargs,
        advantage_estimator=estimator, **settings,
    )  # fmt: skip
    figures, rollout = _Figures(), _Rollout()
    model.set_logger(Logger(folder=None, output_formats=[figures]))
    model.learn(32, callback=rollout)  # SB3 logs an update's figures when the next rollout ends
    env.close()
    return {"rollout": rollout.rollouts, "figures": figures.rows, "tensors": _tensors(model)}


def _dqn_iteration(model_dir: Path) -> dict[str, Any]:
    env = make_text_env("gym_llm/HighLow-v0", n_envs=4, seed=0)
    model = DQN(
        LLMPolicy, env, learning_starts=16, target_update_interval=16, batch_size=8,
        train_freq=4, gradient_steps=1, learning_rate=1e-3, seed=0, device="cpu",
        policy_kwargs={"model": str(model_dir), "lora": {"r": 4}},
    )  # fmt: skip
    figures = _Figures()
    model.set_logger(Logger(folder=None, output_formats=[figures]))
    model.learn(48, log_interval=1)
    env.close()
    return {"figures": figures.rows, "tensors": _tensors(model)}


def _run(model_dir: Path) -> dict[str, Any]:
    return {
        "ppo_choice": _ppo_iteration(model_dir, "choice"),
        # the default: the action values and the step onto their target in choice mode
        "ppo_choice_auto": _ppo_iteration(model_dir, "choice", estimator="auto"),
        # the values refitted in closed form after each rollout
        "ppo_choice_ridge": _ppo_iteration(model_dir, "choice", estimator="auto", q_fit="ridge"),
        "ppo_generate": _ppo_iteration(model_dir, "generate"),
        "ppo_generate_constrained": _ppo_iteration(model_dir, "generate", "action"),
        "dqn": _dqn_iteration(model_dir),
    }


def _compare(got: Any, want: Any, where: str) -> list[str]:
    """Differences between two records, each named by its path."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return [
                f"{where}: keys {sorted(got) if isinstance(got, dict) else got} != {sorted(want)}"
            ]
        if set(want) == {"sum", "sumsq", "sha256"} and not EXACT:
            return _compare_tensor(got, want, where)
        return [d for k in want for d in _compare(got[k], want[k], f"{where}.{k}")]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{where}: length {len(got) if isinstance(got, list) else got} != {len(want)}"]
        return [
            d
            for i, (g, w) in enumerate(zip(got, want, strict=True))
            for d in _compare(g, w, f"{where}[{i}]")
        ]
    if isinstance(want, float) and not EXACT:
        both_nan = math.isnan(want) and math.isnan(float(got))
        if both_nan or math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-6):
            return []
        return [f"{where}: {got!r} != {want!r}"]
    if isinstance(want, str) and len(want) == 64 and not EXACT:  # a SHA-256: exact runs only
        return []
    if got != want and not (isinstance(want, float) and math.isnan(want) and math.isnan(got)):
        return [f"{where}: {got!r} != {want!r}"]
    return []


def _compare_tensor(got: dict[str, Any], want: dict[str, Any], where: str) -> list[str]:
    """A trained tensor's statistics on another CPU: its sum within 1e-3 of the tensor's norm.

    The sum of a tensor whose entries cancel is no scale for a relative tolerance: float32
    rounding of another CPU, carried through Adam's steps (whose size does not depend on the
    gradient's), moves it by up to a few 1e-4 of the norm; a changed setting of the update
    moves it by 1e-2 of the norm or more. The sum of squares keeps the tight tolerance.
    """
    norm = math.sqrt(want["sumsq"])
    out = []
    if not math.isclose(got["sum"], want["sum"], rel_tol=1e-5, abs_tol=max(1e-6, 1e-3 * norm)):
        out.append(f"{where}.sum: {got['sum']!r} != {want['sum']!r}")
    out.extend(_compare(got["sumsq"], want["sumsq"], f"{where}.sumsq"))
    return out


def test_one_iteration_of_each_learner_matches_the_record(model_dir: Path) -> None:
    got = _run(model_dir)
    if os.environ.get("GYM_LLM_RECORD_GOLDEN") == "1":
        RECORD.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(RECORD.read_text())
    assert want["ppo_choice"]["figures"], "the record holds no logged figures"
    assert want["ppo_choice"]["rollout"][0]["advantages"], "the record holds no rollout"
    differences = _compare(json.loads(json.dumps(got)), want, "golden")
    assert not differences, f"{len(differences)} numbers moved:\n" + "\n".join(differences[:20])
