"""The suite's runs, streamed: every curve point is appended to a JSONL file the moment it is
measured, so a run cut off at a deadline (a lent GPU's lease) keeps its points. ``--seeds``
runs several seeds one after another in one process (sharing the model's trunk cache).
``--resume`` goes on where a run was cut short: from its newest checkpoint, writing only points
the file does not hold yet, and skipping seeds that finished.

    python -m benchmarks.recipes.streamed_runs run --env FrozenLake-v1 --env-kwargs is_slippery=False \\
        --seeds 0 1 2 --timesteps 20480 --every 1024 --estimator gigpo --n-steps 16 \\
        --jsonl out/suite.jsonl --run-dir /tmp/runs/fl-0
    python -m benchmarks.recipes.streamed_runs summarize out/suite.jsonl

``run`` trains SmolLM2 with ``gym_llm.experiments.run.run`` (exact evaluation of the greedy policy at each
point) and writes one line per point plus a last line with the run's totals. ``summarize`` reads
the lines of many runs and prints, per env and estimator, the mean ± std over seeds at each
target budget of issue 14, the env step and training seconds at which each seed first met the
target, and the env step at which it first closed 90 % of the random → optimum gap.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.cli_args import append_jsonl, new_parser
from benchmarks.recipes.family_sweep import ENV_ID as FAMILY_ENV_ID
from benchmarks.recipes.family_sweep import STEPS as FAMILY_STEPS
from benchmarks.recipes.family_sweep import WALK_STEPS as FAMILY_WALK_STEPS
from benchmarks.recipes.streamed_diagnostics import diagnostics
from gym_llm.cli.demo import parse_env_kwargs, quiet_progress_bar_warning
from gym_llm.experiments.specs import parse_settings
from gym_llm.policy.models import DEFAULT_MODEL

if TYPE_CHECKING:
    from gym_llm.experiments.plots import Series

#: Issue 14's targets: (env id, env kwargs) -> (target mean return, env-step budget).
TARGETS: dict[tuple[str, str], tuple[float, int]] = {
    ("FrozenLake-v1", "is_slippery=False"): (1.0, 2048),
    ("gym_llm/TextMaze-v0", ""): (-7.0, 4096),
    ("gym_llm/GuessNumber-v0", ""): (0.50, 4096),
    ("Blackjack-v1", "sab=False"): (-0.070, 8192),
    ("FrozenLake-v1", "is_slippery=True"): (0.60, 8192),
}

#: The PPO settings every row ran with unless it names its own (``gym-llm bench``'s): a row
#: records a setting only where it differs, so rows recorded before a setting was recorded
#: still read right.
RECORDED: dict[str, Any] = {
    "n_epochs": 2,
    "batch_size": 32,
    "learning_rate": None,
    "ent_coef": 0.01,
}


def env_key(env: str, kwargs: Sequence[str]) -> tuple[str, str]:
    """How a run's env is named in :data:`TARGETS` and in the summary."""
    return env, ",".join(sorted(kwargs))


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.recipes.streamed_runs", __doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="one training run, its points streamed to --jsonl")
    add = run.add_argument
    add("--env", required=True, help="Gymnasium env id")
    add("--env-kwargs", nargs="*", default=[], metavar="KEY=VALUE", help="env kwargs")
    add("--model", default=DEFAULT_MODEL, help="registry name or local model path")
    add("--mode", choices=["choice", "generate"], default="choice", help="action mode")
    add(
        "--seed",
        "--seeds",
        type=int,
        nargs="+",
        default=[0],
        help="seeds, run one after another in this process (they share the model's trunk cache, "
        "the fastest way to run seeds on a CPU: benchmarks/RESULTS.md)",
    )
    add("--timesteps", type=int, default=2048, help="env steps in all")
    add(
        "--every",
        type=int,
        default=512,
        help="env steps between curve points (rounded up to whole rollouts)",
    )
    add(
        "--estimator",
        default="gae",
        help="advantage estimator (gae, rebn, grpo, rloo, gigpo, or q: action values learned "
        "off-policy, with --set ppo.policy_update=target)",
    )
    add("--n-envs", type=int, default=8, help="parallel envs")
    add("--n-steps", type=int, default=8, help="steps per env per rollout")
    add("--batch-size", type=int, default=RECORDED["batch_size"], help="PPO minibatch size")
    add("--epochs", type=int, default=RECORDED["n_epochs"], help="passes over each rollout")
    add(
        "--lr", type=float, default=RECORDED["learning_rate"], help="learning rate (default: PPO's)"
    )
    add("--ent-coef", type=float, default=RECORDED["ent_coef"], help="entropy bonus")
    add("--device", default="auto", help="auto, cpu, cuda or mps")
    add("--count-bonus", type=float, default=0.0,
        help="novelty bonus scale (TrainConfig.count_bonus, falling to 0 by half the budget; "
        "0: none)")  # fmt: skip
    add("--algo", choices=["ppo", "dqn"], default="ppo", help="gym_llm.PPO or gym_llm.DQN")
    add("--set", dest="set", nargs="*", default=[], metavar="SETTING=VALUE",
        help="more settings, dotted names of `gym-llm train`'s, e.g. "
        "policy.value_normalization=true or ppo.ent_coef=auto (recorded in each row; over a "
        "flag's value). With --algo dqn, DQN's (dqn.beta=1 dqn.gradient_steps=8), over the "
        "base that --dqn-base names")  # fmt: skip
    add("--dqn-base", choices=["scaled", "library"], default="scaled",
        help="with --algo dqn, the settings --set changes: 'scaled' (SB3 DQN's as gym-llm bench "
        "scales them to --timesteps, gym_llm.evaluation.baselines.build_sb3, with "
        "gradient_steps = --n-envs so each env step is replayed as often as SB3's one-env DQN "
        "replays it, and --batch-size) or 'library' (gym_llm.DQN's defaults, as a user's "
        "DQN(LLMPolicy, env) gets them)")  # fmt: skip
    add("--jsonl", type=Path, required=True, help="append the points here")
    add("--run-dir", type=Path, required=True, help="the run's directory (agent, TensorBoard)")
    add("--resume", action="store_true",
        help="go on with runs cut short (a session's end), given the cut run's flags (the same "
        "--seeds, --run-dir and --jsonl): a seed whose line in --jsonl says done is skipped, one "
        "with a checkpoint in its run directory continues from it, and no point already in "
        "--jsonl is written twice")  # fmt: skip
    summarize = commands.add_parser("summarize", help="a markdown table from JSONL files")
    summarize.add_argument("files", nargs="+", type=Path, help="JSONL files written by run")
    summarize.add_argument("--plots", type=Path, default=None, help="one PNG per env here")
    summarize.add_argument(
        "--target", type=float, default=None,
        help="judge every env in FILES against this mean return instead of its suite target "
        "(a learner's own row: PPO's slippery FrozenLake asks 0.50 where DQN's asks 0.60)",
    )  # fmt: skip
    diagnostics = commands.add_parser(
        "diagnostics", help="rollout/train figures of run dirs' TensorBoard logs as CSV"
    )
    diagnostics.add_argument("run_dirs", nargs="+", type=Path, help="--run-dir of each run")
    diagnostics.add_argument("--every", type=int, default=8, help="keep every N-th update")
    diagnostics.add_argument("--csv", type=Path, required=True, help="write the rows here")
    return parser


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Each seed's run in turn (``--run-dir``/seed<N> when there are several); the last one's
    totals."""
    seeds, totals = list(args.seed), {}
    for seed in seeds:
        one = argparse.Namespace(**{**vars(args), "seed": seed})
        if len(seeds) > 1:
            one.run_dir = args.run_dir / f"seed{seed}"
        totals = run_seed(one)
    return totals


def dqn_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The run's DQN settings: SB3 DQN's as the baselines scale them to the budget, replayed as
    often as SB3's one-env DQN replays each step, then ``--set`` on top."""
    from gym_llm.evaluation.baselines import dqn_budget_settings

    settings: dict[str, Any] = {}
    if args.dqn_base == "scaled":
        budgeted = dqn_budget_settings(args.timesteps, args.n_envs)
        settings = {f"dqn.{name}": value for name, value in budgeted.items()}
        settings["dqn.batch_size"] = args.batch_size
    if args.lr is not None:
        settings["dqn.learning_rate"] = args.lr
    settings.update(parse_settings(args.set, "--set"))
    return settings


