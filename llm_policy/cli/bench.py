"""``gym-llm bench``: an LLM agent next to classic RL on the same envs and the same env steps.

For every env and seed it runs the selected agents (uniform random; SB3 PPO and DQN with
``MlpPolicy`` on the raw env, at the LLM's budget and at a usual classic budget; the LLM
zero-shot; the LLM trained with gym_llm's PPO in choice and/or generate mode), scores each one
exactly where the env allows (one greedy query per state, then dynamic programming) and by
Monte-Carlo with a 95% interval elsewhere, and writes to ``--out``:

* ``results.csv``: one row per run, with its learning curve (JSON
  ``[[env_steps, return, train_wall_s], ...]``);
  re-running an env replaces its rows, so envs can be run as separate invocations;
* ``summary.md``: mean ± std over seeds, the optimum, % of the optimum-minus-random gap closed,
  the probability of reaching the goal, the time to target (env steps and training wall time
  until the curve first reaches ``--target``, by default 90% of the gap), evaluation kind, env
  steps, wall time and device, with warnings where "% gap closed" flatters an agent that never
  reaches the goal;
* ``<env>.png``: return against env steps for every agent, random and optimum as lines.

Agent weights are never written there: LLM runs train in a temporary directory unless
``--run-dir`` asks to keep them (TensorBoard logs and agents) somewhere else.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from gym_llm.cli.commands import parse_value
from gym_llm.evaluation.baselines import (
    ClassicAlgo,
    Score,
    exact_score,
    random_score,
    tabular_supported,
    train_sb3,
)
from gym_llm.experiments.curves import gap_target, time_to_target
from gym_llm.experiments.run import TrainConfig, device_name
from gym_llm.policy.models import DEFAULT_MODEL, resolve_device
from gym_llm.rl.advantages import ESTIMATORS

#: Every agent ``--agents`` can select.
AGENTS: tuple[str, ...] = ("random", "ppo", "dqn", "llm-zero-shot", "llm-choice", "llm-generate")
DEFAULT_AGENTS: tuple[str, ...] = ("random", "ppo", "dqn", "llm-zero-shot", "llm-choice")
AGENT_LABELS: dict[str, str] = {
    "random": "uniform random",
    "ppo": "SB3 PPO (MlpPolicy)",
    "dqn": "SB3 DQN (MlpPolicy)",
    "llm-zero-shot": "LLM zero-shot",
    "llm-choice": "LLM + gym_llm PPO (choice)",
    "llm-generate": "LLM + gym_llm PPO (generate)",
}
CSV_FIELDS: tuple[str, ...] = (
    "env",
    "env_kwargs",
    "agent",
    "budget",
    "seed",
    "env_steps",
    "value",
    "sem",
    "eval_kind",
    "eval_episodes",
    "success",
    "wall_s",
    "device",
    "model",
    "curve",
)


@dataclass(frozen=True)
class EnvSpec:
    """One env of the comparison: a Gymnasium id and its kwargs."""

    id: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        if not self.kwargs:
            return self.id
        return f"{self.id} ({', '.join(f'{k}={v}' for k, v in self.kwargs.items())})"

    @property
    def slug(self) -> str:
        """A file name for the env's plot."""
        parts = [self.id.split("/")[-1]] + [f"{k}={v}" for k, v in self.kwargs.items()]
        return re.sub(r"[^A-Za-z0-9_.=-]+", "_", "-".join(parts))

    @property
    def kwargs_json(self) -> str:
        return json.dumps(self.kwargs, sort_keys=True)


#: The default suite (``--envs suite``). The text-native envs keep numeric Discrete spaces, so
#: SB3 plays them too.
SUITE: tuple[EnvSpec, ...] = (
    EnvSpec("Blackjack-v1", {"sab": False}),
    EnvSpec("FrozenLake-v1", {"is_slippery": False}),
    EnvSpec("FrozenLake-v1", {"is_slippery": True}),
    EnvSpec("Taxi-v4"),
    EnvSpec("CliffWalking-v1", {"max_episode_steps": 100}),
    EnvSpec("CartPole-v1"),
    EnvSpec("gym_llm/GuessNumber-v0"),
    EnvSpec("gym_llm/TextMaze-v0"),
)


