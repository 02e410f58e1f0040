"""Does PPO learn a rule over its input? SmolLM2 on ``gym_llm/HighLow-v0``, exact success per point.

    python -m benchmarks.recipes.rule_learning --steps 1024 --every 256 --set ppo.learning_rate=1e-3 \\
        policy.choice_calibration=true --json out.json

HighLow's right word depends on a number in the observation; the untrained model answers the same
word everywhere (success 0.5). Every ``--every`` env steps the greedy policy answers each number
once (exact success) and the rollout's diagnostics are read: the mean per-state action entropy,
the mutual information between observation and action (0 = the policy ignores its input) and the
share of states whose greedy answer changed. PPO is built as a user builds it: the library's
defaults plus ``--n-steps``/``--batch-size`` and any ``--set policy.NAME=VALUE ppo.NAME=VALUE``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stable_baselines3.common.logger import Logger

from benchmarks.cli_args import add_settings, keeping, new_parser, write_json
from gym_llm import PPO, make_text_env
from gym_llm.cli.demo import quiet_progress_bar_warning
from gym_llm.envs.high_low import HighLowEnv, exact_success
from gym_llm.experiments.run import device_name
from gym_llm.policy.models import DEFAULT_MODEL


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.recipes.rule_learning", __doc__)
    add = parser.add_argument
    add("--model", default=DEFAULT_MODEL, help="registry name or local model path")
    add("--n-envs", type=int, default=8, help="parallel envs")
    add("--n-steps", type=int, default=8, help="PPO n_steps")
    add("--batch-size", type=int, default=64, help="PPO minibatch size")
    add("--steps", type=int, default=1024, help="env steps in all")
    add("--every", type=int, default=256, help="env steps between evaluations")
    add_settings(add, example="ppo.learning_rate=1e-3 policy.choice_calibration=true")
    add("--seed", type=int, default=0, help="seed")
    add("--json", type=Path, default=None, help="write the results here")
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    quiet_progress_bar_warning()
    env = make_text_env("gym_llm/HighLow-v0", args.n_envs, seed=args.seed)
    model = PPO(
        "LLMPolicy",
        env,
        policy_kwargs={"model": args.model, **args.set["policy"]},
        n_steps=args.n_steps,
        batch_size=args.batch_size,
        seed=args.seed,
        **args.set["ppo"],
    )
    figures: dict[str, float] = {}
    logger = Logger(folder=None, output_formats=[])  # no output: this script prints its own rows
    keep = ("state_entropy", "mutual_information", "greedy_changed", "explained_variance")
    logger.record = keeping(logger.record, keep, figures)
    model.set_logger(logger)

    def point(seconds: float) -> dict[str, Any]:
        success = exact_success(lambda obs: model.predict(obs, deterministic=True)[0], HighLowEnv())
        row = {"env_steps": model.num_timesteps, "train_s": round(seconds, 3), "success": success}
        row.update({k: round(v, 4) for k, v in figures.items()})
        print(json.dumps(row), flush=True)
        return row

    curve, train_s = [point(0.0)], 0.0
    while model.num_timesteps < args.steps:
        start = time.perf_counter()
        model.learn(args.every, reset_num_timesteps=False)
        train_s += time.perf_counter() - start
        curve.append(point(train_s))
    result = {
        "device": device_name(model.device),
        "settings": vars(args) | {"json": str(args.json)},
        "curve": curve,
    }
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
