"""Throughput benchmark: gym_llm's rollouts and updates against the naive LLM-agent loop.

    python -m benchmarks.speed.throughput --model smollm2-135m --env Blackjack-v1 --n-envs 8 \\
        --steps 256 --mode choice --json out.json

Measured in one run, on the same weights (one PPO agent; the naive loop drives its model):

* ``rollout_env_steps_per_s``: PPO rollout collection (batched prompts, shared prefix KV cache,
  choice scoring or batched sampling into a pre-allocated KV cache);
* ``naive_env_steps_per_s``: the loop LlamaGym runs, written out below: one env, the whole
  conversation re-tokenised every step, a batch-1 ``generate`` (LlamaGym's defaults: up to 32 new
  tokens, sampling with top-p 0.6 at temperature 0.9) and no cache kept between steps;
* ``update_tokens_per_s``: tokens per second of the PPO update (prompt + action tokens of every
  sample, times epochs), and ``learn_env_steps_per_s``: ``learn()`` end to end (rollout + update,
  ``n_epochs=1``);
* generate mode also: reply tokens generated per second and mean reply lengths of both, since the
  two samplers stop at different lengths;
* ``peak_rss_mb`` (peak RSS during gym_llm's own blocks) and, on CUDA, ``peak_cuda_mb``; on CUDA
  also the update's model FLOP utilisation (``update_mfu``, see :func:`update_flops`).

**Robust to drift and to other processes.** The machine's speed changes while a benchmark runs
(other jobs, thermal limits), so the measurements are interleaved: ``--repeats`` rounds, each
running a short block of every contender in turn (gym_llm ``learn()``, the naive loop, then gym_llm
with each compared speed-up switched off). Every figure is the median over rounds;
``speedup_vs_naive`` is the ratio of the medians, and the per-round ratios are kept in
``rounds`` to show the spread.

**Switches** (``--compare``): ``prefix`` (the shared prompt-prefix KV cache, rollouts and update),
``reserve`` (generate mode: the pre-allocated decode KV cache instead of ``torch.cat`` per token),
``packed`` (CPU: frozen weights packed once for oneDNN instead of MKL re-packing them every
call), ``reuse`` (the update starts at the first trainable layer from the rollout's states
instead of running the whole model), ``memo`` (choice mode: each distinct observation scored
once per weights version) and ``micro`` (micro-batches chosen by memory instead of 8 turns) are
measured off in their own blocks of every round, on the same weights. ``--trainable-layers``
sets how many layers train (``auto``, ``all``, a count); it changes the weights, so compare it
across runs (or with ``benchmarks/speed/first_call.py``).

The JSON has the keys above plus ``speedup_vs_naive``, ``device``, ``model``, ``mode``, ``n_envs``,
the settings, per-round figures and the switch comparisons; a short table is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from stable_baselines3.common.callbacks import BaseCallback
from tqdm.auto import tqdm

from benchmarks.cli_args import add_model_and_env, new_parser, write_json
from gym_llm import PPO, make_text_env
from gym_llm.cli.demo import parse_env_kwargs, quiet_progress_bar_warning
from gym_llm.experiments.run import device_name
from gym_llm.policy.llm_policy import LLMPolicy, UpdateWork
from gym_llm.policy.models import resolve_device
from gym_llm.policy.prompts import render_prompt, system_text
from gym_llm.policy.top_layers import decoder_of, parse_trainable_layers
from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper

#: LlamaGym's default generation settings (its README's ``generate_config_dict``).
NAIVE_MAX_NEW_TOKENS = 32
#: Switches the benchmark can turn off, per mode.
SWITCHES = {
    "choice": ("prefix", "packed", "reuse", "memo", "micro"),
    "generate": ("prefix", "reserve", "packed", "reuse", "micro"),
}
#: The micro-batch size of the "micro" switch: PPO's default before it was chosen by memory.
FIXED_MICRO_BATCH = 8
#: Dense bf16 tensor-core peak (TFLOP/s) by GPU name, for MFU; ``--peak-tflops`` overrides.
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L4": 121.0, "A10": 125.0}


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.speed.throughput", __doc__)
    add = parser.add_argument
    add_model_and_env(add, n_envs_help="parallel envs in gym_llm's rollouts")
    add("--steps", type=int, default=256, help="gym_llm env steps per contender, all rounds")
    add("--naive-steps", type=int, default=16, help="naive-loop env steps, all rounds (it is slow)")
    add("--repeats", type=int, default=3, help="interleaved rounds; figures are their medians")
    add(
        "--max-new-tokens",
        type=int,
        default=NAIVE_MAX_NEW_TOKENS,
        help="reply budget of gym_llm's generate mode and of the naive loop alike",
    )
    add(
        "--reply-constraint",
        choices=["off", "action", "auto"],
        default="off",
        help="generate mode's replies: free text, as the naive loop writes (off), or decoded "
        "among the listed actions (action; auto: the library's default)",
    )
    add(
        "--micro-batch-size",
        type=int,
        default=None,
        help="turns per update forward/backward (default: PPO's, chosen by memory)",
    )
    add(
        "--compare",
        nargs="*",
        default=None,
        choices=["prefix", "reserve", "packed", "reuse", "memo", "micro"],
        help="speed-ups to also measure switched off (default: all that apply to the mode; "
        "give the flag alone for none)",
    )
    add(
        "--trainable-layers",
        default="auto",
        help="top layers that train: auto, all, a count (8) or a share (0.25)",
    )
    add("--device", default="auto", help="auto, cpu, cuda or mps")
    add("--dtype", default=None, help="weights dtype, e.g. bf16 (default: bf16 on GPU, fp32 CPU)")
    add(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads for both contenders (default: torch's, the core count)",
    )
    add("--peak-tflops", type=float, default=None, help="device peak for MFU (default: by GPU)")
    add("--seed", type=int, default=0, help="seed")
    add("--no-progress", action="store_true", help="no progress bar")
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


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class PeakMemory:
    """Peak memory over a block: RSS (Linux resets its high-water mark) and CUDA allocations."""

    def __init__(self) -> None:
        self.rss_mb = 0.0
        self.cuda_mb: float | None = None

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        resettable = _reset_rss_peak()
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        yield
        rss = _rss_peak_mb() if resettable else None
        self.rss_mb = max(self.rss_mb, rss if rss is not None else _lifetime_rss_mb())
        if torch.cuda.is_available():
            self.cuda_mb = max(self.cuda_mb or 0.0, torch.cuda.max_memory_allocated() / 2**20)


def _reset_rss_peak() -> bool:
    try:  # Linux: "5" resets VmHWM, the process's peak RSS
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _rss_peak_mb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _lifetime_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _make_ppo(args: argparse.Namespace, n_steps: int, **ppo: Any) -> PPO:
    """PPO on ``args``' env and model; ``ppo``: more PPO arguments."""
    env = make_text_env(
        args.env, args.n_envs, env_kwargs=parse_env_kwargs(args.env_kwargs), seed=args.seed
    )
    policy_kwargs: dict[str, Any] = {
        "model": args.model,
        "lora": {"r": 16},
        "action_mode": args.mode,
        "trainable_layers": parse_trainable_layers(args.trainable_layers),
        "dtype": args.dtype,
        "max_new_tokens": args.max_new_tokens,
    }
    if args.mode == "generate":
        policy_kwargs["reply_constraint"] = getattr(args, "reply_constraint", "off")
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
        **ppo,
    )


