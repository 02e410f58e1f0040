"""Learning-curve benchmark: train an LLM agent with gym_llm's PPO and measure how far it gets.

    python -m benchmarks.recipes.learn --env Blackjack-v1 --env-kwargs sab=False \\
        --policy.model smollm2-135m --timesteps 4096 --policy.action-mode choice

Its settings are ``gym-llm train``'s, the same flags (``--ppo.n-epochs 2``); without ``--env``,
Blackjack with ``sab=False``.

Evaluates the greedy policy before training, at evenly spaced points during training and after,
on a separate evaluation env, and writes under ``--out`` (default ``benchmarks/results/``):

* ``learn-<env>-<mode>-<model>.json``: config, device, versions, every curve point (mean, std,
  standard error, invalid-action rate), the random baseline and the known optimum, and the time
  to target (env steps and training seconds until the curve first reached ``--target``; by
  default 90% of the random-to-optimum gap where both are known);
* ``learn-<env>-<mode>-<model>.png``: the curve with 95% bands, random and optimum as lines.

The run directory (``--run-dir``) keeps the TensorBoard logs and the saved agent.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.cli_args import new_parser
from gym_llm.cli.arguments import (
    _HelpFormatter,
    add_dataclass_flags,
    dashed_flags,
    given_settings,
)
from gym_llm.cli.demo import quiet_progress_bar_warning
from gym_llm.evaluation.curve import CurvePoint
from gym_llm.evaluation.monte_carlo import reference_returns
from gym_llm.experiments.curves import gap_target, time_to_target
from gym_llm.experiments.run import TrainConfig, plot_result, run

RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.recipes.learn", __doc__, _HelpFormatter)
    add = parser.add_argument
    add("--out", type=Path, default=RESULTS_DIR, help="where the JSON and PNG go")
    add("--run-dir", type=Path, default=None, help="logs + agent (default: runs/<name>)")
    add(
        "--target",
        type=float,
        default=None,
        help="return whose first crossing is timed (default: 90%% of the random-to-optimum gap)",
    )
    add("--no-progress", action="store_true", help="no progress bar (for logs)")
    parser.set_defaults(config_fields=add_dataclass_flags(parser, TrainConfig))
    return parser


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """``gym-llm train``'s settings as given; Blackjack with ``sab=False`` without ``--env``."""
    given = given_settings(args, args.config_fields)
    base = TrainConfig() if "env" in given else TrainConfig(env_kwargs={"sab": False})
    return base.with_settings(given)


def result_name(config: TrainConfig) -> str:
    model = str(config.policy.model)
    model = Path(model).name if "/" in model else model
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"learn-{config.env}-{config.mode}-{model}")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(dashed_flags(list(sys.argv[1:] if argv is None else argv)))
    quiet_progress_bar_warning()
    config = config_from_args(args)
    name = result_name(config)
    run_dir = args.run_dir or Path("runs") / name

    def report(point: CurvePoint) -> None:
        print(f"[{point.timesteps:>7} steps, {point.wall_s:6.0f} s] {point.describe()}", flush=True)

    references = reference_returns(config.env, config.env_kwargs)
    random, optimum = references.get("random"), references.get("optimum")
    print(f"random policy: {random:+.4f}; optimum: {optimum}")
    result = run(config, run_dir, progress_bar=not args.no_progress, on_point=report)
    data = result.as_dict()
    data["random"] = random
    data["optimum"] = optimum
    target = args.target
    if target is None and random is not None and optimum is not None and optimum != random:
        target = gap_target(random, optimum)
    reached = (
        time_to_target([(p.timesteps, p.value, p.wall_s) for p in result.curve], target)
        if target is not None
        else None
    )
    data["target"] = target
    data["time_to_target"] = (
        None if reached is None else {"env_steps": reached.env_steps, "wall_s": reached.wall_s}
    )
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / f"{name}.json"
    json_path.write_text(json.dumps(data, indent=2))
    png_path = plot_result(result, args.out / f"{name}.png", references)
    print(
        f"\nbefore: {result.before.describe()}\nafter:  {result.after.describe()}\n"
        f"{result.timesteps} env steps in {result.train_wall_s:.0f} s "
        f"({data['env_steps_per_s']:.2f} steps/s) on {result.device}\n"
        f"time to target {target}: "
        + (
            "not reached"
            if reached is None
            else f"{reached.env_steps} env steps, {reached.wall_s:.0f} s of training"
        )
        + "\n"
        f"wrote {json_path} and {png_path}; logs and agent in {run_dir}"
    )
    return data


if __name__ == "__main__":
    main(sys.argv[1:])
