"""Which term of the update keeps a cell wrong? Saved agents trained on, each with one term off.

    python -m benchmarks.studies.floor_ablation --agents /tmp/runs/tm-floor-s0/agent \\
        --env gym_llm/TextMaze-v0 --cells 5 15 --steps 2048 --every 512 \\
        --arms as-saved floor-off:min_action_prob=0 no-value:vf_coef=0 \\
        --jsonl benchmarks/results/ppo-noisy/q/floor/textmaze-ablation.jsonl

A saved PPO agent that has settled with a cell played wrong (its values right, its policy not) is
trained on from its checkpoint, with its replay, optimizer and advantage scale, once per arm: as
saved, and with one setting changed (``NAME=VALUE`` of :class:`~gym_llm.rl.ppo.config.PPOConfig`,
e.g. the probability floor off, or the value loss off, since the value head reads the same
adapted weights). Every ``--every`` env steps: the policy's probabilities in each named cell, its
optimal move (exact model) and the greedy policy's exact value. If a cell flips only with a term
off, that term is what held it. Rows go to ``--jsonl`` as they are measured.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from benchmarks.cli_args import append_jsonl, new_parser
from gym_llm import PPO, make_text_env
from gym_llm.envs.tabular import TabularModel
from gym_llm.evaluation.exact import exact_policy_value
from gym_llm.experiments.specs import parse_settings
from gym_llm.wrappers import TextObservationWrapper


def parse_arm(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME`` or ``NAME:SETTING=VALUE,...`` -> ``(name, settings)``.

    >>> parse_arm("floor-off:min_action_prob=0")
    ('floor-off', {'min_action_prob': 0})
    >>> parse_arm("as-saved")
    ('as-saved', {})
    """
    name, _, settings = text.partition(":")
    return name, parse_settings(settings.split(","), "--arms") if settings else {}


def cell_probabilities(model: PPO, texts: Sequence[str]) -> np.ndarray:
    """``(cells, K)``: the policy's probabilities of the listed actions in each text (a greedy
    call, so reading them spends no random draw of the run being measured)."""
    with torch.inference_mode():
        step = model.policy.act(list(texts), deterministic=True)
    assert step.action_probs is not None, "the agent does not score listed actions"
    return np.asarray(step.action_probs, dtype=np.float64)


def run_arm(
    agent: Path,
    env_id: str,
    cells: Sequence[int],
    arm: str,
    steps: int,
    every: int,
    *,
    seed: int,
    n_envs: int,
) -> list[dict[str, Any]]:
    """One agent trained on under one arm; a row per point (the first before any step)."""
    name, settings = parse_arm(arm)
    env = make_text_env(env_id, n_envs=n_envs, seed=seed)
    model = PPO.load(agent, env=env, seed=seed, device="cpu")
    for key, value in settings.items():
        setattr(model, key, value)
    text_env = TextObservationWrapper(gym.make(env_id))
    texts = [text_env.format(cell) for cell in cells]
    best = TabularModel.of(gym.make(env_id)).q_values()[list(cells)].argmax(-1)
    rows: list[dict[str, Any]] = []
    done = 0
    while True:
        probs = cell_probabilities(model, texts)
        rows.append({
            "agent": str(agent), "arm": name, "settings": settings, "seed": seed,
            "env_steps": done, "value": exact_policy_value(model, env_id),
            "cells": {str(c): {"best": int(b), "probs": p.round(4).tolist(),
                               "right": bool(p.argmax() == b)}
                      for c, b, p in zip(cells, best, probs, strict=True)},
        })  # fmt: skip
        if done >= steps:
            return rows
        model.learn(every, reset_num_timesteps=False)
        done += every


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = new_parser("python -m benchmarks.studies.floor_ablation", __doc__)
    add = parser.add_argument
    add("--agents", type=Path, nargs="+", required=True, help="saved PPO agents (directories)")
    add("--env", default="gym_llm/TextMaze-v0", help="the agents' env (one with an exact model)")
    add("--cells", type=int, nargs="+", default=[5, 15], help="state indices to watch")
    add("--arms", nargs="+", default=["as-saved", "floor-off:min_action_prob=0"],
        help="NAME or NAME:SETTING=VALUE,... (PPOConfig's fields)")  # fmt: skip
    add("--steps", type=int, default=2048, help="env steps trained on per arm")
    add("--every", type=int, default=512, help="env steps between points")
    add("--seed", type=int, default=1000, help="the envs' and sampling's seed when training on")
    add("--n-envs", type=int, default=8, help="the agents' env count (their replay needs as many)")
    add("--jsonl", type=Path, default=None, help="append every row here")
    args = parser.parse_args(argv)
    rows = []
    for agent in args.agents:
        for arm in args.arms:
            points = run_arm(
                agent, args.env, args.cells, arm, args.steps, args.every,
                seed=args.seed, n_envs=args.n_envs,
            )  # fmt: skip
            for row in points:
                print(json.dumps(row), flush=True)
                append_jsonl(args.jsonl, row)
                rows.append(row)
    return rows


if __name__ == "__main__":
    main()
