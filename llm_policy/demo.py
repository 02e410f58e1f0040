"""``make demo``: the embedded SmolLM2-135M plays a wrapped Gymnasium env through text, zero-shot.

Run ``python -m gym_llm.demo --help`` for the options.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import torch

from gym_llm.models import DEFAULT_MODEL, load_model
from gym_llm.prompts import build_messages, render_prompt, system_text
from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper


def parse_env_kwargs(items: Sequence[str]) -> dict[str, Any]:
    """``["sab=False", "map_name=8x8"]`` -> ``{"sab": False, "map_name": "8x8"}``."""
    kwargs: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--env-kwargs takes key=value pairs, got {item!r}.")
        lowered = raw.lower()
        value: Any
        if lowered in ("true", "false"):
            value = lowered == "true"
        elif lowered in ("none", "null"):
            value = None
        else:
            try:
                value = int(raw)
            except ValueError:
                try:
                    value = float(raw)
                except ValueError:
                    value = raw
        kwargs[key] = value
    return kwargs


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gym_llm.demo",
        description="Watch a language model play a Gymnasium env through text, zero-shot "
        "(no training): per step the observation text, the model's reply, the parsed action "
        "and the reward, then a summary.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--env", default="Blackjack-v1", help="Gymnasium env id")
    parser.add_argument(
        "--env-kwargs", nargs="*", default=["sab=False"], metavar="KEY=VALUE", help="env kwargs"
    )
    parser.add_argument(
        "--model", default=DEFAULT_MODEL, help="registry name, local path or hub id"
    )
    parser.add_argument("--episodes", type=int, default=5, help="episodes to play")
    parser.add_argument("--max-new-tokens", type=int, default=12, help="reply length budget")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    parser.add_argument("--seed", type=int, default=0, help="seed for the env and the fallback")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = _build_parser().parse_args(argv)
    print(f"Loading {args.model} (the first load converts the embedded weights, ~20 s) ...")
    start = time.perf_counter()
    model, tokenizer = load_model(args.model, device=args.device)
    print(f"Loaded in {time.perf_counter() - start:.1f} s on {model.device}.\n")
    env = ActionParserWrapper(
        TextObservationWrapper(gym.make(args.env, **parse_env_kwargs(args.env_kwargs)))
    )
    print(f"System prompt:\n{system_text(env.observation_space)}\n")

    returns: list[float] = []
    steps = invalid = 0
    for episode in range(args.episodes):
        observation, _ = env.reset(seed=args.seed + episode)
        done, total = False, 0.0
        print(f"=== Episode {episode + 1}/{args.episodes}")
        while not done:
            messages = build_messages(observation, env.observation_space, env.action_space)
            prompt = render_prompt(tokenizer, messages)
            inputs = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).to(
                model.device
            )
            with torch.inference_mode():
                output = model.generate(
                    **inputs,
                    max_new_tokens=args.max_new_tokens,
                    do_sample=False,
                    pad_token_id=tokenizer.pad_token_id,
                )
            reply = tokenizer.decode(
                output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True
            ).strip()
            next_observation, reward, terminated, truncated, info = env.step(reply)
            status = "valid" if info["action_valid"] else f"INVALID ({info['parse_error']})"
            print("Observation:\n  " + observation.replace("\n", "\n  "))
            print(f"Model reply: {reply!r}")
            print(f"Parsed action: {info['action']} [{status}]  reward: {float(reward):g}\n")
            observation = next_observation
            total += float(reward)
            steps += 1
            invalid += not info["action_valid"]
            done = terminated or truncated
        returns.append(total)
    mean = sum(returns) / len(returns)
    print("=== Summary")
    print(f"Episodes: {len(returns)}  mean return: {mean:.3f}  returns: {returns}")
    print(f"Steps: {steps}  invalid-action rate: {invalid / max(steps, 1):.1%}")


if __name__ == "__main__":
    main()
