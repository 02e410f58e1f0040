"""SFT warm start then PPO, against PPO alone on the same PPO budget, evaluated exactly.

    python -m benchmarks.recipes.sft_vs_ppo --policy.model smollm2-135m --timesteps 128 --sft-epochs 1

Its settings are ``gym-llm train``'s flags (``--ppo.n-epochs 2``) over its own defaults.

Two runs of :func:`gym_llm.experiments.run.run` from the same base model, seed and PPO settings:

* ``ppo``: PPO for ``--timesteps`` env steps;
* ``sft+ppo``: first supervised fine-tuning (:func:`gym_llm.rl.sft.warm_start`) on demonstrations of
  the env's reference policy (:func:`gym_llm.experiments.demos.make_demos`, one per state with the default
  ``--balanced``; or ``--demos FILE``), then the same PPO.

Each is evaluated exactly (:mod:`gym_llm.evaluation.exact`: one greedy question per state, expected return by
dynamic programming) before, after SFT and after PPO. Writes ``sft-<env>-<model>.json`` (both
runs, the summary, demo stats, wall times, device, versions) and ``.png`` to ``--out`` (default
``benchmarks/results/``); TensorBoard logs and agents go to ``--run-dir``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.cli_args import new_parser
from gym_llm.cli.arguments import (
    _HelpFormatter,
    add_dataclass_flags,
    dashed_flags,
    given_settings,
)
from gym_llm.cli.demo import quiet_progress_bar_warning
from gym_llm.evaluation.curve import CurvePoint
from gym_llm.evaluation.exact import exact_evaluation_supported
from gym_llm.evaluation.monte_carlo import reference_returns
from gym_llm.experiments.demos import make_demos
from gym_llm.experiments.plots import Series, plot_curves
from gym_llm.experiments.run import TrainConfig, TrainResult, run

RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"


#: The comparison's settings before the flags: a short PPO budget with one epoch, and SFT at
#: 1e-3 (a few demonstration steps must move the model).
BASE = TrainConfig(
    env_kwargs={"sab": False}, timesteps=128, eval_episodes=0, eval_points=0,
    sft_learning_rate=1e-3,
).with_settings({"ppo.n_steps": 16, "ppo.n_epochs": 1})  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.recipes.sft_vs_ppo", __doc__, _HelpFormatter)
    add = parser.add_argument
    add("--demos", type=Path, default=None, help="demonstrations JSONL (default: generated)")
    add(
        "--episode-demos",
        type=int,
        default=0,
        metavar="EPISODES",
        help="generate demos from this many reference episodes instead of one per state",
    )
    add("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    add("--out", type=Path, default=RESULTS_DIR, help="where the JSON and PNG go")
    add("--run-dir", type=Path, default=None, help="logs + agents (default: runs/<name>)")
    add("--no-progress", action="store_true", help="no progress bars (for logs)")
    parser.set_defaults(config_fields=add_dataclass_flags(parser, TrainConfig, BASE))
    return parser


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The runs' settings (``gym-llm train``'s flags over :data:`BASE`); another ``--env``
    starts from no env kwargs."""
    given = given_settings(args, args.config_fields)
    base = BASE.with_settings({"env_kwargs": {}}) if "env" in given else BASE
    return base.with_settings(given)


def result_name(config: TrainConfig) -> str:
    model = str(config.policy.model)
    model = Path(model).name if "/" in model else model
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"sft-{config.env}-{model}")


