"""Why does the policy not move? Gradient geometry, features and advantages on a family task.

    python -m benchmarks.studies.diagnose_learning --tasks threshold-p0-s0 compare-p0-s1 \\
        --jsonl benchmarks/results/diagnosis/untrained.jsonl

For every state of a task (``gym_llm/Family-v0``), with the library's default policy:

- ``grad``: the gradient of the action-logit difference ``d(s) = logit[right] - logit[other]``
  (2-action tasks; K actions: ``log pi(right | s)``) over the trainable weights. How much of its
  energy differs between states (``relational_share``: 1 minus the squared norm of the mean
  gradient over the mean squared norm) says whether a gradient step can move states apart or only
  moves all of them together; ``step_margin_gain`` is how much one ideal gradient step (ascent on
  ``mean_s d(s)`` signed by the right action) raises the right-minus-wrong margin, split into the
  part that is the same for every state (``common``) and the part that tells states apart.
- ``features``: the same for the final hidden state of the last prompt token (what the value head
  and a linear action head read), and a ridge probe's leave-one-out accuracy of the right action
  from it (with shuffled labels for a floor).
- ``layers`` (``--layers``): how many full-batch steps a linear head needs to get every state
  right from the last prompt token's hidden state at each layer (centred and scaled), and the
  ridge probe there: which layer a head should read.
- ``rollout``: one PPO rollout of ``--n-envs`` x ``--n-steps`` turns: each state's advantage
  signal-to-noise (mean advantage of the right action minus the other's, over the advantages'
  spread) and per parameter group gradient norms of the clipped surrogate and of the value loss.

Rows go to ``--jsonl`` as they are measured.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.cli_args import add_settings, append_jsonl, new_parser
from gym_llm.policy.models import DEFAULT_MODEL

ENV_ID = "gym_llm/Family-v0"


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.studies.diagnose_learning", __doc__)
    add = parser.add_argument
    add("--tasks", nargs="+", default=["threshold-p0-s0", "compare-p0-s1"], help="family tasks")
    add("--model", default=DEFAULT_MODEL, help="registry name or local model path")
    add("--n-envs", type=int, default=8, help="parallel envs of the rollout")
    add("--n-steps", type=int, default=8, help="PPO n_steps")
    add("--seed", type=int, default=0, help="seed")
    add_settings(add, ("policy",), example="policy.action_head=false")
    add("--layers", action="store_true", help="also fit a head on each layer's features")
    add("--jsonl", type=Path, default=None, help="append one row per task here")
    return parser


def state_table(task: str) -> tuple[list[str], np.ndarray]:
    """Each state's prompt text (as the wrappers write it) and its optimal action."""
    import gymnasium as gym

    from gym_llm.envs.tabular import TabularModel
    from gym_llm.wrappers import TextObservationWrapper

    env = TextObservationWrapper(gym.make(ENV_ID, task=task))
    n_states = len(env.unwrapped.task.texts)
    texts = [env.format(s) for s in range(n_states)]
    right = TabularModel.of(env).q_values().argmax(-1)
    return texts, right


def gradient_geometry(vectors: np.ndarray) -> float:
    """The share of the rows' energy that differs between rows: ``1 - |mean|^2 / mean |row|^2``
    (0: every state the same vector, 1: mean zero)."""
    mean = vectors.mean(0)
    return float(1.0 - (mean @ mean) / np.mean((vectors**2).sum(-1)))


def margin_step(gradients: np.ndarray, right: np.ndarray) -> dict[str, float]:
    """One unit gradient step that raises every state's right action (ascending
    ``mean_s margin_s``, ``gradients[s, a]`` = the gradient of ``logit_a - mean logits`` in state
    ``s``): how much each state's right-action margin rises, to first order.

    ``efficiency`` is the mean rise per unit of a state's own gradient: 1 when every state's
    gradient points the same way, near 0 when they cancel (states that need different actions
    have opposite gradients in the same directions), and then a step barely moves any state.
    """
    own = gradients[np.arange(len(right)), right]  # (n, P)
    direction = own.mean(0)
    direction = direction / (np.linalg.norm(direction) + 1e-12)
    change = own @ direction
    scale = float(np.linalg.norm(own, axis=1).mean())
    return {
        "mean": float(change.mean()),
        "spread": float(change.std()),
        "min": float(change.min()),
        "efficiency": float(change.mean()) / (scale + 1e-12),
    }


def head_gradients(features: np.ndarray, k: int) -> np.ndarray:
    """``[s, a]``: the gradient of ``logit_a - mean logits`` of a linear head ``W [h; 1]`` over
    ``W`` (flattened ``K x (d + 1)``)."""
    x = np.concatenate([features, np.ones((len(features), 1))], 1)
    eye = np.eye(k)[None, :, :, None] - 1.0 / k  # (1, a, K, 1)
    grads: np.ndarray = (eye * x[:, None, None, :]).reshape(len(x), k, -1)
    return grads


