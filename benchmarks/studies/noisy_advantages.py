"""Why PPO loses a noisy task: what each rollout's advantages say per state, against the truth.

On a task with an exact model (the family's tasks), after every rollout of a PPO run:

- how many turns each visited state got, and in what share of them both the best action
  (``Q*``'s) and another were tried — a per-state comparison needs both;
- the **exact on-policy gap** ``Q^pi(s, a*) - Q^pi(s, other)`` (``other``: the rest, weighted by
  the policy), from the policy's own probabilities in every state and the task's dynamics, with
  PPO's discount: the direction the expected update pushes in. When it is negative the policy is
  in a trap (the right action looks worse *because of* how the policy plays later), whatever the
  noise;
- the **estimated gap**, the mean rollout advantage of ``a*`` minus the others', and its
  signal-to-noise: the exact gap over the estimate's standard error. Near 1, one state's update
  in six points the wrong way;
- each state's entropy and smallest action probability, the greedy policy's share of right
  states, and the exact value of the sampling policy.

``python -m benchmarks.recipes.family_sweep run ... --noise-figures`` writes one row per rollout
to ``NAME.noise.jsonl`` beside the sweep's JSONL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.cli_args import append_jsonl
from gym_llm.envs.tabular import TabularModel


def on_policy_q(tabular: TabularModel, policy: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """``Q^pi[s, a]`` of ``policy[s, a]`` (probabilities) over the horizon, discounted by
    ``gamma``: what each action is worth when ``policy`` plays after it."""
    v = np.zeros(len(tabular.reward))
    q: np.ndarray = tabular.reward.copy()
    for _ in range(tabular.horizon):
        q = tabular.reward + gamma * tabular.cont @ v
        v = (policy * q).sum(-1)
    return q


def exact_gaps(q: np.ndarray, policy: np.ndarray, best: np.ndarray) -> np.ndarray:
    """Per state, ``Q(s, a*)`` minus the policy-weighted mean ``Q`` of the other actions
    (their plain mean where the policy gives them no weight)."""
    gaps = np.zeros(len(q))
    for s, a in enumerate(best):
        others = np.delete(np.arange(q.shape[1]), a)
        weights = policy[s, others]
        weights = (
            weights / weights.sum() if weights.sum() > 0 else np.full(len(others), 1 / len(others))
        )
        gaps[s] = q[s, a] - weights @ q[s, others]
    return gaps


def advantage_figures(
    states: np.ndarray,
    actions: np.ndarray,
    advantages: np.ndarray,
    gaps: np.ndarray,
    best: np.ndarray,
) -> dict[str, Any]:
    """One rollout's per-state comparison of the estimated advantages with the exact gaps.

    ``states``, ``actions``, ``advantages``: one entry per turn (state indices, action indices,
    the advantages PPO trains on, before any normalisation); ``gaps``: :func:`exact_gaps`;
    ``best``: ``Q*``'s action per state.
    """
    visited, counts = np.unique(states, return_counts=True)
    snr, estimate_right, estimated, exact = [], [], [], []
    exact_right_turns = 0.0
    for s, n in zip(visited, counts, strict=True):
        exact_right_turns += n * float(gaps[s] > 0)
        rows = states == s
        right = advantages[rows & (actions == best[s])]
        wrong = advantages[rows & (actions != best[s])]
        if len(right) == 0 or len(wrong) == 0:
            continue
        gap = float(right.mean() - wrong.mean())
        estimated.append(gap)
        exact.append(float(gaps[s]))
        estimate_right.append(float(gap > 0))
        within = np.concatenate([right - right.mean(), wrong - wrong.mean()])
        spread = float(np.sqrt((within**2).sum() / max(len(within) - 2, 1)))
        if len(within) > 2 and spread > 1e-6:  # no spread: no noise to measure against
            se = spread * np.sqrt(1 / len(right) + 1 / len(wrong))
            snr.append(abs(float(gaps[s])) / se)
    return {
        "turns": len(states),
        "states_visited": len(visited),
        "turns_per_state": float(counts.mean()),
        "both_tried_share": len(estimated) / len(visited),
        "exact_gap_right_share": exact_right_turns / len(states),
        "estimate_right_share": float(np.mean(estimate_right)) if estimate_right else None,
        "exact_gap_mean": float(np.mean(exact)) if exact else None,
        "estimated_gap_mean": float(np.mean(estimated)) if estimated else None,
        "snr_median": float(np.median(snr)) if snr else None,
        "advantage_std": float(np.std(advantages)),
    }


def optimal_actions(q_star: np.ndarray) -> np.ndarray:
    """``(n, K)`` whether each action is optimal in its state: every action tied with the best
    counts, so a state with two equally short ways to the goal is right either way.

    >>> optimal_actions(np.array([[1.0, 1.0, 0.5]])).tolist()
    [[True, True, False]]
    """
    return np.isclose(q_star, q_star.max(-1, keepdims=True))  # type: ignore[no-any-return]


def greedy_right(scores: np.ndarray, optimal: np.ndarray) -> np.ndarray:
    """Per state, whether the action with the highest score is an optimal one."""
    return optimal[np.arange(len(scores)), scores.argmax(-1)]  # type: ignore[no-any-return]


def policy_figures(
    policy: np.ndarray,
    best: np.ndarray,
    tabular: TabularModel,
    gaps: np.ndarray | None = None,
    optimal: np.ndarray | None = None,
) -> dict[str, Any]:
    """The policy over every state: entropy, smallest probability, greedy share right (any
    optimal action counts; ``optimal``: :func:`optimal_actions` of the task, computed when not
    given), value, and each state the greedy policy gets wrong as ``[state, p(a*), exact gap]``."""
    from gym_llm.rl.common.diagnostics import entropy as entropy_of

    entropy = entropy_of(policy)
    if optimal is None:
        optimal = optimal_actions(tabular.q_values())
    right = greedy_right(policy, optimal)
    wrong = np.flatnonzero(~right)
    return {
        "wrong_states": [
            [
                int(s),
                round(float(policy[s, best[s]]), 4),
                None if gaps is None else round(float(gaps[s]), 4),
            ]
            for s in wrong
        ],
        "entropy_mean": float(entropy.mean()),
        "entropy_min": float(entropy.min()),
        "min_prob": float(policy.min()),
        "greedy_right_share": float(np.mean(right)),
        "sampling_value": tabular.value(policy),
    }


def value_figures(
    q: np.ndarray, optimal: np.ndarray, pairs: set[tuple[int, int]]
) -> dict[str, Any]:
    """A learner's action values over every state (``advantage_estimator="q"``): the share of
    states whose greedy value is an optimal action (``optimal``: :func:`optimal_actions`), and
    the share of (state, action) pairs its replay holds (a value never trained on is the head's
    guess).

    >>> value_figures(np.array([[1.0, 0.0], [0.0, 1.0]]), np.eye(2, dtype=bool)[[0, 0]], {(0, 0)})
    {'values_right_share': 0.5, 'replay_pairs_share': 0.25}
    """
    return {
        "values_right_share": float(np.mean(greedy_right(q, optimal))),
        "replay_pairs_share": len(pairs) / optimal.size,
    }


class NoiseFigures:
    """After each rollout of ``model`` on family task ``task``, one row of figures to ``path``."""

    def __init__(self, task: str, path: Path, run: dict[str, Any]) -> None:
        import gymnasium as gym

        from benchmarks.studies.diagnose_learning import ENV_ID, state_table

        self.texts, self.best = state_table(task)
        self.index = {t: s for s, t in enumerate(self.texts)}
        self.tabular = TabularModel.of(gym.make(ENV_ID, task=task))
        self.optimal = optimal_actions(self.tabular.q_values())
        self.path, self.run = path, run

    def policy(self, model: Any) -> np.ndarray:
        """Every state's action probabilities (greedy calls: no random draw is spent)."""
        import torch

        with torch.inference_mode():
            step = model.policy.act(self.texts, deterministic=True)
        assert step.action_probs is not None, "noise figures need choice mode's distributions"
        return np.asarray(step.action_probs, dtype=np.float64)

    def after_rollout(self, model: Any) -> dict[str, Any]:
        """The figures of the rollout in ``model.rollout_buffer``, appended to the file."""
        buffer = model.rollout_buffer
        texts: Sequence[str] = [str(t) for t in buffer.observations_text.reshape(-1)]
        states = np.asarray([self.index[t] for t in texts])
        actions = np.asarray([int(a[0]) for a in buffer.action_tokens.reshape(-1)])
        advantages = np.asarray(buffer.advantages, dtype=np.float64).reshape(-1)
        policy = self.policy(model)
        gaps = exact_gaps(on_policy_q(self.tabular, policy, model.gamma), policy, self.best)
        row = {**self.run, "env_steps": int(model.num_timesteps)}
        row.update(advantage_figures(states, actions, advantages, gaps, self.best))
        row.update(policy_figures(policy, self.best, self.tabular, gaps, self.optimal))
        critic = getattr(model, "q_critic", None)
        if critic is not None:
            held = len(critic.replay) // critic.replay.n_envs
            observations = critic.replay.observations[:held].ravel()
            actions_held = critic.replay.actions[:held].ravel()
            pairs = {
                (self.index[str(o)], int(a))
                for o, a in zip(observations, actions_held, strict=True)
                if str(o) in self.index
            }
            q = critic.values(self.texts)
            row.update(value_figures(q, self.optimal, pairs))
        append_jsonl(self.path, row)
        return row

    def callback(self, model: Any) -> Any:
        """An SB3 callback calling :meth:`after_rollout` at each rollout's end."""
        from stable_baselines3.common.callbacks import BaseCallback

        figures = self

        class _AfterRollout(BaseCallback):
            def _on_step(self) -> bool:
                return True

            def _on_rollout_end(self) -> None:
                figures.after_rollout(model)

        return _AfterRollout()