def plot(results: dict[str, TrainResult], references: dict[str, float], path: Path) -> Path:
    """Exact return against PPO env steps; the SFT jump is the vertical segment at step 0."""
    series = []
    for label, result in results.items():
        points = [result.before, *([result.after_sft] if result.after_sft else []), result.after]
        series.append(Series(label, [p.timesteps for p in points], [p.value for p in points], None))
    first = next(iter(results.values()))
    return plot_curves(
        series,
        path,
        title=f"{first.config.env}: SFT warm start vs PPO alone - {first.device}",
        references=references,
        ylabel="exact expected return (greedy)",
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(dashed_flags(list(sys.argv[1:] if argv is None else argv)))
    quiet_progress_bar_warning()
    if args.threads:
        torch.set_num_threads(args.threads)
    config = config_from_args(args)
    env, env_kwargs = config.env, config.env_kwargs
    if not exact_evaluation_supported(env, env_kwargs):
        raise SystemExit(
            f"{env} {env_kwargs} has no exact evaluation; see gym_llm.evaluation.exact."
        )
    name = result_name(config)
    run_dir = args.run_dir or Path("runs") / name
    run_dir.mkdir(parents=True, exist_ok=True)
    demos = args.demos
    balanced = args.episode_demos == 0
    if demos is None:
        demos = run_dir / ("demos-balanced.jsonl" if balanced else "demos-episodes.jsonl")
        demo_lines = make_demos(
            env,
            max(1, args.episode_demos),
            demos,
            seed=config.seed,
            env_kwargs=env_kwargs,
            balanced=balanced,
        )
    else:  # a given file: count its demonstrations
        demo_lines = sum(1 for line in Path(demos).read_text().splitlines() if line.strip())
    print(f"demonstrations: {demos} ({demo_lines} lines)", flush=True)

    def report(label: str) -> Any:
        def on_point(point: CurvePoint) -> None:
            print(
                f"[{label}: {point.timesteps:>5} steps, {point.wall_s:6.0f} s] {point.describe()}"
            )

        return on_point

    results: dict[str, TrainResult] = {}
    walls: dict[str, float] = {}
    for label, sft in (("PPO alone", None), ("SFT then PPO", str(demos))):
        start = time.perf_counter()
        results[label] = run(
            config.with_settings({"sft_demos": sft}),
            run_dir / ("sft-ppo" if sft else "ppo"),
            progress_bar=not args.no_progress,
            on_point=report(label),
        )
        walls[label] = time.perf_counter() - start
    ppo, sft_ppo = results["PPO alone"], results["SFT then PPO"]
    assert sft_ppo.after_sft is not None and sft_ppo.sft is not None
    references = reference_returns(env, env_kwargs, measure_random=False)
    summary = {
        "before": ppo.before.value,
        "ppo_after": ppo.after.value,
        "sft_after": sft_ppo.after_sft.value,
        "sft_ppo_after": sft_ppo.after.value,
        "ppo_timesteps": ppo.timesteps,
        "sft_wall_s": sft_ppo.sft["sft/wall_s"],
        "ppo_train_wall_s": ppo.train_wall_s,
        "sft_ppo_train_wall_s": sft_ppo.train_wall_s,
        **{f"{k}_return": v for k, v in references.items()},
    }
    data: dict[str, Any] = {
        "summary": summary,
        "demos": {"path": str(demos), "lines": demo_lines, "balanced": balanced},
        "device": ppo.device,
        "torch_threads": torch.get_num_threads(),
        "wall_s": walls,
        "runs": {label: result.as_dict() for label, result in results.items()},
        "command": "python -m benchmarks.recipes.sft_vs_ppo " + " ".join(argv or sys.argv[1:]),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / f"{name}.json"
    json_path.write_text(json.dumps(data, indent=2))
    png_path = plot(results, references, args.out / f"{name}.png")
    print(
        f"\nbefore: {summary['before']:+.4f}; PPO alone after {ppo.timesteps} steps: "
        f"{summary['ppo_after']:+.4f}\nafter SFT ({sft_ppo.sft['sft/steps']:.0f} steps, "
        f"{summary['sft_wall_s']:.0f} s): {summary['sft_after']:+.4f}; then PPO: "
        f"{summary['sft_ppo_after']:+.4f}\non {ppo.device}; wrote {json_path} and {png_path}"
    )
    return data


if __name__ == "__main__":
    main(sys.argv[1:])
