"""The front page's picture: one held-out task, gym_llm's learners against SB3 and the optimum.

Reads what the sweeps wrote (nothing is run): ``gym_llm.DQN`` and ``gym_llm.PPO`` with the
library's defaults (``results/dqn-noisy/rate/report/family-<task>.jsonl``,
``results/ppo-noisy/q/floor/behaviour/held-out-walk-grid/<task>-s<seed>-behaviour.jsonl``,
the floor on every move drawing moves in the rollout), SB3 PPO and DQN
at 10k env steps (``results/family-sb3/results.csv``), and the task's exact random and optimal
returns. Each learner is the mean of its seeds with a band of ± one standard deviation.

    python -m benchmarks.recipes.headline_plot --task walk-p3-s101 --out benchmarks/results/headline.png
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from benchmarks.recipes.family_sweep import load_rows

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _mean_curve(
    curves: list[list[tuple[float, float]]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and std over seeds at the env steps every seed has."""
    steps = sorted(set.intersection(*(set(s for s, _ in c) for c in curves)))
    values = np.array([[dict(c)[s] for s in steps] for c in curves])
    return np.array(steps), values.mean(0), values.std(0)


def gym_llm_dqn(task: str) -> list[list[tuple[float, float]]]:
    by_seed: dict[int, list[tuple[float, float]]] = defaultdict(list)
    path = RESULTS / "dqn-noisy" / "rate" / "report" / f"family-{task}.jsonl"
    for line in path.read_text().splitlines():
        row = json.loads(line)
        by_seed[row["seed"]].append((row["env_steps"], row["value"]))
    return [sorted(c) for c in by_seed.values()]


def gym_llm_ppo(task: str) -> list[list[tuple[float, float]]]:
    runs = RESULTS / "ppo-noisy" / "q" / "floor" / "behaviour" / "held-out-walk-grid"
    rows = load_rows(*sorted(runs.glob(f"{task}-s*-behaviour.jsonl")))
    return [[(p["env_steps"], p["value"]) for p in row["curve"]] for row in rows]


def sb3(task: str, agent: str, budget: int = 10000) -> list[list[tuple[float, float]]]:
    curves = []
    with (RESULTS / "family-sb3" / "results.csv").open() as f:
        for row in csv.DictReader(f):
            if json.loads(row["env_kwargs"]).get("task") != task:
                continue
            if row["agent"] == agent and int(row["budget"]) == budget:
                curves.append([(float(s), float(v)) for s, v, *_ in json.loads(row["curve"])])
    return curves


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="walk-p3-s101", help="a held-out task of the family")
    parser.add_argument("--out", default=str(RESULTS / "headline.png"), help="the PNG to write")
    args = parser.parse_args(argv)

    import gymnasium as gym
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import gym_llm  # noqa: F401  (registers gym_llm/Family-v0)

    env = gym.make("gym_llm/Family-v0", task=args.task).unwrapped
    fig, ax = plt.subplots(figsize=(8, 4.2))
    learners = [
        ("gym_llm DQN (its defaults), SmolLM2-135M", gym_llm_dqn(args.task), "tab:blue"),
        ("gym_llm PPO (its defaults), SmolLM2-135M", gym_llm_ppo(args.task), "tab:purple"),
        ("SB3 DQN (MlpPolicy on the state)", sb3(args.task, "dqn"), "tab:red"),
        ("SB3 PPO (MlpPolicy on the state)", sb3(args.task, "ppo"), "tab:orange"),
    ]
    for label, curves, colour in learners:
        if not curves:
            continue
        steps, mean, std = _mean_curve(curves)
        ax.plot(steps, mean, marker=".", color=colour, label=f"{label} ({len(curves)} seeds)")
        ax.fill_between(steps, mean - std, mean + std, color=colour, alpha=0.15)
    ax.axhline(env.optimal_return, color="grey", linestyle=":", label="optimum (exact)")
    ax.axhline(env.random_return, color="grey", linestyle="--", label="random (exact)")
    ax.set_xlim(0, 10000)
    ax.set_xlabel("env steps")
    ax.set_ylabel("exact return of the greedy policy")
    ax.set_title(f"A held-out task never tuned on: gym_llm/Family-v0 {args.task}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
