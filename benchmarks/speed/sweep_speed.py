"""What a seed sweep costs: this code against an earlier commit, and the ways to run N seeds.

    python -m benchmarks.speed.sweep_speed compare --baseline 2bba315 --seeds 0 1 --steps 512 \\
        --jsonl benchmarks/results/sweep-speed-cpu/compare.jsonl
    python -m benchmarks.speed.sweep_speed options --seeds 0 1 --steps 512 --jsonl .../options.jsonl
    python -m benchmarks.speed.sweep_speed summarize .../compare.jsonl .../options.jsonl

Every run is a sweep as users write it: ``gym_llm.experiments.run.run`` with the library's
defaults (8 envs, ``n_steps`` 32, minibatch 64, 2 epochs) and the exact evaluation of the greedy
policy every ``--every`` env steps (curve points), in a fresh process (``one``) that splits its
time into rollouts, updates and evaluations and writes one JSONL line per seed.

``compare`` runs the same slice with this checkout and with ``--baseline`` (a commit, checked
out in a temporary git worktree and imported in place of the installed package), alternating
code by code for each (env, seed), so a drift in the machine's speed hits both alike.
``options`` runs the same seeds three ways with this checkout: one fresh process per seed one
after another, all seeds in one process (sharing the loaded model's trunk cache), and
``--workers`` processes side by side with ``threads / workers`` threads each. Lines already in the
JSONL are skipped, so a cut-off sweep resumes where it stopped. ``benchmarks/speed/cold_start.py``
times a user's first ``learn()`` where the trunk cache cannot help, ``benchmarks/speed/flop_floor.py``
the FLOPs of a revisited turn against this machine's matmul ceiling.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.cli_args import append_jsonl

_STARTED = time.perf_counter()
ROOT = Path(__file__).resolve().parents[2]
#: (env id, kwargs as JSON) of the two sweeps the targets name.
ENVS = {
    "blackjack": ("Blackjack-v1", '{"sab": false}'),
    "frozenlake": ("FrozenLake-v1", '{"is_slippery": false}'),
}


def _timed_run(
    env: str, env_kwargs: dict[str, Any], seed: int, steps: int, every: int
) -> dict[str, Any]:
    """One training run with its time split; only names both codes have (the baseline too)."""
    import gym_llm.experiments.run as run_module
    from gym_llm.rl.ppo import PPO

    spent: dict[str, float] = defaultdict(float)
    originals = (PPO.collect_rollouts, PPO.train, run_module.exact_policy_value)

    def rollout(self: Any, *args: Any, **kwargs: Any) -> Any:
        start, evaluated = time.perf_counter(), spent["eval"]
        try:
            return originals[0](self, *args, **kwargs)
        finally:  # evaluations run by a callback at a rollout's end are counted as evaluation
            spent["rollout"] += time.perf_counter() - start - (spent["eval"] - evaluated)

    def train(self: Any) -> None:
        start = time.perf_counter()
        originals[1](self)
        spent["update"] += time.perf_counter() - start

    def evaluate(*args: Any, **kwargs: Any) -> float:
        start = time.perf_counter()
        try:
            return float(originals[2](*args, **kwargs))
        finally:
            spent["eval"] += time.perf_counter() - start

    PPO.collect_rollouts, PPO.train = rollout, train
    run_module.exact_policy_value = evaluate
    try:
        rollouts = steps // 256
        config = run_module.TrainConfig(
            env=env,
            env_kwargs=env_kwargs,
            timesteps=steps,
            eval_episodes=0,
            eval_points=max(0, rollouts // max(1, every // 256) - 1),
            seed=seed,
            device="cpu",
        )
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as run_dir:
            result = run_module.run(config, Path(run_dir), progress_bar=False)
        wall = time.perf_counter() - start
    finally:
        PPO.collect_rollouts, PPO.train, run_module.exact_policy_value = originals
    cache = getattr(result.model.policy, "trunk_cache", None)
    return {
        "wall_s": round(wall, 2),
        **{f"{k}_s": round(v, 2) for k, v in spent.items()},
        "values": [round(p.value, 4) for p in result.curve],
        "trunk_hit_rate": round(cache.stats.hit_rate, 3) if cache is not None else None,
    }


def one(args: argparse.Namespace) -> None:
    """The seeds of one env, in this process, one JSONL line each."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    for seed in args.seeds:
        row = _timed_run(args.env, json.loads(args.env_kwargs), seed, args.steps, args.every)
        row |= {
            "label": args.label,
            "env": args.env,
            "seed": seed,
            "steps": args.steps,
            "threads": torch.get_num_threads(),
            "process_s": round(time.perf_counter() - _STARTED, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        }
        append_jsonl(args.jsonl, row)


def _one_command(
    env: str, seeds: Sequence[int], args: argparse.Namespace, label: str, threads: int = 0
) -> list[str]:
    env_id, kwargs = ENVS[env]
    return [
        sys.executable, "-m", "benchmarks.speed.sweep_speed", "one", "--env", env_id,
        "--env-kwargs", kwargs, "--seeds", *map(str, seeds), "--steps", str(args.steps),
        "--every", str(args.every), "--label", label, "--threads", str(threads),
        "--jsonl", str(args.jsonl),
    ]  # fmt: skip


def _baseline_tree(ref: str, where: Path) -> Path:
    """``where/gym_llm`` laid out from commit ``ref`` as the package installs it."""
    code = where / "code"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(code), ref],
        check=True,
        capture_output=True,
    )
    package = where / "tree" / "gym_llm"
    package.mkdir(parents=True)
    for item in (code / "llm_policy").iterdir():
        (package / item.name).symlink_to(item)
    (package / "wrappers").symlink_to(code / "wrappers")
    (package / "envs").symlink_to(code / "envs")
    return package.parent


