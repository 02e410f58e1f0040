"""Where a generate-mode policy starts, per state, and which states its action head must learn
as exceptions: the measurements behind ``action_prior_scale`` (benchmarks/RESULTS.md).

    python -m benchmarks.studies.decision_odds --tasks range-p1-s1 compare-p0-s1 \\
        --json benchmarks/results/family/decision-odds.json

For each state of a family task, before any update (generate mode with the action head, the
head at zero): the greedy reply, and the odds among the listed actions at its *decision token*
(the first reply token that names an action; :func:`gym_llm.policy.action_words.decisions`).
The same for the content-free observation ``"N/A"`` that choice mode calibrates on. Then a
leave-one-out ridge probe on the features the head reads (the last prompt token at the first
trainable layer's input): which states' right action the other states' features do *not*
predict, and each state's nearest other state by cosine. A state the probe misses is one the
linear head must learn against its neighbours, from that state's own samples.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.cli_args import new_parser, tables_per_task
from benchmarks.studies.feature_probe import fit_ridge, prompt_features, standardise
from gym_llm.policy.models import DEFAULT_MODEL


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.studies.decision_odds", __doc__)
    add = parser.add_argument
    add("--tasks", nargs="+", required=True, help="family tasks, e.g. range-p1-s1")
    add("--model", default=DEFAULT_MODEL, help="registry name or local model path")
    add("--prior-scale", type=float, default=1.0, help="the policy's action_prior_scale")
    add("--json", type=Path, default=None, help="write every task's table here")
    return parser


def leave_one_out(features: np.ndarray, best: Sequence[int], n_actions: int) -> list[int]:
    """Each state's action predicted by ridge (one-hot targets) fitted on the other states.

    >>> x = np.array([[1.0, 0], [0.9, 0.1], [0, 1.0], [0.1, 0.9]])
    >>> leave_one_out(x, [0, 0, 1, 1], 2)
    [0, 0, 1, 1]
    """
    targets = np.eye(n_actions)[list(best)]
    predicted = []
    for i in range(len(features)):
        keep = np.arange(len(features)) != i
        row = fit_ridge(features[keep], targets[keep], features[i : i + 1], 0)
        predicted.append(int(np.argmax(row[0])))
    return predicted


def nearest(features: np.ndarray) -> list[tuple[int, float]]:
    """Each row's most cosine-similar other row (centred and standardised over rows) and the
    cosine."""
    x = standardise(features, features)[0]
    x = x / np.linalg.norm(x, axis=1, keepdims=True).clip(min=1e-12)
    cos = x @ x.T
    np.fill_diagonal(cos, -np.inf)
    return [(int(j), round(float(cos[i, j]), 3)) for i, j in enumerate(cos.argmax(1))]


def decision(policy: Any, observation: str) -> tuple[str, list[float] | None]:
    """The greedy reply to ``observation`` and the odds at its decision token (``None`` when
    it names no action)."""
    with torch.no_grad():
        actions = policy.act([observation], deterministic=True).actions
        ev = policy.evaluate_actions([observation], actions)
    found = ev.decision_found is not None and bool(ev.decision_found[0])
    odds = ev.decision_log_probs[0].exp().tolist() if found else None
    return policy.decode(actions[0]), odds


def head_policy(task: str, model: str, prior_scale: float = 1.0) -> Any:
    """A fresh generate-mode policy with the action head for a family task, as PPO builds it."""
    from gym_llm import PPO, make_text_env

    env = make_text_env("gym_llm/Family-v0", 1, env_kwargs={"task": task}, seed=0)
    policy_kwargs = {"model": model, "action_mode": "generate", "action_head": True,
                     "reply_constraint": "off",  # the free-text head this study is about
                     "action_prior_scale": prior_scale}  # fmt: skip
    policy = PPO("LLMPolicy", env, n_steps=8, batch_size=8, seed=0, device="cpu",
                 policy_kwargs=policy_kwargs).policy  # fmt: skip
    env.close()
    return policy


def odds_table(task: str, model: str, prior_scale: float = 1.0) -> dict[str, Any]:
    """The per-state table of one family task (see the module docstring)."""
    from benchmarks.studies.state_replies import best_actions, state_texts
    from gym_llm.policy.choice import CONTENT_FREE_OBSERVATION

    policy = head_policy(task, model, prior_scale)
    texts, parser = state_texts(task)
    parser.close()
    best = [b[0] for b in best_actions(task)]
    hidden, layer = prompt_features(policy, texts)
    features = hidden[:, layer]
    predicted = leave_one_out(features, best, len(policy.actions_list))
    close = nearest(features)
    states: list[dict[str, Any]] = []
    found: list[list[float]] = []
    for s, text in enumerate(texts):
        reply, odds = decision(policy, text)
        found += [] if odds is None else [odds]
        states.append({"observation": text, "best": best[s], "greedy_reply": reply,
                       "decision_odds": odds, "probe_predicts": predicted[s],
                       "nearest": close[s][0], "nearest_cosine": close[s][1]})  # fmt: skip
    log_odds = [float(np.log(o[0] / o[1])) for o in found if len(o) == 2 and min(o) > 0]
    reply, odds = decision(policy, CONTENT_FREE_OBSERVATION)
    return {
        "task": task,
        "actions": list(policy.actions_list),
        "head_layer": layer,
        "content_free": {"greedy_reply": reply, "decision_odds": odds},
        "states_naming_an_action": len(found),
        "log_odds_std": round(float(np.std(log_odds)), 3) if log_odds else None,
        "probe_right": sum(p == b for p, b in zip(predicted, best, strict=True)) / len(best),
        "states": states,
    }


def report(table: dict[str, Any]) -> str:
    """A few lines per task for the terminal."""
    lines = [
        f"{table['task']} {table['actions']}: {table['states_naming_an_action']} of "
        f"{len(table['states'])} greedy replies name an action; log-odds std "
        f"{table['log_odds_std']}; probe (leave one out, layer {table['head_layer']}) right on "
        f"{table['probe_right']:.2f}; content-free reply names "
        f"{'none' if table['content_free']['decision_odds'] is None else 'one'}"
    ]
    for s, st in enumerate(table["states"]):
        odds = st["decision_odds"]
        shown = "none" if odds is None else " ".join(f"{p:.3f}" for p in odds)
        miss = " probe misses" if st["probe_predicts"] != st["best"] else ""
        lines.append(
            f"  {s:2d} best {st['best']} odds {shown:13s} nearest {st['nearest']:2d} "
            f"({st['nearest_cosine']:+.2f}){miss} | {st['observation']}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    args = build_parser().parse_args(argv)
    return tables_per_task(
        args.tasks, lambda task: odds_table(task, args.model, args.prior_scale), report, args.json
    )


if __name__ == "__main__":
    main()
