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
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gym_llm.cli.arguments import add_renamed_flags
from gym_llm.experiments.comparison import (
    AGENTS,
    COMPARISON_LLM,
    DEFAULT_AGENTS,
    ComparisonConfig,
    References,
    Row,
    env_references,
    parse_agents,
    plan,
)
from gym_llm.experiments.comparison_runs import execute
from gym_llm.experiments.report import read_rows, write_outputs
from gym_llm.experiments.specs import SUITE, EnvSpec, parse_envs, parse_settings

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
    defaults = ComparisonConfig()  # the defaults live in one place
    suite = ", ".join(s.label for s in SUITE)
    add(
        "--envs",
        nargs="+",
        default=["suite"],
        metavar="ENV",
        help=f"'suite' ({suite}; registered ones), 'family-tuning', 'family-held-out', "
        "'family-noisy-tuning' or 'family-noisy-held-out' (the task family's splits, "
        "gym_llm/Family-v0) and/or ID or ID:key=value,... items",
    )
    add(
        "--agents",
        default=",".join(DEFAULT_AGENTS),
        help=f"comma-separated agents among {', '.join(AGENTS)}",
    )
    add("--model", default=defaults.model, help="LLM: registry name, local directory or .gguf file")
    add(
        "--budget",
        type=int,
        default=defaults.budget,
        help="env steps for the trained LLM and for PPO/DQN at the LLM's budget",
    )
    add(
        "--classic-budget",
        type=int,
        default=defaults.classic_budget,
        help="PPO/DQN also at this usual budget (0 skips it)",
    )
    add(
        "--seeds",
        nargs="+",
        type=int,
        default=list(defaults.seeds),
        help="seeds (one run per seed)",
    )
    add(
        "--classic-seeds",
        type=int,
        default=defaults.classic_seeds,
        help="run the --classic-budget runs on only the first N seeds (0 = all)",
    )
    add(
        "--eval-episodes",
        type=int,
        default=defaults.eval_episodes,
        help="Monte-Carlo episodes per score where no exact evaluation exists",
    )
    add(
        "--random-episodes",
        type=int,
        default=defaults.random_episodes,
        help="Monte-Carlo episodes for the random reference where not exact",
    )
    add(
        "--curve-points",
        type=int,
        default=defaults.curve_points,
        help="PPO/DQN scores during training",
    )
    add(
        "--llm",
        nargs="+",
        action=_LLMSettings,
        default={},
        metavar="SETTING=VALUE",
        help="the LLM runs' settings, dotted names of `gym-llm train`'s (see its --help): e.g. "
        "ppo.n_epochs=4 ppo.advantage_estimator=gigpo policy.max_new_tokens=8 dqn.beta=1 "
        "n_envs=4 eval_points=4. Over the suite's: "
        + " ".join(f"{k}={v}" for k, v in COMPARISON_LLM.items())
        + " (each capped by --budget); policy.action_head and policy.choice_calibration apply "
        "to choice-mode runs. llm-dqn's other settings are SB3 DQN's, scaled to --budget as "
        "for the dqn agent",
    )
    add(
        "--device",
        default=defaults.device,
        help="LLM device: auto, cpu, cuda or mps (SB3 uses CPU)",
    )
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
        default=defaults.run_dir,
        help="keep LLM runs (TensorBoard logs, agents) here; default: a temp dir, deleted",
    )
    add(
        "--target-gap",
        type=float,
        default=defaults.target_gap,
        help="time to target: env steps and seconds until a curve first closes this fraction "
        "of the random-to-optimum gap",
    )
    add("--fresh", action="store_true", help="drop earlier rows in results.csv (default: merge)")
    add("--no-progress", action="store_true", help="no progress bar (for logs)")
    add_renamed_flags(parser, RENAMED)
    parser.set_defaults(results_root=results_root)
    return parser


#: The flags of the LLM runs' settings before ``--llm``, and what replaced each.
RENAMED = {
    "--llm-eval-points": "--llm eval_points=N",
    "--llm-n-envs": "--llm n_envs=N",
    "--llm-n-steps": "--llm ppo.n_steps=N",
    "--llm-batch-size": "--llm ppo.batch_size=N",
    "--llm-micro-batch-size": "--llm ppo.micro_batch_size=N",
    "--llm-epochs": "--llm ppo.n_epochs=N",
    "--llm-lr": "--llm ppo.learning_rate=X",
    "--llm-ent-coef": "--llm ppo.ent_coef=X",
    "--llm-lora-r": '--llm \'policy.lora={"r": 8, "lora_alpha": 16}\' (none: full fine-tuning)',
    "--llm-estimator": "--llm ppo.advantage_estimator=NAME",
    "--llm-action-head": "--llm policy.action_head=true",
    "--llm-choice-calibration": "--llm policy.choice_calibration=true",
    "--llm-dqn-beta": "--llm dqn.beta=X",
    "--max-new-tokens": "--llm policy.max_new_tokens=N",
}


def _llm_settings(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, Any]:
    """``--llm``'s items as dotted settings, checked against a run's config before any run."""
    from gym_llm.experiments.train_config import TrainConfig

    try:
        settings = parse_settings(items, "--llm")
        for name in ("policy.model", "policy.action_mode", "algo"):
            if name in settings:
                raise ValueError(f"--llm {name}: the suite sets it (--model, --agents).")
        TrainConfig().with_settings({**COMPARISON_LLM, **settings})
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    return settings


class _LLMSettings(argparse.Action):
    """Stores ``--llm``'s items as a dict of checked dotted settings."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: str | None = None) -> None:
        setattr(namespace, self.dest, _llm_settings(parser, list(values)))


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
    config = ComparisonConfig.from_namespace(args)
    jobs = plan(specs, agents, config)
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
        new = execute(job, refs[key], config)
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
