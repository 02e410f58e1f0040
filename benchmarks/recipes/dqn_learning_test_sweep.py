"""The seed sweep behind DQN's learning test: every seed of the test's run
(:func:`benchmarks.recipes.learning_recipes.train_dqn_high_low`: tiny model, HighLow, the
library's defaults but for the test's settings), exact success before, after 256 and after 512
env steps, each ``learn`` one call as the test makes it.

    python -m benchmarks.recipes.dqn_learning_test_sweep --seeds 10 --json out.json

The test asserts 1.0 after 512 env steps on three seeds; this sweep is the record that every
seed gets there, with a margin (256 steps).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.cli_args import new_parser, write_json


def sweep(seeds: int, model_dir: Path) -> list[dict[str, Any]]:
    """One row per seed: the success at 0, 256 and 512 env steps."""
    from benchmarks.recipes.learning_recipes import DQN_SETTINGS, train_dqn_high_low
    from gym_llm.rl.dqn.config import DQNConfig

    rows = []
    for seed in range(seeds):
        decay = DQNConfig().learning_rate_decay  # the library's default, which the run keeps
        row: dict[str, Any] = {"seed": seed, **DQN_SETTINGS, "learning_rate_decay": decay}
        for steps in (256, 512):
            row["start"], row[f"at_{steps}"] = train_dqn_high_low(model_dir, seed, steps)
        print(row, flush=True)
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = new_parser("python -m benchmarks.recipes.dqn_learning_test_sweep", __doc__)
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0 .. N-1")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = parser.parse_args(argv)
    from gym_llm.testing import save_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        rows = sweep(args.seeds, save_tiny_model(Path(tmp) / "model", words=["low", "high"]))
    write_json(args.json, rows, indent=1)
    return rows


if __name__ == "__main__":
    main()
