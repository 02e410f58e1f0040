"""One run of each kind of agent in the comparison suite: random play, SB3 PPO/DQN on the raw
env, the LLM zero-shot and the LLM trained with gym_llm's PPO; each returns its ``results.csv`` rows.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from gym_llm.evaluation.baselines import (
    ClassicAlgo,
    exact_score,
    random_score,
    tabular_supported,
    train_sb3,
)
from gym_llm.evaluation.scores import Score
from gym_llm.experiments.comparison import COMPARISON_LLM, ComparisonConfig, Job, References, Row
from gym_llm.experiments.run import TrainConfig, device_name
from gym_llm.experiments.specs import EnvSpec
from gym_llm.policy.arguments import scores_listed_actions
from gym_llm.policy.config import PolicyConfig
from gym_llm.policy.models import resolve_device

CPU = device_name(torch.device("cpu"))


def _row(
    spec: EnvSpec,
    agent: str,
    budget: int,
    seed: int,
    steps: int,
    score: Score,
    wall: float,
    device: str,
    model: str,
    curve: list[tuple[int, float, float]],
) -> Row:
    return Row(
        spec.id,
        spec.kwargs_json,
        agent,
        budget,
        seed,
        steps,
        score.value,
        score.sem,
        score.kind,
        score.episodes,
        score.success,
        wall,
        device,
        model,
        curve,
    )


def run_random(spec: EnvSpec, seed: int, refs: References) -> Row:
    """Random play is the reference itself: exact (the same for every seed) or Monte-Carlo."""
    score = (
        refs.random
        if refs.random.kind == "exact"
        else random_score(spec.id, spec.kwargs, 1000, seed)
    )
    return _row(spec, "random", 0, seed, 0, score, 0.0, CPU, "", [(0, score.value, 0.0)])


def run_classic(
    spec: EnvSpec, algo: ClassicAlgo, budget: int, seed: int, config: ComparisonConfig
) -> Row:
    result = train_sb3(
        algo,
        spec.id,
        spec.kwargs,
        budget,
        seed,
        eval_points=config.curve_points,
        eval_episodes=config.eval_episodes,
    )
    curve = [(p.timesteps, p.score.value, p.wall_s) for p in result.curve]
    return _row(
        spec,
        algo,
        budget,
        seed,
        result.env_steps,
        result.final,
        result.train_wall_s,
        CPU,
        "",
        curve,
    )


def llm_score(model: Any, spec: EnvSpec, episodes: int, seed: int) -> Score:
    """An LLM agent's greedy policy through text: exactly (with its success probability on
    tabular envs) where :mod:`gym_llm.evaluation.exact` allows, else Monte-Carlo."""
    from gym_llm.evaluation.exact import (
        TEXT_TABULAR_ENVS,
        exact_evaluation_supported,
        exact_policy_value,
        greedy_action_probabilities,
        reachable_greedy_probabilities,
    )
    from gym_llm.evaluation.monte_carlo import evaluate
    from gym_llm.rl.common.vec_env import make_text_env

    if tabular_supported(spec.id, spec.kwargs):
        # Text-native envs have hundreds of states: ask only those the greedy policy reaches.
        ask = (
            reachable_greedy_probabilities
            if spec.id in TEXT_TABULAR_ENVS
            else greedy_action_probabilities
        )
        return exact_score(spec.id, spec.kwargs, lambda _: ask(model, spec.id, spec.kwargs))
    if exact_evaluation_supported(spec.id, spec.kwargs):
        return Score(exact_policy_value(model, spec.id, spec.kwargs), 0.0, "exact")
    text_env = make_text_env(spec.id, min(8, episodes), env_kwargs=spec.kwargs, seed=seed + 10_000)
    stats = evaluate(model, text_env, episodes)
    text_env.close()
    return Score(stats.mean, stats.sem, "mc", stats.episodes)


#: Settings of the policy's that only choice mode takes (a suite runs both modes with one set).
CHOICE_ONLY = ("policy.action_head", "policy.choice_calibration")


def llm_config(
    spec: EnvSpec, mode: str, budget: int, seed: int, config: ComparisonConfig
) -> TrainConfig:
    """gym_llm PPO's run config (:data:`COMPARISON_LLM` with ``config.llm`` over it), its rollouts
    shrunk to add up to at most ``budget`` env steps."""
    from gym_llm.evaluation.exact import exact_evaluation_supported

    settings = {**COMPARISON_LLM, **config.llm}
    if not scores_listed_actions(mode):
        settings = {k: v for k, v in settings.items() if k not in CHOICE_ONLY}
    exact = exact_evaluation_supported(spec.id, spec.kwargs)
    base = TrainConfig(
        env=spec.id,
        env_kwargs=dict(spec.kwargs),
        policy=PolicyConfig(model=config.model, action_mode=mode),  # type: ignore[arg-type]
        eval_episodes=0 if exact else config.eval_episodes,
        seed=seed,
        device=config.device,
    ).with_settings(settings)
    n_envs = max(1, min(base.n_envs, budget))
    n_steps = max(1, min(base.ppo.n_steps, budget // n_envs))
    rollout = n_envs * n_steps
    return base.with_settings(
        {
            "n_envs": n_envs,
            "ppo.n_steps": n_steps,
            "ppo.batch_size": min(base.ppo.batch_size, rollout),
            "timesteps": rollout * max(1, budget // rollout),
        }
    )


@contextmanager
def _run_dir(config: ComparisonConfig, name: str) -> Iterator[Path]:
    """Where an LLM run keeps its TensorBoard logs and agent: ``--run-dir/<name>``, or a
    temporary directory deleted afterwards (weights never land in the results folder)."""
    if config.run_dir is not None:
        path = Path(config.run_dir) / name
        path.mkdir(parents=True, exist_ok=True)
        yield path
    else:
        with tempfile.TemporaryDirectory(prefix="gym-llm-bench-") as tmp:
            yield Path(tmp)


def run_llm_trained(
    spec: EnvSpec,
    mode: str,
    budget: int,
    seed: int,
    config: ComparisonConfig,
    zero_shot: bool = False,
) -> list[Row]:
    """The LLM trained with gym_llm's PPO; with ``zero_shot``, also the untrained model's row,
    taken from the run's "before" evaluation (the LoRA adapter starts as the identity) instead
    of evaluating the same policy twice."""
    from gym_llm.experiments.run import run

    if mode == "dqn":  # SB3 DQN's settings for this budget, each step replayed as often
        from gym_llm.evaluation.baselines import dqn_budget_settings

        choice = llm_config(spec, "choice", budget, seed, config)
        budgeted = dqn_budget_settings(budget, choice.n_envs)
        train_config = choice.with_settings(
            {
                "algo": "dqn",
                "dqn.batch_size": choice.ppo.batch_size,
                **{f"dqn.{name}": value for name, value in budgeted.items()},
                **{k: v for k, v in config.llm.items() if k.startswith("dqn.")},
            }
        )
    else:
        train_config = llm_config(spec, mode, budget, seed, config)
    with _run_dir(config, f"{spec.slug}-llm-{mode}-seed{seed}") as run_dir:
        result = run(train_config, run_dir, progress_bar=False)
        curve = [(p.timesteps, p.value, p.wall_s) for p in result.curve]
        # training.run's "after" point is measured once learn() has returned; tabular envs are
        # scored again only for the goal probability, which run() does not compute.
        if tabular_supported(spec.id, spec.kwargs):
            score = llm_score(result.model, spec, config.eval_episodes, seed)
        else:
            score = result.after.score
        del result.model
    rows = []
    if zero_shot:
        before = result.before.score
        rows.append(
            _row(spec, "llm-zero-shot", 0, seed, 0, before, 0.0, result.device, config.model,
                 [(0, before.value, 0.0)])
        )  # fmt: skip
    trained = _row(
        spec,
        f"llm-{mode}",
        budget,
        seed,
        result.timesteps,
        score,
        result.train_wall_s,
        result.device,
        config.model,
        curve,
    )
    return [trained, *rows]


def run_llm_zero_shot(spec: EnvSpec, seed: int, config: ComparisonConfig) -> Row:
    """The untrained model's greedy policy (choice mode: it scores the listed actions)."""
    from gym_llm.rl.common.vec_env import make_text_env
    from gym_llm.rl.ppo import PPO

    train_config = llm_config(spec, "choice", 1, seed, config)
    env = make_text_env(spec.id, 1, env_kwargs=spec.kwargs, seed=seed)
    model = PPO(
        "LLMPolicy",
        env,
        policy_kwargs=train_config.policy_kwargs(),
        seed=seed,
        device=str(resolve_device(config.device)),
    )
    start = time.perf_counter()
    score = llm_score(model, spec, config.eval_episodes, seed)
    wall = time.perf_counter() - start
    env.close()
    device = device_name(model.device)
    return _row(
        spec,
        "llm-zero-shot",
        0,
        seed,
        0,
        score,
        wall,
        device,
        config.model,
        [(0, score.value, 0.0)],
    )


def execute(job: Job, refs: References, config: ComparisonConfig) -> list[Row]:
    if job.agent == "random":
        return [run_random(job.spec, job.seed, refs)]
    if job.agent in ("ppo", "dqn"):
        return [run_classic(job.spec, job.agent, job.budget, job.seed, config)]  # type: ignore[arg-type]
    if job.agent == "llm-zero-shot":
        return [run_llm_zero_shot(job.spec, job.seed, config)]
    mode = job.agent.removeprefix("llm-")
    return run_llm_trained(job.spec, mode, job.budget, job.seed, config, job.zero_shot)