def parse_env_spec(text: str) -> EnvSpec:
    """``"FrozenLake-v1:is_slippery=False,map_name=4x4"`` → :class:`EnvSpec`; the env is built
    once so that an unknown id or kwarg fails here, with a message, not an hour into a run."""
    import gym_llm.envs  # noqa: F401  (registers gym_llm/<Name>-v0)

    env_id, _, rest = text.strip().partition(":")
    if not env_id:
        raise ValueError(f"Env spec {text!r} has no env id; write ID or ID:key=value,...")
    kwargs: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(
                f"Env spec {text!r}: {item!r} is not key=value; write e.g. "
                "FrozenLake-v1:is_slippery=False,map_name=4x4"
            )
        kwargs[key.strip()] = parse_value(raw.strip())
    try:
        gym.make(env_id, **kwargs).close()
    except gym.error.Error as exc:
        raise ValueError(f"Env spec {text!r}: unknown env id {env_id!r} ({exc}).") from exc
    except TypeError as exc:
        raise ValueError(
            f"Env spec {text!r}: {env_id} does not take these kwargs ({exc})."
        ) from exc
    return EnvSpec(env_id, kwargs)


def parse_envs(items: Sequence[str]) -> list[EnvSpec]:
    """``--envs`` items: ``suite`` (every env of :data:`SUITE` that is registered) or specs."""
    specs: list[EnvSpec] = []
    for item in items:
        if item == "suite":
            specs.extend(s for s in SUITE if _registered(s.id))
        else:
            specs.append(parse_env_spec(item))
    return specs


def _registered(env_id: str) -> bool:
    import gym_llm.envs  # noqa: F401

    return env_id in gym.registry


def parse_agents(text: str) -> list[str]:
    agents = [a.strip() for a in text.split(",") if a.strip()]
    unknown = [a for a in agents if a not in AGENTS]
    if unknown or not agents:
        raise ValueError(
            f"Unknown agents {unknown or text!r}; choose a comma-separated list of {', '.join(AGENTS)}."
        )
    return agents


# --- references ------------------------------------------------------------------------------


@dataclass(frozen=True)
class References:
    """What an env's scores are read against."""

    random: Score
    optimum: float | None


def env_references(spec: EnvSpec, episodes: int = 1000) -> References:
    """Random play (exact or Monte-Carlo) and the optimum: by dynamic programming, the env's
    ``optimal_return``, or CartPole's step limit (balancing to the end is the best possible)."""
    from gym_llm.evaluation.monte_carlo import known_optimum

    optimum = known_optimum(spec.id, spec.kwargs)
    if optimum is None and spec.id.startswith("CartPole"):
        env = gym.make(spec.id, **spec.kwargs)
        optimum = (
            float(env.spec.max_episode_steps) if env.spec and env.spec.max_episode_steps else None
        )
        env.close()
    return References(random_score(spec.id, spec.kwargs, episodes), optimum)


# --- one run -----------------------------------------------------------------------------


@dataclass
class Row:
    """One run of one agent on one env with one seed: a line of ``results.csv``."""

    env: str
    env_kwargs: str
    agent: str
    budget: int
    seed: int
    env_steps: int
    value: float
    sem: float
    eval_kind: str
    eval_episodes: int
    success: float | None
    wall_s: float
    device: str
    model: str
    #: ``[(env_steps, return, train_wall_s), ...]``, the last point being the final score
    #: (wall time NaN in rows written before it was recorded).
    curve: list[tuple[int, float, float]]

    @property
    def key(self) -> tuple[str, str, str, int, int]:
        return (self.env, self.env_kwargs, self.agent, self.budget, self.seed)

    def to_csv(self) -> dict[str, str]:
        values = asdict(self)
        values["curve"] = json.dumps(
            [[int(s), float(v), None if math.isnan(w) else round(w, 3)] for s, v, w in self.curve]
        )
        values["success"] = "" if self.success is None else repr(self.success)
        return {k: str(v) for k, v in values.items()}

    @classmethod
    def from_csv(cls, record: Mapping[str, str]) -> Row:
        return cls(
            env=record["env"],
            env_kwargs=record["env_kwargs"],
            agent=record["agent"],
            budget=int(record["budget"]),
            seed=int(record["seed"]),
            env_steps=int(record["env_steps"]),
            value=float(record["value"]),
            sem=float(record["sem"]),
            eval_kind=record["eval_kind"],
            eval_episodes=int(record["eval_episodes"]),
            success=float(record["success"]) if record["success"] else None,
            wall_s=float(record["wall_s"]),
            device=record["device"],
            model=record["model"],
            curve=[_curve_point(*point) for point in json.loads(record["curve"])],
        )


