"""What a user's ``learn()`` costs: a fresh process, the first call cold, settings as given.

    python -m benchmarks.speed.first_call --mode choice --n-epochs 1 --steps 256 --json out.json

``benchmarks/speed/throughput.py`` measures a warm, interleaved steady state; this one measures the call
a user makes. In one fresh process it builds ``PPO`` with PPO's and LLMPolicy's own defaults
except for the settings given here, then runs:

1. ``learn(--steps)``: the **first call**, cold (lazy set-up, first allocations, optimizer state);
2. a block of the naive LlamaGym-style loop (``benchmarks.speed.throughput.NaiveLoop``: batch 1, the
   episode's conversation re-encoded every step, ``generate`` with ``--max-new-tokens``);
3. ``learn(--steps)`` again: the **warm call**;
4. a second naive block.

Each ``learn()`` is split into rollout and update time. The naive loop's rate is the mean over
its two blocks, which bracket the warm call, so a drift of the machine's speed biases the ratio
less. ``--set policy.NAME=VALUE ppo.NAME=VALUE`` sets any other argument (e.g. ``--set
policy.trainable_layers=all`` or ``--set policy.lora=none`` for what those users get). The JSON has every
figure; a table is printed. Peak RSS is the whole process's high-water mark (model load
included); on a GPU also the peak CUDA memory (``--device cuda``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.cli_args import add_model_and_env, add_settings, new_parser, write_json
from benchmarks.speed.throughput import NaiveLoop, _lifetime_rss_mb, _RolloutTimer, _sync
from gym_llm import PPO, make_text_env
from gym_llm.cli.demo import parse_env_kwargs, quiet_progress_bar_warning
from gym_llm.experiments.run import device_name, versions
from gym_llm.policy.models import resolve_device


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.speed.first_call", __doc__)
    add = parser.add_argument
    add_model_and_env(add)
    add("--n-steps", type=int, default=32, help="PPO n_steps (steps per env per rollout)")
    add("--batch-size", type=int, default=64, help="PPO minibatch size")
    add("--n-epochs", type=int, default=None, help="PPO epochs (default: PPO's)")
    add("--steps", type=int, default=256, help="env steps per learn() call")
    add("--naive-steps", type=int, default=16, help="naive-loop env steps, both blocks together")
    add("--max-new-tokens", type=int, default=8, help="reply budget: naive loop and generate mode")
    add_settings(add, example="policy.trainable_layers=all ppo.n_epochs=1")
    add("--device", default="auto", help="auto, cpu, cuda or mps")
    add("--threads", type=int, default=None, help="torch threads (default: torch's)")
    add("--seed", type=int, default=0, help="seed")
    add("--json", type=Path, default=None, help="write the results here")
    return parser


def build_model(args: argparse.Namespace) -> PPO:
    """``PPO`` as a user builds it: only the settings given, everything else the defaults."""
    env = make_text_env(
        args.env, args.n_envs, env_kwargs=parse_env_kwargs(args.env_kwargs), seed=args.seed
    )
    policy_kwargs: dict[str, Any] = {"model": args.model, "action_mode": args.mode}
    if args.mode == "generate":
        policy_kwargs["max_new_tokens"] = args.max_new_tokens
    policy_kwargs.update(args.set["policy"])
    ppo_kwargs: dict[str, Any] = {"n_steps": args.n_steps, "batch_size": args.batch_size}
    if args.n_epochs is not None:
        ppo_kwargs["n_epochs"] = args.n_epochs
    ppo_kwargs.update(args.set["ppo"])
    return PPO(
        "LLMPolicy",
        env,
        policy_kwargs=policy_kwargs,
        seed=args.seed,
        device=str(resolve_device(args.device)),
        **ppo_kwargs,
    )


def timed_learn(model: PPO, steps: int) -> dict[str, float]:
    """One ``learn(steps)`` call, split into rollout and update (evaluation: none)."""
    timer = _RolloutTimer()
    before = model.num_timesteps
    _sync()
    start = time.perf_counter()
    model.learn(steps, callback=timer, reset_num_timesteps=False)
    _sync()
    total = time.perf_counter() - start
    done = model.num_timesteps - before
    return {
        "total_s": total,
        "rollout_s": timer.rollout_s,
        "update_s": total - timer.rollout_s,
        "env_steps_per_s": done / total,
        "rollout_env_steps_per_s": done / max(timer.rollout_s, 1e-9),
        "update_share": (total - timer.rollout_s) / total,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model = build_model(args)
    construct_s = time.perf_counter() - start
    naive_args = argparse.Namespace(
        env=args.env,
        env_kwargs=args.env_kwargs,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
    )
    naive = NaiveLoop(model, naive_args)
    first = timed_learn(model, args.steps)
    half = max(1, args.naive_steps // 2)
    naive_blocks = [naive.run(half)]
    warm = timed_learn(model, args.steps)
    naive_blocks.append(naive.run(half))
    naive_seconds = sum(b["seconds"] for b in naive_blocks)
    naive_rate = 2 * half / naive_seconds
    return {
        "device": device_name(model.device),
        "threads": torch.get_num_threads(),
        "model": args.model,
        "env": args.env,
        "env_kwargs": parse_env_kwargs(args.env_kwargs),
        "mode": args.mode,
        "settings": {
            "n_envs": args.n_envs,
            "n_steps": model.n_steps,
            "batch_size": model.batch_size,
            "n_epochs": model.n_epochs,
            "micro_batch_size": model.micro_batch_size,
            "steps_per_call": args.steps,
            "max_new_tokens": args.max_new_tokens,
            "policy": args.set["policy"],
            "ppo": args.set["ppo"],
        },
        "construct_s": construct_s,
        "first_call": first,
        "warm_call": warm,
        "naive_blocks": naive_blocks,
        "naive_env_steps_per_s": naive_rate,
        "naive_mean_reply_tokens": sum(b["mean_reply_tokens"] for b in naive_blocks) / 2,
        "first_call_vs_naive": first["env_steps_per_s"] / naive_rate,
        "warm_call_vs_naive": warm["env_steps_per_s"] / naive_rate,
        "peak_rss_mb": _lifetime_rss_mb(),
        "peak_cuda_mb": torch.cuda.max_memory_allocated() / 2**20
        if torch.cuda.is_available()
        else None,
        "versions": versions(),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    quiet_progress_bar_warning()
    result = run(args)
    first, warm = result["first_call"], result["warm_call"]
    print(
        f"\n{args.model} on {args.env}, {args.mode} mode, {args.n_envs} envs, "
        f"{result['device']}, {result['threads']} threads; settings {result['settings']}"
    )
    print(f"  PPO(...) built in {result['construct_s']:.1f} s")
    for name, call in (("first learn()", first), ("warm learn() ", warm)):
        print(
            f"  {name}: {call['env_steps_per_s']:.2f} env-steps/s "
            f"(rollout {call['rollout_s']:.1f} s, update {call['update_s']:.1f} s = "
            f"{100 * call['update_share']:.0f}%)"
        )
    print(
        f"  naive loop: {result['naive_env_steps_per_s']:.2f} env-steps/s "
        f"({result['naive_mean_reply_tokens']:.1f} reply tokens)"
    )
    print(
        f"  learn() vs naive: first {result['first_call_vs_naive']:.2f}x, "
        f"warm {result['warm_call_vs_naive']:.2f}x; peak RSS {result['peak_rss_mb']:,.0f} MB"
    )
    write_json(args.json, result)
    if args.json is not None:
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