def _done(jsonl: Path) -> set[tuple[str, str, int]]:
    if not jsonl.exists():
        return set()
    rows = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    return {(r["label"], r["env"], r["seed"]) for r in rows}


def _run(command: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, env=env)
    return time.perf_counter() - start


def compare(args: argparse.Namespace) -> None:
    """This checkout and ``--baseline``, alternating, one fresh process per (code, env, seed)."""
    args.jsonl.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tree = _baseline_tree(args.baseline, Path(tmp))
        old_env = {**os.environ, "PYTHONPATH": str(tree)}
        try:
            for env in args.envs:
                for seed in args.seeds:
                    for label, environ in (("baseline", old_env), ("this", None)):
                        if (label, ENVS[env][0], seed) not in _done(args.jsonl):
                            _run(_one_command(env, [seed], args, label), environ)
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(Path(tmp) / "code")],
                check=False,
            )


def options(args: argparse.Namespace) -> None:
    """The same seeds run three ways with this checkout; each way's wall clock is one line."""
    args.jsonl.parent.mkdir(parents=True, exist_ok=True)
    cores = args.threads or os.cpu_count() or 1
    for env in args.envs:
        ways: dict[str, Any] = {
            "processes-in-turn": lambda e=env: sum(
                _run(_one_command(e, [s], args, "processes-in-turn")) for s in args.seeds
            ),
            "one-process": lambda e=env: _run(_one_command(e, args.seeds, args, "one-process")),
            f"{args.workers}-workers": lambda e=env: _side_by_side(e, args, cores),
        }
        for way, go in ways.items():
            if (f"{way}:total", ENVS[env][0], -1) in _done(args.jsonl):
                continue
            wall = go()
            row = {"label": f"{way}:total", "env": ENVS[env][0], "seed": -1, "sweep_s": wall}
            append_jsonl(args.jsonl, row | {"seeds": len(args.seeds)})