def _curve_point(steps: int, value: float, wall: float | None = None) -> tuple[int, float, float]:
    return int(steps), float(value), math.nan if wall is None else float(wall)


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
    spec: EnvSpec, algo: ClassicAlgo, budget: int, seed: int, args: argparse.Namespace
) -> Row:
    result = train_sb3(
        algo,
        spec.id,
        spec.kwargs,
        budget,
        seed,
        eval_points=args.curve_points,
        eval_episodes=args.eval_episodes,
    )
    curve = [(p.steps, p.score.value, p.wall_s) for p in result.curve]
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
    from gym_llm.rl.vec_env import make_text_env

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


def llm_config(
    spec: EnvSpec, mode: str, budget: int, seed: int, args: argparse.Namespace
) -> TrainConfig:
    """gym_llm PPO settings whose rollouts add up to at most ``budget`` env steps."""
    from gym_llm.evaluation.exact import exact_evaluation_supported

    n_envs = max(1, min(args.llm_n_envs, budget))
    n_steps = max(1, min(args.llm_n_steps, budget // n_envs))
    rollout = n_envs * n_steps
    return TrainConfig(
        env=spec.id,
        env_kwargs=dict(spec.kwargs),
        model=args.model,
        mode=mode,
        timesteps=rollout * max(1, budget // rollout),
        n_envs=n_envs,
        n_steps=n_steps,
        batch_size=min(args.llm_batch_size, rollout),
        n_epochs=args.llm_epochs,
        learning_rate=args.llm_lr,
        lora_r=args.llm_lora_r,
        ent_coef=args.llm_ent_coef,
        advantage_estimator=args.llm_estimator,
        micro_batch_size=args.llm_micro_batch_size,
        max_new_tokens=args.max_new_tokens,
        eval_episodes=0 if exact_evaluation_supported(spec.id, spec.kwargs) else args.eval_episodes,
        eval_points=args.llm_eval_points,
        seed=seed,
        device=args.device,
    )


@contextmanager
def _run_dir(args: argparse.Namespace, name: str) -> Iterator[Path]:
    """Where an LLM run keeps its TensorBoard logs and agent: ``--run-dir/<name>``, or a
    temporary directory deleted afterwards (weights never land in the results folder)."""
    if args.run_dir is not None:
        path = Path(args.run_dir) / name
        path.mkdir(parents=True, exist_ok=True)
        yield path
    else:
        with tempfile.TemporaryDirectory(prefix="gym-llm-bench-") as tmp:
            yield Path(tmp)


def _stats_score(point: Any) -> Score:
    """A training curve point as a :class:`Score` (exact where it was measured exactly)."""
    if point.exact is not None:
        return Score(point.exact, 0.0, "exact")
    stats = point.eval
    return Score(stats.mean, stats.sem, "mc", stats.episodes)


def run_llm_trained(
    spec: EnvSpec,
    mode: str,
    budget: int,
    seed: int,
    args: argparse.Namespace,
    zero_shot: bool = False,
) -> list[Row]:
    """The LLM trained with gym_llm's PPO; with ``zero_shot``, also the untrained model's row,
    taken from the run's "before" evaluation (the LoRA adapter starts as the identity) instead
    of evaluating the same policy twice."""
    from gym_llm.experiments.run import run

    config = llm_config(spec, mode, budget, seed, args)
    with _run_dir(args, f"{spec.slug}-llm-{mode}-seed{seed}") as run_dir:
        result = run(config, run_dir, progress_bar=False)
        curve = [(p.timesteps, p.value, p.wall_s) for p in result.curve]
        # training.run's "after" point is measured once learn() has returned; tabular envs are
        # scored again only for the goal probability, which run() does not compute.
        if tabular_supported(spec.id, spec.kwargs):
            score = llm_score(result.model, spec, args.eval_episodes, seed)
        else:
            score = _stats_score(result.after)
        del result.model
    rows = []
    if zero_shot:
        before = _stats_score(result.before)
        rows.append(
            _row(spec, "llm-zero-shot", 0, seed, 0, before, 0.0, result.device, args.model,
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
        args.model,
        curve,
    )
    return [trained, *rows]


def run_llm_zero_shot(spec: EnvSpec, seed: int, args: argparse.Namespace) -> Row:
    """The untrained model's greedy policy (choice mode: it scores the listed actions)."""
    from gym_llm.rl.ppo import PPO
    from gym_llm.rl.vec_env import make_text_env

    config = llm_config(spec, "choice", 1, seed, args)
    env = make_text_env(spec.id, 1, env_kwargs=spec.kwargs, seed=seed)
    model = PPO(
        "LLMPolicy",
        env,
        policy_kwargs=config.policy_kwargs(),
        seed=seed,
        device=str(resolve_device(args.device)),
    )
    start = time.perf_counter()
    score = llm_score(model, spec, args.eval_episodes, seed)
    wall = time.perf_counter() - start
    env.close()
    device = device_name(model.device)
    return _row(
        spec, "llm-zero-shot", 0, seed, 0, score, wall, device, args.model, [(0, score.value, 0.0)]
    )


@dataclass(frozen=True)
class Job:
    """A planned run, so the progress bar knows the total before the first one starts."""

    spec: EnvSpec
    agent: str
    budget: int
    seed: int
    #: A trained LLM job that also reports the zero-shot row from its "before" evaluation.
    zero_shot: bool = False

    @property
    def label(self) -> str:
        return (
            f"{self.spec.label} {self.agent}"
            + (f"@{self.budget}" if self.budget else "")
            + f" seed {self.seed}"
        )


def plan(specs: Sequence[EnvSpec], agents: Sequence[str], args: argparse.Namespace) -> list[Job]:
    """Every run, env by env. Random play and the zero-shot LLM are deterministic where the
    evaluation is exact, so they run once (seed 0) there and once per seed elsewhere."""
    from gym_llm.evaluation.exact import exact_evaluation_supported

    jobs: list[Job] = []
    for spec in specs:
        exact = exact_evaluation_supported(spec.id, spec.kwargs)
        # Tabular envs evaluate the zero-shot model on its own (for its goal probability);
        # elsewhere the first trained LLM run's "before" point is the zero-shot score.
        shared = (
            "llm-zero-shot" in agents
            and "llm-choice" in agents
            and not tabular_supported(spec.id, spec.kwargs)
        )
        zero_seeds = args.seeds[:1] if exact else args.seeds
        for agent in agents:
            if agent == "llm-zero-shot" and shared:
                continue
            seeds = args.seeds[:1] if agent in ("random", "llm-zero-shot") and exact else args.seeds
            if agent in ("ppo", "dqn"):
                jobs.extend(Job(spec, agent, args.budget, s) for s in seeds)
                if args.classic_budget:
                    usual = seeds[: args.classic_seeds] if args.classic_seeds else seeds
                    jobs.extend(Job(spec, agent, args.classic_budget, s) for s in usual)
                continue
            elif agent in ("llm-choice", "llm-generate"):
                budgets = [args.budget]
            else:
                budgets = [0]
            jobs.extend(
                Job(spec, agent, b, s, shared and agent == "llm-choice" and s in zero_seeds)
                for b in budgets
                for s in seeds
            )
    return jobs


def execute(job: Job, refs: References, args: argparse.Namespace) -> list[Row]:
    if job.agent == "random":
        return [run_random(job.spec, job.seed, refs)]
    if job.agent in ("ppo", "dqn"):
        return [run_classic(job.spec, job.agent, job.budget, job.seed, args)]  # type: ignore[arg-type]
    if job.agent == "llm-zero-shot":
        return [run_llm_zero_shot(job.spec, job.seed, args)]
    mode = job.agent.removeprefix("llm-")
    return run_llm_trained(job.spec, mode, job.budget, job.seed, args, job.zero_shot)


# --- outputs -----------------------------------------------------------------------------


def read_rows(path: Path) -> list[Row]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return [Row.from_csv(r) for r in csv.DictReader(f)]


def write_rows(path: Path, rows: Sequence[Row]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".csv.{os.getpid()}.tmp")  # invocations may write side by side
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(CSV_FIELDS))
        writer.writeheader()
        writer.writerows(r.to_csv() for r in rows)
    tmp.replace(path)


@dataclass
class Group:
    """The seeds of one agent at one budget on one env, summarised."""

    agent: str
    budget: int
    rows: list[Row]

    @property
    def values(self) -> list[float]:
        return [r.value for r in self.rows]

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    @property
    def std(self) -> float:
        n = len(self.values)
        if n < 2:
            return 0.0
        return math.sqrt(sum((v - self.mean) ** 2 for v in self.values) / (n - 1))

    @property
    def success(self) -> float | None:
        known = [r.success for r in self.rows if r.success is not None]
        return sum(known) / len(known) if known else None

    def gap_closed(self, refs: Mapping[str, float]) -> float | None:
        if "optimum" not in refs or "random" not in refs or refs["optimum"] == refs["random"]:
            return None
        return 100.0 * (self.mean - refs["random"]) / (refs["optimum"] - refs["random"])


def _groups(rows: Sequence[Row]) -> list[Group]:
    order = {a: i for i, a in enumerate(AGENTS)}
    groups: dict[tuple[str, int], Group] = {}
    for row in rows:
        groups.setdefault((row.agent, row.budget), Group(row.agent, row.budget, [])).rows.append(
            row
        )
    return sorted(groups.values(), key=lambda g: (order.get(g.agent, 99), g.budget))


def _references(rows: Sequence[Row], refs: References | None) -> dict[str, float]:
    out: dict[str, float] = {}
    randoms = [r.value for r in rows if r.agent == "random"]
    if refs is not None:
        out["random"] = refs.random.value
    elif randoms:
        out["random"] = sum(randoms) / len(randoms)
    if refs is not None and refs.optimum is not None:
        out["optimum"] = refs.optimum
    return out


def _fmt(value: float) -> str:
    return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"


def _to_target(group: Group, target: float | None) -> str:
    """Mean env steps and training seconds until the curve first reached ``target``, over the
    seeds that did, and how many did."""
    if target is None or group.agent in ("random", "llm-zero-shot"):
        return "—"
    reached = [r for r in (time_to_target(row.curve, target) for row in group.rows) if r]
    if not reached:
        return f"not reached (0/{len(group.rows)})"
    steps = sum(r.env_steps for r in reached) / len(reached)
    walls = [r.wall_s for r in reached if not math.isnan(r.wall_s)]
    wall = f", {sum(walls) / len(walls):.0f} s" if walls else ""
    return f"{steps:.0f} steps{wall} ({len(reached)}/{len(group.rows)})"


def env_table(
    label: str, rows: Sequence[Row], refs: Mapping[str, float], target_gap: float = 0.9
) -> list[str]:
    """The markdown section of one env, warnings included. The time to target is measured to
    ``target_gap`` of the random-to-optimum gap (where both are known)."""
    exact = all(r.eval_kind == "exact" for r in rows)
    lines = [f"### {label}", ""]
    ref_text = ", ".join(f"{k} {_fmt(v)}" for k, v in refs.items())
    target = (
        gap_target(refs["random"], refs["optimum"], target_gap)
        if "random" in refs and "optimum" in refs and refs["optimum"] != refs["random"]
        else None
    )
    target_text = (
        f" Target: {_fmt(target)} ({100 * target_gap:.0f}% of the gap)."
        if target is not None
        else ""
    )
    lines.append(
        f"References ({'exact' if exact else 'random by Monte-Carlo'}): {ref_text or 'none'}."
        + target_text
    )
    lines += [
        "",
        "| agent | budget | env steps | seeds | return (mean ± std) | % gap closed | reaches goal | to target | eval | train wall s | device |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    warnings: list[str] = []
    for group in _groups(rows):
        gap = group.gap_closed(refs)
        success = group.success
        success_text = "—" if success is None else f"{100 * success:.1f}%"
        if success is not None and success < 0.01 and group.agent != "random":
            success_text += " ⚠"
            if gap is not None and gap > 10:
                warnings.append(
                    f"**{AGENT_LABELS.get(group.agent, group.agent)}"
                    f"{f' @ {group.budget}' if group.budget else ''}** closes {gap:.0f}% of the "
                    f"gap but reaches the goal in {100 * success:.1f}% of episodes: it only avoids "
                    "random play's penalties (a return this high without the goal is an artifact "
                    "of the gap metric, not a solution)."
                )
        kinds = sorted({r.eval_kind for r in group.rows})
        episodes = max(r.eval_episodes for r in group.rows)
        kind = "/".join("exact" if k == "exact" else f"MC {episodes} ep" for k in kinds)
        sem = max(r.sem for r in group.rows)
        spread = f" ± {_fmt(group.std)}" if len(group.rows) > 1 else ""
        ci = f" (95% CI ± {_fmt(1.96 * sem)})" if sem > 0 else ""
        steps = sorted({r.env_steps for r in group.rows})
        lines.append(
            f"| {AGENT_LABELS.get(group.agent, group.agent)} | {group.budget or '—'} | "
            f"{'/'.join(map(str, steps))} | {len(group.rows)} | {_fmt(group.mean)}{spread}{ci} | "
            f"{'—' if gap is None else f'{gap:.0f}%'} | {success_text} | "
            f"{_to_target(group, target)} | {kind} | "
            f"{sum(r.wall_s for r in group.rows) / len(group.rows):.1f} | "
            f"{', '.join(sorted({r.device for r in group.rows}))} |"
        )
    if warnings:
        lines += [""] + [f"- ⚠ {w}" for w in warnings]
    lines.append("")
    return lines


def write_summary(
    path: Path,
    rows: Sequence[Row],
    refs: Mapping[tuple[str, str], References],
    command: str,
    target_gap: float = 0.9,
) -> None:
    """``summary.md``: one table per env, in the order the envs first appear in ``rows``."""
    envs: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        envs.setdefault((row.env, row.env_kwargs), []).append(row)
    lines = [
        "# gym-llm bench: LLM agents vs classic RL",
        "",
        f"Command (last invocation): `{command}`",
        "",
        "Return = expected episode return of the greedy policy: exact (dynamic programming over "
        "the env's dynamics, one query per state) or Monte-Carlo (95% CI from the worst seed's "
        "standard error). ± is the std over seeds. % gap closed = (return − random) / "
        "(optimum − random). Reaches goal = probability of ending the episode on the env's best "
        "terminal reward (exact envs only). To target = env steps and training seconds until "
        "the learning curve first reached the target (mean over the seeds that did; how many "
        "did). Wall time is training only (no evaluation); random "
        "and the zero-shot LLM are exact and deterministic, so they run once.",
        "",
    ]
    for (env_id, kwargs), env_rows in envs.items():
        spec = EnvSpec(env_id, json.loads(kwargs))
        env_refs = _references(env_rows, refs.get((env_id, kwargs)))
        lines += env_table(spec.label, env_rows, env_refs, target_gap)
    path.write_text("\n".join(lines))


def plot_env(path: Path, label: str, rows: Sequence[Row], refs: Mapping[str, float]) -> Path:
    """Return against env steps (symlog axis: 128 and 10,000 steps on one plot), mean over
    seeds with a ±std band; random, optimum and the zero-shot LLM as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    for group in _groups(rows):
        name = AGENT_LABELS.get(group.agent, group.agent)
        if group.agent in ("random", "llm-zero-shot"):
            if group.agent == "llm-zero-shot":
                ax.axhline(
                    group.mean,
                    color="tab:purple",
                    linestyle="-.",
                    label=f"{name} ({group.mean:.3g})",
                )
            continue
        by_step: dict[int, list[float]] = {}
        for row in group.rows:
            for step, value, _ in row.curve:
                by_step.setdefault(step, []).append(value)
        steps = sorted(by_step)
        means = [sum(by_step[s]) / len(by_step[s]) for s in steps]
        stds = [
            math.sqrt(sum((v - m) ** 2 for v in by_step[s]) / max(1, len(by_step[s]) - 1))
            for s, m in zip(steps, means, strict=True)
        ]
        (line,) = ax.plot(steps, means, marker="o", markersize=3, label=f"{name} @ {group.budget}")
        ax.fill_between(
            steps,
            [m - s for m, s in zip(means, stds, strict=True)],
            [m + s for m, s in zip(means, stds, strict=True)],
            alpha=0.15,
            color=line.get_color(),
        )
    for (name, value), style in zip(refs.items(), ("--", ":"), strict=False):
        ax.axhline(value, color="gray", linestyle=style, label=f"{name} ({value:.3g})")
    ax.set_xscale("symlog", linthresh=100)
    ax.set_xlim(left=0)
    ax.set_xlabel("env steps (symlog)")
    ax.set_ylabel("expected return of the greedy policy")
    ax.set_title(label)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="x-small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_outputs(
    out: Path,
    rows: Sequence[Row],
    refs: Mapping[tuple[str, str], References],
    command: str,
    target_gap: float = 0.9,
) -> None:
    write_rows(out / "results.csv", rows)
    write_summary(out / "summary.md", rows, refs, command, target_gap)
    envs: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        envs.setdefault((row.env, row.env_kwargs), []).append(row)
    for (env_id, kwargs), env_rows in envs.items():
        spec = EnvSpec(env_id, json.loads(kwargs))
        plot_env(
            out / f"{spec.slug}.png",
            spec.label,
            env_rows,
            _references(env_rows, refs.get((env_id, kwargs))),
        )


# --- CLI ---------------------------------------------------------------------------------


def build_parser(
    prog: str = "gym-llm bench", results_root: Path = Path("runs")
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(__doc__ or "").split("\n\n")[0],
        epilog="Example: gym-llm bench --envs FrozenLake-v1:is_slippery=False CartPole-v1 "
        "--agents random,ppo,dqn --budget 128 --classic-budget 10000 --seeds 0 1 2",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    suite = ", ".join(s.label for s in SUITE)
    add(
        "--envs",
        nargs="+",
        default=["suite"],
        metavar="ENV",
        help=f"'suite' ({suite}; registered ones) and/or ID or ID:key=value,... items",
    )
    add(
        "--agents",
        default=",".join(DEFAULT_AGENTS),
        help=f"comma-separated agents among {', '.join(AGENTS)}",
    )
    add("--model", default=DEFAULT_MODEL, help="LLM: registry name or local path")
    add(
        "--budget",
        type=int,
        default=128,
        help="env steps for the trained LLM and for PPO/DQN at the LLM's budget",
    )
    add(
        "--classic-budget",
        type=int,
        default=10_000,
        help="PPO/DQN also at this usual budget (0 skips it)",
    )
    add("--seeds", nargs="+", type=int, default=[0, 1, 2], help="seeds (one run per seed)")
    add(
        "--classic-seeds",
        type=int,
        default=0,
        help="run the --classic-budget runs on only the first N seeds (0 = all)",
    )
    add(
        "--eval-episodes",
        type=int,
        default=100,
        help="Monte-Carlo episodes per score where no exact evaluation exists",
    )
    add(
        "--random-episodes",
        type=int,
        default=1000,
        help="Monte-Carlo episodes for the random reference where not exact",
    )
    add("--curve-points", type=int, default=4, help="PPO/DQN scores during training")
    add("--llm-eval-points", type=int, default=1, help="LLM scores during training")
    add("--llm-n-envs", type=int, default=8, help="LLM PPO: parallel envs")
    add("--llm-n-steps", type=int, default=8, help="LLM PPO: steps per env per rollout")
    add("--llm-batch-size", type=int, default=32, help="LLM PPO: turns per minibatch")
    add(
        "--llm-micro-batch-size",
        type=int,
        default=None,
        help="LLM PPO: turns per forward/backward pass (default: as many as fit PPO's memory "
        "budget)",
    )
    add("--llm-epochs", type=int, default=2, help="LLM PPO: epochs per rollout")
    add("--llm-lr", type=float, default=5e-4, help="LLM PPO: learning rate")
    add("--llm-ent-coef", type=float, default=0.01, help="LLM PPO: entropy bonus")
    add("--llm-lora-r", type=int, default=16, help="LLM PPO: LoRA rank (0 = full fine-tuning)")
    add(
        "--llm-estimator",
        choices=list(ESTIMATORS),
        default="gae",
        help="LLM PPO: advantage estimator (gigpo reached FrozenLake's goal on 4 of 10 seeds "
        "within 2,048 env steps; benchmarks/RESULTS.md)",
    )
    add("--max-new-tokens", type=int, default=None, help="LLM reply budget in generate mode")
    add("--device", default="auto", help="LLM device: auto, cpu, cuda or mps (SB3 uses CPU)")
    add("--name", default="bench", help="results go to <root>/compare-<name> unless --out")
    add(
        "--out",
        type=Path,
        default=None,
        help=f"results folder; None means {results_root}/compare-<name>",
    )
    add(
        "--run-dir",
        type=Path,
        default=None,
        help="keep LLM runs (TensorBoard logs, agents) here; default: a temp dir, deleted",
    )
    add(
        "--target-gap",
        type=float,
        default=0.9,
        help="time to target: env steps and seconds until a curve first closes this fraction "
        "of the random-to-optimum gap",
    )
    add("--fresh", action="store_true", help="drop earlier rows in results.csv (default: merge)")
    add("--no-progress", action="store_true", help="no progress bar (for logs)")
    parser.set_defaults(results_root=results_root)
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    results_root: Path | None = None,
    prog: str = "gym-llm bench",
) -> int:
    """Run the comparison; returns the exit status (0 on success). ``results_root`` is where
    ``compare-<name>/`` goes without ``--out`` (``runs/``; the benchmark uses its results/)."""
    parser = build_parser(prog, results_root or Path("runs"))
    args = parser.parse_args(argv)
    try:
        specs = parse_envs(args.envs)
        agents = parse_agents(args.agents)
    except ValueError as exc:
        parser.error(str(exc))
    if args.budget < 2 or args.classic_budget < 0:
        parser.error("--budget must be >= 2 and --classic-budget >= 0.")
    if not args.seeds:
        parser.error("--seeds needs at least one seed.")
    if not 0 < args.target_gap <= 1:
        parser.error(f"--target-gap must be in (0, 1], got {args.target_gap}.")
    if not specs:
        parser.error("no env to run: --envs suite found none registered; name envs explicitly.")
    out: Path = args.out or Path(args.results_root) / f"compare-{args.name}"
    command = " ".join(["gym-llm bench", *(argv if argv is not None else sys.argv[1:])])
    jobs = plan(specs, agents, args)
    planned = {(j.spec.id, j.spec.kwargs_json, j.agent) for j in jobs}
    planned |= {(j.spec.id, j.spec.kwargs_json, "llm-zero-shot") for j in jobs if j.zero_shot}
    mine: list[Row] = []
    refs: dict[tuple[str, str], References] = {}

    def merged() -> list[Row]:
        """Rows of other invocations (re-read each time: one may be running beside this one),
        minus those this invocation re-runs, plus this invocation's rows."""
        if args.fresh:
            return list(mine)
        others = read_rows(out / "results.csv")
        rows = [r for r in others if (r.env, r.env_kwargs, r.agent) not in planned] + mine
        for env_id, kwargs in {(r.env, r.env_kwargs) for r in rows} - refs.keys():
            spec = EnvSpec(env_id, json.loads(kwargs))
            refs[(env_id, kwargs)] = env_references(spec, args.random_episodes)
        return rows

    from tqdm.auto import tqdm

    bar = tqdm(total=len(jobs), desc="bench", unit="run", disable=args.no_progress)
    for job in jobs:
        key = (job.spec.id, job.spec.kwargs_json)
        if key not in refs:
            refs[key] = env_references(job.spec, args.random_episodes)
        bar.set_postfix_str(job.label)
        start = time.perf_counter()
        new = execute(job, refs[key], args)
        mine.extend(new)
        row = new[0]
        # partial results survive an interruption
        write_outputs(out, merged(), refs, command, args.target_gap)
        bar.update(1)
        bar.write(
            f"{job.label}: {row.value:+.4f} ({row.eval_kind}) after {row.env_steps} env steps "
            f"[{time.perf_counter() - start:.0f} s]"
        )
    bar.close()
    print(f"Wrote {out / 'results.csv'}, {out / 'summary.md'} and a PNG per env.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