def run_seed(args: argparse.Namespace) -> dict[str, Any]:
    from gym_llm.experiments.run import TrainConfig
    from gym_llm.experiments.run import run as train
    from gym_llm.rl.common.checkpoint_files import latest_checkpoint
    from gym_llm.rl.dqn.config import DQNConfig

    is_dqn = args.algo == "dqn"
    dqn = dqn_settings(args) if is_dqn else {}
    extra = {} if is_dqn else parse_settings(args.set, "--set")
    train_freq = dqn.get("dqn.train_freq", DQNConfig.train_freq)
    rollout = args.n_envs * (train_freq if is_dqn else args.n_steps)
    iterations = max(1, -(-args.timesteps // rollout))
    every_rollouts = max(1, -(-args.every // rollout))
    flags: dict[str, Any] = {
        "algo": args.algo,
        "env": args.env,
        "env_kwargs": parse_env_kwargs(args.env_kwargs),
        "timesteps": args.timesteps,
        "n_envs": args.n_envs,
        "eval_episodes": 0,
        "eval_points": max(0, iterations // every_rollouts - 1),
        "seed": args.seed,
        "device": args.device,
        "count_bonus": args.count_bonus,
        "policy.model": args.model,
        "policy.action_mode": args.mode,
        "ppo.n_steps": args.n_steps,
        "ppo.batch_size": args.batch_size,
        "ppo.n_epochs": args.epochs,
        "ppo.learning_rate": args.lr,
        "ppo.ent_coef": args.ent_coef,
        "ppo.advantage_estimator": args.estimator,
    }
    # a --set setting wins over a flag's (ppo.ent_coef=auto over --ent-coef's number)
    config = TrainConfig().with_settings({**flags, **dqn, **extra})
    env, kwargs = env_key(args.env, args.env_kwargs)
    base = {
        "env": env,
        "env_kwargs": kwargs,
        "estimator": args.estimator,
        "mode": args.mode,
        "seed": args.seed,
        "n_steps": args.n_steps,
    }
    if is_dqn:
        base.update(algo="dqn", dqn=dqn, dqn_base=args.dqn_base)
    if extra:
        base["set"] = extra
    if args.count_bonus:
        base["count_bonus"] = args.count_bonus
    chosen = {"n_epochs": args.epochs, "batch_size": args.batch_size,
              "learning_rate": args.lr, "ent_coef": args.ent_coef}  # fmt: skip
    base.update({k: v for k, v in chosen.items() if v != RECORDED[k]})
    args.jsonl.parent.mkdir(parents=True, exist_ok=True)
    recorded, done = recorded_points(args.jsonl, base) if args.resume else (-1, None)
    if done is not None:
        print(f"seed {args.seed}: done in {args.jsonl}, skipped", file=sys.stderr)
        return done
    start = time.perf_counter()

    def write(row: dict[str, Any]) -> None:
        append_jsonl(args.jsonl, base | row)

    def on_point(point: Any) -> None:
        if point.timesteps <= recorded:  # written before the run was cut short
            return
        write(
            {
                "env_steps": point.timesteps,
                "train_s": round(point.wall_s, 2),
                "value": point.value,
                "elapsed_s": round(time.perf_counter() - start, 1),
            }
        )

    quiet_progress_bar_warning()
    resume = args.resume and latest_checkpoint(args.run_dir / "checkpoints") is not None
    if recorded >= 0 and not resume:
        raise SystemExit(
            f"seed {args.seed} has points up to {recorded} env steps in {args.jsonl} but no "
            f"checkpoint in {args.run_dir / 'checkpoints'} to go on from: a new run would join "
            "another trajectory to them. Remove its lines from the file, or write to another "
            "--jsonl, to start it again."
        )
    result = train(config, args.run_dir, progress_bar=False, on_point=on_point, resume=resume)
    distilled = {}
    if config.algo == "dqn" and config.dqn.distill_interval:  # the LM alone, without the values
        from gym_llm.evaluation.exact import exact_policy_value

        distilled["distilled_value"] = exact_policy_value(
            result.model.policy, config.env, config.env_kwargs
        )
    totals = {
        "done": True,
        "device": result.device,
        "env_steps": result.timesteps,
        "train_s": round(result.train_wall_s, 2),
        "value": result.after.value,
        "env_steps_per_s": round(result.timesteps / max(result.train_wall_s, 1e-9), 2),
        **distilled,
    }
    write(totals)
    return base | totals


#: What a line adds to its run's settings: a point's figures, or the run's totals.
POINT_KEYS = frozenset({"env_steps", "train_s", "value", "elapsed_s", "done", "device",
                        "env_steps_per_s", "distilled_value"})  # fmt: skip


def recorded_points(jsonl: Path, base: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
    """The last env step ``jsonl`` holds for the run whose settings are ``base`` (-1: none), and
    its totals line if it finished."""
    last, done = -1, None
    if not jsonl.is_file():
        return last, done
    for line in jsonl.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if {k: v for k, v in row.items() if k not in POINT_KEYS} != base:
            continue
        last = max(last, int(row["env_steps"]))
        if row.get("done"):
            done = row
    return last, done


def read_runs(files: Sequence[Path]) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """Points grouped by run (env, kwargs, learner, mode, n_steps, seed), in file order, ``done``
    line last. The learner: PPO's advantage estimator or ``dqn beta=B`` (gym_llm's DQN), then
    ``+ count bonus C``, ``, n_epochs E`` and each ``--set`` setting where the run had them (on
    ``--dqn-base library``, each DQN setting it changed, so two arms on one seed are two
    runs)."""
    runs: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for path in files:
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                learner = (
                    f"dqn beta={row['dqn'].get('dqn.beta', row['dqn'].get('dqn_beta', 0))}"
                    if row.get("algo") == "dqn"
                    else row["estimator"]
                )
                if row.get("count_bonus"):
                    learner += f" + count bonus {row['count_bonus']}"
                learner += "".join(f", {k} {row[k]}" for k in RECORDED if k in row)
                learner += "".join(f", {k} {v}" for k, v in row.get("set", {}).items())
                if row.get("dqn_base") == "library":  # its dqn settings are the arm's own
                    learner += "".join(
                        f", {k.removeprefix('dqn.')} {v}"
                        for k, v in row["dqn"].items()
                        if k not in ("dqn.beta", "dqn_beta")
                    )
                key = (row["env"], row["env_kwargs"], learner, row["mode"], row["n_steps"])
                runs[(*key, row["seed"])].append(row)
    return runs


def value_at(points: Sequence[dict[str, Any]], budget: int) -> float | None:
    """The last curve value measured at or before ``budget`` env steps (``None``: the run had not
    got that far, so a cut-off run is never credited with a budget it did not reach)."""
    reached = [p for p in points if "done" not in p and p["env_steps"] <= budget]
    if not reached or max(p["env_steps"] for p in points if "done" not in p) < budget:
        return None
    return float(reached[-1]["value"])


def first_reaching(points: Sequence[dict[str, Any]], level: float) -> dict[str, Any] | None:
    """The first curve point whose value is at least ``level``."""
    return next((p for p in points if "done" not in p and p["value"] >= level - 1e-9), None)


def wobble(points: Sequence[dict[str, Any]], budget: int, target: float) -> tuple[float, int, int]:
    """What holding a level costs, from ``budget`` env steps on: the standard deviation of the
    curve's values there, how many of those points are below ``target``, and how many there are
    (a run can be at its target at two points and below it between them)."""
    from statistics import pstdev

    late = [float(p["value"]) for p in points if "done" not in p and p["env_steps"] >= budget]
    below = sum(v < target - 1e-9 for v in late)
    return (pstdev(late) if late else float("nan")), below, len(late)


def summarize(files: Sequence[Path], override: float | None = None) -> str:
    """The markdown table the README and RESULTS.md quote (``override``: one target for every
    env, ``--target``)."""
    from statistics import mean, stdev

    from gym_llm.evaluation.monte_carlo import reference_returns

    groups: dict[tuple[Any, ...], list[list[dict[str, Any]]]] = defaultdict(list)
    for key, points in sorted(read_runs(files).items()):
        groups[key[:5]].append(points)
    lines = [
        "| env | learner (mode, n_steps) | seeds | target @ budget | met within budget | "
        "held: at the target at the budget and at twice it | "
        "from the budget on: sd of the value (mean over seeds); points below the target | "
        "value @ budget (per seed) | mean ± std | first met target: env steps (train s) | "
        "90 % of gap at | last point | distilled LM @ end |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (env, kwargs, estimator, mode, n_steps), runs in groups.items():
        target, budget = TARGETS.get((env, kwargs), (float("nan"), 0))
        refs = reference_returns(
            env, parse_env_kwargs(kwargs.split(",") if kwargs else []), measure_random=False
        )
        level90 = (
            refs["random"] + 0.9 * (refs["optimum"] - refs["random"])
            if "random" in refs and "optimum" in refs
            else None
        )
        if env == FAMILY_ENV_ID and level90 is not None:  # a family task: 90 % of its gap
            kind = kwargs.removeprefix("task=").split("-")[0]
            target, budget = level90, FAMILY_STEPS.get(kind, FAMILY_WALK_STEPS)
        if override is not None:
            target = override
        at_budget = [value_at(points, budget) for points in runs]
        at_twice = [value_at(points, 2 * budget) for points in runs]
        held = sum(
            a is not None and b is not None and min(a, b) >= target - 1e-9
            for a, b in zip(at_budget, at_twice, strict=True)
        )
        measured_twice = sum(b is not None for b in at_twice)
        late = [wobble(points, budget, target) for points in runs]
        late_points = sum(n for _, _, n in late)
        late_cell = (
            f"{mean(sd for sd, _, n in late if n):.3f}; "
            f"{sum(b for _, b, _ in late)} of {late_points}"
            if late_points
            else "—"
        )
        known = [v for v in at_budget if v is not None]
        spread = f"{mean(known):+.3f}" if known else "not reached"
        if len(known) > 1:
            spread += f" ± {stdev(known):.3f}"
        met = [first_reaching(points, target) for points in runs]
        gap = [first_reaching(points, level90) if level90 is not None else None for points in runs]
        last = [[p for p in points if "done" not in p][-1] for points in runs]
        within = sum(m is not None and m["env_steps"] <= budget for m in met)
        distilled = [
            p["distilled_value"] for points in runs for p in points if "distilled_value" in p
        ]
        lines.append(
            f"| {env} {kwargs} | {estimator} ({mode}, {n_steps}) | {len(runs)} | {target:+.3f} @ "
            f"{budget} | {within} of {len(runs)} | "
            + (f"{held} of {len(runs)}" if measured_twice else "not run to twice it")
            + f" | {late_cell} | "
            f"{' / '.join('—' if v is None else f'{v:+.3f}' for v in at_budget)} | "
            f"{spread} | "
            + " / ".join(
                "never" if m is None else f"{m['env_steps']} ({m['train_s']:.0f} s)" for m in met
            )
            + " | "
            + " / ".join("never" if g is None else str(g["env_steps"]) for g in gap)
            + " | "
            + " / ".join(f"{p['value']:+.3f} @ {p['env_steps']}" for p in last)
            + " | "
            + (" / ".join(f"{v:+.3f}" for v in distilled) or "—")
            + " |"
        )
    return "\n".join(lines)


def seed_series(name: str, runs: Sequence[tuple[int, list[dict[str, Any]]]]) -> list[Series]:
    """One learner's curves: with 3 seeds or more, their mean with a 95 % band over the points
    every seed measured (a seed cut short ends the mean there, and the label says so, rather
    than the mean changing which seeds it averages), with each seed's whole curve drawn thin;
    else each seed's curve."""
    import numpy as np

    from gym_llm.experiments.plots import Series

    steps = [[p["env_steps"] for p in points] for _, points in runs]
    shared = sorted(set.intersection(*(set(s) for s in steps))) if steps else []
    if len(runs) >= 3 and shared:
        values = np.array(
            [[p["value"] for p in points if p["env_steps"] in shared] for _, points in runs]
        )
        label = f"{name}: mean of {len(runs)} seeds"
        if shared[-1] < max(max(s) for s in steps):
            label += f" (to {shared[-1]}, where every seed got)"
        label += "; thin: each seed"
        sems = values.std(0, ddof=1) / np.sqrt(len(runs))
        members = [
            (seed_steps, [p["value"] for p in points])
            for seed_steps, (_, points) in zip(steps, runs, strict=True)
        ]
        return [Series(label, shared, values.mean(0), sems, members)]
    return [
        Series(
            f"{name} seed {seed}", [p["env_steps"] for p in points], [p["value"] for p in points]
        )
        for seed, points in runs
    ]


def plot(files: Sequence[Path], directory: Path, target: float | None = None) -> list[Path]:
    """One PNG per env: per learner the mean over seeds with a 95 % band (:func:`seed_series`),
    random play, the optimum and the target (``target``, else the suite's) as lines."""
    from gym_llm.evaluation.monte_carlo import reference_returns
    from gym_llm.experiments.plots import plot_curves

    by_env: dict[tuple[str, str], list[Series]] = defaultdict(list)
    groups: dict[tuple[Any, ...], list[tuple[int, list[dict[str, Any]]]]] = defaultdict(list)
    for (*key, seed), rows in sorted(read_runs(files).items()):
        groups[tuple(key)].append((seed, [p for p in rows if "done" not in p]))
    for (env, kwargs, learner, mode, n_steps), runs in groups.items():
        name = (
            f"{learner} ({mode}"
            + ("" if learner.startswith("dqn") else f", n_steps {n_steps}")
            + ")"
        )
        by_env[env, kwargs].extend(seed_series(name, runs))
    paths = []
    for (env, kwargs), series in by_env.items():
        env_kwargs = parse_env_kwargs(kwargs.split(",") if kwargs else [])
        references = reference_returns(env, env_kwargs, measure_random=False)
        if target is not None:
            references["target"] = target
        elif (env, kwargs) in TARGETS:
            references["target"] = TARGETS[env, kwargs][0]
        name = f"{env.split('/')[-1]}{'-' + kwargs if kwargs else ''}".replace(",", "-")
        paths.append(
            plot_curves(
                series, directory / f"{name}.png", title=f"{env} {kwargs}", references=references
            )
        )
    return paths


def main(argv: Sequence[str] | None = None) -> Any:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        return run(args)
    if args.command == "diagnostics":
        return diagnostics(args.run_dirs, args.every, args.csv)
    table = summarize(args.files, args.target)
    print(table)
    if args.plots is not None:
        for path in plot(args.files, args.plots, args.target):
            print(f"wrote {path}")
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
