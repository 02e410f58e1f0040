"""Where a constrained generate-mode policy starts, per state: the probability of each action's
whole reply under the mask, and the unmasked policy's mass on valid first tokens.

    python -m benchmarks.studies.constrained_start --tasks membership-p1-s0 threshold-p0-s0 \\
        --json benchmarks/results/family/constrained-start-tuning.json

A reply decoded under the mask is one of the actions; its probability is the product of its
tokens' masked probabilities. A state where one action starts near 1 is a corner PPO cannot
leave (it never samples the other). Each task is measured three ways: the LM's own odds, even
odds at the action words (``action_prior_scale=0``) and calibrated (``choice_calibration``, the
content-free odds divided out at every choice).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.cli_args import new_parser
from benchmarks.studies.diagnose_learning import ENV_ID, state_table
from gym_llm.policy.models import DEFAULT_MODEL


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.studies.constrained_start", __doc__)
    add = parser.add_argument
    add("--tasks", nargs="+", default=["membership-p1-s0", "threshold-p0-s0"], help="tasks")
    add("--model", default=DEFAULT_MODEL, help="registry name or local model path")
    add("--json", type=Path, default=None, help="write the table here")
    return parser


def reply_probabilities(policy: Any, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(states, K)`` each action's probability as a whole constrained reply, and ``(states,)``
    the unmasked first-token valid mass."""
    actions = policy.actions_list
    ids = policy.actions.constraint.trie(tuple(actions))
    spellings = sorted(ids.complete)
    by_action = {}
    tokenizer = policy.prompts.tokenizer
    for a in actions:
        by_action[a] = tuple(tokenizer(a, add_special_tokens=False)["input_ids"])
    assert set(by_action.values()) == set(spellings)
    n = len(texts)
    replies = [np.asarray(by_action[a]) for a in actions for _ in range(n)]
    observations = [t for _ in actions for t in texts]
    with torch.no_grad():
        out = policy.evaluate_actions(observations, replies)
        step = policy.act(list(texts), deterministic=True)
    lp = (out.token_log_probs * out.mask).sum(-1).numpy().reshape(len(actions), n).T
    assert step.valid_mass is not None
    return np.exp(lp), step.valid_mass


#: The ways a start is measured: (name, action_prior_scale, choice_calibration).
WAYS = (("own odds", 1.0, False), ("even word odds", 0.0, False), ("calibrated", 1.0, True))


def table(task: str, model: str, prior_scale: float, calibration: bool) -> dict[str, Any]:
    from gym_llm import LLMPolicy, make_text_env

    env = make_text_env(ENV_ID, 1, env_kwargs={"task": task}, seed=0)
    policy = LLMPolicy(
        env.observation_space, env.action_space, lambda _: 1e-3, model=model, device="cpu",
        action_mode="generate", reply_constraint="action", action_head=True,
        action_prior_scale=prior_scale, choice_calibration=calibration,
    )  # fmt: skip
    texts, right = state_table(task)
    probs, mass = reply_probabilities(policy, texts)
    p_right = probs[np.arange(len(texts)), right]
    return {
        "task": task,
        "prior_scale": prior_scale,
        "calibration": calibration,
        "actions": list(policy.actions_list),
        "p_right": [round(float(p), 4) for p in p_right],
        "max_prob": [round(float(p), 4) for p in probs.max(-1)],
        "states_in_corner": int((probs.max(-1) > 0.99).sum()),
        "states": len(texts),
        "valid_mass": round(float(mass.mean()), 4),
        "sum_of_probs": [round(float(s), 4) for s in probs.sum(-1)],
    }


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    args = build_parser().parse_args(argv)
    rows = []
    for task in args.tasks:
        for way, scale, calibration in WAYS:
            rows.append(table(task, args.model, scale, calibration))
            row = rows[-1]
            print(
                f"{task} {way}: {row['states_in_corner']} of {row['states']} states "
                f"with one action > 0.99; mean p(right) {np.mean(row['p_right']):.3f}; "
                f"valid mass {row['valid_mass']:.3f}",
                flush=True,
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
