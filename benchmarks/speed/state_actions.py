"""What per-state action lists cost per step, against one fixed list of the same size.

One ``act`` call on a batch of observations, three ways, each batch of fresh texts (no cache
hit, no remembered scores: the cost of a state seen for the first time):

- ``fixed``: ``TextActions(actions=...)``, one list for the policy;
- ``per-state, one list``: every observation carries the same list (one group);
- ``per-state, all different``: every observation carries its own list of the same size (one
  group per row: the worst case, a batch of ``n`` passes of one row each).

The texts are identical across the three (the list is written into every observation), so the
prompts have the same length. Writes a JSON file and prints a table.

    python -m benchmarks.speed.state_actions --json benchmarks/results/state-actions/cpu.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

VERBS = ("open", "take", "examine", "go to", "close", "put", "eat", "read")
THINGS = ("the door", "the coin", "the red box", "the kitchen", "the fridge", "a book", "an apple")


def _lists(n: int, k: int, same: bool) -> list[list[str]]:
    commands = [f"{v} {t}" for v in VERBS for t in THINGS]
    if same:
        return [commands[:k]] * n
    return [commands[i * k : (i + 1) * k] for i in range(n)]


def _observations(step: int, lists: list[list[str]], carry: bool, tag: int) -> list[str]:
    from gym_llm.wrappers.valid_actions import with_actions

    texts = [f"Turn {step}.{tag}, room {i}: you see a table and a door." for i in range(len(lists))]
    shown = [with_actions(t, a) for t, a in zip(texts, lists, strict=True)]
    return shown if carry else [str(s) for s in shown]


def _time_act(policy: Any, batches: list[list[str]]) -> float:
    policy.act(batches[0])  # warm-up: kernels, the shared prefix
    start = time.perf_counter()
    for batch in batches[1:]:
        policy.act(batch)
    return (time.perf_counter() - start) / (len(batches) - 1)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gym_llm import LLMPolicy
    from gym_llm.policy.trunk_cache import clear_shared_trunk_caches
    from gym_llm.spaces import TextActions, TextObservations

    torch.manual_seed(0)
    results: dict[str, Any] = {"model": args.model, "n": args.n, "k": args.k, "steps": args.steps}
    arms = {
        "fixed": (False, True),
        "per-state, one list": (True, True),
        "per-state, all different": (True, False),
    }
    for tag, (arm, (per_state, same)) in enumerate(arms.items()):
        clear_shared_trunk_caches()  # every arm meets its states for the first time
        lists = _lists(args.n, args.k, same)
        space = TextActions(None, per_state=True) if per_state else TextActions(tuple(lists[0]))
        policy = LLMPolicy(
            TextObservations(), space, lambda _: 1e-4, model=args.model, device=args.device,
            memoize_choice_scores=False,
        )  # fmt: skip
        batches = [_observations(s, lists, per_state, tag) for s in range(args.steps + 1)]
        with torch.inference_mode():
            seconds = _time_act(policy, batches)
        results[arm] = {"seconds_per_step": seconds}
        print(f"{arm}: {seconds * 1000:.0f} ms per step of {args.n} observations")
        del policy
    base = results["fixed"]["seconds_per_step"]
    for arm in arms:
        results[arm]["ratio_to_fixed"] = results[arm]["seconds_per_step"] / base
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="registry name or local path")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--n", type=int, default=8, help="observations per step")
    parser.add_argument("--k", type=int, default=4, help="actions per state")
    parser.add_argument("--steps", type=int, default=5, help="timed steps (after one warm-up)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    results = run(args)
    print("| arm | ms per step | × fixed |\n|---|---:|---:|")
    for arm, figures in results.items():
        if isinstance(figures, dict):
            print(f"| {arm} | {figures['seconds_per_step'] * 1000:.0f} | "
                  f"{figures['ratio_to_fixed']:.2f} |")  # fmt: skip
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
