"""Throughput benchmark: gym_llm's rollouts and updates against the naive LLM-agent loop.

    python benchmarks/throughput.py --model smollm2-135m --env Blackjack-v1 --n-envs 8 \\
        --steps 256 --mode choice --json out.json

Measured in one run, on the same weights:

* ``rollout_env_steps_per_s``: PPO rollout collection (batched prompts, shared prefix KV cache,
  choice scoring or batched sampling) - also without the prefix cache, to show what it buys;
* ``naive_env_steps_per_s``: the loop LlamaGym runs, written out below: one env, the whole
  conversation re-tokenised every step, a batch-1 ``generate`` (LlamaGym's defaults: up to 32 new
  tokens, sampling) and no cache kept between steps;
* ``update_tokens_per_s``: tokens per second of the PPO update (prompt + action tokens of every
  sample, times epochs), and ``learn_env_steps_per_s``: ``learn()`` end to end (rollout + update,
  ``n_epochs=1``);
* generate mode also: reply tokens generated per second by both, since the two samplers stop
  at different lengths (LlamaGym samples with top-p 0.6 at temperature 0.9, gym_llm from the
  full distribution at temperature 1, as exact log-probs require);
* ``peak_rss_mb`` (after the main measurement; the comparison without the prefix cache needs
  more and is reported apart) and, on CUDA, ``peak_cuda_mb``.

The JSON has exactly those keys plus ``speedup_vs_naive``, ``device``, ``model``, ``mode``,
``n_envs`` and the settings; a short table is printed.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from stable_baselines3.common.callbacks import BaseCallback

from gym_llm import PPO, make_text_env
from gym_llm.demo import parse_env_kwargs, quiet_progress_bar_warning
from gym_llm.models import DEFAULT_MODEL, resolve_device
from gym_llm.prompts import render_prompt, system_text
from gym_llm.training import device_name
from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper

#: LlamaGym's default generation settings (its README's ``generate_config_dict``).
NAIVE_MAX_NEW_TOKENS = 32


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/throughput.py",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("--model", default=DEFAULT_MODEL, help="registry name or local model path")
    add("--env", default="Blackjack-v1", help="Gymnasium env id")
    add("--env-kwargs", nargs="*", default=["sab=False"], metavar="KEY=VALUE", help="env kwargs")
    add("--mode", choices=["choice", "generate"], default="choice", help="action mode")
    add("--n-envs", type=int, default=8, help="parallel envs in gym_llm's rollouts")
    add("--steps", type=int, default=256, help="env steps per gym_llm measurement")
    add("--naive-steps", type=int, default=16, help="env steps of the naive loop (it is slow)")
    add(
        "--max-new-tokens",
        type=int,
        default=None,
        help="reply budget of gym_llm's generate mode and of the naive loop (default: the "
        f"registry's for gym_llm, LlamaGym's {NAIVE_MAX_NEW_TOKENS} for the naive loop)",
    )
    add("--micro-batch-size", type=int, default=16, help="turns per update forward/backward")
    add("--device", default="auto", help="auto, cpu, cuda or mps")
    add("--dtype", default=None, help="weights dtype (default: bf16 on GPU, fp32 on CPU)")
    add("--no-compare-prefix", action="store_true", help="skip the run without prefix cache")
    add("--seed", type=int, default=0, help="seed")
    add("--json", type=Path, default=None, help="write the results here")
    return parser


class _RolloutTimer(BaseCallback):
    """Splits ``learn()`` wall time into rollout and update."""

    def __init__(self) -> None:
        super().__init__()
        self.rollout_s = 0.0
        self._start = 0.0

    def _on_rollout_start(self) -> None:
        _sync()
        self._start = time.perf_counter()

    def _on_rollout_end(self) -> None:
        _sync()
        self.rollout_s += time.perf_counter() - self._start

    def _on_step(self) -> bool:
        return True


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _make_ppo(args: argparse.Namespace, share_prefix: bool, n_steps: int) -> PPO:
    env = make_text_env(
        args.env, args.n_envs, env_kwargs=parse_env_kwargs(args.env_kwargs), seed=args.seed
    )
    policy_kwargs: dict[str, Any] = {
        "model": args.model,
        "lora": {"r": 16},
        "action_mode": args.mode,
        "share_prefix": share_prefix,
        "dtype": args.dtype,
    }
    if args.max_new_tokens:
        policy_kwargs["max_new_tokens"] = args.max_new_tokens
    return PPO(
        "LLMPolicy",
        env,
        n_steps=n_steps,
        batch_size=min(64, n_steps * args.n_envs),
        n_epochs=1,
        micro_batch_size=args.micro_batch_size,
        policy_kwargs=policy_kwargs,
        seed=args.seed,
        device=str(resolve_device(args.device)),
    )


def measure_learn(args: argparse.Namespace, share_prefix: bool) -> dict[str, float]:
    """One ``learn()`` of ``--steps`` env steps: rollout and update timed apart."""
    n_steps = max(1, args.steps // args.n_envs)
    model = _make_ppo(args, share_prefix, n_steps)
    with torch.inference_mode():  # warm-up: first-call allocations are not throughput
        model.policy.act(list(model.env.reset()))
    timer = _RolloutTimer()
    _sync()
    start = time.perf_counter()
    model.learn(n_steps * args.n_envs, callback=timer)
    _sync()
    total = time.perf_counter() - start
    buffer = model.rollout_buffer
    prompt_tokens = sum(
        len(model.policy.prompt_ids(str(o))) for o in buffer.observations_text.ravel()
    )
    action_tokens = sum(len(a) for a in buffer.action_tokens.ravel())
    steps = n_steps * args.n_envs
    update_s = max(total - timer.rollout_s, 1e-9)
    return {
        "rollout_env_steps_per_s": steps / timer.rollout_s,
        "update_tokens_per_s": (prompt_tokens + action_tokens) / update_s,
        "learn_env_steps_per_s": steps / total,
        "rollout_s": timer.rollout_s,
        "update_s": update_s,
        "shared_prefix_tokens": float(len(model.policy.shared_prefix)),
        "mean_reply_tokens": action_tokens / steps,
        "reply_tokens_per_s": action_tokens / timer.rollout_s,
        "mean_prompt_tokens": prompt_tokens / steps,
    }


def measure_naive(args: argparse.Namespace) -> dict[str, float]:
    """LlamaGym's loop (batch 1, re-tokenise everything, generate): env steps/s, reply tokens."""
    model = _make_ppo(args, share_prefix=False, n_steps=1)
    lm, tokenizer = model.policy.lm, model.policy.tokenizer
    env = ActionParserWrapper(
        TextObservationWrapper(gym.make(args.env, **parse_env_kwargs(args.env_kwargs)))
    )
    messages = [{"role": "system", "content": system_text(env.observation_space)}]
    observation, _ = env.reset(seed=args.seed)
    torch.manual_seed(args.seed)
    steps = reply_tokens = 0
    _sync()
    start = time.perf_counter()
    while steps < args.naive_steps:
        # LlamaGym keeps the episode as one growing chat and re-encodes all of it every step.
        messages.append({"role": "user", "content": observation})
        prompt = render_prompt(tokenizer, messages)
        inputs = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).to(lm.device)
        with torch.no_grad():
            output = lm.generate(
                **inputs,
                max_new_tokens=args.max_new_tokens or NAIVE_MAX_NEW_TOKENS,
                do_sample=True,
                top_p=0.6,
                top_k=0,
                temperature=0.9,
                pad_token_id=tokenizer.pad_token_id,
            )
        new_tokens = output[0, inputs["input_ids"].shape[1] :]
        reply_tokens += len(new_tokens)
        reply = tokenizer.decode(new_tokens, skip_special_tokens=True)
        messages.append({"role": "assistant", "content": reply})
        observation, _, terminated, truncated, _ = env.step(reply)
        steps += 1
        if terminated or truncated:
            messages = messages[:1]
            observation, _ = env.reset()
    _sync()
    elapsed = time.perf_counter() - start
    return {
        "env_steps_per_s": steps / elapsed,
        "mean_reply_tokens": reply_tokens / steps,
        "reply_tokens_per_s": reply_tokens / elapsed,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    quiet_progress_bar_warning()
    device = resolve_device(args.device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    fast = measure_learn(args, share_prefix=True)
    peak_rss_mb = _peak_rss_mb()  # before the (much hungrier) comparison without the cache
    peak_cuda_mb = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None
    slow = None if args.no_compare_prefix else measure_learn(args, share_prefix=False)
    naive_details = measure_naive(args)
    naive = naive_details["env_steps_per_s"]
    result: dict[str, Any] = {
        "rollout_env_steps_per_s": fast["rollout_env_steps_per_s"],
        "naive_env_steps_per_s": naive,
        "speedup_vs_naive": fast["rollout_env_steps_per_s"] / naive,
        "update_tokens_per_s": fast["update_tokens_per_s"],
        "learn_env_steps_per_s": fast["learn_env_steps_per_s"],
        "learn_speedup_vs_naive": fast["learn_env_steps_per_s"] / naive,
        "peak_rss_mb": peak_rss_mb,
        "peak_rss_mb_incl_comparisons": _peak_rss_mb(),
        "peak_cuda_mb": peak_cuda_mb,
        "device": device_name(device),
        "model": args.model,
        "mode": args.mode,
        "n_envs": args.n_envs,
        "env": args.env,
        "steps": args.steps,
        "naive_steps": args.naive_steps,
        "dtype": args.dtype or ("bfloat16" if device.type == "cuda" else "float32"),
        "details": {"prefix_cache": fast, "no_prefix_cache": slow, "naive": naive_details},
    }
    if args.mode == "generate":  # same machinery, different reply lengths: compare tokens too
        result["reply_tokens_per_s"] = fast["reply_tokens_per_s"]
        result["naive_reply_tokens_per_s"] = naive_details["reply_tokens_per_s"]
        result["reply_token_speedup_vs_naive"] = (
            fast["reply_tokens_per_s"] / naive_details["reply_tokens_per_s"]
        )
    if slow is not None:
        result["rollout_env_steps_per_s_no_prefix_cache"] = slow["rollout_env_steps_per_s"]
        result["update_tokens_per_s_no_prefix_cache"] = slow["update_tokens_per_s"]
    rows = [
        ("rollout env-steps/s (gym_llm)", result["rollout_env_steps_per_s"]),
        (
            "rollout env-steps/s, no prefix cache",
            result.get("rollout_env_steps_per_s_no_prefix_cache"),
        ),
        ("naive loop env-steps/s (LlamaGym-style)", naive),
        ("rollout speed-up vs naive", result["speedup_vs_naive"]),
        ("learn() env-steps/s (rollout + update)", result["learn_env_steps_per_s"]),
        ("learn() speed-up vs naive rollouts", result["learn_speedup_vs_naive"]),
        ("update tokens/s", result["update_tokens_per_s"]),
        ("update tokens/s, no prefix cache", result.get("update_tokens_per_s_no_prefix_cache")),
        ("generated reply tokens/s (gym_llm)", result.get("reply_tokens_per_s")),
        ("generated reply tokens/s (naive)", result.get("naive_reply_tokens_per_s")),
        ("reply-token speed-up vs naive", result.get("reply_token_speedup_vs_naive")),
        ("peak RSS MB", result["peak_rss_mb"]),
        ("peak CUDA MB", result["peak_cuda_mb"]),
    ]
    print(f"\n{args.model} on {args.env}, {args.mode} mode, {args.n_envs} envs, {result['device']}")
    for name, value in rows:
        shown = "n/a" if value is None else f"{value:,.2f}"
        print(f"  {name:<42} {shown:>12}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, default=float))
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
