"""k of N seeds on the task family: PPO with one set of settings (an *arm*) on each task and seed.

    python -m benchmarks.recipes.family_sweep run --split tuning --seeds 0-9 \\
        --arms defaults plain:policy.action_head=false,policy.choice_calibration=false \\
        --jsonl benchmarks/results/family/tuning.jsonl
    python -m benchmarks.recipes.family_sweep summarize benchmarks/results/family/tuning.jsonl \\
        --plots benchmarks/results/family/curves-tuning

Each run is PPO as a user builds it (the library's defaults plus the arm's settings: an arm is
``NAME`` or ``NAME:SETTING=VALUE,...``, settings by dotted name: ``policy.X`` for ``LLMPolicy``,
``ppo.X`` for PPO and ``parser.X`` for the training env's ``ActionParserWrapper``
(``parser.invalid_penalty=-0.1``)) on
one task of ``gym_llm/Family-v0``, with the exact value of the greedy
policy every ``--every`` env steps, as a fraction of the gap from the random policy (0) to the
optimum (1). A seed *reaches* the target when that fraction is at least ``--target`` (0.9); the
headline is "k of N seeds reach it, by how many env steps", and for runs that went to twice
the task's budget (``--steps``), how many *held* it: at the target at the budget and at twice
it. Rows are appended to ``--jsonl`` as
each run ends (and each point to ``NAME.points.jsonl`` as it is measured, which
``summarize --cut-short`` reads for runs that never finished), and runs already there (same task, seed and arm) are skipped: a sweep cut short
keeps what it measured and the next call resumes it. Runs share one process (and the trunk
cache: each distinct prompt's frozen layers once for the whole sweep), seed by seed (every task
and arm for seed 0, then seed 1, ...), so that a sweep cut short is balanced.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.cli_args import append_jsonl, keeping, new_parser, read_jsonl, seed_list
from benchmarks.recipes.sweep_points import (
    append_point,
    gap_at,
    held,
    partial_rows,
    points_path,
    reached_at,
)
from gym_llm.policy.models import DEFAULT_MODEL

ENV_ID = "gym_llm/Family-v0"
#: Env steps per run: one-step tasks, and the walking kinds (longer episodes, more states).
STEPS = {"threshold": 1024, "range": 1024, "compare": 1024, "membership": 1024, "weather": 2048,
         "dice": 4096, "cards": 4096, "deck": 8192}  # fmt: skip
WALK_STEPS = 2048
DIAGNOSTICS = (
    "state_entropy",
    "mutual_information",
    "approx_kl",
    "clip_fraction",
    "invalid_action_rate",
    "ent_coef",
    "entropy_loss",
    "floor_loss",
    "grad_norm",
)


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.recipes.family_sweep", __doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="train and evaluate; append rows to --jsonl")
    add = run.add_argument
    add("--split", choices=["tuning", "held-out", "noisy-tuning", "noisy-held-out"],
        default="tuning", help="the family's split")  # fmt: skip
    add("--tasks", nargs="*", default=None, help="these tasks instead of a split's")
    add("--seeds", type=seed_list, default=list(range(10)), help="e.g. 0-9 or 0,3,7")
    add(
        "--arms",
        nargs="+",
        default=["defaults"],
        metavar="NAME[:SETTING=VALUE,...]",
        help="settings to compare, by dotted name: policy.NAME for LLMPolicy, ppo.NAME for PPO, "
        "parser.NAME for the training env's ActionParserWrapper (rows that name an arm "
        "already there count as done)",
    )
    add("--model", default=DEFAULT_MODEL, help="registry name or local model path")
    add("--device", default="auto", help="cpu, cuda or auto (cuda when there is one)")
    add("--n-envs", type=int, default=8, help="parallel envs")
    add("--n-steps", type=int, default=8, help="PPO n_steps")
    add("--batch-size", type=int, default=64, help="PPO minibatch size")
    add("--steps", type=int, default=None, help="env steps per run (default: per kind)")
    add("--every", type=int, default=128, help="env steps between exact evaluations")
    add("--target", type=float, default=0.9, help="share of the random-to-optimum gap")
    add(
        "--replies",
        type=int,
        default=0,
        metavar="N",
        help="also record, at every point, each state's greedy reply and the actions of N "
        "sampled replies (benchmarks/studies/state_replies.py; the run trains as without them)",
    )
    add(
        "--noise-figures",
        action="store_true",
        help="also write, after every rollout, each state's advantage signal-to-noise against "
        "the exact on-policy gap, entropy and visits to NAME.noise.jsonl "
        "(benchmarks/studies/noisy_advantages.py; choice mode)",
    )
    add(
        "--jsonl",
        type=Path,
        required=True,
        help="append a row per finished run here (and resume from it); every point also goes "
        "to NAME.points.jsonl beside it as it is measured",
    )
    summary = commands.add_parser(
        "summarize",
        help="k of N per task and arm: reached (within the budget), median env steps, and held "
        "(at the target at the budget and at twice it)",
    )
    summary.add_argument("jsonl", type=Path, nargs="+", help="one or more sweeps' rows")
    summary.add_argument("--target", type=float, default=0.9)
    summary.add_argument("--markdown", action="store_true", help="a table for RESULTS.md")
    summary.add_argument(
        "--per-seed",
        action="store_true",
        help="a table for RESULTS.md with a column per seed: the gap at the budget -> at twice "
        "it (first env step at the target), and how many held",
    )
    summary.add_argument(
        "--rename",
        nargs="+",
        default=[],
        metavar="OLD=NEW",
        help="count runs recorded under arm OLD as arm NEW (the same settings renamed)",
    )
    summary.add_argument(
        "--plots",
        type=Path,
        default=None,
        metavar="DIR",
        help="also write one PNG of every seed's curve per task here (curves-TASK.png)",
    )
    summary.add_argument(
        "--budget",
        type=int,
        default=None,
        metavar="STEPS",
        help="the budget a claim was made at, instead of the task kind's (reached within it; "
        "held at it and at twice it)",
    )
    summary.add_argument(
        "--cut-short",
        action="store_true",
        help="also count the runs found only in the points files beside JSONL (stopped before "
        "their last point), as arm 'ARM (cut short)'",
    )
    return parser


def budget(task: str, override: int | None = None) -> int:
    """A task's budget in env steps (its kind's; the walking kinds share one, unless
    ``override``, the summary's ``--budget``): the default length of a run, and where "held" is
    read, with twice it."""
    return override or STEPS.get(task.split("-")[0], WALK_STEPS)


def held_count(
    task: str, runs: Sequence[dict[str, Any]], target: float, budget_steps: int | None = None
) -> tuple[int, int]:
    """How many runs held the target (:func:`held`), of those that went to twice the budget."""
    holds = [held(r["curve"], budget(task, budget_steps), target) for r in runs]
    return sum(h is True for h in holds), sum(h is not None for h in holds)


def _done(path: Path) -> set[tuple[str, int, str]]:
    return {(r["task"], r["seed"], r["arm"]) for r in read_jsonl(path)}


def parse_arm(text: str) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``NAME:SETTING=VALUE,...`` -> the name, the LLMPolicy kwargs (``policy.X``), the PPO
    kwargs (``ppo.X``) and the training env's ActionParserWrapper kwargs (``parser.X``)."""
    from gym_llm.configs import by_section
    from gym_llm.experiments.specs import parse_settings

    name, _, settings = text.partition(":")
    items = [item for item in re.split(r",(?=[\w.]+=)", settings) if item]
    try:
        groups = by_section(parse_settings(items, f"--arms {name}"), ("policy", "ppo", "parser"))
    except ValueError as exc:
        raise ValueError(f"--arms {name}: {exc}") from None
    return name, groups["policy"], groups["ppo"], groups["parser"]


