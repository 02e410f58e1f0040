"""A user's first ``learn()`` where the trunk cache cannot help, this code against a baseline.

    python -m benchmarks.speed.cold_start --baseline 2bba315 \\
        --jsonl benchmarks/results/sweep-speed-cpu/cold.jsonl
    python -m benchmarks.speed.sweep_speed summarize benchmarks/results/sweep-speed-cpu/cold.jsonl

Each call is a fresh process that builds ``PPO("LLMPolicy", env)`` with the library's defaults
and times its first ``learn(--steps)`` (rollouts and updates apart): choice mode on an env whose
observations never repeat (HighLow over nine-digit numbers: every prompt is new, so the trunk
cache only adds its bookkeeping), and generate mode on Blackjack (whose rollouts do not use the
cache). This checkout and ``--baseline`` (a commit, imported from a temporary worktree)
alternate, ``--repeats`` times.
"""

from __future__ import annotations

import argparse
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
from benchmarks.speed.sweep_speed import ROOT, _baseline_tree, _run


def _never_repeating_env() -> Any:
    """HighLow over nine-digit numbers: no observation comes twice in a run."""
    from gym_llm.envs.high_low import HighLowEnv

    class NeverRepeats(HighLowEnv):
        def reset(
            self, *, seed: int | None = None, options: Any = None
        ) -> tuple[str, dict[str, Any]]:
            super().reset(seed=seed)
            self._number = int(self.np_random.integers(10**8, 10**9))
            return self.observation_for(self._number), {"number": self._number}

        def answer(self, number: int) -> str:
            return "high" if number >= 5 * 10**8 else "low"

    return NeverRepeats()


def cold_one(args: argparse.Namespace) -> None:
    """One user's first ``learn()`` in this fresh process: rollout and update timed apart."""
    from gym_llm import PPO, make_text_env
    from gym_llm.rl.ppo import PPO as Algorithm

    if args.mode == "choice":
        env = make_text_env(_never_repeating_env, 8, seed=0)
    else:
        env = make_text_env("Blackjack-v1", 8, env_kwargs={"sab": False}, seed=0)
    model = PPO("LLMPolicy", env, seed=0, device="cpu", policy_kwargs={"action_mode": args.mode})
    spent: dict[str, float] = defaultdict(float)
    original = Algorithm.collect_rollouts

    def rollout(self: Any, *a: Any, **k: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self, *a, **k)
        finally:
            spent["rollout"] += time.perf_counter() - start

    Algorithm.collect_rollouts = rollout
    start = time.perf_counter()
    model.learn(args.steps)
    wall = time.perf_counter() - start
    row = {
        "label": args.label, "env": f"cold-{args.mode}", "seed": 0, "steps": args.steps,
        "wall_s": round(wall, 2), "rollout_s": round(spent["rollout"], 2),
        "update_s": round(wall - spent["rollout"], 2), "values": [0.0],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }  # fmt: skip
    append_jsonl(args.jsonl, row)


def cold(args: argparse.Namespace) -> None:
    """Cold first ``learn()`` calls, this checkout and ``--baseline`` alternating."""
    args.jsonl.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tree = _baseline_tree(args.baseline, Path(tmp))
        try:
            for repeat in range(args.repeats):
                for mode in ("choice", "generate"):
                    for label, environ in (
                        ("baseline", {**os.environ, "PYTHONPATH": str(tree)}),
                        ("this", None),
                    ):
                        command = [
                            sys.executable, "-m", "benchmarks.speed.cold_start",
                            "--steps", str(args.steps), "--jsonl", str(args.jsonl), "one",
                            "--mode", mode, "--label", f"{label}:{repeat}",
                        ]  # fmt: skip
                        _run(command, environ)
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(Path(tmp) / "code")],
                check=False,
            )


def main(argv: Sequence[str] | None = None) -> None:
    from benchmarks.cli_args import new_parser

    parser = new_parser("python -m benchmarks.speed.cold_start", __doc__)
    commands = parser.add_subparsers(dest="command")
    parser.add_argument("--steps", type=int, default=256, help="env steps of the learn() call")
    parser.add_argument("--jsonl", type=Path, required=True, help="append one line per call")
    parser.add_argument("--baseline", default="2bba315", help="the commit to compare with")
    parser.add_argument("--repeats", type=int, default=2, help="calls per code and mode")
    one = commands.add_parser("one", help="one call in this process (what the runner starts)")
    one.add_argument("--mode", choices=["choice", "generate"], required=True)
    one.add_argument("--label", required=True, help="what the line is")
    args = parser.parse_args(argv)
    (cold_one if args.command == "one" else cold)(args)


if __name__ == "__main__":
    main(sys.argv[1:])
