"""Env steps per second of ``PPO.learn()`` in one process and data-parallel in two.

Three jobs, measured one after the other in one invocation, each started with ``torchrun``
(one torch thread per process): one process with ``--n-envs`` envs; one process with twice as
many (the global rollout of the two-process job); two processes with ``--n-envs`` envs each.
Each job first trains one rollout untimed (first-call costs), then times ``learn`` for
``--timesteps`` env steps (counted over every process, as ``total_timesteps`` is).

    python -m benchmarks.speed.data_parallel --model smollm2-135m --timesteps 256 \\
        --out benchmarks/results/data-parallel-cpu

Writes ``data_parallel.json`` and prints a Markdown table with the ratios to the first job.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.cli_args import add_model_and_env, new_parser

ROOT = Path(__file__).resolve().parents[2]


def timed_agent(args: argparse.Namespace, **ppo_kwargs: Any) -> Any:
    """This process's agent (one torch thread, one rollout per update, one epoch), with one
    rollout trained untimed (first calls: kernels, caches, allocator)."""
    import torch

    from gym_llm import PPO, LLMPolicy, make_text_env
    from gym_llm.cli.demo import parse_env_kwargs
    from gym_llm.rl.common.distributed import world_size

    torch.set_num_threads(1)
    env = make_text_env(
        args.env, args.n_envs, env_kwargs=parse_env_kwargs(args.env_kwargs), seed=args.seed
    )
    policy_kwargs = {"model": args.model, "action_mode": args.mode}
    model = PPO(
        LLMPolicy,
        env,
        n_steps=args.n_steps,
        batch_size=args.n_steps * args.n_envs,
        n_epochs=1,
        seed=args.seed,
        device="cpu",
        policy_kwargs={**policy_kwargs, **ppo_kwargs.pop("policy_kwargs", {})},
        **ppo_kwargs,
    )
    model.learn(args.n_steps * args.n_envs * world_size())
    return model


def timed_learn(model: Any, timesteps: int) -> tuple[int, float]:
    """(env steps, seconds) of ``learn`` for ``timesteps`` more env steps."""
    before = model.num_timesteps
    start = time.perf_counter()
    model.learn(before + timesteps, reset_num_timesteps=False)
    return model.num_timesteps - before, time.perf_counter() - start


def worker(args: argparse.Namespace) -> None:
    """One process of a job: warm up, time ``learn``, the main process writes the figures."""
    from gym_llm.rl.common.distributed import is_main_process, world_size

    model = timed_agent(args)
    rollout = args.n_steps * args.n_envs * world_size()
    steps, wall = timed_learn(model, args.timesteps)
    if is_main_process():
        row = {
            "processes": world_size(),
            "n_envs_per_process": args.n_envs,
            "env_steps": steps,
            "updates": steps // rollout,
            "wall_s": wall,
            "env_steps_per_s": steps / wall,
        }
        Path(args.report).write_text(json.dumps(row))


def launch_worker(
    module: str, args: argparse.Namespace, processes: int, n_envs: int, *extra: str
) -> dict[str, Any]:
    """Run ``python -m MODULE --worker`` with this invocation's settings under ``torchrun`` in
    ``processes`` processes (one torch thread each); the row its main process reports."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "row.json"
        command = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", str(processes), "-m", module, "--worker",
            "--model", args.model, "--env", args.env, "--mode", args.mode,
            "--n-envs", str(n_envs), "--n-steps", str(args.n_steps),
            "--timesteps", str(args.timesteps), "--seed", str(args.seed), "--report", str(report),
            *extra, "--env-kwargs", *args.env_kwargs,
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        subprocess.run(command, env=env, check=True, cwd=ROOT)
        row: dict[str, Any] = json.loads(report.read_text())
    return row


def job_parser(prog: str, doc: str | None, n_steps: int, timesteps: int, out: str) -> Any:
    """The arguments both launcher benchmarks take (and their workers' hidden ones)."""
    parser = new_parser(prog, doc)
    add = parser.add_argument
    add_model_and_env(add, n_envs_help="envs per process")
    add("--n-steps", type=int, default=n_steps, help="steps per env per rollout")
    add("--timesteps", type=int, default=timesteps, help="timed env steps (all processes)")
    add("--seed", type=int, default=0)
    add("--out", type=Path, default=None, help=f"directory for {out}")
    add("--worker", action="store_true", help=argparse.SUPPRESS)
    add("--report", default=None, help=argparse.SUPPRESS)
    return parser


def table(rows: list[dict[str, Any]]) -> str:
    base = rows[0]["env_steps_per_s"]
    lines = [
        "| processes | envs per process | env steps | updates | wall s | env steps/s | ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['processes']} | {r['n_envs_per_process']} | {r['env_steps']} | "
            f"{r['updates']} | {r['wall_s']:.1f} | {r['env_steps_per_s']:.2f} | "
            f"{r['env_steps_per_s'] / base:.2f} |"
        )
    return "\n".join(lines)


def write_result(
    args: argparse.Namespace, rows: list[dict[str, Any]], text: str, name: str, **extra: Any
) -> dict[str, Any]:
    """Print the table; write the rows with the settings and the device to ``--out``/name."""
    result = {
        "device": f"CPU ({platform.machine()}, {os.cpu_count()} cores), 1 torch thread/process",
        "model": args.model,
        "env": args.env,
        "mode": args.mode,
        "n_steps": args.n_steps,
        **extra,
        "rows": rows,
    }
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / name).write_text(json.dumps(result, indent=2))
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = job_parser(
        "python -m benchmarks.speed.data_parallel", __doc__, 8, 256, "data_parallel.json"
    )
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return {}
    jobs = [(1, args.n_envs), (1, 2 * args.n_envs), (2, args.n_envs)]
    rows = [launch_worker("benchmarks.speed.data_parallel", args, p, n) for p, n in jobs]
    return write_result(args, rows, table(rows), "data_parallel.json")


if __name__ == "__main__":
    main()