def ridge_loo_accuracy(features: np.ndarray, labels: np.ndarray, alpha: float = 1.0) -> float:
    """Leave-one-out accuracy of a ridge regression of one-hot labels on standardised features."""
    x = (features - features.mean(0)) / (features.std(0) + 1e-6)
    classes = np.unique(labels)
    y = (labels[:, None] == classes[None, :]).astype(float)
    hits = 0
    for i in range(len(x)):
        keep = np.arange(len(x)) != i
        xt, yt = x[keep], y[keep]
        w = np.linalg.solve(xt @ xt.T + alpha * np.eye(len(xt)), yt - yt.mean(0))  # dual form
        hits += int(classes[(x[i] @ xt.T @ w + yt.mean(0)).argmax()] == labels[i])
    return hits / len(x)


def steps_to_fit(
    features: torch.Tensor, labels: np.ndarray, k: int, max_steps: int = 400
) -> int | None:
    """Full-batch Adam steps (lr 5e-4, the policy's) of a zero-initialised linear head on the
    centred, scaled features until every state's right action is its argmax (``None``: not
    within ``max_steps``): how fast a head *can* learn from these features, without RL noise."""
    from gym_llm.policy.action_head import standardiser

    centre, scale = standardiser(features.float())
    x = (features.float() - centre) / scale
    y = torch.as_tensor(labels)
    head = torch.nn.Linear(x.shape[1], k)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    optimizer = torch.optim.Adam(head.parameters(), lr=5e-4)
    for step in range(max_steps):
        logits = head(x)
        if bool((logits.argmax(-1) == y).all()) and step > 0:
            return step
        loss = torch.nn.functional.cross_entropy(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return None


def layer_fits(model: Any, texts: list[str], right: np.ndarray, k: int) -> dict[str, Any]:
    """:func:`steps_to_fit` and the ridge probe on the last prompt token at every fourth layer,
    the first trainable layer's input and the final layer (untrained model)."""
    policy = model.policy
    with torch.no_grad():
        states = []
        for text in texts:
            out = policy.lm(
                input_ids=torch.tensor([policy.prompt_ids(text)]), output_hidden_states=True
            )
            states.append(torch.stack([h[0, -1].float() for h in out.hidden_states]))
    hidden = torch.stack(states)  # (n, layers + 1, d)
    last = hidden.shape[1] - 1
    layers = sorted({*range(4, last, 4), policy.first_trainable_layer or last, last})
    return {
        str(layer): {
            "steps_to_fit": steps_to_fit(hidden[:, layer], right, k),
            "probe_loo": ridge_loo_accuracy(hidden[:, layer].double().numpy(), right),
        }
        for layer in layers
    }


def per_state_gradients(model: Any, texts: list[str]) -> dict[str, Any]:
    """The trainable weights' gradient of each state's margin, and the captured features."""
    policy = model.policy
    params = [
        p for p in policy.parameters() if p.requires_grad and p is not policy.value_head.weight
    ]
    params = [p for p in params if p is not policy.value_head.bias]
    captured: list[torch.Tensor] = []
    hook = policy.value_head.register_forward_hook(
        lambda _m, inputs, _o: captured.append(inputs[0].detach().float().cpu())
    )
    rows, logits_out = [], []
    policy.set_training_mode(True)
    try:
        for text in texts:
            policy.zero_grad(set_to_none=True)
            logits, _, _ = policy.actions.scores([text])
            logits = logits[0].float()
            centred = logits - logits.mean()
            per_action = []
            for a in range(len(logits)):
                policy.zero_grad(set_to_none=True)
                centred[a].backward(retain_graph=a + 1 < len(logits))
                grads = [p.grad.flatten() for p in params if p.grad is not None]
                per_action.append(torch.cat(grads).numpy())
            rows.append(np.stack(per_action))
            logits_out.append(logits.detach().numpy())
    finally:
        hook.remove()
        policy.zero_grad(set_to_none=True)
        policy.set_training_mode(False)
    return {
        "gradients": np.stack(rows).astype(np.float64),
        "features": torch.cat(captured).numpy().astype(np.float64),
        "logits": np.stack(logits_out),
    }


def rollout_figures(model: Any, right_by_text: dict[str, int]) -> dict[str, Any]:
    """One rollout: advantage signal-to-noise per state, gradient norms per parameter group."""
    from gym_llm.rl.ppo.loss_terms import clipped_surrogate, value_loss

    model._setup_learn(model.n_steps * model.n_envs, None)
    callback = model._init_callback(None)
    model.collect_rollouts(model.env, callback, model.rollout_buffer, model.n_steps)
    batch = next(model.rollout_buffer.minibatches(model.n_steps * model.n_envs))
    texts = batch.observations
    actions = np.asarray([int(a[0]) for a in batch.actions])
    advantages = batch.advantages.cpu().numpy()
    snr = []
    for text in set(texts):
        rows = [i for i, t in enumerate(texts) if t == text]
        good = [advantages[i] for i in rows if actions[i] == right_by_text.get(text, -1)]
        bad = [advantages[i] for i in rows if actions[i] != right_by_text.get(text, -1)]
        if good and bad:
            snr.append((np.mean(good) - np.mean(bad)) / (np.std(advantages[rows]) + 1e-8))
    policy = model.policy
    policy.set_training_mode(True)
    groups: dict[str, dict[str, float]] = {}
    for name in ("policy", "value"):
        policy.zero_grad(set_to_none=True)
        evaluation = policy.evaluate_actions(batch.observations, batch.actions, batch.states)
        adv = batch.advantages
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        if name == "policy":
            old = torch.as_tensor(np.stack([lp[:1] for lp in batch.old_token_log_probs]))
            mask = evaluation.mask.float()
            loss = clipped_surrogate(
                evaluation.token_log_probs, old, adv, mask, model.clip_range(1.0)
            ).loss
        else:
            loss = model.vf_coef * value_loss(
                evaluation.values, batch.returns, batch.old_values, None
            )
        loss.backward()
        norms: dict[str, float] = {}
        for pname, p in policy.named_parameters():
            if p.grad is None:
                continue
            key = (
                "value_head"
                if "value_head" in pname
                else ("lora_A" if "lora_A" in pname else "lora_B")
            )
            norms[key] = norms.get(key, 0.0) + float(p.grad.float().pow(2).sum())
        groups[name] = {k: v**0.5 for k, v in norms.items()}
    policy.zero_grad(set_to_none=True)
    policy.set_training_mode(False)
    return {
        "advantage_snr_mean": float(np.mean(snr)) if snr else None,
        "advantage_snr_states": len(snr),
        "distinct_states": len(set(texts)),
        "grad_norms": groups,
        "max_grad_norm": model.max_grad_norm,
    }


def diagnose(task: str, args: argparse.Namespace) -> dict[str, Any]:
    from gym_llm import PPO, make_text_env

    env = make_text_env(ENV_ID, args.n_envs, env_kwargs={"task": task}, seed=args.seed)
    model = PPO(
        "LLMPolicy", env, n_steps=args.n_steps, batch_size=args.n_envs * args.n_steps,
        seed=args.seed, policy_kwargs={"model": args.model, **args.set["policy"]},
    )  # fmt: skip
    texts, right = state_table(task)
    start = time.perf_counter()
    measured = per_state_gradients(model, texts)
    grads, feats = measured["gradients"], measured["features"]
    k = measured["logits"].shape[1]
    standard = (feats - feats.mean(0)) / (feats.std(0) + 1e-6)
    unit = feats / np.linalg.norm(feats, axis=1, keepdims=True)
    greedy = measured["logits"].argmax(-1)
    rng = np.random.default_rng(0)
    row: dict[str, Any] = {
        "task": task,
        "seed": args.seed,
        "states": len(texts),
        "actions": k,
        "greedy_right_share": float(np.mean(greedy == right)),
        "greedy_distinct": len(set(greedy.tolist())),
        # The trainable weights' gradients of each action's centred logit, per state: what
        # share differs between states, and what one ideal step does to the right margins.
        "lora": {
            "relational_share": float(np.mean([gradient_geometry(grads[:, a]) for a in range(k)])),
            "norm_mean": float(np.linalg.norm(grads, axis=2).mean()),
            "ideal_step": margin_step(grads, right),
        },
        # The final hidden state of the last prompt token (the value head's input): as it is,
        # and standardised over the states (what a linear head on centred features would see).
        "features": {
            "relational_share": gradient_geometry(feats),
            "cosine_mean": float(np.mean(unit @ unit.T)),
            "probe_loo_accuracy": ridge_loo_accuracy(feats, right),
            "probe_loo_shuffled": ridge_loo_accuracy(feats, rng.permutation(right)),
            "head_ideal_step": margin_step(head_gradients(feats, k), right),
            "standardised_head_ideal_step": margin_step(head_gradients(standard, k), right),
        },
        "gradient_s": round(time.perf_counter() - start, 2),
    }
    if args.layers:
        row["layers"] = layer_fits(model, texts, right, k)
        row["first_trainable_layer"] = model.policy.first_trainable_layer
    right_by_text = dict(zip(texts, right.tolist(), strict=True))
    row["rollout"] = rollout_figures(model, right_by_text)
    return row


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    args = build_parser().parse_args(argv)
    torch.manual_seed(args.seed)
    rows = []
    for task in args.tasks:
        row = diagnose(task, args)
        print(json.dumps(row), flush=True)
        append_jsonl(args.jsonl, row)
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
