"""Memory and speed of full fine-tuning in two processes: whole weights in each (plain data
parallelism) against FSDP-sharded (``PPO(fsdp=True)``, :mod:`gym_llm.rl.common.sharding`).

Two ``torchrun`` jobs, one after the other in one invocation, one torch thread per process. Each
trains one rollout untimed, then times ``learn`` for ``--timesteps`` env steps (over both
processes). Per process it reports the training state it holds between updates (its part of the
weights, gradients and optimizer moments, counted from the tensors), the whole weights it holds
for rollouts, the peak resident memory of its timed rollouts and updates (each measured from
memory after ``malloc_trim``, with the kernel's peak count reset: ``/proc/self/clear_refs``), and
the peak of the whole process (``ru_maxrss``, model loading included).

    python -m benchmarks.speed.sharding --model smollm2-135m --timesteps 32 \\
        --out benchmarks/results/sharding-cpu

Writes ``sharding.json`` and prints a Markdown table with ratios to the unsharded job.
"""

from __future__ import annotations

import argparse
import json
import resource
from pathlib import Path
from typing import Any

from benchmarks.speed.data_parallel import (
    job_parser,
    launch_worker,
    timed_agent,
    timed_learn,
    write_result,
)
from benchmarks.speed.memory import rss_mb, trim_rss_mb

ROOT = Path(__file__).resolve().parents[2]
MB = 2**20


def held_bytes(model: Any) -> dict[str, float]:
    """MB of this process's training state (its parts of the trainable weights, their gradients
    and the optimizer's tensors) and of the weights its rollouts run on."""
    from gym_llm.rl.common.sharding import local

    optimizer = model.policy.optimizer
    params = [p for group in optimizer.param_groups for p in group["params"]]

    def size(t: Any) -> int:
        t = local(t)
        return int(t.numel() * t.element_size())

    weights = sum(size(p) for p in params)
    grads = sum(size(p.grad) for p in params if p.grad is not None)
    moments = sum(
        size(v) for state in optimizer.state.values() for v in state.values() if v.dim() > 0
    )
    rollout = sum(int(p.numel() * p.element_size()) for p in model.policy.lm.parameters())
    return {
        "weights_mb": weights / MB,
        "gradients_mb": grads / MB,
        "optimizer_mb": moments / MB,
        "training_state_mb": (weights + grads + moments) / MB,
        "rollout_weights_mb": rollout / MB,
    }


def reset_peak() -> None:
    """Hand freed heap back (``malloc_trim``) and restart the kernel's peak-RSS count (VmHWM)
    from what is resident now (``clear_refs`` 5, Linux)."""
    trim_rss_mb()
    Path("/proc/self/clear_refs").write_text("5")


def phase_peaks(model: Any) -> dict[str, list[float]]:
    """Record the peak resident memory of every rollout and every update from now on (each
    starting from trimmed memory), in MB, by wrapping the model's two phases."""
    peaks: dict[str, list[float]] = {"rollout": [], "update": []}

    def wrap(name: str, phase: str) -> None:
        method = getattr(model, name)

        def measured(*args: Any, **kwargs: Any) -> Any:
            reset_peak()
            try:
                return method(*args, **kwargs)
            finally:
                peaks[phase].append(rss_mb()[1])

        setattr(model, name, measured)

    wrap("collect_rollouts", "rollout")
    wrap("train", "update")
    return peaks


def worker(args: argparse.Namespace) -> None:
    from gym_llm.rl.common.distributed import gather_objects, is_main_process, rank, world_size

    model = timed_agent(args, fsdp=args.fsdp, policy_kwargs={"lora": None})
    peaks = phase_peaks(model)
    steps, wall = timed_learn(model, args.timesteps)
    mine = {
        "rank": rank(),
        **held_bytes(model),
        **{f"peak_{phase}_mb": max(values) for phase, values in peaks.items()},
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    processes = [p[0] for p in gather_objects([mine])]
    if is_main_process():
        row = {
            "fsdp": args.fsdp,
            "processes": world_size(),
            "env_steps": steps,
            "wall_s": wall,
            "env_steps_per_s": steps / wall,
            "per_process": processes,
        }
        Path(args.report).write_text(json.dumps(row))


COLUMNS = ("training_state_mb", "peak_rollout_mb", "peak_update_mb", "peak_rss_mb")


def table(rows: list[dict[str, Any]]) -> str:
    """Per job: the largest figure over its processes, and its ratio to the first job's."""
    base = rows[0]
    lines = [
        "| weights | training state MB | peak in rollouts MB | peak in updates MB | peak RSS MB "
        "| env steps/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def most(row: dict[str, Any], key: str) -> float:
        return max(float(p[key]) for p in row["per_process"])

    for r in rows:
        cells = [f"{most(r, k):.0f} ({most(r, k) / most(base, k):.2f}x)" for k in COLUMNS]
        speed = r["env_steps_per_s"]
        cells.append(f"{speed:.2f} ({speed / base['env_steps_per_s']:.2f}x)")
        lines.append(
            f"| {'sharded (FSDP)' if r['fsdp'] else 'whole'} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = job_parser("python -m benchmarks.speed.sharding", __doc__, 4, 32, "sharding.json")
    parser.add_argument("--fsdp", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return {}
    jobs: tuple[list[str], ...] = ([], ["--fsdp"])
    rows = [
        launch_worker("benchmarks.speed.sharding", args, 2, args.n_envs, *flags) for flags in jobs
    ]
    text = table(rows)
    return write_result(args, rows, text, "sharding.json", n_envs_per_process=args.n_envs)


if __name__ == "__main__":
    main()
