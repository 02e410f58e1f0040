"""Where one PPO update's time goes: operators launched, passes, padding, host syncs, Python.

    python -m benchmarks.speed.update_profile --json benchmarks/results/update-profile/cpu.json
    python -m benchmarks.speed.update_profile --device cuda --json .../gpu.json  # on a GPU

One rollout of ``--n-envs`` x ``--n-steps`` turns (Blackjack ``sab=False``, choice mode, the
library's defaults unless ``--set``), then ``PPO.train()`` once under ``torch.profiler``:

- ``operators``: aten operators the update called (on a GPU each launches one or more kernels;
  ``kernels`` counts those), per optimizer step and per pass;
- ``passes``: forward/backward passes and rows per pass (``evaluate_actions`` calls);
- ``padding``: the share of the update's padded hidden-state positions (the trainable layers'
  inputs) that were padding;
- ``host_syncs``: operators that wait for the device (``aten::item``, ``aten::_local_scalar_dense``,
  copies to the host);
- ``seconds``: the update's wall clock, the time inside operators (the profiler's self time of
  every operator) and the rest (Python, the framework, waiting), and the top operators by self
  time.

The counts do not depend on the machine's load; the seconds do (run it on a quiet machine).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.cli_args import add_model_and_env, add_settings, new_parser

#: Operators that make the host wait for the device.
SYNC_OPERATORS = ("aten::item", "aten::_local_scalar_dense")


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.speed.update_profile", __doc__)
    add = parser.add_argument
    add_model_and_env(add)
    add("--n-steps", type=int, default=16, help="vector steps of the profiled rollout")
    add("--device", default="cpu", help="cpu or cuda")
    add("--seed", type=int, default=0, help="seed")
    add("--top", type=int, default=12, help="operators listed by self time")
    add_settings(add, example="ppo.n_epochs=2")
    add("--json", type=Path, default=None, help="write the figures here")
    return parser


def padding_share(batches: Sequence[tuple[int, int]]) -> float | None:
    """Padding's share of the positions of padded batches, given each as ``(real positions,
    padded positions)``; ``None`` when nothing was padded."""
    real = sum(r for r, _ in batches)
    padded = sum(p for _, p in batches)
    return 1.0 - real / padded if padded else None


def operator_figures(events: Any, top: int) -> dict[str, Any]:
    """Counts and self times from ``profiler.key_averages()``."""
    calls: Counter[str] = Counter()
    self_us: Counter[str] = Counter()
    kernels = 0
    for event in events:
        calls[event.key] += event.count
        self_us[event.key] += event.self_cpu_time_total
        kernels += (
            int(
                getattr(event, "device_type", None) is not None and "CUDA" in str(event.device_type)
            )
            * event.count
        )
    aten = {k: n for k, n in calls.items() if k.startswith("aten::")}
    syncs = sum(calls[k] for k in SYNC_OPERATORS)
    host_copies = calls.get("aten::_to_copy", 0)
    return {
        "operators": sum(aten.values()),
        "kernels": kernels,
        "host_syncs": syncs,
        "to_copies": host_copies,
        "operator_self_s": sum(self_us[k] for k in aten) / 1e6,
        "top_self_s": [
            [k, round(v / 1e6, 4), calls[k]]
            for k, v in sorted(self_us.items(), key=lambda kv: -kv[1])[:top]
            if k.startswith("aten::")
        ],
        "top_calls": [[k, n] for k, n in sorted(aten.items(), key=lambda kv: -kv[1])[:top]],
    }


def profile(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from benchmarks.speed.throughput import update_flops
    from gym_llm import PPO, make_text_env
    from gym_llm.experiments.specs import parse_env_kwargs
    from gym_llm.policy import choice, generate, top_layers
    from gym_llm.policy.outputs import UpdateWork

    env_kwargs = parse_env_kwargs(args.env_kwargs)
    env = make_text_env(args.env, args.n_envs, env_kwargs=env_kwargs, seed=args.seed)
    settings = {"n_steps": args.n_steps, **args.set["ppo"]}
    model = PPO(
        "LLMPolicy", env, seed=args.seed, device=args.device,
        policy_kwargs={"model": args.model, "action_mode": args.mode, **args.set["policy"]},
        **settings,
    )  # fmt: skip
    model.learn(args.n_steps * args.n_envs)  # warm: one rollout and update, caches filled
    model._setup_learn(args.n_steps * args.n_envs, None, reset_num_timesteps=False)
    model.collect_rollouts(env, model._init_callback(None), model.rollout_buffer, model.n_steps)

    policy, runner = model.policy, model.policy.runner
    passes: list[int] = []
    padded: list[tuple[int, int]] = []
    evaluate, pad_states = policy.evaluate_actions, top_layers.pad_states

    def counted_evaluate(observations: Any, *rest: Any, **kw: Any) -> Any:
        passes.append(len(observations))
        return evaluate(observations, *rest, **kw)

    def counted_pad_states(prompts: Any, extras: Any = None) -> Any:
        hidden, mask, width = pad_states(prompts, extras)
        if torch.is_grad_enabled():  # the update's passes, not the rollout's
            padded.append((int(mask.sum()), int(mask.numel())))
        return hidden, mask, width

    policy.evaluate_actions = counted_evaluate
    for module in (choice, generate):
        module.pad_states = counted_pad_states
    runner.update_work = UpdateWork()
    steps_before = model._n_updates
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    try:
        with torch_profile(activities=activities) as prof:
            start = time.perf_counter()
            model.train()
            if args.device == "cuda":
                torch.cuda.synchronize()
            wall = time.perf_counter() - start
    finally:  # the policy and the modules as they were, whatever happened
        policy.evaluate_actions = evaluate
        for module in (choice, generate):
            module.pad_states = pad_states
    steps = model._n_updates - steps_before
    figures = operator_figures(prof.key_averages(), args.top)
    flops = update_flops(policy, runner.update_work)
    return {
        "env": args.env,
        "device": args.device,
        "dtype": str(policy.lm.dtype).replace("torch.", ""),
        "turns": args.n_steps * args.n_envs,
        "optimizer_steps": steps,
        "passes": len(passes),
        "passes_per_step": len(passes) / max(steps, 1),
        "rows_per_pass": sum(passes) / max(len(passes), 1),
        "padding_share": padding_share(padded),
        "update_s": wall,
        "in_operators_s": figures["operator_self_s"],
        "outside_operators_s": wall - figures["operator_self_s"],
        "operators": figures["operators"],
        "operators_per_step": figures["operators"] / max(steps, 1),
        "operators_per_pass": figures["operators"] / max(len(passes), 1),
        "kernels": figures["kernels"],
        "host_syncs": figures["host_syncs"],
        "host_syncs_per_step": figures["host_syncs"] / max(steps, 1),
        "update_gflop": flops / 1e9,
        "update_gflop_per_s": flops / 1e9 / wall,
        "top_self_s": figures["top_self_s"],
        "top_calls": figures["top_calls"],
        "settings": {"n_envs": args.n_envs, **settings, **args.set["policy"]},
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    row = profile(args)
    for name, value in row.items():
        if name not in ("top_self_s", "top_calls"):
            print(f"{name:>22}: {value if not isinstance(value, float) else round(value, 4)}")
    print("top operators by self time (s, calls):")
    for name, seconds, calls in row["top_self_s"]:
        print(f"  {name:<40} {seconds:>8.3f} {calls:>7}")
    print("top operators by calls:")
    for name, calls in row["top_calls"]:
        print(f"  {name:<40} {calls:>7}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(row, indent=1) + "\n")
    return row


if __name__ == "__main__":
    main()
