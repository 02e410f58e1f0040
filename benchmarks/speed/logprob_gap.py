"""How far rollout log-probs are from the update's recomputation, with each rollout kernel on/off.

    python -m benchmarks.speed.logprob_gap --model smollm2-135m --env Blackjack-v1 --mode generate

PPO's first importance ratio is ``exp(update log-prob - rollout log-prob)``; invariant 1 wants it
at 1. Rollouts and the update run different code (KV caches, batch shapes, packed weights), so
the two agree only to float32 rounding. The tests check it on tiny models; this measures it on a
real one with a *trained-looking* adapter (LoRA B drawn from N(0, ``--lora-b-std``) instead of
the zeros a fresh adapter starts from, which would hide any adapter-path difference; the value
head's weights from N(0, 0.02) instead of zeros, for the same reason), for the
default rollout kernels and with the packed frozen weights switched off, on the same weights,
observations and random seed. Prints and writes (``--json``) the largest and mean absolute
per-token gap and the largest value gap.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.cli_args import add_model_and_env, new_parser, write_json
from gym_llm import make_text_env
from gym_llm.cli.demo import parse_env_kwargs
from gym_llm.experiments.run import device_name
from gym_llm.policy.llm_policy import LLMPolicy
from gym_llm.policy.models import resolve_device


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.speed.logprob_gap", __doc__)
    add = parser.add_argument
    add_model_and_env(add, mode="generate", n_envs_help="observations per rollout batch")
    add("--batches", type=int, default=3, help="rollout batches (vector steps) measured")
    add("--max-new-tokens", type=int, default=32, help="reply budget (generate mode)")
    add("--lora-b-std", type=float, default=0.02, help="std of the random LoRA B weights")
    add("--device", default="auto", help="auto, cpu, cuda or mps")
    add("--seed", type=int, default=0, help="seed for the adapter, the envs and the sampler")
    add("--json", type=Path, default=None, help="write the results here")
    return parser


def measure(policy: LLMPolicy, batches: list[list[str]], seed: int) -> dict[str, float]:
    """Largest/mean |update log-prob - rollout log-prob| per token, and the largest value gap."""
    gaps: list[np.ndarray] = []
    value_gap = 0.0
    for i, observations in enumerate(batches):
        torch.manual_seed(seed + i)
        policy.set_training_mode(False)
        with torch.inference_mode():
            step = policy.act(observations)
        with torch.no_grad():
            ev = policy.evaluate_actions(observations, step.actions)
        for row, stored in enumerate(step.token_log_probs):
            recomputed = ev.token_log_probs[row][ev.mask[row]].cpu().numpy()
            gaps.append(np.abs(recomputed - stored))
        value_gap = max(value_gap, float((ev.values.cpu() - step.values.cpu()).abs().max()))
    every = np.concatenate(gaps)
    return {
        "max_abs_gap": float(every.max()),
        "mean_abs_gap": float(every.mean()),
        "max_value_gap": value_gap,
        "tokens": float(every.size),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    device = resolve_device(args.device)
    env = make_text_env(
        args.env, args.n_envs, env_kwargs=parse_env_kwargs(args.env_kwargs), seed=args.seed
    )
    torch.manual_seed(args.seed)
    policy = LLMPolicy(
        env.observation_space,
        env.action_space,
        lambda _: 1e-4,
        model=args.model,
        lora={"r": 16},
        action_mode=args.mode,
        max_new_tokens=args.max_new_tokens,
        device=device,
    )
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, args.lora_b_std)
        policy.value_head.weight.normal_(0.0, 0.02)  # a zero head would hide any value gap
    listed = getattr(env.action_space, "actions", None)
    reply = listed[0] if listed else ""  # any reply moves the envs on (invalid ones included)
    batches, observations = [], env.reset()
    for _ in range(args.batches):  # a few different states, the same for both settings
        batches.append([str(o) for o in observations])
        observations, *_ = env.step(np.array([reply] * args.n_envs, dtype=object))
    result: dict[str, Any] = {
        "device": device_name(device),
        "model": args.model,
        "mode": args.mode,
        "lora_b_std": args.lora_b_std,
        "default": measure(policy, batches, args.seed),
    }
    policy.runner.pack_frozen_weights = False
    result["packed_weights_off"] = measure(policy, batches, args.seed)
    for name in ("default", "packed_weights_off"):
        r = result[name]
        print(
            f"{name:<20} max |gap| {r['max_abs_gap']:.2e}  mean {r['mean_abs_gap']:.2e}  "
            f"value {r['max_value_gap']:.2e}  over {int(r['tokens'])} tokens"
        )
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
