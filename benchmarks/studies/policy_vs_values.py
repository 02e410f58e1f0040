"""Does a saved agent's policy lag its own action values, or are the values wrong?

    python -m benchmarks.studies.policy_vs_values /tmp/runs/blackjack-s0/agent \\
        --env Blackjack-v1 --env-kwargs sab=False --top 12 --json out.json

For an agent with action values on an env with an exact model (FrozenLake, the toy-text and
text tabular envs, Blackjack): PPO trained with ``advantage_estimator="q"`` or ``"auto"``, or DQN
(whose greedy policy is its values' posterior with the LM's prior). The exact value of
the policy's greedy play and of its values' greedy play, against the optimum, and every state
where the best move alone would raise the policy's value, with what it would gain there, the
policy's probabilities there, the values and ``Q*``. Values right where the policy is wrong: the
policy lags them. Values wrong too: the values are what to fix.

Each move's error is also read against how often the run played it (its count in the saved
replay; DQN saves none, so its errors are not banded): the values against ``Q*`` at their own
discount, by bands of plays, over the states the run visited. Values learned only from what was played are wrong where little was played.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from benchmarks.cli_args import new_parser, write_json
from benchmarks.studies.floor_ablation import cell_probabilities
from benchmarks.studies.noisy_advantages import optimal_actions
from gym_llm import DQN, PPO, make_text_env
from gym_llm.envs.tabular import TabularModel
from gym_llm.evaluation.exact import (
    BlackjackTable,
    blackjack_q_values,
    blackjack_states,
    blackjack_value,
    exact_optimum,
)
from gym_llm.experiments.agents import load_agent
from gym_llm.experiments.specs import parse_env_kwargs
from gym_llm.rl.dqn.replay import TextReplayBuffer
from gym_llm.wrappers import TextObservationWrapper


def exact_table(
    env_id: str, env_kwargs: dict[str, Any]
) -> tuple[list[Any], np.ndarray, np.ndarray, Callable[[np.ndarray], float]]:
    """The env's decision states, ``Q*`` per state (rows), a best move per state (ties broken
    by the values at discount 0.99, so that a move which only waits is not taken for best), and
    the exact value of a deterministic policy given as one action index per state."""
    if env_id == "Blackjack-v1":
        states: list[Any] = list(blackjack_states())
        table = blackjack_q_values()
        q_star = np.array([table[s] for s in states])

        def bj_value(actions: np.ndarray) -> float:
            return blackjack_value({s: float(a) for s, a in zip(states, actions, strict=True)})

        return states, q_star, q_star.argmax(1), bj_value
    model = TabularModel.of(gym.make(env_id, **env_kwargs))
    q_star = np.asarray(model.q_values())
    discounted = np.asarray(model.q_values(0.99, sweeps=1000))
    best = np.where(optimal_actions(q_star), discounted, -np.inf).argmax(1)
    n_actions = q_star.shape[1]
    return (
        list(range(len(q_star))), q_star, best,
        lambda a: float(model.value(np.eye(n_actions)[a])),
    )  # fmt: skip


#: Bands of plays per (state, move) in the replay, by their lower edges.
VISIT_BANDS = (0, 1, 10, 100, 1000)


def discounted_q_star(env_id: str, env_kwargs: dict[str, Any], gamma: float) -> np.ndarray:
    """``Q*`` per decision state (``exact_table``'s order) at the discount ``gamma``: what the
    values are meant to learn (a hit's worth discounted by the cards drawn after it)."""
    plain = BlackjackTable() if env_id == "Blackjack-v1" else gym.make(env_id, **env_kwargs)
    return np.asarray(TabularModel.of(plain).q_values(gamma, sweeps=1000))


def saved_replay(agent: Path) -> TextReplayBuffer:
    """The action values' replay as the agent saved it (``policy.pt``), whatever env count the
    agent is loaded with here."""
    state = torch.load(agent / "policy.pt", map_location="cpu", weights_only=True)["q_critic"]
    held, n_envs = state["replay"]["actions"].shape
    replay = TextReplayBuffer(held * n_envs, n_envs, state["replay"]["behaviour_probs"].shape[-1])
    replay.load_state_dict(state["replay"])
    return replay


def replay_visits(replay: TextReplayBuffer, texts: Sequence[str]) -> np.ndarray:
    """``(S, K)``: how often each move was played in each of ``texts`` among the steps the
    replay holds (the whole run while the run is shorter than the replay)."""
    observations, actions, _ = replay.latest(replay.held_rows)
    counts = Counter(
        zip((str(o) for o in observations.ravel()), actions.ravel().tolist(), strict=True)
    )
    return np.array([[counts[(t, a)] for a in range(replay.n_actions)] for t in texts])


def error_by_visits(errors: np.ndarray, visits: np.ndarray) -> list[dict[str, Any]]:
    """The values' error per band of plays, over the states played at least once: how many
    moves, the mean signed error (values minus ``Q*``) and the mean absolute error.

    >>> rows = error_by_visits(np.array([[0.5, -0.1], [0.0, 0.2]]), np.array([[0, 20], [0, 0]]))
    >>> [(r["plays"], r["moves"], r["mean_error"]) for r in rows]
    [('0', 1, 0.5), ('10-99', 1, -0.1)]
    """
    seen = visits.sum(1) > 0
    errors, visits = errors[seen].ravel(), visits[seen].ravel()
    rows = []
    edges = (*VISIT_BANDS, np.inf)
    for low, high in pairwise(edges):
        band = (visits >= low) & (visits < high)
        if not band.any():
            continue
        label = (
            str(low)
            if high == low + 1
            else f"{low}+"
            if high == np.inf
            else f"{low}-{int(high) - 1}"
        )
        rows.append(
            {
                "plays": label,
                "moves": int(band.sum()),
                "mean_error": round(float(errors[band].mean()), 4),
                "mean_abs_error": round(float(np.abs(errors[band]).mean()), 4),
            }
        )
    return rows


@dataclass(frozen=True)
class AgentReading:
    """What an agent plays and believes in each state: ``(S, K)`` policy probabilities, values
    (``reward_scale`` times reward units), plays per move from its saved replay (``None``: none
    saved) and the values' discount."""

    probs: np.ndarray
    values: np.ndarray
    visits: np.ndarray | None
    gamma: float
    reward_scale: float = 1.0


def read_ppo(model: PPO, agent: Path, texts: list[str]) -> AgentReading:
    """PPO's greedy policy over the listed actions, its action values and its saved replay."""
    if model.q_critic is None:
        raise SystemExit(f"{agent} learned no action values (advantage_estimator 'gae').")
    probs = np.concatenate(
        [cell_probabilities(model, texts[i : i + 64]) for i in range(0, len(texts), 64)]
    )
    critic = model.q_critic
    visits = replay_visits(saved_replay(agent), texts)
    values = np.asarray(critic.values(texts))
    return AgentReading(probs, values, visits, critic.gamma, model.reward_scale)


def read_dqn(model: DQN, texts: list[str]) -> AgentReading:
    """DQN's greedy policy: the argmax of its (averaged) values' posterior with the LM's prior,
    as ``predict(deterministic=True)`` takes it."""
    _, features = model.prior_and_features(texts)
    head = model.q_net_average if model.average_tau < 1 else model.q_net
    with torch.no_grad():
        probs = torch.softmax(model.action_logits(texts, averaged=True).double(), -1)
        values = head(features).double()
    return AgentReading(probs.cpu().numpy(), values.cpu().numpy(), None, float(model.gamma))


def compare(agent: Path, env_id: str, env_kwargs: dict[str, Any], top: int) -> dict[str, Any]:
    """One agent's policy, values and optimum, with the states its policy plays wrong: those
    where the best move alone would raise the policy's value."""
    states, q_star, best, value_of = exact_table(env_id, env_kwargs)
    text_env = TextObservationWrapper(gym.make(env_id, **env_kwargs))
    texts = [text_env.format(s) for s in states]
    env = make_text_env(env_id, n_envs=1, seed=0, env_kwargs=env_kwargs)
    model = load_agent(agent, env=env, device="cpu")
    reading = read_dqn(model, texts) if isinstance(model, DQN) else read_ppo(model, agent, texts)
    probs, values, visits = reading.probs, reading.values, reading.visits
    errors = values / reading.reward_scale - discounted_q_star(env_id, env_kwargs, reading.gamma)
    policy, greedy = probs.argmax(1), values.argmax(1)
    policy_value = value_of(policy)

    def gain(state: int, move: int) -> float:
        changed = policy.copy()
        changed[state] = move
        return value_of(changed) - policy_value

    wrong = []
    for i in np.flatnonzero(policy != best):
        if (fix := gain(i, best[i])) <= 1e-9:
            continue
        wrong.append(
            {
                "state": str(states[i]),
                "gain": fix,
                "policy": np.round(probs[i].astype(float), 3).tolist(),
                "values": np.round(values[i].astype(float), 3).tolist(),
                "q_star": np.round(q_star[i].astype(float), 3).tolist(),
                "plays": None if visits is None else visits[i].astype(int).tolist(),
                "values_right": bool(gain(i, greedy[i]) >= fix - 1e-9),
            }
        )
    wrong.sort(key=lambda row: -row["gain"])
    return {
        "agent": str(agent),
        "policy_value": policy_value,
        "values_value": value_of(greedy),
        "optimum": exact_optimum(env_id, env_kwargs),
        "states_wrong": len(wrong),
        "values_right_there": sum(row["values_right"] for row in wrong),
        "worst": wrong[:top],
        "values_gamma": reading.gamma,
        "values_mean_error": round(float(errors.mean()), 4),
        "error_by_plays": [] if visits is None else error_by_visits(errors, visits),
    }


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = new_parser("python -m benchmarks.studies.policy_vs_values", __doc__)
    add = parser.add_argument
    add("agents", nargs="+", type=Path, help="saved agents (model.save or a run's checkpoints/N)")
    add("--env", default="FrozenLake-v1", help="the env they trained on (with an exact model)")
    add("--env-kwargs", nargs="*", default=[], help="KEY=VALUE, as the run had them")
    add("--top", type=int, default=10, help="how many wrong states to list, worst first")
    add("--json", type=Path, default=None, help="write the rows here")
    args = parser.parse_args(argv)
    kwargs = parse_env_kwargs(args.env_kwargs)
    rows = [compare(agent, args.env, kwargs, args.top) for agent in args.agents]
    for row in rows:
        print(
            f"{row['agent']}: policy {row['policy_value']:+.4f}, its values' greedy play "
            f"{row['values_value']:+.4f}, optimum {row['optimum']:+.4f}; {row['states_wrong']} "
            f"states played wrong, the values right on {row['values_right_there']} of them"
        )
        for w in row["worst"]:
            print(
                f"  {w['state']}: gain {w['gain']:+.4f} policy {w['policy']} values "
                f"{w['values']} Q* {w['q_star']} plays {w['plays']} "
                f"({'values right' if w['values_right'] else 'values wrong'})"
            )
        bands = ", by plays:" if row["error_by_plays"] else " (no saved replay to band them by)"
        print(
            f"  the values against Q* at their discount {row['values_gamma']}: mean error over "
            f"every state {row['values_mean_error']:+.3f}{bands}"
        )
        for band in row["error_by_plays"]:
            print(
                f"    played {band['plays']:>7} times: {band['moves']:4d} moves, mean error "
                f"{band['mean_error']:+.3f}, mean |error| {band['mean_abs_error']:.3f}"
            )
    write_json(args.json, rows)
    return rows


if __name__ == "__main__":
    main()