def _side_by_side(env: str, args: argparse.Namespace, cores: int) -> float:
    workers = max(1, min(args.workers, len(args.seeds)))
    threads = max(1, cores // workers)
    label = f"{args.workers}-workers"
    start = time.perf_counter()
    children = [
        subprocess.Popen(
            _one_command(env, args.seeds[w::workers], args, label, threads),
            cwd=ROOT,
            env={**os.environ, "OMP_NUM_THREADS": str(threads)},
        )
        for w in range(workers)
    ]
    if any(child.wait() != 0 for child in children):
        raise RuntimeError(f"a worker of {label} failed")
    return time.perf_counter() - start


def summarize(files: Sequence[Path]) -> str:
    """Per env and label: seconds per seed (split) and, against the baseline, the ratio."""
    rows = [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]
    lines = [
        "| env | code or way | seeds | s per seed: all (rollout / update / eval) | "
        "sweep s | vs baseline | peak RSS MB | final values |",
        "|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[row["env"], row["label"].split(":")[0]].append(row)
    for (env, label), group in sorted(groups.items()):
        runs = [r for r in group if r["seed"] >= 0]
        totals = [r for r in group if r["seed"] < 0]
        if not runs:
            continue
        n = len(runs)
        per_seed = sum(r["wall_s"] for r in runs) / n
        split = " / ".join(f"{sum(r.get(f'{k}_s', 0.0) for r in runs) / n:.1f}" for k in
                           ("rollout", "update", "eval"))  # fmt: skip
        sweep = f"{totals[-1]['sweep_s']:.0f}" if totals else ""
        base = [r for r in groups.get((env, "baseline"), []) if r["seed"] >= 0]
        seeds = {r["seed"] for r in runs} & {r["seed"] for r in base}
        ratio = ""
        if base and label != "baseline" and seeds:
            old = sum(r["wall_s"] for r in base if r["seed"] in seeds)
            new = sum(r["wall_s"] for r in runs if r["seed"] in seeds)
            ratio = f"{old / new:.2f}x"
        values = " / ".join(str(r["values"][-1]) for r in runs)
        rss = max(r["peak_rss_mb"] for r in runs)
        lines.append(
            f"| {env} | {label} | {n} | {per_seed:.1f} ({split}) | {sweep} | {ratio} | {rss} | "
            f"{values} |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    from benchmarks.cli_args import new_parser

    parser = new_parser("python -m benchmarks.speed.sweep_speed", __doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("compare", "this checkout against --baseline, alternating"),
        ("options", "N seeds in turn, in one process, or side by side"),
        ("one", "the seeds of one env in this process (what the others start)"),
    ):
        sub = commands.add_parser(name, help=text)
        add = sub.add_argument
        add("--seeds", type=int, nargs="+", default=[0, 1], help="seeds")
        add("--steps", type=int, default=512, help="env steps per seed")
        add("--every", type=int, default=256, help="env steps between exact evaluations")
        add("--jsonl", type=Path, required=True, help="append one line per seed here")
        add("--threads", type=int, default=0, help="torch threads (0: torch's default)")
        if name == "one":
            add("--env", required=True, help="Gymnasium env id")
            add("--env-kwargs", default="{}", help="env kwargs as JSON")
            add("--label", required=True, help="what the line is (code or way)")
        else:
            add("--envs", nargs="+", choices=sorted(ENVS), default=sorted(ENVS), help="envs")
        if name == "compare":
            add("--baseline", default="2bba315", help="the commit to compare with")
        if name == "options":
            add("--workers", type=int, default=2, help="processes side by side")
    summary = commands.add_parser("summarize", help="a markdown table from the JSONL files")
    summary.add_argument("files", nargs="+", type=Path, help="JSONL files")
    return parser


def main(argv: Sequence[str] | None = None) -> Any:
    args = build_parser().parse_args(argv)
    if args.command == "summarize":
        table = summarize(args.files)
        print(table)
        return table
    return {"one": one, "compare": compare, "options": options}[args.command](args)


if __name__ == "__main__":
    main(sys.argv[1:])
