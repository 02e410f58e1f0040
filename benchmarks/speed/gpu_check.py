"""The GPU checklist: what to measure first on any CUDA machine, in one command (~15 minutes).

    make gpu-check                        # = python -m benchmarks.speed.gpu_check --device cuda
    python -m benchmarks.speed.gpu_check --device cpu --model <tiny dir> --envs 2 4 --seeds 1 ...

Runs, on SmolLM2-135M in choice mode (Blackjack, ``sab=False``) unless told otherwise:

1. **bf16 against fp32**: one rollout and its first update in each dtype, same seed: the largest
   importance-ratio error on the first minibatch (invariant 1: ~0) and the update's approximate
   KL.
2. **Rollout env steps/s** at each ``--envs`` count (8 / 64 / 256) in one process, one warm
   ``learn()`` block each, and the update's model FLOP utilisation (MFU) and tokens/s.
3. **Peak memory** of each block (CUDA allocations; RSS).
4. **A ``--seeds``-seed FrozenLake sweep** (not slippery, ``--sweep-steps`` env steps, exact
   evaluation every 256), the seeds one after another in this process: value per seed, how many
   reached the optimum, seconds per seed.

Writes every figure to ``--json`` and appends a section naming the device to ``--results``
(``benchmarks/RESULTS.md``). On a machine without a GPU, ``--device cpu`` runs the same steps
(smaller with the flags above), which is how the checklist itself is tested.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

import torch
from stable_baselines3.common.logger import KVWriter, Logger

from benchmarks.cli_args import new_parser, write_json
from benchmarks.speed.throughput import PEAK_BF16_TFLOPS, PeakMemory, _make_ppo, learn_block
from gym_llm.experiments.run import device_name
from gym_llm.policy.models import DEFAULT_MODEL, resolve_device


class _Capture(KVWriter):
    """Keeps the last value of every logged figure (SB3 clears its logger at each dump)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def write(self, key_values: dict[str, Any], key_excluded: Any, step: int = 0) -> None:
        self.values.update(key_values)


def _args(args: argparse.Namespace, n_envs: int, dtype: str | None) -> argparse.Namespace:
    """The flags ``benchmarks.speed.throughput._make_ppo`` reads."""
    return argparse.Namespace(
        env="Blackjack-v1", env_kwargs=["sab=False"], n_envs=n_envs, seed=0, model=args.model,
        mode="choice", trainable_layers="auto", dtype=dtype, max_new_tokens=None,
        micro_batch_size=None, device=args.device,
    )  # fmt: skip