@contextlib.contextmanager
def switched_off(model: PPO, switch: str | None) -> Iterator[None]:
    """Run a block with one speed-up off, on the same weights; restore it afterwards."""
    policy: LLMPolicy = model.policy
    if switch is None:
        yield
        return
    if switch == "micro":
        saved_micro = model.micro_batch_size
        model.micro_batch_size = FIXED_MICRO_BATCH
        try:
            yield
        finally:
            model.micro_batch_size = saved_micro
        return
    if switch == "prefix":
        saved = policy.shared_prefix
        policy.prompts.shared_prefix = []
        policy.invalidate_prefix_cache()
        try:
            yield
        finally:
            policy.prompts.shared_prefix = saved
            policy.invalidate_prefix_cache()
    elif switch in ("reserve", "packed", "reuse", "memo"):
        flag = {
            "reserve": "reserve_kv_cache",
            "packed": "pack_frozen_weights",
            "reuse": "reuse_rollout_states",
            "memo": "memoize_choice_scores",
        }[switch]
        setattr(policy, flag, False)
        try:
            yield
        finally:
            setattr(policy, flag, True)
    else:
        raise ValueError(
            f"unknown switch {switch!r}; known: {sorted(set(SWITCHES['generate']) | {'memo'})}"
        )


def update_flops(policy: LLMPolicy, work: UpdateWork) -> float:
    """FLOPs of the update passes counted in ``work`` (:class:`gym_llm.policy.UpdateWork`).

    Forward: ``2 (token_layers P_layer + head_rows P_head)``, with ``P_layer`` the matrix
    parameters of one decoder layer (LoRA included, averaged over layers) and ``P_head`` those of
    the LM head; the backward costs as much again for activation gradients, plus ``2
    N_trainable`` per token that reached a trainable layer for weight gradients. Only work really
    done counts: the layers the update ran (the trainable ones when it starts from the rollout's
    states), real tokens (no padding), one row per distinct observation where rows are shared.
    Attention-score FLOPs are left out, so the figure is a slight underestimate.
    """
    layers = decoder_of(policy.lm).layers
    per_layer = float(sum(p.numel() for p in layers.parameters() if p.dim() == 2)) / len(layers)
    head = int(policy.lm.get_output_embeddings().weight.numel())
    trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad and p.dim() == 2)
    forward = 2.0 * (work.token_layers * per_layer + work.head_rows * head)
    return 2.0 * forward + 2.0 * trainable * work.tokens


