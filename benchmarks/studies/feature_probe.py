"""Go/no-go for value learning on the LM's features: can Q* be read off the frozen model?

    python -m benchmarks.studies.feature_probe --envs blackjack frozenlake frozenlake-slippery \\
        --jsonl benchmarks/results/feature-probe/cpu.jsonl

An off-policy learner that regresses ``Q(s, a)`` on the language model's features can only be as
good as those features. For every decision state of an env with an exact model, this takes the
hidden state of the last prompt token (the prompt the policy itself builds, adapter disabled) at
the middle layer, the first trainable layer's input, the final layer and the middle and final
layers side by side, and regresses the exact optimal ``Q*(s, a)`` of every action from it (dynamic
programming, as the exact evaluation computes it). Five folds: each state's prediction comes from
a regressor that never saw it, so every state is a held-out state once (20 % per fold).

Per env, feature set and regressor (ridge; a one-hidden-layer MLP), a row with: ``r2_q`` (R² of
``Q*`` over all states and actions), ``r2_advantage`` (R² of ``Q*(s, a) - mean_a Q*(s, a)``,
the part that decides the action), ``agreement`` (share of states with a strictly best action
where the predicted argmax is it), ``greedy_return`` (exact return of acting greedily on the
held-out predictions in every state) with its share of the random-to-optimum gap, and the same
R² with the states' Q-rows shuffled (a floor: what fitting noise gives). Held-out states test
whether the features *generalise* Q* to states never seen; an env with a handful of states (a 4x4
grid: 11 decision states) has too few neighbours for that, and a learner visits all of them
anyway, so each row also has the fit on every state (``*_fit``): whether the features tell the
states apart well enough for a head to hold every state's values.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.cli_args import append_jsonl, new_parser
from gym_llm.policy.models import DEFAULT_MODEL

#: The envs the issue asks about: (env id, kwargs).
ENVS: dict[str, tuple[str, dict[str, Any]]] = {
    "blackjack": ("Blackjack-v1", {"sab": False}),
    "frozenlake": ("FrozenLake-v1", {"is_slippery": False}),
    "frozenlake-slippery": ("FrozenLake-v1", {"is_slippery": True}),
}


def env_name(name: str) -> str:
    """``name`` as given when it is one of :data:`ENVS` or a task of the family, else an error
    listing both."""
    if name in ENVS:
        return name
    from gym_llm.envs.family import make_task

    try:
        make_task(name)
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"{name!r}: not one of {', '.join(ENVS)}, and {error}"
        ) from None
    return name


def env_spec(name: str) -> tuple[str, dict[str, Any]]:
    """The env id and kwargs of :func:`env_name`'s ``name``."""
    return ENVS.get(name, ("gym_llm/Family-v0", {"task": name}))


Regressor = Callable[[np.ndarray, np.ndarray, np.ndarray, int], np.ndarray]


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.studies.feature_probe", __doc__)
    add = parser.add_argument
    add(
        "--envs",
        nargs="+",
        type=env_name,
        default=list(ENVS),
        help=f"envs to probe: {', '.join(ENVS)} or a task of the family (e.g. deck-p0-s1)",
    )
    add("--model", default=DEFAULT_MODEL, help="registry name or local model path")
    add("--folds", type=int, default=5, help="cross-validation folds (5: 20 %% held out)")
    add("--seed", type=int, default=0, help="seed of the folds and the MLP")
    add("--jsonl", type=Path, default=None, help="append one row per env, layer and regressor")
    return parser


def decision_table(
    env_id: str, env_kwargs: dict[str, Any], gamma: float = 0.99
) -> tuple[list[Any], np.ndarray]:
    """The states a policy is asked in and ``Q*[state, action]`` there. Grid worlds are discounted
    (``gamma``, SB3 DQN's default): undiscounted, every move that does not fall in a hole is
    worth the same 1.0, so the greedy policy of ``Q*`` can walk into a wall for ever. Blackjack
    has no cycles and is left undiscounted (its Q* is the return the exact evaluation scores)."""
    if env_id == "Blackjack-v1":
        from gym_llm.evaluation.exact import blackjack_q_values

        table = blackjack_q_values()
        return list(table), np.array(list(table.values()))
    import gymnasium as gym

    from gym_llm.envs.tabular import TabularModel

    model = TabularModel.of(gym.make(env_id, **env_kwargs))
    live = (model.cont.sum(-1) > 0).any(-1) | (model.reward != 0).any(-1)
    states = np.flatnonzero(live).tolist()
    return states, model.q_values(gamma)[states]