def dtype_check(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Per dtype: first-minibatch ratio error and first-update approximate KL."""
    figures = {}
    for dtype in ("fp32", "bf16"):
        model = _make_ppo(_args(args, 8, dtype), n_steps=8)
        capture = _Capture()
        model.set_logger(Logger(folder=None, output_formats=[capture]))
        model.learn(model.n_steps * model.n_envs)
        figures[dtype] = {
            "first_ratio_error": float(model.first_ratio_error),
            # SB3 dumps before each update, so the last update's figures are still pending.
            "approx_kl": float(
                model.logger.name_to_value.get(
                    "train/approx_kl", capture.values.get("train/approx_kl", float("nan"))
                )
            ),
        }
        del model
        _empty_cache()
    return figures


def throughput_check(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Per env count: a warm learn() block's rollout env steps/s, update MFU, peak memory."""
    device = resolve_device(args.device)
    peak_tflops = None
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        peak_tflops = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    figures: dict[str, dict[str, Any]] = {}
    for n_envs in args.envs:
        model = _make_ppo(_args(args, n_envs, None), n_steps=args.n_steps)
        learn_block(model)  # cold: first allocations, lazy set-up, the trunk cache filled
        peak = PeakMemory()
        block = learn_block(model, peak)
        figures[str(n_envs)] = {
            "rollout_env_steps_per_s": block["rollout_env_steps_per_s"],
            "learn_env_steps_per_s": block["learn_env_steps_per_s"],
            "update_tokens_per_s": block["update_tokens_per_s"],
            "update_mfu": block["update_flops_per_s"] / (peak_tflops * 1e12)
            if peak_tflops
            else None,
            "peak_cuda_mb": peak.cuda_mb,
            "peak_rss_mb": peak.rss_mb,
        }
        del model
        _empty_cache()
    return figures


def sweep_check(args: argparse.Namespace) -> dict[str, Any]:
    """``--seeds`` FrozenLake runs with exact evaluation, one after another in this process."""
    import tempfile

    from gym_llm.evaluation.exact import exact_optimum
    from gym_llm.experiments.run import TrainConfig, run

    env_kwargs = {"is_slippery": False}
    optimum = exact_optimum("FrozenLake-v1", env_kwargs)
    rollouts = max(1, args.sweep_steps // 256)
    runs = []
    for seed in range(args.seeds):
        config = TrainConfig(
            env="FrozenLake-v1",
            env_kwargs=env_kwargs,
            timesteps=args.sweep_steps,
            eval_episodes=0,
            eval_points=max(0, rollouts - 1),
            seed=seed,
            device=args.device,
        ).with_settings({"policy.model": args.model})
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as run_dir:
            result = run(config, Path(run_dir), progress_bar=False)
        values = [p.value for p in result.curve]
        runs.append({"seed": seed, "wall_s": time.perf_counter() - start, "values": values})
    reached = sum(any(v >= optimum - 1e-9 for v in r["values"]) for r in runs)
    return {"optimum": optimum, "reached": reached, "seeds": args.seeds, "runs": runs}


def _empty_cache() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def report(result: dict[str, Any]) -> str:
    """The markdown section appended to RESULTS.md."""
    lines = [
        f"### GPU checklist — {result['device']} ({result['date']})",
        "",
        f"Model {result['model']}, choice mode; `python -m benchmarks.speed.gpu_check` "
        f"({result['wall_s']:.0f} s in all).",
        "",
        "| dtype | first-minibatch ratio error | first-update approx KL |",
        "|---|---|---|",
    ]
    for dtype, row in result["dtype"].items():
        lines.append(f"| {dtype} | {row['first_ratio_error']:.2e} | {row['approx_kl']:.2e} |")
    lines += [
        "",
        "| envs | rollout env steps/s | learn env steps/s | update tokens/s | update MFU | "
        "peak CUDA MB | peak RSS MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for n_envs, row in result["throughput"].items():
        mfu = f"{row['update_mfu']:.1%}" if row["update_mfu"] is not None else "—"
        cuda = f"{row['peak_cuda_mb']:.0f}" if row["peak_cuda_mb"] is not None else "—"
        lines.append(
            f"| {n_envs} | {row['rollout_env_steps_per_s']:.1f} | "
            f"{row['learn_env_steps_per_s']:.1f} | {row['update_tokens_per_s']:.0f} | {mfu} | "
            f"{cuda} | {row['peak_rss_mb']:.0f} |"
        )
    lines += ["", sweep_line(result["sweep"], result["sweep_steps"]), ""]
    return "\n".join(lines)


def sweep_line(sweep: dict[str, Any], steps: int) -> str:
    """The sweep's sentence; ``--seeds 0`` (a short lease) says it was skipped, not "0 of 0"."""
    if not sweep["runs"]:
        return "FrozenLake sweep: skipped (`--seeds 0`)."
    per_seed = sum(r["wall_s"] for r in sweep["runs"]) / len(sweep["runs"])
    finals = " / ".join(f"{r['values'][-1]:.2f}" for r in sweep["runs"])
    return (
        f"FrozenLake 4x4 (not slippery), {steps} env steps, exact evaluation every 256: "
        f"**{sweep['reached']} of {sweep['seeds']} seeds reached the optimum "
        f"({sweep['optimum']:.2f})**; final values {finals}; {per_seed:.0f} s per seed."
    )


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.speed.gpu_check", __doc__)
    add = parser.add_argument
    add("--device", default="cuda", help="cuda (the checklist), or cpu to test it")
    add("--model", default=DEFAULT_MODEL, help="registry name or local model path")
    add("--envs", type=int, nargs="+", default=[8, 64, 256], help="env counts for throughput")
    add("--n-steps", type=int, default=8, help="steps per env in each throughput block")
    add("--seeds", type=int, default=10, help="FrozenLake sweep seeds")
    add("--sweep-steps", type=int, default=2048, help="env steps per sweep seed")
    add("--json", type=Path, default=None, help="write every figure here")
    add("--results", type=Path, default=None, help="append the markdown section here")
    return parser


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    device = resolve_device(args.device)
    if args.device.startswith("cuda") and device.type != "cuda":
        raise SystemExit("gpu_check: no CUDA device here; use --device cpu to test the checklist.")
    start = time.perf_counter()
    result: dict[str, Any] = {
        "device": device_name(device),
        "date": date.today().isoformat(),
        "model": args.model,
        "sweep_steps": args.sweep_steps,
        "dtype": dtype_check(args),
        "throughput": throughput_check(args),
        "sweep": sweep_check(args),
    }
    result["wall_s"] = time.perf_counter() - start
    section = report(result)
    print(section)
    write_json(args.json, result)
    if args.results is not None:
        with args.results.open("a") as out:
            out.write("\n" + section)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