def one_run(task: str, seed: int, arm: str, args: argparse.Namespace) -> dict[str, Any]:
    """Train one seed on one task; the exact gap fraction every ``args.every`` env steps."""
    from stable_baselines3.common.logger import Logger

    from benchmarks.studies.state_replies import best_actions, reply_figures, state_replies
    from gym_llm import PPO, make_text_env
    from gym_llm.envs.family import FamilyEnv
    from gym_llm.evaluation.exact import exact_policy_value

    name, policy, ppo, parser = parse_arm(arm)
    steps = args.steps or budget(task)
    reference = FamilyEnv(task)
    low, high = reference.random_return, reference.optimal_return
    env = make_text_env(
        ENV_ID, args.n_envs, env_kwargs={"task": task}, action_kwargs=parser or None, seed=seed
    )
    model = PPO(
        "LLMPolicy", env, n_steps=args.n_steps, batch_size=args.batch_size, seed=seed,
        policy_kwargs={"model": args.model, **policy}, device=args.device, **ppo,
    )  # fmt: skip
    figures: dict[str, float] = {}
    logger = Logger(folder=None, output_formats=[])  # no folder: nothing is written
    logger.record = keeping(logger.record, DIAGNOSTICS, figures)
    model.set_logger(logger)

    best = best_actions(task) if args.replies else []
    callback = None
    if args.noise_figures:
        from benchmarks.studies.noisy_advantages import NoiseFigures

        noise_path = args.jsonl.with_name(args.jsonl.stem + ".noise.jsonl")
        run_key = {"task": task, "seed": seed, "arm": name}
        callback = NoiseFigures(task, noise_path, run_key).callback(model)

    def point(seconds: float) -> dict[str, Any]:
        value = exact_policy_value(model, ENV_ID, {"task": task})
        gap = (value - low) / (high - low)
        row = {"env_steps": model.num_timesteps, "train_s": round(seconds, 2), "value": value}
        row.update(gap=round(gap, 4), **{k: round(v, 5) for k, v in figures.items()})
        if args.replies:
            replies = state_replies(model, task, args.replies)
            found = reply_figures(best, replies["greedy_action"], replies["sampled"])
            row.update({f"replies_{k}": round(v, 5) for k, v in found.items()})
            row["replies"] = replies
        return row

    curve, train_s = [point(0.0)], 0.0
    append_point(points_path(args.jsonl), task, seed, name, curve[0])
    while model.num_timesteps < steps:
        start = time.perf_counter()
        model.learn(args.every, reset_num_timesteps=False, callback=callback)
        train_s += time.perf_counter() - start
        curve.append(point(train_s))
        append_point(points_path(args.jsonl), task, seed, name, curve[-1])
        print(  # progress, and what a run stopped short leaves in its log
            f"{task} seed {seed} {name}: {curve[-1]['env_steps']} env steps, "
            f"gap {curve[-1]['gap']:.2f}, {train_s:.0f} s",
            flush=True,
        )
    reached = reached_at(curve, args.target)
    env.close()
    return {
        "task": task,
        "seed": seed,
        "arm": name,
        "settings": {"policy": policy, "ppo": ppo, **({"parser": parser} if parser else {}),
                     "n_envs": args.n_envs,
                     "n_steps": args.n_steps, "batch_size": args.batch_size, "steps": steps,
                     **({"replies": args.replies} if args.replies else {})},
        **({"best_actions": best} if args.replies else {}),
        "start_gap": curve[0]["gap"],
        "best_gap": max(p["gap"] for p in curve),
        "final_gap": curve[-1]["gap"],
        "reached_at": reached,
        "train_s": round(train_s, 1),
        "device": f"{model.device.type}, {model.policy.lm.dtype}".replace("torch.", ""),
        "curve": curve,
    }  # fmt: skip