def greedy_return(
    env_id: str, env_kwargs: dict[str, Any], states: list[Any], actions: np.ndarray
) -> float:
    """Exact return of playing ``actions[i]`` in ``states[i]`` (uniform where no one is asked)."""
    if env_id == "Blackjack-v1":
        from gym_llm.evaluation.exact import blackjack_value

        return blackjack_value({s: float(a) for s, a in zip(states, actions, strict=True)})
    import gymnasium as gym

    from gym_llm.envs.tabular import TabularModel

    model = TabularModel.of(gym.make(env_id, **env_kwargs))
    policy = np.full(model.reward.shape, 1.0 / model.reward.shape[1])
    policy[states] = np.eye(model.reward.shape[1])[actions]
    return model.value(policy)


def r2(target: np.ndarray, predicted: np.ndarray) -> float:
    """Coefficient of determination over every entry, each column centred on its own mean."""
    residual = float(((target - predicted) ** 2).sum())
    total = float(((target - target.mean(0)) ** 2).sum())
    return 1.0 - residual / total if total > 0 else float("nan")


def advantages(q: np.ndarray) -> np.ndarray:
    return np.asarray(q - q.mean(1, keepdims=True))


def agreement(q: np.ndarray, predicted: np.ndarray, tol: float = 1e-9) -> float:
    """Share of the states where some action is worse than the best in which the prediction's
    argmax is a best action (ties count as right)."""
    best = q.max(1, keepdims=True)
    decided = (q < best - tol).any(1)
    if not decided.any():
        return float("nan")
    chosen = q[np.arange(len(q)), predicted.argmax(1)]
    return float(np.mean(chosen[decided] >= best[decided, 0] - tol))


def out_of_fold(x: np.ndarray, y: np.ndarray, fit: Regressor, folds: int, seed: int) -> np.ndarray:
    """Each row's prediction from a regressor fitted on the other folds."""
    order = np.random.default_rng(seed).permutation(len(x))
    predicted = np.zeros_like(y)
    for held in np.array_split(order, folds):
        train = np.setdiff1d(order, held)
        predicted[held] = fit(x[train], y[train], x[held], seed)
    return predicted


def standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both sets in units of the training set's per-feature mean and std."""
    mean, std = train.mean(0), train.std(0) + 1e-6
    return (train - mean) / std, (test - mean) / std


def fit_ridge(
    x: np.ndarray, y: np.ndarray, test: np.ndarray, seed: int, alpha: float = 10.0
) -> np.ndarray:
    """Ridge on standardised features (closed form in the dual: fewer states than features)."""
    del seed
    x, test = standardise(x, test)
    mean = y.mean(0)
    dual = np.linalg.solve(x @ x.T + alpha * np.eye(len(x)), y - mean)
    return np.asarray(test @ (x.T @ dual) + mean)


def fit_mlp(
    x: np.ndarray, y: np.ndarray, test: np.ndarray, seed: int, hidden: int = 64, steps: int = 600
) -> np.ndarray:
    """A one-hidden-layer MLP, full-batch Adam with weight decay (settings fixed in advance)."""
    x, test = standardise(x, test)
    generator = torch.Generator().manual_seed(seed)
    net = torch.nn.Sequential(
        torch.nn.Linear(x.shape[1], hidden), torch.nn.GELU(), torch.nn.Linear(hidden, y.shape[1])
    )
    for p in net.parameters():
        torch.nn.init.normal_(p, std=0.02, generator=generator)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=1e-2)
    inputs, targets = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(net(inputs), targets).backward()
        optimizer.step()
    with torch.no_grad():
        return np.asarray(net(torch.tensor(test, dtype=torch.float32)).double().numpy())


REGRESSORS: dict[str, Regressor] = {"ridge": fit_ridge, "mlp": fit_mlp}


