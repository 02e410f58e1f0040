"""Seed sweep of the learning tests: are they robust, and by how much?

    python -m benchmarks.recipes.learning_sweep --seeds 0-9 --json benchmarks/results/learning-sweep.json

A learning test that passes for one seed passes by luck: another machine's float rounding
follows another trajectory. This runs the tests' own training function
(``benchmarks.recipes.learning_recipes``, the recipes and checks of the tests) for every mode and
seed, one process per run (``--jobs`` at a time, one torch thread each), and reports each
curve, whether it passes, and the margins that matter: the worst seed's best success (the test
needs >= 0.9), its final success (>= 0.6) and the latest curve point at which a seed first
reached 0.9. ``--jsonl`` appends each run as it finishes and skips the runs already there
(same mode, seed and PPO arguments), so a sweep cut short resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from benchmarks.cli_args import (
    add_settings,
    append_jsonl,
    new_parser,
    read_jsonl,
    seed_list,
    write_json,
)

#: learning_sweep mode -> the corner recipe's arm (benchmarks.recipes.learning_recipes.train_corner).
CORNER_MODES = {
    "corner": "defaults",
    "corner-plain": "plain",
    "corner-head": "head",
    "corner-target": "target",
    "corner-head-target": "head-target",
}


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.recipes.learning_sweep", __doc__)
    add = parser.add_argument
    add("--seeds", type=seed_list, default=list(range(10)), help="e.g. 0-9 or 0,3,7")
    add(
        "--modes",
        nargs="+",
        default=["choice", "generate"],
        choices=["choice", "generate", "constrained", "head", "no-head", *CORNER_MODES],
        help="KeywordBandit's modes (generate: free text; constrained: generate mode's default "
        "replies among the listed actions); HighLow with and without the action head "
        "(tests/rl/ppo/test_learning_head); HighLow from a prior of 0.3 %% for the better arm "
        "(tests/rl/ppo/test_learning_corner: the defaults, neither head nor calibration, the head alone, "
        "neither with policy_update='target')",
    )
    add_settings(
        add, ("ppo",), example="ppo.n_epochs=4 (PPO's for the HighLow modes, to measure a "
        "default change on every seed before making it)",
    )  # fmt: skip
    add("--jobs", type=int, default=2, help="runs at a time (one torch thread each)")
    add("--json", type=Path, default=None, help="write the results here")
    add(
        "--jsonl",
        type=Path,
        default=None,
        help="append each run here as it finishes; runs already there are skipped (resume)",
    )
    return parser


def one_run(mode: str, seed: int, ppo: dict[str, Any] | None = None) -> dict[str, Any]:
    """``ppo``: PPO arguments for the HighLow modes (KeywordBandit's are the test's own)."""
    import torch

    ppo = ppo or {}

    from benchmarks.recipes import learning_recipes as recipes

    torch.set_num_threads(1)
    start = time.perf_counter()
    if mode in CORNER_MODES:
        with tempfile.TemporaryDirectory() as tmp:
            before, curve = recipes.train_corner(Path(tmp), seed, CORNER_MODES[mode], **ppo)
        check, steps = recipes.check_high_low, recipes.STEPS
    elif mode in ("head", "no-head"):
        with tempfile.TemporaryDirectory() as tmp:
            before, curve = recipes.train_high_low(Path(tmp), seed, head=mode == "head", **ppo)
        check, steps = recipes.check_high_low, recipes.STEPS
    else:
        with tempfile.TemporaryDirectory() as tmp:
            before, curve = recipes.train_keyword_bandit(Path(tmp), mode, seed)
        check, steps = recipes.check_keyword_bandit, int(recipes.SETTINGS[mode]["steps"])
    try:
        check(before, curve)
        passed = True
    except AssertionError:
        passed = False
    points = [steps * (i + 1) // len(curve) for i in range(len(curve))]
    reached = next((p for p, v in zip(points, curve, strict=True) if v >= 0.9), None)
    return {
        "mode": mode,
        "seed": seed,
        "ppo": ppo,
        "before": before,
        "steps": points,
        "curve": curve,
        "first_at_0_9": reached,
        "passed": passed,
        "seconds": time.perf_counter() - start,
    }


def _key(mode: str, seed: int, ppo: dict[str, Any] | None) -> tuple[str, int, str]:
    return mode, seed, json.dumps(ppo or {}, sort_keys=True)


def load_runs(path: Path) -> list[dict[str, Any]]:
    """The runs a ``--jsonl`` file holds (none if it does not exist yet)."""
    return read_jsonl(path)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in sorted({r["mode"] for r in runs}):
        mine = [r for r in runs if r["mode"] == mode]
        late = [r["first_at_0_9"] for r in mine]
        out[mode] = {
            "runs": len(mine),
            "passed": sum(r["passed"] for r in mine),
            "worst_best": min(max(r["curve"]) for r in mine),
            "worst_final": min(r["curve"][-1] for r in mine),
            "worst_after_reaching": min(
                min(r["curve"][r["curve"].index(max(r["curve"])) :]) for r in mine
            ),
            "latest_first_at_0_9": None if None in late else max(late),
        }
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    ppo = args.set["ppo"]
    jobs = [(mode, seed, ppo) for mode in args.modes for seed in args.seeds]
    earlier = load_runs(args.jsonl) if args.jsonl is not None else []
    done = {_key(r["mode"], r["seed"], r["ppo"]) for r in earlier}
    wanted = {_key(*job) for job in jobs}
    runs = [r for r in earlier if _key(r["mode"], r["seed"], r["ppo"]) in wanted]
    todo = [job for job in jobs if _key(*job) not in done]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for future in as_completed([pool.submit(one_run, *job) for job in todo]):
            runs.append(future.result())
            append_jsonl(args.jsonl, runs[-1])
    runs.sort(key=lambda r: (args.modes.index(r["mode"]), r["seed"]))
    for run in runs:
        curve = " ".join(f"{v:.2f}" for v in run["curve"])
        print(
            f"{run['mode']:<8} seed {run['seed']}: before {run['before']:.2f} | {curve} | "
            f"0.9 first at {run['first_at_0_9']} | {'pass' if run['passed'] else 'FAIL'} "
            f"({run['seconds']:.0f} s)"
        )
    summary = summarize(runs)
    for mode, figures in summary.items():
        print(f"{mode}: {figures}")
    result = {"runs": runs, "summary": summary}
    write_json(args.json, result)
    if args.json is not None:
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