def run(args: argparse.Namespace) -> None:
    from gym_llm.cli.demo import quiet_progress_bar_warning
    from gym_llm.envs.family import SPLITS

    quiet_progress_bar_warning()
    tasks = args.tasks or list(SPLITS[args.split])
    done = _done(args.jsonl)
    args.jsonl.parent.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        for task in tasks:
            for arm in args.arms:
                if (task, seed, parse_arm(arm)[0]) in done:
                    continue
                row = one_run(task, seed, arm, args)
                append_jsonl(args.jsonl, row)
                _report(row)


def _report(row: dict[str, Any]) -> None:
    print(
        f"{row['task']} seed {row['seed']} {row['arm']}: gap {row['start_gap']:.2f} -> "
        f"{row['final_gap']:.2f} (best {row['best_gap']:.2f}, reached at "
        f"{row['reached_at']}) in {row['train_s']:.0f} s",
        flush=True,
    )


def load_rows(*paths: Path) -> list[dict[str, Any]]:
    """Every run of one or more sweep files, in file order. A points file passed by mistake (a
    shell glob picks it up) is refused by name: its lines are single points, not runs."""
    rows = []
    for path in paths:
        if path.name.endswith(".points.jsonl"):
            raise SystemExit(
                f"{path} is a points file (one line per evaluation point), not a sweep file: "
                "pass the sweep file beside it; --cut-short reads its points"
            )
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def summarize(path: Path, target: float = 0.9) -> list[dict[str, Any]]:
    """Per task and arm: seeds, how many reached the target (within the budget, and at any
    point), median env steps to it, and how many held it (of the runs that went to twice the
    budget)."""
    return summarize_rows(load_rows(path), target)


