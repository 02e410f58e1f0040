"""What each advantage estimator costs a ``learn()`` block, measured side by side.

    python -m benchmarks.speed.estimator_cost                      # SmolLM2-135M, Blackjack, CPU
    python -m benchmarks.speed.estimator_cost --estimators gae q --device cuda --n-envs 64

PPO's action values (``advantage_estimator="q"``, what ``"auto"`` picks in choice mode) add work
to every rollout: each new observation's frozen features, and TD steps on the replay. This builds
one PPO per estimator on the same env and seed, each in a process of its own, runs one warm
``learn()`` block each, then ``--repeats`` timed blocks, the estimators taking turns so that a
machine's load falls on all of them alike, and reports each one's rollout and update seconds (medians) and its ratio to the
first estimator's.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch

from benchmarks.cli_args import new_parser, write_json
from benchmarks.speed.throughput import _make_ppo, learn_block

FIGURES = ("rollout_s", "update_s", "rollout_env_steps_per_s", "learn_env_steps_per_s")

_model: Any = None  # the PPO of a worker process


def _build(args: argparse.Namespace, estimator: str) -> None:
    """A worker's PPO, warmed by one block (first-call costs, the replay's and caches' fill)."""
    global _model
    torch.set_num_threads(args.threads)
    _model = _make_ppo(args, args.n_steps, advantage_estimator=estimator)
    learn_block(_model)


def _block() -> dict[str, float]:
    figures = learn_block(_model)
    return {k: figures[k] for k in FIGURES}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Per estimator: the median of each figure over the timed blocks, and each block's.

    Each estimator's PPO lives in a process of its own, so no cache is shared (policies on
    the same model in one process share the trunk cache, and the second would find the first's
    observations computed); the processes take turns, one block at a time."""
    context = multiprocessing.get_context("spawn")
    workers = {
        e: ProcessPoolExecutor(1, mp_context=context, initializer=_build, initargs=(args, e))
        for e in args.estimators
    }
    blocks: dict[str, list[dict[str, float]]] = {e: [] for e in args.estimators}
    try:
        for worker in workers.values():
            worker.submit(int).result()  # built and warmed, one after the other
        for _ in range(args.repeats):
            for estimator, worker in workers.items():
                blocks[estimator].append(worker.submit(_block).result())
    finally:
        for worker in workers.values():
            worker.shutdown()
    first = args.estimators[0]
    out: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(args).items()}}
    for estimator, rows in blocks.items():
        median = {k: statistics.median(r[k] for r in rows) for k in FIGURES}
        out[estimator] = {"median": median, "blocks": rows}
    for estimator in args.estimators:
        mine, base = out[estimator]["median"], out[first]["median"]
        out[estimator]["rollout_s_over_" + first] = mine["rollout_s"] / base["rollout_s"]
        out[estimator]["learn_speed_over_" + first] = (
            mine["learn_env_steps_per_s"] / base["learn_env_steps_per_s"]
        )
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = new_parser("python -m benchmarks.speed.estimator_cost", __doc__)
    parser.add_argument(
        "--estimators",
        nargs="+",
        default=["gae", "auto"],
        help="advantage_estimator values; ratios are to the first",
    )
    parser.add_argument("--model", default="smollm2-135m", help="registry name or local path")
    parser.add_argument("--env", default="Blackjack-v1", help="Gymnasium env id")
    parser.add_argument("--env-kwargs", nargs="*", default=["sab=False"], help="KEY=VALUE ...")
    parser.add_argument("--n-envs", type=int, default=8, help="parallel envs")
    parser.add_argument("--n-steps", type=int, default=16, help="PPO n_steps (one block's rollout)")
    parser.add_argument("--repeats", type=int, default=2, help="timed blocks per estimator")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--dtype", default=None, help="model dtype (default: the device's)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)
    # What throughput's PPO reads besides the flags above.
    args.mode, args.trainable_layers = "choice", "auto"
    args.max_new_tokens = args.micro_batch_size = None
    out = measure(args)
    for estimator in args.estimators:
        median = out[estimator]["median"]
        print(
            f"{estimator:>5}: rollout {median['rollout_s']:.1f} s, update {median['update_s']:.1f} s,"
            f" learn {median['learn_env_steps_per_s']:.2f} env steps/s"
            f" (rollout x{out[estimator]['rollout_s_over_' + args.estimators[0]]:.2f})"
        )
    write_json(args.json, out, indent=1)
    return out


if __name__ == "__main__":
    main()
