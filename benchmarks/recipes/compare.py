"""Comparison benchmark: an LLM agent next to classic RL on the same envs and env-step budget.

A thin front end to :func:`gym_llm.cli.bench.main` (also ``gym-llm bench``) that writes to
``benchmarks/results/compare-<name>/`` by default (``results.csv``, ``summary.md``, a PNG per
env), so kept results sit with the other benchmarks. Run envs as separate invocations with the
same ``--name`` to build one table: each invocation replaces only its own envs' rows.

    python benchmarks/recipes/compare.py --name cpu --envs FrozenLake-v1:is_slippery=False \\
        --agents random,ppo,dqn --budget 128 --classic-budget 10000
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from gym_llm.cli.bench import main as compare_main

RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"


def main(argv: Sequence[str] | None = None) -> int:
    return compare_main(
        list(argv) if argv is not None else sys.argv[1:],
        results_root=RESULTS_DIR,
        prog="python benchmarks/recipes/compare.py",
    )


if __name__ == "__main__":
    raise SystemExit(main())