def summarize_rows(
    rows: Sequence[dict[str, Any]], target: float = 0.9, budget_steps: int | None = None
) -> list[dict[str, Any]]:
    """:func:`summarize` on rows already read (several files' rows pooled), the budget
    ``budget_steps`` where given."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[r["task"], r["arm"]].append(r)
    table = []
    for (task, arm), runs in sorted(groups.items()):
        hits = [reached_at(r["curve"], target) for r in runs]
        reached = sorted(h for h in hits if h is not None)
        kept, went = held_count(task, runs, target, budget_steps)
        table.append({
            "task": task, "arm": arm, "seeds": len(runs), "reached": len(reached),
            "median_steps": reached[len(reached) // 2] if reached else None,
            "within_budget": sum(h <= budget(task, budget_steps) for h in reached),
            "budget": budget(task, budget_steps),
            "held": kept,
            "to_twice_budget": went,
            "mean_final_gap": round(sum(r["final_gap"] for r in runs) / len(runs), 3),
            "mean_start_gap": round(sum(r["start_gap"] for r in runs) / len(runs), 3),
        })  # fmt: skip
    return table


def markdown(table: list[dict[str, Any]]) -> str:
    """One row per task, one column per arm: "k of N (median steps)" and the mean gap closed."""
    arms = list(dict.fromkeys(r["arm"] for r in table))
    tasks = list(dict.fromkeys(r["task"] for r in table))
    cell = {(r["task"], r["arm"]): r for r in table}
    lines = [
        "| task | " + " | ".join(arms) + " |",
        "|---|" + "---|" * len(arms),
    ]
    for task in tasks:
        cells = []
        for arm in arms:
            r = cell.get((task, arm))
            if r is None:
                cells.append("–")
                continue
            steps = f", median {r['median_steps']}" if r["median_steps"] is not None else ""
            cells.append(
                f"{r['reached']} of {r['seeds']}{steps}; gap {r['mean_start_gap']:.2f} → "
                f"{r['mean_final_gap']:.2f}{_held_text(r, '; ')}"
            )
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def seed_cell(curve: list[dict[str, Any]], budget_steps: int, target: float) -> str:
    """One run in a few characters: ``0.98 → 1.00 (512)``, the gap at the budget and at twice
    it (``–`` where the run stopped before) and the first env step at the target (``never``)."""
    at = [gap_at(curve, budget_steps), gap_at(curve, 2 * budget_steps)]
    first = reached_at(curve, target)
    gaps = " → ".join("–" if g is None else _gap_text(g, target) for g in at)
    return f"{gaps} ({'never' if first is None else f'{first:,}'})"


def _gap_text(gap: float, target: float) -> str:
    """Two decimals, or three where two would put the gap on the wrong side of the target
    (0.899 is not 0.90); a minus sign, as RESULTS.md writes it."""
    short = f"{gap:.2f}"
    text = short if (float(short) >= target) == (gap >= target) else f"{gap:.3f}"
    return text.replace("-", "−")


def per_seed_markdown(
    rows: Sequence[dict[str, Any]], target: float = 0.9, budget_steps: int | None = None
) -> str:
    """One line per task and arm, a column per seed (:func:`seed_cell`), and the held count:
    the table a reader checks a k-of-N claim against, seed by seed."""
    seeds = sorted({r["seed"] for r in rows})
    groups: dict[tuple[str, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        groups[r["task"], r["arm"]][r["seed"]] = r
    lines = [
        "| task (budget) | arm | " + " | ".join(f"seed {s}" for s in seeds) + " | held |",
        "|---|---|" + "---|" * (len(seeds) + 1),
    ]
    for (task, arm), runs in sorted(groups.items()):
        steps = budget(task, budget_steps)
        cells = [seed_cell(runs[s]["curve"], steps, target) if s in runs else "–" for s in seeds]
        kept, went = held_count(task, list(runs.values()), target, budget_steps)
        lines.append(
            f"| {task} ({steps:,}) | {arm} | " + " | ".join(cells) + f" | {kept} of {went} |"
        )
    return "\n".join(lines)


def _held_text(row: dict[str, Any], sep: str) -> str:
    """The held count as text, for the runs that went to twice the budget; empty when none
    did."""
    if not row.get("to_twice_budget"):
        return ""
    return f"{sep}held {row['held']} of {row['to_twice_budget']}"


def _rename(text: str) -> tuple[str, str]:
    old, sep, new = text.partition("=")
    if not (sep and old and new):
        raise SystemExit(f"--rename expects OLD=NEW, got {text!r}")
    return old, new


def plot_curves(
    rows: Sequence[dict[str, Any]],
    out_dir: Path,
    target: float = 0.9,
    budget_steps: int | None = None,
) -> list[Path]:
    """One PNG per task: every seed's greedy gap against env steps (thin), the median over
    seeds per arm (bold), and the target: k of N hides *how* runs miss (never moving, or
    crossing and falling back), which the curves show at a glance."""
    from gym_llm.experiments.plots import _pyplot

    plt: Any = _pyplot()
    by_task: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by_task[r["task"]][r["arm"]].append(r)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for task, arms in sorted(by_task.items()):
        fig, ax = plt.subplots(figsize=(8, 4.8))
        for i, (arm, runs) in enumerate(arms.items()):
            color = f"C{i}"
            by_step: dict[int, list[float]] = defaultdict(list)
            for r in runs:
                steps = [p["env_steps"] for p in r["curve"]]
                gaps = [p["gap"] for p in r["curve"]]
                ax.plot(steps, gaps, color=color, alpha=0.25, linewidth=0.8)
                for step, gap in zip(steps, gaps, strict=True):
                    by_step[step].append(gap)
            xs = sorted(by_step)
            medians = [sorted(by_step[x])[len(by_step[x]) // 2] for x in xs]
            reached = sum(reached_at(r["curve"], target) is not None for r in runs)
            kept, went = held_count(task, runs, target, budget_steps)
            label = f"{arm}: {reached} of {len(runs)} reach {target:.0%}"
            label += f", {kept} of {went} hold" if went else ""
            ax.plot(xs, medians, color=color, linewidth=2.2, label=label)
        ax.axvline(budget(task, budget_steps), color="gray", linestyle=":", linewidth=1)
        ax.axhline(target, color="gray", linestyle="--", linewidth=1)
        ax.axhline(0.0, color="gray", linestyle=":", linewidth=1)
        ax.set_xlabel("env steps")
        ax.set_ylabel("share of the random → optimum gap (greedy, exact)")
        ax.set_title(f"{task}: every seed (thin) and the median (bold)")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
        fig.tight_layout()
        path = out_dir / f"curves-{task}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        run(args)
        return
    rows = load_rows(*args.jsonl)
    if args.cut_short:
        rows += [
            {**r, "arm": f"{r['arm']} (cut short)"}
            for path in args.jsonl
            if points_path(path).exists()
            for r in partial_rows(points_path(path), rows, args.target)
        ]
    renames = dict(_rename(text) for text in args.rename)
    rows = [{**r, "arm": renames.get(r["arm"], r["arm"])} for r in rows]
    table = summarize_rows(rows, args.target, args.budget)
    if args.plots is not None:
        for path in plot_curves(rows, args.plots, args.target, args.budget):
            print(f"wrote {path}", file=sys.stderr)
    if args.per_seed:
        print(per_seed_markdown(rows, args.target, args.budget))
        return
    if args.markdown:
        print(markdown(table))
        return
    for row in table:
        print(
            f"{row['task']:<22} {row['arm']:<14} {row['reached']:>2} of {row['seeds']:<2} "
            f"({row['within_budget']} within {row['budget']}) "
            f"median steps {row['median_steps']}  gap {row['mean_start_gap']:.2f} -> "
            f"{row['mean_final_gap']:.2f}{_held_text(row, '  ')}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