#: The figures :func:`summarize` averages per window, in its table's order.
SUMMARY = (
    "turns_per_state",
    "both_tried_share",
    "exact_gap_right_share",
    "estimate_right_share",
    "snr_median",
    "entropy_mean",
    "greedy_right_share",
    "sampling_value",
    "values_right_share",
    "replay_pairs_share",
)


def summarize(rows: Sequence[dict[str, Any]], edges: Sequence[int]) -> list[dict[str, Any]]:
    """Per task and arm, each figure's mean (the signal-to-noise's median) over the rollouts of
    every seed in each window
    ``(edges[i-1], edges[i]]`` of env steps (missing values left out), and the seeds counted."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["task"], row["arm"]), []).append(row)
    table = []
    for (task, arm), members in sorted(groups.items()):
        for low, high in zip([0, *edges[:-1]], edges, strict=True):
            inside = [r for r in members if low < r["env_steps"] <= high]
            if not inside:
                continue
            line: dict[str, Any] = {"task": task, "arm": arm, "window": f"{low + 1}-{high}"}
            line["seeds"] = len({r["seed"] for r in inside})
            for name in SUMMARY:
                values = [r[name] for r in inside if r.get(name) is not None]
                average = np.median if name == "snr_median" else np.mean  # a ratio: skewed
                line[name] = round(float(average(values)), 3) if values else None
            table.append(line)
    return table


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """``python -m benchmarks.studies.noisy_advantages FILE.noise.jsonl ... --edges 512 4096``:
    the windows' table as markdown."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.noisy_advantages",
                                     description=main.__doc__)  # fmt: skip
    parser.add_argument("files", type=Path, nargs="+", help="NAME.noise.jsonl files")
    parser.add_argument("--edges", type=int, nargs="+", default=[512, 2048, 4096, 8192],
                        help="the windows' upper ends, in env steps")  # fmt: skip
    args = parser.parse_args(argv)
    rows = [json.loads(line) for f in args.files for line in f.read_text().splitlines() if line]
    table = summarize(rows, args.edges)
    names = ["task", "arm", "window", "seeds", *SUMMARY]
    print("| " + " | ".join(names) + " |\n|" + "---|" * len(names))
    for line in table:
        print("| " + " | ".join("–" if line[n] is None else str(line[n]) for n in names) + " |")
    return table


if __name__ == "__main__":
    main()
