"""The physical floor of a revisited turn with the trunk cached, and how close each phase gets.

    python -m benchmarks.speed.flop_floor --json benchmarks/results/sweep-speed-cpu/floor.json

On SmolLM2-135M (Blackjack, choice mode, the library's defaults) it counts the FLOPs of a turn
whose observation was seen before: the rollout runs the trainable layers forward on the cached
frozen-layer states (plus one LM-head row), the update runs them forward and backward (counted as
``benchmarks.speed.throughput.update_flops`` does). It times both (every Blackjack state scored once;
one PPO update) and this CPU's fp32 matmul rate (2048x2048, torch's threads) in the same process,
and reports each phase's FLOP/s as a share of that ceiling.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.cli_args import write_json


def matmul_ceiling(size: int = 2048, repeats: int = 10) -> float:
    """This machine's fp32 matmul rate (FLOP/s) with torch's threads: the ceiling."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    for _ in range(2):
        a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return repeats * 2 * size**3 / (time.perf_counter() - start)


def floor(args: argparse.Namespace) -> dict[str, Any]:
    """FLOPs per revisited turn and the share of the matmul ceiling each phase reaches."""
    import gymnasium as gym
    import torch

    from benchmarks.speed.throughput import update_flops
    from gym_llm import PPO, make_text_env
    from gym_llm.evaluation.exact import blackjack_states
    from gym_llm.policy.outputs import UpdateWork
    from gym_llm.policy.top_layers import decoder_of, num_layers
    from gym_llm.wrappers import TextObservationWrapper

    env = make_text_env("Blackjack-v1", 8, env_kwargs={"sab": False}, seed=0)
    model = PPO("LLMPolicy", env, seed=0, device="cpu")
    policy = model.policy
    model.learn(256)  # warm: one rollout and update
    formatter = TextObservationWrapper(gym.make("Blackjack-v1", sab=False))
    texts = [formatter.format(state) for state in blackjack_states()]
    with torch.inference_mode():
        policy.act(texts[:8])  # trunk filled for what follows
        policy.trunk_states(texts)
        policy.invalidate_prefix_cache()
        start = time.perf_counter()
        policy.act(texts, deterministic=True)  # every state, trainable layers only
        rollout_s = time.perf_counter() - start
    layers = decoder_of(policy.lm).layers
    per_layer = sum(p.numel() for p in layers.parameters() if p.dim() == 2) / len(layers)
    head = policy.lm.get_output_embeddings().weight.numel()
    top = num_layers(policy.lm) - policy.first_trainable_layer
    suffix = [len(policy.prompt_ids(t)) - len(policy.shared_prefix) for t in texts]
    rollout_flops = sum(2.0 * (n * top * per_layer + head) for n in suffix)
    policy.runner.update_work = UpdateWork()
    start = time.perf_counter()
    model.train()
    update_s = time.perf_counter() - start
    turns = model.n_epochs * model.n_steps * model.n_envs
    update = update_flops(policy, policy.update_work)
    ceiling = matmul_ceiling()
    result = {
        "device": f"CPU ({os.cpu_count()} cores), {torch.get_num_threads()} threads",
        "matmul_ceiling_gflops": ceiling / 1e9,
        "trainable_layers": top,
        "mean_suffix_tokens": sum(suffix) / len(suffix),
        "rollout_gflop_per_turn": rollout_flops / len(texts) / 1e9,
        "rollout_gflops": rollout_flops / rollout_s / 1e9,
        "rollout_share_of_ceiling": rollout_flops / rollout_s / ceiling,
        "update_gflop_per_turn": update / turns / 1e9,
        "update_gflops": update / update_s / 1e9,
        "update_share_of_ceiling": update / update_s / ceiling,
        "update_distinct_rows_per_turn": policy.update_work.head_rows / turns,
    }
    write_json(args.json, result)
    print(json.dumps(result, indent=2))
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from benchmarks.cli_args import new_parser

    parser = new_parser("python -m benchmarks.speed.flop_floor", __doc__)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    return floor(parser.parse_args(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