def prompt_features(policy: Any, texts: list[str]) -> tuple[np.ndarray, int]:
    """Every layer's hidden state of each prompt's last token, adapter disabled: ``(n, L+1, d)``,
    and the index of the first trainable layer's input."""
    lm = policy.lm
    adapter_off = lm.disable_adapter() if hasattr(lm, "disable_adapter") else nullcontext()
    rows = []
    with torch.no_grad(), adapter_off:
        for text in texts:
            out = lm(
                input_ids=torch.tensor([policy.prompt_ids(text)], device=policy.device),
                output_hidden_states=True,
            )
            rows.append(torch.stack([h[0, -1].float().cpu() for h in out.hidden_states]))
    hidden = torch.stack(rows).double().numpy()
    return hidden, int(policy.first_trainable_layer or hidden.shape[1] - 1)


def feature_sets(hidden: np.ndarray, first_trainable: int) -> dict[str, np.ndarray]:
    last = hidden.shape[1] - 1
    middle = last // 2
    return {
        f"layer {middle} (middle)": hidden[:, middle],
        f"layer {first_trainable} (first trainable's input)": hidden[:, first_trainable],
        f"layer {last} (final)": hidden[:, last],
        f"layers {middle}+{last}": np.concatenate([hidden[:, middle], hidden[:, last]], axis=1),
    }


def probe(name: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    from gym_llm import PPO, make_text_env
    from gym_llm.evaluation.exact import exact_optimum, exact_random_value
    from gym_llm.wrappers import TextObservationWrapper

    env_id, env_kwargs = env_spec(name)
    states, q = decision_table(env_id, env_kwargs)
    import gymnasium as gym

    text_env = TextObservationWrapper(gym.make(env_id, **env_kwargs))
    texts = [text_env.format(state) for state in states]
    env = make_text_env(env_id, 1, env_kwargs=env_kwargs, seed=args.seed)
    model = PPO("LLMPolicy", env, n_steps=8, batch_size=8, policy_kwargs={"model": args.model})
    start = time.perf_counter()
    hidden, first_trainable = prompt_features(model.policy, texts)
    feature_s = time.perf_counter() - start
    optimum, random = exact_optimum(env_id, env_kwargs), exact_random_value(env_id, env_kwargs)
    shuffled = q[np.random.default_rng(args.seed).permutation(len(q))]
    rows = []
    for features, x in feature_sets(hidden, first_trainable).items():
        for regressor, fit in REGRESSORS.items():
            predicted = out_of_fold(x, q, fit, args.folds, args.seed)
            floor = out_of_fold(x, shuffled, fit, args.folds, args.seed)
            value = greedy_return(env_id, env_kwargs, states, predicted.argmax(1))
            fitted = fit(x, q, x, args.seed)  # every state seen: what a learner that visits
            fitted_value = greedy_return(env_id, env_kwargs, states, fitted.argmax(1))
            row = {
                "env": name, "features": features, "regressor": regressor,
                "states": len(states), "dim": x.shape[1], "folds": args.folds,
                "r2_q": round(r2(q, predicted), 4),
                "r2_advantage": round(r2(advantages(q), advantages(predicted)), 4),
                "r2_q_shuffled": round(r2(shuffled, floor), 4),
                "agreement": round(agreement(q, predicted), 4),
                "greedy_return": round(value, 4), "optimum": round(optimum, 4),
                "random": round(random, 4),
                "gap": round((value - random) / (optimum - random), 4),
                "r2_q_fit": round(r2(q, fitted), 4),
                "agreement_fit": round(agreement(q, fitted), 4),
                "greedy_return_fit": round(fitted_value, 4),
                "feature_s": round(feature_s, 1),
            }  # fmt: skip
            rows.append(row)
    env.close()
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| env | features | regressor | R² Q* | R² advantage | R² shuffled | best action | "
        "greedy return (gap) | fit on all: R² Q*, best action, greedy return |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['env']} ({r['states']} states) | {r['features']} | {r['regressor']} | "
            f"{r['r2_q']:.3f} | {r['r2_advantage']:.3f} | {r['r2_q_shuffled']:.3f} | "
            f"{r['agreement']:.2f} | {r['greedy_return']:.3f} ({r['gap']:.0%}) | "
            f"{r['r2_q_fit']:.3f}, {r['agreement_fit']:.2f}, {r['greedy_return_fit']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    args = build_parser().parse_args(argv)
    torch.manual_seed(args.seed)
    rows: list[dict[str, Any]] = []
    for name in args.envs:
        measured = probe(name, args)
        rows += measured
        append_jsonl(args.jsonl, *measured)
    print(markdown(rows))
    return rows


if __name__ == "__main__":
    main()