def learn_block(model: PPO, peak: PeakMemory | None = None) -> dict[str, float]:
    """One ``learn()`` of ``n_steps x n_envs`` env steps: rollout and update timed apart."""
    timer = _RolloutTimer()
    steps = model.n_steps * model.n_envs
    model.policy.runner.update_work = UpdateWork()
    with peak.watch() if peak is not None else contextlib.nullcontext():
        _sync()
        start = time.perf_counter()
        model.learn(steps, callback=timer, reset_num_timesteps=False)
        _sync()
        total = time.perf_counter() - start
    buffer = model.rollout_buffer
    policy: LLMPolicy = model.policy
    prompt_lengths = [len(policy.prompt_ids(str(o))) for o in buffer.observations_text.ravel()]
    action_lengths = [len(a) for a in buffer.action_tokens.ravel()]
    prompt_tokens, action_tokens = sum(prompt_lengths), sum(action_lengths)
    update_s = max(total - timer.rollout_s, 1e-9)
    return {
        "rollout_env_steps_per_s": steps / timer.rollout_s,
        "update_tokens_per_s": model.n_epochs * (prompt_tokens + action_tokens) / update_s,
        "update_flops_per_s": update_flops(policy, policy.update_work) / update_s,
        "learn_env_steps_per_s": steps / total,
        "rollout_s": timer.rollout_s,
        "update_s": update_s,
        "shared_prefix_tokens": float(len(policy.shared_prefix)),
        "mean_reply_tokens": action_tokens / steps,
        "reply_tokens_per_s": action_tokens / timer.rollout_s,
        "mean_prompt_tokens": prompt_tokens / steps,
        "packed_weight_mb": policy.packed_weight_bytes / 2**20,
    }


class NaiveLoop:
    """LlamaGym's loop (batch 1, re-tokenise the whole chat, ``generate``), resumable in blocks.

    It drives the agent's own model object (LoRA included, as LlamaGym's peft model did), so both
    contenders always run the same weights.
    """

    def __init__(self, model: PPO, args: argparse.Namespace) -> None:
        policy: LLMPolicy = model.policy
        self.lm, self.tokenizer = policy.lm, policy.tokenizer
        self.max_new_tokens = args.max_new_tokens
        self.env = ActionParserWrapper(
            TextObservationWrapper(gym.make(args.env, **parse_env_kwargs(args.env_kwargs)))
        )
        self.system = {"role": "system", "content": system_text(self.env.observation_space)}
        self.messages = [self.system]
        self.observation, _ = self.env.reset(seed=args.seed)
        self.generator_seed = args.seed

    def run(self, steps: int) -> dict[str, float]:
        reply_tokens = 0
        _sync()
        start = time.perf_counter()
        for _ in range(steps):
            # LlamaGym keeps the episode as one growing chat and re-encodes all of it every step.
            self.messages.append({"role": "user", "content": self.observation})
            prompt = render_prompt(self.tokenizer, self.messages)
            inputs = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False).to(
                self.lm.device
            )
            with torch.no_grad():
                output = self.lm.generate(
                    **inputs,
                    max_new_tokens=self.max_new_tokens,
                    do_sample=True,
                    top_p=0.6,
                    top_k=0,
                    temperature=0.9,
                    pad_token_id=self.tokenizer.pad_token_id,
                )
            new_tokens = output[0, inputs["input_ids"].shape[1] :]
            reply_tokens += len(new_tokens)
            reply = self.tokenizer.decode(new_tokens, skip_special_tokens=True)
            self.messages.append({"role": "assistant", "content": reply})
            self.observation, _, terminated, truncated, _ = self.env.step(reply)
            if terminated or truncated:
                self.messages = [self.system]
                self.observation, _ = self.env.reset()
        _sync()
        elapsed = time.perf_counter() - start
        return {
            "env_steps_per_s": steps / elapsed,
            "mean_reply_tokens": reply_tokens / steps,
            "reply_tokens_per_s": reply_tokens / elapsed,
            "seconds": elapsed,
        }


