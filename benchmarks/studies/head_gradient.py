"""Where the generate-mode action head's policy gradient comes from: the token that names the
action, the rest of the reply around it, or replies that name none.

    python -m benchmarks.studies.head_gradient --tasks membership-p1-s0 range-p1-s1 \\
        --json benchmarks/results/family/head-gradient-tuning.json

The head's scores are added to the action words' logits at *every* reply position
(:mod:`gym_llm.policy.action_words`), so every token of every reply carries them in its
softmax's normaliser, and the policy gradient reaches the head from all of them. Only the
decision token (the first that names an action) says which action the reply chose. For each
state of a family task, before any update: ``--samples`` sampled replies, their rewards as the
training env pays them (the action's value; for a reply that names no action, a uniform random
action's value plus ``--invalid-penalty``), advantages normalised over the batch as PPO's
minibatches do, and then the head's gradient split by token: the decision tokens, the other
tokens of replies that name an action, and the tokens of replies that name none. Per part:
its share of the head's gradient, and per state whether the step it asks for raises the right
action's score or the action the LM already favours there.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.cli_args import new_parser, tables_per_task
from gym_llm.policy.models import DEFAULT_MODEL

PARTS = ("decision", "wording", "no_action")


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.studies.head_gradient", __doc__)
    add = parser.add_argument
    add("--tasks", nargs="+", required=True, help="family tasks, e.g. membership-p1-s0")
    add("--model", default=DEFAULT_MODEL, help="registry name or local model path")
    add("--samples", type=int, default=16, help="sampled replies per state")
    add("--invalid-penalty", type=float, default=-0.5, help="added for a reply naming no action")
    add("--prior-scale", type=float, default=1.0, help="the policy's action_prior_scale")
    add("--seed", type=int, default=0, help="torch seed for the sampled replies")
    add("--json", type=Path, default=None, help="write every task's table here")
    return parser


def token_parts(
    reply: torch.Tensor, valid: torch.Tensor, word_ids: torch.Tensor
) -> dict[str, torch.Tensor]:
    """``(n, T)`` float masks of the reply tokens in each part of :data:`PARTS`.

    >>> reply = torch.tensor([[1, 5, 2], [1, 2, 0]])  # 5 names an action; 0 pads
    >>> valid = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    >>> {k: v.tolist() for k, v in token_parts(reply, valid, torch.tensor([5, 6])).items()}
    {'decision': [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]], 'wording': [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]], 'no_action': [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]}
    """
    named = torch.isin(reply, word_ids) & valid
    found = named.any(-1, keepdim=True)
    steps = torch.arange(reply.shape[1], device=reply.device)
    first = torch.where(named, steps, reply.shape[1]).amin(-1, keepdim=True)
    decision = steps == first
    return {
        "decision": decision.float(),
        "wording": (valid & found & ~decision).float(),
        "no_action": (valid & ~found).float(),
    }


def normalised(rewards: np.ndarray) -> np.ndarray:
    """Advantages as PPO's minibatch normalisation makes them from a critic at zero.

    >>> [round(float(a), 6) for a in normalised(np.array([1.0, 0.0, 1.0, 0.0]))]
    [1.0, -1.0, 1.0, -1.0]
    """
    out: np.ndarray = (rewards - rewards.mean()) / (rewards.std() + 1e-8)
    return out


def per_state_steps(
    step: np.ndarray,
    state_of: np.ndarray,
    n_states: int,
    right: Sequence[int],
    favoured: Sequence[int],
) -> dict[str, float]:
    """From each reply's step on the head's centred scores ``step`` ``(n, K)`` (minus the
    gradient), summed per state: the step's size; its common part's share of it (the norm of
    the states' mean step over their steps' root mean square: 1 when every state is pushed the
    same way by the same amount, 0 when the pushes cancel; the common part is what a head cannot
    use to tell states apart); and the share of states (with a
    step) where it raises the right action's score above the others' mean, and the LM's
    favoured action's.

    >>> step = np.array([[0.2, -0.2], [0.1, -0.1], [-0.3, 0.3]])
    >>> per_state_steps(step, np.array([0, 0, 1]), 2, [0, 0], [0, 1])
    {'size': 0.6, 'common': 0.0, 'raises_right': 0.5, 'raises_favoured': 1.0}
    """
    totals = np.zeros((n_states, step.shape[1]))
    np.add.at(totals, state_of, step)
    centred = totals - totals.mean(1, keepdims=True)
    moved = np.abs(totals).sum(1) > 1e-12
    if not moved.any():
        nan = float("nan")
        return {"size": 0.0, "common": nan, "raises_right": nan, "raises_favoured": nan}
    rows = [int(s) for s in np.flatnonzero(moved)]
    rms = np.sqrt((centred[rows] ** 2).sum(1).mean())
    return {
        "size": round(float(np.linalg.norm(totals)), 6),
        "common": round(float(np.linalg.norm(centred[rows].mean(0)) / rms), 4),
        "raises_right": float(np.mean([centred[s, right[s]] > 0 for s in rows])),
        "raises_favoured": float(np.mean([centred[s, favoured[s]] > 0 for s in rows])),
    }


def gradient_table(
    task: str, model: str, samples: int, penalty: float, prior_scale: float, seed: int
) -> dict[str, Any]:
    """The per-part table of one family task (see the module docstring)."""
    from benchmarks.studies.decision_odds import head_policy
    from benchmarks.studies.state_replies import INVALID, state_texts
    from gym_llm.envs.family import FamilyEnv
    from gym_llm.envs.tabular import TabularModel

    policy = head_policy(task, model, prior_scale)
    texts, parser = state_texts(task)
    policy.calibrate_action_head(texts)  # as PPO does before its first update
    q = TabularModel.of(FamilyEnv(task)).q_values()
    observations = [t for t in texts for _ in range(samples)]
    state_of = np.repeat(np.arange(len(texts)), samples)
    torch.manual_seed(seed)
    with torch.no_grad():
        replies = policy.act(observations).actions
    chosen = []
    for reply in replies:
        parsed = parser.parse(policy.decode(reply))
        chosen.append(int(parsed.action) if parsed.valid else INVALID)
    parser.close()
    rewards = np.array([q[s, a] if a != INVALID else q[s].mean() + penalty
                        for s, a in zip(state_of, chosen, strict=True)])  # fmt: skip
    advantages = torch.as_tensor(normalised(rewards), dtype=torch.float32)
    head = policy.action_head
    assert head is not None and policy.action_words is not None
    trainable = {p: p.requires_grad for p in policy.parameters()}
    for p in trainable:
        p.requires_grad_(False)
    params = [p for p in head.parameters()]
    for p in params:
        p.requires_grad_(True)
    captured: list[torch.Tensor] = []
    hook = head.register_forward_hook(lambda _m, _i, out: captured.append(out))
    try:
        ev = policy.evaluate_actions(observations, replies)
    finally:
        hook.remove()
        for p, flag in trainable.items():
            p.requires_grad_(flag)
    (scores,) = captured
    reply = torch.zeros(ev.mask.shape, dtype=torch.long)
    for i, r in enumerate(replies):
        reply[i, : len(r)] = torch.as_tensor(r[: reply.shape[1]], dtype=torch.long)
    parts = token_parts(reply, ev.mask.bool(), policy.action_words.ids)
    counts = np.zeros((len(texts), q.shape[1]))
    for s, a in zip(state_of, chosen, strict=True):
        if a != INVALID:
            counts[s, a] += 1
    favoured = [int(np.argmax(row)) for row in counts]
    right = [int(np.argmax(row)) for row in q]
    grads: dict[str, list[torch.Tensor]] = {}
    table: dict[str, Any] = {"task": task, "prior_scale": prior_scale, "samples": samples,
                             "invalid_share": float(np.mean(np.array(chosen) == INVALID)),
                             "mean_reward": float(rewards.mean()), "parts": {}}  # fmt: skip
    for name, mask in parts.items():
        loss = -(advantages.unsqueeze(1) * ev.token_log_probs * mask).sum() / len(replies)
        on_scores, *on_params = torch.autograd.grad(loss, [scores, *params], retain_graph=True)
        grads[name] = [g.flatten() for g in on_params]
        figures = per_state_steps(-on_scores.numpy(), state_of, len(texts), right, favoured)
        table["parts"][name] = {"tokens": int(mask.sum()), **figures}
    flat = {k: torch.cat(v) for k, v in grads.items()}
    whole = sum(flat.values())
    assert isinstance(whole, torch.Tensor)
    every = -(advantages.unsqueeze(1) * ev.token_log_probs).sum() / len(replies)
    direct = torch.cat([g.flatten() for g in torch.autograd.grad(every, params)])
    table["parts_sum_error"] = float((whole - direct).norm())  # the parts cover every token once
    for name, g in flat.items():
        table["parts"][name]["head_grad_norm"] = round(float(g.norm()), 6)
        table["parts"][name]["cosine_with_decision"] = round(
            float(torch.nn.functional.cosine_similarity(g, flat["decision"], 0)), 4
        )
    table["head_grad_norm"] = round(float(whole.norm()), 6)
    return table


def report(table: dict[str, Any]) -> str:
    """A few lines per task for the terminal."""
    lines = [f"{table['task']} (prior scale {table['prior_scale']}): "
             f"{table['invalid_share']:.2f} of replies name no action; head grad norm "
             f"{table['head_grad_norm']:.4g}"]  # fmt: skip
    for name, part in table["parts"].items():
        lines.append(
            f"  {name:9s} tokens {part['tokens']:5d}  grad {part['head_grad_norm']:.4g}  "
            f"cos(decision) {part['cosine_with_decision']:+.2f}  step {part['size']:.3g}  "
            f"common {part['common']:.2f}  raises right {part['raises_right']:.2f}  "
            f"raises favoured {part['raises_favoured']:.2f}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    args = build_parser().parse_args(argv)

    def table(task: str) -> dict[str, Any]:
        return gradient_table(task, args.model, args.samples, args.invalid_penalty,
                              args.prior_scale, args.seed)  # fmt: skip

    return tables_per_task(args.tasks, table, report, args.json)


if __name__ == "__main__":
    main()
