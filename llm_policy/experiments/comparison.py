"""The comparison suite behind ``gym-llm bench``: which runs to make (:func:`plan`), making one
(:func:`execute`), and the row each run leaves in ``results.csv``. Takes a :class:`ComparisonConfig`;
the command line only builds one."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym

from gym_llm.evaluation.baselines import random_score, tabular_supported
from gym_llm.evaluation.scores import Score
from gym_llm.experiments.specs import EnvSpec
from gym_llm.policy.models import DEFAULT_MODEL

#: Every agent ``--agents`` can select.
AGENTS: tuple[str, ...] = (
    "random", "ppo", "dqn", "llm-zero-shot", "llm-choice", "llm-generate", "llm-dqn",
)  # fmt: skip


DEFAULT_AGENTS: tuple[str, ...] = ("random", "ppo", "dqn", "llm-zero-shot", "llm-choice")


AGENT_LABELS: dict[str, str] = {
    "random": "uniform random",
    "ppo": "SB3 PPO (MlpPolicy)",
    "dqn": "SB3 DQN (MlpPolicy)",
    "llm-zero-shot": "LLM zero-shot",
    "llm-choice": "LLM + gym_llm PPO (choice)",
    "llm-generate": "LLM + gym_llm PPO (generate)",
    "llm-dqn": "LLM features + gym_llm DQN",
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


#: The suite's LLM runs before ``ComparisonConfig.llm`` changes them: rollouts of 8 steps of 8 envs,
#: two epochs, one curve point, sized for budgets of a few hundred env steps (each capped by the
#: budget).
COMPARISON_LLM: dict[str, Any] = {
    "n_envs": 8,
    "eval_points": 1,
    "ppo.n_steps": 8,
    "ppo.batch_size": 32,
    "ppo.n_epochs": 2,
    "ppo.learning_rate": 5e-4,
    "ppo.ent_coef": 0.01,
}


@dataclass(frozen=True)
class ComparisonConfig:
    """Everything a suite run needs besides its envs and agents (``gym-llm bench --help``)."""

    seeds: Sequence[int] = (0, 1, 2)
    budget: int = 128
    classic_budget: int = 10_000
    classic_seeds: int = 0
    model: str = DEFAULT_MODEL
    device: str = "auto"
    curve_points: int = 4
    eval_episodes: int = 100
    random_episodes: int = 1000
    #: The LLM runs' settings, as dotted names of a run's config
    #: (:class:`~gym_llm.experiments.train_config.TrainConfig`) over :data:`COMPARISON_LLM`;
    #: ``policy.action_head`` and ``policy.choice_calibration`` apply to choice-mode runs.
    llm: Mapping[str, Any] = field(default_factory=dict)
    #: Where LLM runs keep TensorBoard logs and agents (``None``: a temporary directory).
    run_dir: str | os.PathLike[str] | None = None
    target_gap: float = 0.9

    @classmethod
    def from_namespace(cls, namespace: Any) -> ComparisonConfig:
        """The fields of a parsed command line (``argparse.Namespace``) that are settings."""
        return cls(**{name: getattr(namespace, name) for name in cls.__dataclass_fields__})


def parse_agents(text: str) -> list[str]:
    agents = [a.strip() for a in text.split(",") if a.strip()]
    unknown = [a for a in agents if a not in AGENTS]
    if unknown or not agents:
        raise ValueError(
            f"Unknown agents {unknown or text!r}; choose a comma-separated list of {', '.join(AGENTS)}."
        )
    return agents


# --- references ---------------------------------------------------------------


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


# --- one run ---------------------------------------------------------------------------------


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


def plan(specs: Sequence[EnvSpec], agents: Sequence[str], config: ComparisonConfig) -> list[Job]:
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
        zero_seeds = config.seeds[:1] if exact else config.seeds
        for agent in agents:
            if agent == "llm-zero-shot" and shared:
                continue
            seeds = (
                config.seeds[:1] if agent in ("random", "llm-zero-shot") and exact else config.seeds
            )
            if agent in ("ppo", "dqn"):
                jobs.extend(Job(spec, agent, config.budget, s) for s in seeds)
                if config.classic_budget:
                    usual = seeds[: config.classic_seeds] if config.classic_seeds else seeds
                    jobs.extend(Job(spec, agent, config.classic_budget, s) for s in usual)
                continue
            elif agent in ("llm-choice", "llm-generate", "llm-dqn"):
                budgets = [config.budget]
            else:
                budgets = [0]
            jobs.extend(
                Job(spec, agent, b, s, shared and agent == "llm-choice" and s in zero_seeds)
                for b in budgets
                for s in seeds
            )
    return jobs