def _median(rounds: list[dict[str, float]], key: str) -> float:
    return float(statistics.median(r[key] for r in rounds))


def _summary(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Median of every figure over rounds."""
    return {key: _median(rounds, key) for key in rounds[0]}


def run_rounds(
    args: argparse.Namespace, on_round: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Interleave gym_llm, the naive loop and the switched-off variants over ``--repeats`` rounds.

    ``on_round`` gets the measurements so far after every round (the JSON is rewritten then, so a
    run cut short still leaves its completed rounds).
    """
    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}.")
    switches = SWITCHES[args.mode] if args.compare is None else tuple(args.compare)
    unknown = [s for s in switches if s not in SWITCHES[args.mode]]
    if unknown:
        raise ValueError(f"--compare {unknown} does not apply to {args.mode} mode.")
    n_steps = max(1, args.steps // (args.n_envs * args.repeats))
    naive_per_round = max(1, math.ceil(args.naive_steps / args.repeats))
    model = _make_ppo(args, n_steps)
    naive = NaiveLoop(model, args)
    # Warm-up, not measured: first calls allocate (KV caches, packed weights, the optimizer's
    # state, autograd's buffers), which made round 1's update ~1.5x slower than later rounds.
    learn_block(model)
    naive.run(1)
    peak = PeakMemory()
    contenders = ["gym_llm", "naive", *switches]
    blocks: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
    bar = tqdm(total=args.repeats * len(contenders), desc="throughput", disable=args.no_progress)
    measured = {
        "blocks": blocks,
        "peak": peak,
        "switches": switches,
        "steps_per_round": n_steps * args.n_envs,
        "naive_steps_per_round": naive_per_round,
    }
    for _ in range(args.repeats):
        for name in contenders:
            bar.set_postfix_str(name)
            if name == "gym_llm":
                blocks[name].append(learn_block(model, peak))
            elif name == "naive":
                blocks[name].append(naive.run(naive_per_round))
            else:
                with switched_off(model, name):
                    blocks[name].append(learn_block(model))
            bar.update()
        if on_round is not None:
            on_round(measured)
    bar.close()
    return measured


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    quiet_progress_bar_warning()
    device = resolve_device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    def write(measured: dict[str, Any]) -> None:
        if args.json is not None:
            write_json(args.json, summarize(args, device, measured))

    measured = run_rounds(args, on_round=write)
    result = summarize(args, device, measured)
    _print_table(args, result)
    if args.json is not None:
        print(f"wrote {args.json}")
    return result


def summarize(
    args: argparse.Namespace, device: torch.device, measured: dict[str, Any]
) -> dict[str, Any]:
    """The JSON result from the rounds measured so far (medians, ratios, switch gains)."""
    blocks: dict[str, list[dict[str, float]]] = measured["blocks"]
    fast, naive = _summary(blocks["gym_llm"]), _summary(blocks["naive"])
    round_ratios = [
        g["rollout_env_steps_per_s"] / n["env_steps_per_s"]
        for g, n in zip(blocks["gym_llm"], blocks["naive"], strict=True)
    ]
    naive_rate = naive["env_steps_per_s"]
    peak: PeakMemory = measured["peak"]
    peak_tflops = args.peak_tflops
    if peak_tflops is None and device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        peak_tflops = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    dtype = args.dtype or ("bfloat16" if device.type == "cuda" else "float32")
    result: dict[str, Any] = {
        "rollout_env_steps_per_s": fast["rollout_env_steps_per_s"],
        "naive_env_steps_per_s": naive_rate,
        "speedup_vs_naive": fast["rollout_env_steps_per_s"] / naive_rate,
        "speedup_vs_naive_per_round": round_ratios,
        "speedup_vs_naive_median_of_rounds": float(statistics.median(round_ratios)),
        "update_tokens_per_s": fast["update_tokens_per_s"],
        "update_tflops_per_s": fast["update_flops_per_s"] / 1e12,
        "update_mfu": fast["update_flops_per_s"] / (peak_tflops * 1e12) if peak_tflops else None,
        "learn_env_steps_per_s": fast["learn_env_steps_per_s"],
        "learn_speedup_vs_naive": fast["learn_env_steps_per_s"] / naive_rate,
        "peak_rss_mb": peak.rss_mb,
        "peak_rss_mb_incl_comparisons": _lifetime_rss_mb(),
        "peak_cuda_mb": peak.cuda_mb if device.type == "cuda" else None,
        "device": device_name(device),
        "model": args.model,
        "mode": args.mode,
        "n_envs": args.n_envs,
        "env": args.env,
        "dtype": dtype,
        "max_new_tokens": args.max_new_tokens,
        "repeats": len(blocks["gym_llm"]),
        "threads": torch.get_num_threads(),
        "steps": measured["steps_per_round"] * len(blocks["gym_llm"]),
        "naive_steps": measured["naive_steps_per_round"] * len(blocks["naive"]),
        "mean_reply_tokens": fast["mean_reply_tokens"],
        "naive_mean_reply_tokens": naive["mean_reply_tokens"],
        "shared_prefix_tokens": fast["shared_prefix_tokens"],
        "packed_weight_mb": fast["packed_weight_mb"],
        "mean_prompt_tokens": fast["mean_prompt_tokens"],
        "peak_tflops": peak_tflops,
        "switched_off": {},
        "rounds": blocks,
    }
    if args.mode == "generate":  # same machinery, different reply lengths: compare tokens too
        result["reply_tokens_per_s"] = fast["reply_tokens_per_s"]
        result["naive_reply_tokens_per_s"] = naive["reply_tokens_per_s"]
        result["reply_token_speedup_vs_naive"] = (
            fast["reply_tokens_per_s"] / naive["reply_tokens_per_s"]
        )
    for switch in measured["switches"]:
        off = _summary(blocks[switch])
        per_round = [
            g["rollout_env_steps_per_s"] / o["rollout_env_steps_per_s"]
            for g, o in zip(blocks["gym_llm"], blocks[switch], strict=True)
        ]
        result["switched_off"][switch] = {
            **off,
            "rollout_gain": fast["rollout_env_steps_per_s"] / off["rollout_env_steps_per_s"],
            "rollout_gain_per_round": per_round,
            "update_gain": fast["update_tokens_per_s"] / off["update_tokens_per_s"],
        }
    return result


def _print_table(args: argparse.Namespace, result: dict[str, Any]) -> None:
    labels = {
        "prefix": "prefix cache",
        "reserve": "reserved KV cache",
        "packed": "packed weights",
        "reuse": "update from rollout states",
        "memo": "choice-score memo",
        "micro": "micro-batch by memory",
    }
    rows: list[tuple[str, Any]] = [
        ("rollout env-steps/s (gym_llm)", result["rollout_env_steps_per_s"]),
        ("naive loop env-steps/s (LlamaGym-style)", result["naive_env_steps_per_s"]),
        ("rollout speed-up vs naive", result["speedup_vs_naive"]),
        ("  per round", result["speedup_vs_naive_per_round"]),
        ("learn() env-steps/s (rollout + update)", result["learn_env_steps_per_s"]),
        ("learn() speed-up vs naive rollouts", result["learn_speedup_vs_naive"]),
        ("update tokens/s", result["update_tokens_per_s"]),
        ("update TFLOP/s (MFU)", (result["update_tflops_per_s"], result["update_mfu"])),
        (
            "reply tokens/step gym_llm / naive",
            (result["mean_reply_tokens"], result["naive_mean_reply_tokens"]),
        ),
        ("generated reply tokens/s (gym_llm)", result.get("reply_tokens_per_s")),
        ("generated reply tokens/s (naive)", result.get("naive_reply_tokens_per_s")),
        ("reply-token speed-up vs naive", result.get("reply_token_speedup_vs_naive")),
    ]
    for switch, off in result["switched_off"].items():
        rows.append((f"rollout env-steps/s, no {labels[switch]}", off["rollout_env_steps_per_s"]))
        rows.append((f"  gain from {labels[switch]} (rollout)", off["rollout_gain"]))
        rows.append((f"  gain from {labels[switch]} (update)", off["update_gain"]))
    rows += [("peak RSS MB", result["peak_rss_mb"]), ("peak CUDA MB", result["peak_cuda_mb"])]
    print(
        f"\n{args.model} on {args.env}, {args.mode} mode, {args.n_envs} envs, {result['device']}, "
        f"medians of {result['repeats']} interleaved rounds"
    )
    for name, value in rows:
        print(f"  {name:<42} {_fmt(value):>20}")


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, list | tuple):
        return " / ".join(_fmt(v) for v in value)
    if isinstance(value, float) and abs(value) < 0.01:
        return f"{value:.2e}"
    return f"{value:,.2f}"


if __name__ == "__main__":
    main(sys.argv[1:])
