"""PPO's action values (``advantage_estimator="q"``) learned offline on a family task's exact model.

    python -m benchmarks.studies.q_values_offline --task grid-p1-s1 --behaviour uniform target \\
        --seeds 0-3 --n-steps 1 3 --cut 0 0.5 1 --jsonl benchmarks/results/ppo-noisy/q/offline.jsonl
    python -m benchmarks.studies.q_values_offline --task grid-p1-s1 --n-steps 1 \\
        --replay-ratio 8 16 32 --critic target_update_interval=25

The critic a run trains (:class:`~gym_llm.rl.ppo.q_critic.QCritic`: DQN's head, replay, rate and
target copy on the frozen model's features) is driven here by a simulated behaviour policy on
the task's transition model, with each state's features computed once: a run of 2,048 env steps
takes seconds instead of minutes, so what the values do can be separated from what the LoRA
policy does. Behaviours: ``uniform`` (every action alike, as DQN's first exploration),
``prior`` (the untrained LM's own distribution, never updated) and ``target`` (the LM's
distribution, replaced after every rollout by the target update's tilt of each visited state:
a policy that follows the values exactly as far as ``kl_step`` allows).

Every 256 env steps a row: the share of states whose greedy value is an optimal action (ties
count), the exact return of acting greedily on the values (also as a share of the
random-to-optimum gap) and of the behaviour, and the mean absolute error of the values against
``Q*`` (undiscounted, so a floor of ~``1 - gamma^h``); over the states acted in so far (a
terminal state's values are never a target), their error against ``Q*`` at their own discount
(what they are fitted to), the share whose greedy move is right there, and the fewest visits.
A run's last row also holds every state's values, ``Q*`` at their discount and visits.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from benchmarks.cli_args import append_jsonl, new_parser, seed_list
from benchmarks.studies.noisy_advantages import greedy_right, optimal_actions
from benchmarks.studies.policy_vs_values import error_by_visits
from gym_llm.envs.tabular import TabularModel
from gym_llm.evaluation.exact import (
    BlackjackTable,
    exact_evaluation_supported,
    exact_random_value,
)
from gym_llm.policy.models import DEFAULT_MODEL
from gym_llm.policy.q_head import QHead
from gym_llm.rl.dqn.config import DQNConfig
from gym_llm.rl.dqn.td import QHeads
from gym_llm.rl.ppo.behaviour import floored, rare_first
from gym_llm.rl.ppo.config import Q_CUT, Q_GAMMA, Q_REPLAY_RATIO
from gym_llm.rl.ppo.q_critic import Q_DEFAULTS, QCritic
from gym_llm.rl.ppo.ridge_values import fitted_q
from gym_llm.rl.ppo.target_update import table_targets
from gym_llm.rl.ppo.td_values import TDFit

BEHAVIOURS = ("uniform", "prior", "target")
#: The replay ratio of rows written before ``--replay-ratio`` existed.
RECORDED_RATIO = 8.0
#: The values' discount of rows written before ``--gamma`` existed (PPO's ``gamma``).
RECORDED_GAMMA = 0.99
#: As ``family_sweep``'s runs: 8 envs, 8 steps each per rollout.
N_ENVS, ROLLOUT = 8, 8


class DuelingHead(QHead):
    """``V(s) + A(s, a) - mean_a A(s, a)`` (Wang et al. 2016): the common climb of every action's
    value in one output, the differences that pick the action in the others."""

    def __init__(self, hidden: int, n_actions: int) -> None:
        super().__init__(hidden, n_actions + 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        out = super().forward(features)
        value, advantage = out[:, :1], out[:, 1:]
        return value + advantage - advantage.mean(-1, keepdim=True)


def cut_value(text: str) -> float:
    """``--cut``'s values: a share of each state's value range in [0, 1]."""
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"a cut is a share in [0, 1], got {text}")
    return value


def critic_setting(text: str) -> tuple[str, float]:
    """``--critic``'s values: ``NAME=NUMBER``, a field of the critic's
    :class:`~gym_llm.rl.dqn.config.DQNConfig`."""
    name, _, value = text.partition("=")
    fields = {f.name for f in dataclasses.fields(DQNConfig)}
    if name not in fields or not value:
        raise argparse.ArgumentTypeError(
            f"expected NAME=NUMBER with NAME a DQNConfig field ({', '.join(sorted(fields))}), "
            f"got {text!r}"
        )
    return name, float(value)


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("python -m benchmarks.studies.q_values_offline", __doc__)
    add = parser.add_argument
    add("--task", default="grid-p1-s1", help="a task of gym_llm/Family-v0")
    add(
        "--env",
        default=None,
        metavar="ID:KEY=VALUE,...",
        help="instead of --task, an env that lists its transitions (e.g. "
        "FrozenLake-v1:is_slippery=False), or Blackjack-v1 (its exact model)",
    )
    add("--behaviour", nargs="+", choices=BEHAVIOURS, default=list(BEHAVIOURS))
    add("--seeds", type=seed_list, default=[0, 1, 2, 3], help="e.g. 0-3 or 0,2")
    add("--steps", type=int, default=2048, help="env steps per run")
    add("--n-steps", type=int, nargs="+", default=[1, 3], help="the TD target's n (each)")
    add("--dueling", action="store_true", help="also each setting with a dueling head")
    add(
        "--cut",
        nargs="+",
        type=cut_value,
        default=[Q_CUT],
        help="each: n-step returns cut before the first action below its state's best value "
        "by more than this share of the state's value range (0: any off-greedy action; 1: "
        "never cut)",
    )
    add(
        "--replay-ratio",
        type=float,
        nargs="+",
        default=[Q_REPLAY_RATIO],
        help="each: how many times the values replay each env step (PPO's q_replay_ratio)",
    )
    add(
        "--replay-balance",
        type=float,
        nargs="+",
        default=[0.0],
        help="each: steps replayed with probability ∝ n(s, a)^-B, n the steps held with that "
        "state and move (0: every step alike, as PPO's default; 1: every pair alike)",
    )
    add(
        "--critic",
        type=critic_setting,
        nargs="+",
        default=[],
        metavar="NAME=NUMBER",
        help="the critic's DQN settings changed for every run, e.g. target_update_interval=25 "
        "learning_rate_decay=0 learning_rate=3e-4 huber_delta=1 (SB3's Huber loss; PPO's "
        "is inf, the squared error; rows written before it existed used 1)",
    )
    add(
        "--gamma",
        type=float,
        nargs="+",
        default=[Q_GAMMA],
        help="each: the values' discount (PPO's q_gamma)",
    )
    add(
        "--gap-increase",
        type=float,
        nargs="+",
        default=[0.0],
        help="each: advantage learning's share in the TD target (0: plain Q-learning, as PPO's)",
    )
    add(
        "--random-start",
        action="store_true",
        help="the values start from the head's random output, as DQN's (PPO's start at 0)",
    )
    add("--plot", type=Path, default=None, help="also draw every run's greedy gap here (PNG)")
    add("--kl-step", type=float, default=0.05, help="the target behaviour's step, nats")
    add(
        "--floor",
        type=float,
        nargs="+",
        default=[0.0],
        help="each: the target behaviour's least probability of every move after each update, "
        "as PPO's min_action_prob holds it (0: none)",
    )
    add(
        "--floor-balance",
        type=float,
        nargs="+",
        default=[0.0],
        help="each: the floor's mass shared among a state's moves by (plays held + 1)^-β, as "
        "PPO's floor_balance does (0: evenly)",
    )
    add("--model", default=DEFAULT_MODEL, help="registry name or local model path")
    add("--jsonl", type=Path, default=None, help="append every row here")
    add(
        "--summarize",
        type=Path,
        nargs="+",
        default=None,
        metavar="JSONL",
        help="instead of running: per task and setting, how many seeds' behaviour acts "
        "greedily within 10 %% of the optimum at --steps / 2 and at --steps (held)",
    )
    add(
        "--fit",
        choices=("td", "ridge"),
        default="td",
        help="how the values are fitted after each rollout: TD steps on the head (PPO's), or "
        "ridge fitted Q iteration in closed form (--ridge-penalty x the steps held)",
    )
    add(
        "--ridge-penalty",
        type=lambda text: text if text == "loo" else float(text),
        default=0.1,
        help="--fit ridge's penalty per step held, or 'loo': chosen at each regression by "
        "leave-one-out error",
    )
    add(
        "--ridge-check",
        type=float,
        nargs="+",
        default=[],
        metavar="ALPHA",
        help="after each run, also fit the values to its replay by ridge fitted Q iteration with "
        "each penalty and record the greedy value of each (ridge_greedy in the last row)",
    )
    add(
        "--close",
        type=float,
        default=None,
        metavar="SHARE",
        help="with --summarize: also count the seeds within SHARE of the random-to-optimum gap "
        "of the optimum at both points (e.g. 0.067, Blackjack's target's share)",
    )
    return parser


def env_key(task: str) -> tuple[str, dict[str, Any]]:
    """A row's ``task``, as env id and kwargs: an env spec (``ID:KEY=VALUE,...``, as ``--env``
    takes it) or the name of a family task."""
    from benchmarks.studies.diagnose_learning import ENV_ID
    from gym_llm.experiments.specs import parse_env_spec

    if "-v" in task:  # every registered env id ends in a version
        spec = parse_env_spec(task)
        return spec.id, spec.kwargs
    return ENV_ID, {"task": task}


def task_tables(task: str, model: str) -> tuple[Any, np.ndarray, torch.Tensor]:
    """The env of ``task`` (:func:`env_key`), the LM's distribution in every state (in the
    env's state order) and the frozen features of every state."""
    import gymnasium as gym

    from gym_llm import PPO, make_text_env
    from gym_llm.wrappers import TextObservationWrapper

    env_id, kwargs = env_key(task)
    plain: Any
    if env_id == "Blackjack-v1":  # its exact model, as a toy-text env lists its own
        if not exact_evaluation_supported(env_id, kwargs):
            raise ValueError("Blackjack has an exact model only with sab=False, natural=False.")
        plain = BlackjackTable()
        states: Sequence[Any] = plain.observations
    else:
        plain = gym.make(env_id, **kwargs)
        states = range(len(plain.unwrapped.P))
    text_env = TextObservationWrapper(gym.make(env_id, **kwargs))
    texts = [text_env.format(s) for s in states]
    env = make_text_env(env_id, 1, env_kwargs=kwargs, seed=0)
    agent = PPO("LLMPolicy", env, advantage_estimator="q", policy_kwargs={"model": model})
    with torch.inference_mode():
        probs = np.asarray(agent.policy.act(texts, deterministic=True).action_probs, np.float64)
    assert agent.q_critic is not None
    _, features = agent.q_critic.features(texts)
    env.close()
    return plain, probs / probs.sum(-1, keepdims=True), features


def offline_critic(
    features: torch.Tensor,
    n_actions: int,
    n_steps: int,
    seed: int,
    dueling: bool = False,
    cut: float = Q_CUT,
    replay_ratio: float = Q_REPLAY_RATIO,
    settings: DQNConfig = Q_DEFAULTS,
    gamma: float = Q_GAMMA,
    gap_increase: float = 0.0,
    zero_start: bool = True,
    replay_balance: float = 0.0,
) -> QCritic:
    """A :class:`QCritic` with the run's settings whose features are looked up by state index
    (observations are the states' texts' indices as strings)."""
    stand_in = SimpleNamespace(  # what QCritic reads of a policy
        action_space=SimpleNamespace(actions=[str(a) for a in range(n_actions)]),
        scores_listed_actions=True, per_state=False, uses_lora=True, device="cpu",
        lm=SimpleNamespace(config=SimpleNamespace(
            get_text_config=lambda: SimpleNamespace(hidden_size=features.shape[1]))),
    )  # fmt: skip
    critic = QCritic(
        stand_in, N_ENVS, gamma=gamma, n_steps=n_steps, cut=cut, replay_ratio=replay_ratio,
        seed=seed, settings=settings, gap_increase=gap_increase, zero_start=zero_start,
        replay_balance=replay_balance,
    )  # fmt: skip
    prior = torch.zeros(len(features), n_actions)

    def lookup(observations: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        rows = [int(o) for o in observations]
        return prior[rows], features[rows]

    critic.features = lookup
    if dueling:
        assert isinstance(critic.fit, TDFit)
        online = DuelingHead(features.shape[1], n_actions)
        lr = critic.fit.base_rate
        critic.fit.heads = QHeads(
            online, copy.deepcopy(online).requires_grad_(False), online,
            torch.optim.Adam(online.parameters(), lr=lr),
        )  # fmt: skip
    return critic


#: Backups for the values' own discount with no step limit (gamma^2000 < 1e-8 at gamma 0.99).
SWEEPS = 2000


def ridge_fqi(
    replay: Any,
    features: torch.Tensor,
    n_actions: int,
    gamma: float,
    alpha: float | str,
    sweeps: int = 60,
    start: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fitted Q iteration with ridge regression on the replay's steps: each sweep regresses
    ``r + gamma max_a Q(s', a)`` on each move's standardised features, every (state, move)
    weighted by its plays and ``alpha`` the penalty (the intercept held at the targets'
    weighted mean; ``"loo"``: the penalty chosen at each regression by the library's
    a free intercept). ``(weights (d, K), bias (K))`` on the features standardised over
    ``features``' rows (the states, by index); ``start``: the ``(n_states, K)`` values the
    first sweep bootstraps from (0)."""
    held = replay.held_rows
    valid = replay.valid[:held].ravel()
    s = np.array([int(o) for o in replay.observations[:held].ravel()])[valid]
    nxt = np.array([int(o) for o in replay.next_observations[:held].ravel()])[valid]
    a = replay.actions[:held].ravel()[valid]
    r = replay.rewards[:held].ravel()[valid].astype(np.float64)
    stop = replay.terminated[:held].ravel()[valid]  # cut by a time limit: bootstrapped
    x = standardised(features)
    q = np.zeros((len(x), n_actions)) if start is None else start
    if alpha == "loo":  # the library's fit, on these features
        weights, bias, _ = fitted_q(x, (s, a, r, nxt, stop), n_actions, gamma, sweeps, q)
        return weights, bias
    weights, bias = np.zeros((x.shape[1], n_actions)), np.zeros(n_actions)
    solves = []
    for move in range(n_actions):  # the plays do not change between sweeps: factor once
        plays = np.bincount(s[a == move], minlength=len(x)).astype(np.float64)
        seen = plays > 0
        xs, w = x[seen], plays[seen]
        gram = xs.T @ (xs * w[:, None]) + float(alpha) * np.eye(x.shape[1])
        solves.append((seen, w, xs, np.linalg.inv(gram)))  # one inverse, a product a sweep
    for _ in range(sweeps):
        target = r + gamma * np.where(stop, 0.0, q[nxt].max(-1))
        for move, (seen, w, xs, inverse) in enumerate(solves):
            mine = a == move
            if not mine.any():
                continue
            sums = np.bincount(s[mine], weights=target[mine], minlength=len(x))[seen]
            y = sums / w
            mean = float(np.average(y, weights=w))
            rhs = xs.T @ (w * (y - mean))
            weights[:, move] = inverse @ rhs
            bias[move] = mean
        q = x @ weights + bias
    return weights, bias


def standardised(features: torch.Tensor) -> np.ndarray:
    """The states' features in units of their mean and spread over the states."""
    x = features.double().numpy()
    return (x - x.mean(0)) / (x.std(0) + 1e-6)  # type: ignore[no-any-return]


def ridge_fitted_values(
    replay: Any,
    features: torch.Tensor,
    n_actions: int,
    gamma: float,
    alpha: float,
    sweeps: int = 60,
) -> np.ndarray:
    """``(n_states, K)`` action values fitted to the same steps by :func:`ridge_fqi` from 0 on
    the same standardised features: what a linear fit of the run's data gives, against what
    the head learned (the data's limit, apart from the head's fit)."""
    weights, bias = ridge_fqi(replay, features, n_actions, gamma, alpha, sweeps)
    return standardised(features) @ weights + bias  # type: ignore[no-any-return]


class RidgeValues(torch.nn.Module):
    """The values of ``--fit ridge``: a linear map of the standardised features, refitted by
    :func:`ridge_fqi` after each rollout (no TD steps, no target copy, no rate)."""

    def __init__(self, features: torch.Tensor, n_actions: int) -> None:
        super().__init__()
        x = features.double()
        self.centre, self.spread = x.mean(0), x.std(0, unbiased=False) + 1e-6
        self.weights = torch.zeros(features.shape[1], n_actions, dtype=torch.float64)
        self.bias = torch.zeros(n_actions, dtype=torch.float64)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = (features.double() - self.centre) / self.spread
        return x @ self.weights + self.bias


def fit_in_closed_form(
    critic: QCritic,
    features: torch.Tensor,
    n_actions: int,
    penalty: float | str,
    sweeps: int = 20,
) -> QCritic:
    """``critic`` with its values fitted by :func:`ridge_fqi` (penalty ``penalty`` × the steps
    held, or ``"loo"``: chosen by leave-one-out error; ``sweeps`` sweeps after each rollout
    from the previous fit) instead of TD steps."""
    values = RidgeValues(features, n_actions)
    assert isinstance(critic.fit, TDFit)
    heads = critic.fit.heads
    critic.fit.heads = dataclasses.replace(heads, online=values, target=values, average=values)

    def train(num_timesteps: int, new_steps: int) -> dict[str, float]:
        held = len(critic.replay)
        start = values(features).numpy()
        alpha = penalty if isinstance(penalty, str) else penalty * held
        weights, bias = ridge_fqi(
            critic.replay, features, n_actions, critic.gamma, alpha, sweeps, start
        )
        values.weights, values.bias = torch.from_numpy(weights), torch.from_numpy(bias)
        return {}

    critic.train = train
    return critic


def ridge_greedy(
    env: Any, critic: QCritic, features: torch.Tensor, alphas: Sequence[float]
) -> dict[str, float]:
    """``alpha -> `` the exact return of acting greedily on :func:`ridge_fitted_values` of the
    run's replay, for each penalty."""
    tabular = TabularModel.of(env)
    n_actions = tabular.reward.shape[1]
    out = {}
    for alpha in alphas:
        q = ridge_fitted_values(critic.replay, features, n_actions, critic.gamma, alpha)
        out[f"{alpha:g}"] = tabular.value(np.eye(n_actions)[q.argmax(-1)])
    return out


def with_floor(probs: np.ndarray, least: float) -> np.ndarray:
    """``probs`` mixed with the uniform distribution so that every move keeps ``least``, the
    order of the moves unchanged: PPO's behaviour floor (:func:`floored`), with the error
    naming this study's flag.

    >>> with_floor(np.array([1.0, 0.0, 0.0, 0.0]), 0.1).round(3).tolist()
    [0.7, 0.1, 0.1, 0.1]
    """
    if not 0 <= least * probs.shape[-1] < 1:
        raise ValueError(
            f"a floor of {least} on each of {probs.shape[-1]} moves leaves no mass to follow the "
            f"values: pass --floor in [0, {1 / probs.shape[-1]:g})"
        )
    return floored(probs, least)


def simulate(
    env: Any,
    critic: QCritic,
    behaviour: np.ndarray,
    steps: int,
    seed: int,
    follow: bool,
    kl_step: float = 0.05,
    every: int = 256,
    least: float = 0.0,
    floor_balance: float = 0.0,
) -> list[dict[str, Any]]:
    """``steps`` env steps of ``N_ENVS`` envs on ``env``'s transition model acting with
    ``behaviour[s, a]`` (tilted by the values after each rollout when ``follow``, then mixed
    with ``least`` on every move, shared by :func:`rare_first` of the replay's plays with
    ``floor_balance``), the critic trained as a PPO run trains it; a row of figures every
    ``every`` env steps."""
    tabular = TabularModel.of(env)
    transitions, initial = env.unwrapped.P, tabular.initial
    q_star = tabular.q_values()
    optimal = optimal_actions(q_star)
    q_gamma = tabular.q_values(critic.gamma, sweeps=SWEEPS)  # a truncated episode bootstraps
    optimal_gamma = optimal_actions(q_gamma)
    n_states, n_actions = q_star.shape
    floor = tabular.value(np.full((n_states, n_actions), 1 / n_actions))  # the random policy
    span = tabular.optimum() - floor
    rng = np.random.default_rng(seed)
    policy = behaviour.copy()
    state = rng.choice(n_states, size=N_ENVS, p=initial)
    clock = np.zeros(N_ENVS, dtype=int)
    acted = np.zeros(n_states, dtype=int)  # acted in: a terminal state never is
    played = np.zeros((n_states, n_actions), dtype=int)
    floored_yet = np.zeros(n_states, dtype=bool)  # the floor acts from a state's first update
    seen: list[float] = []
    rows: list[dict[str, Any]] = []
    done_steps = 0
    while done_steps < steps:
        for _ in range(ROLLOUT):
            probs = policy[state]
            if floor_balance > 0 and floored_yet[state].any():  # the floor's mass moved
                shared = rare_first(critic.replay.plays([str(s) for s in state]), floor_balance)
                probs = probs + floored_yet[state, None] * least * (n_actions * shared - 1)
            actions = np.array([rng.choice(n_actions, p=p) for p in probs])
            np.add.at(acted, state, 1)
            np.add.at(played, (state, actions), 1)
            new, rewards, dones, infos = [], [], [], []
            for i, (s, a) in enumerate(zip(state, actions, strict=True)):
                outcomes = transitions[int(s)][int(a)]
                pick = rng.choice(len(outcomes), p=[o[0] for o in outcomes])
                _, nxt, reward, terminated = outcomes[pick]
                clock[i] += 1
                truncated = not terminated and clock[i] >= tabular.horizon
                info: dict[str, Any] = {}
                if terminated or truncated:
                    info["terminal_observation"] = str(nxt if nxt < n_states else s)
                    info["TimeLimit.truncated"] = truncated
                    nxt, clock[i] = rng.choice(n_states, p=initial), 0
                new.append(nxt)
                rewards.append(reward)
                dones.append(terminated or truncated)
                infos.append(info)
            critic.replay.add_step(
                [str(s) for s in state], [str(s) for s in new], actions,
                np.array(rewards, np.float32), np.array(dones), infos,
                probs.astype(np.float32),
            )  # fmt: skip
            state = np.array(new)
            done_steps += N_ENVS
        critic.train(done_steps, ROLLOUT * N_ENVS)
        if follow:
            observations, _, _ = critic.replay.latest(ROLLOUT)
            seen.extend(critic.rollout_advantages(ROLLOUT).ravel().tolist())
            visited = [str(o) for o in observations.ravel()]
            probs = {o: policy[int(o)] for o in visited}
            states, table, visits = critic.state_table(visited, probs)
            targets, _, _ = table_targets(
                states, table / (float(np.std(seen)) or 1.0), visits, probs, kl_step
            )
            for key, target in targets.items():
                policy[int(key)] = with_floor(target / target.sum(), least)
                floored_yet[int(key)] = True
        if done_steps % every == 0:
            q = critic.values([str(s) for s in range(n_states)])
            greedy = q.argmax(-1)
            live = acted > 0
            rows.append({
                "env_steps": done_steps,
                "values_right_share": float(greedy_right(q, optimal).mean()),
                "greedy_value": tabular.value(np.eye(n_actions)[greedy]),
                "behaviour_value": tabular.value(policy),
                "behaviour_greedy_value": tabular.value(np.eye(n_actions)[policy.argmax(-1)]),
                "optimum": tabular.optimum(),
                "greedy_gap": (tabular.value(np.eye(n_actions)[greedy]) - floor) / span,
                "q_error": float(np.abs(q - q_star).mean()),
                "q_error_gamma": float(np.abs(q - q_gamma)[live].mean()),
                "right_share_gamma": float(greedy_right(q, optimal_gamma)[live].mean()),
                "least_visits": int(acted[live].min()),
            })  # fmt: skip
    if rows:  # the end state by state: where the values are off, and how often each was seen
        q = critic.values([str(s) for s in range(n_states)])
        rows[-1].update(state_values=q.round(4).tolist(), state_q_gamma=q_gamma.round(4).tolist(),
                        state_visits=acted.tolist(), move_plays=played.tolist(),
                        error_by_plays=error_by_visits(q - q_gamma, played))  # fmt: skip
    return rows


def plot(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """One panel per behaviour: each setting's mean greedy gap over seeds, each seed thin."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    behaviours = list(dict.fromkeys(r["behaviour"] for r in rows))
    fig, axes = plt.subplots(1, len(behaviours), figsize=(5.5 * len(behaviours), 4), squeeze=False)
    for ax, behaviour in zip(axes[0], behaviours, strict=True):
        mine = [r for r in rows if r["behaviour"] == behaviour]
        settings = list(dict.fromkeys(setting_name(r) for r in mine))
        for colour, setting in enumerate(settings):
            runs: dict[int, list[tuple[int, float]]] = {}
            for r in mine:
                if setting_name(r) == setting:
                    runs.setdefault(r["seed"], []).append((r["env_steps"], r["greedy_gap"]))
            for curve in runs.values():
                ax.plot(*zip(*curve, strict=True), color=f"C{colour}", alpha=0.25, lw=0.8)
            steps = sorted({s for c in runs.values() for s, _ in c})
            mean = [np.mean([dict(c)[s] for c in runs.values() if s in dict(c)]) for s in steps]
            ax.plot(steps, mean, color=f"C{colour}", lw=2, label=f"{setting} ({len(runs)} seeds)")
        ax.axhline(0.9, color="grey", ls=":", lw=1)
        ax.set(
            title=f"{rows[0]['task']}, behaviour {behaviour}",
            xlabel="env steps",
            ylabel="greedy return of the values (share of the gap)",
            ylim=(-1.0, 1.05),
        )
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def setting_name(row: dict[str, Any]) -> str:
    """``n=3 cut 1``, ``n=1``, ``n=3 cut 0 dueling``, ``n=1 replay 16``..."""
    cut = row["cut"]
    cut = "" if row["n_steps"] == 1 else f" cut {cut:g}"
    ratio = row.get("replay_ratio", RECORDED_RATIO)
    ratio = "" if ratio == Q_REPLAY_RATIO else f" replay {ratio:g}"
    changed = "".join(f" {k}={v:g}" for k, v in row.get("critic", {}).items())
    gamma = row.get("gamma", RECORDED_GAMMA)
    changed += "" if gamma == Q_GAMMA else f" gamma {gamma:g}"
    changed += f" gap {row['gap_increase']:g}" if row.get("gap_increase") else ""
    changed += "" if row.get("zero_start") else " random start"
    changed += f" floor {row['floor']:g}" if row.get("floor") else ""
    changed += f" balance {row['replay_balance']:g}" if row.get("replay_balance") else ""
    changed += f" floor-balance {row['floor_balance']:g}" if row.get("floor_balance") else ""
    changed += f" fit {row['fit']}" if row.get("fit") else ""
    return f"n={row['n_steps']}{cut}{ratio}{changed}{' dueling' if row['dueling'] else ''}"


def held_counts(
    rows: Sequence[dict[str, Any]], floors: dict[str, float], budget: int, share: float = 0.9
) -> dict[tuple[str, str], tuple[int, int]]:
    """``(task, setting) -> (seeds held, seeds)``: held when acting greedily on the behaviour
    closes ``share`` of the random-to-optimum gap (``floors``: each task's random return) at
    ``budget`` and at twice it, as the family's learning claims count (90 %)."""
    curves: dict[tuple[str, str, int], dict[int, float]] = {}
    for row in rows:
        if row["behaviour"] != "target":
            continue
        span = row["optimum"] - floors[row["task"]]
        closed = (row["behaviour_greedy_value"] - floors[row["task"]]) / span
        key = (row["task"], setting_name(row), row["seed"])
        curves.setdefault(key, {})[row["env_steps"]] = closed
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for (task, setting, _), curve in curves.items():
        held = all(curve.get(at, -1.0) >= share for at in (budget, 2 * budget))
        done, seen = out.get((task, setting), (0, 0))
        out[(task, setting)] = (done + held, seen + 1)
    return out


def mean_shortfall(rows: Sequence[dict[str, Any]], steps: int) -> dict[tuple[str, str], float]:
    """``(task, setting) ->`` the mean over seeds of how far acting greedily on the behaviour
    is below the optimum at ``steps``."""
    gaps: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        if row["behaviour"] == "target" and row["env_steps"] == steps:
            key = (row["task"], setting_name(row))
            gaps.setdefault(key, []).append(row["optimum"] - row["behaviour_greedy_value"])
    return {key: float(np.mean(values)) for key, values in gaps.items()}


def misranked(row: dict[str, Any]) -> tuple[int, int]:
    """``(wrong, rare)`` of a run's last row: the states acted in whose greedy value is not an
    optimal move at the values' discount, and of those the ones where every optimal move was
    played less often than the move the values rank first.

    >>> misranked({"state_values": [[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]],
    ...            "state_q_gamma": [[1.0, 0.5], [1.0, 0.0], [0.0, 1.0]],
    ...            "state_visits": [3, 5, 0], "move_plays": [[1, 2], [4, 1], [0, 0]]})
    (1, 1)
    """
    q, q_gamma = np.array(row["state_values"]), np.array(row["state_q_gamma"])
    plays, live = np.array(row["move_plays"]), np.array(row["state_visits"]) > 0
    optimal = optimal_actions(q_gamma)
    greedy = q.argmax(-1)
    wrong = live & ~greedy_right(q, optimal)
    greedy_plays = plays[np.arange(len(q)), greedy]
    best_plays = np.where(optimal, plays, -1).max(-1)
    return int(wrong.sum()), int((wrong & (best_plays < greedy_plays)).sum())


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    args = build_parser().parse_args(argv)
    if args.summarize:
        rows = [json.loads(line) for path in args.summarize for line in path.open()]
        tasks = {row["task"] for row in rows}
        floors = {task: exact_random_value(*env_key(task)) for task in tasks}
        wrong: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for row in rows:
            if row["behaviour"] == "target" and "move_plays" in row:
                wrong.setdefault((row["task"], setting_name(row)), []).append(misranked(row))
        close = held_counts(rows, floors, args.steps // 2, 1 - args.close) if args.close else {}
        shortfall = mean_shortfall(rows, args.steps)
        for (task, setting), (held, seeds) in sorted(
            held_counts(rows, floors, args.steps // 2).items()
        ):
            ends = wrong.get((task, setting), [])
            states = (
                f"; at the end {sum(w for w, _ in ends)} misranked states acted in over "
                f"{len(ends)} seeds, {sum(r for _, r in ends)} with the best move played "
                "less than the values' pick"
                if ends
                else ""
            )
            near = (
                f"; close (within {args.close:.1%} of the gap) {close[(task, setting)][0]}"
                if args.close
                else ""
            )
            short = shortfall.get((task, setting))
            short_text = "" if short is None else f"; mean shortfall at the end {short:.4f}"
            print(f"{task} {setting}: held {held} of {seeds}{near}{short_text}{states}")
        return rows
    task = args.env or args.task
    env, prior_probs, features = task_tables(task, args.model)
    n_actions = prior_probs.shape[1]
    out: list[dict[str, Any]] = []
    changed = dict(args.critic)
    critic_settings = dataclasses.replace(
        Q_DEFAULTS, **{k: type(getattr(Q_DEFAULTS, k))(v) for k, v in changed.items()}
    )
    for dueling in (False, True) if args.dueling else (False,):
        # one step has nothing to cut: run once
        settings = dict.fromkeys(
            (n, c if n > 1 else 0.0, r, g, k, b, f, fb)
            for n in args.n_steps
            for c in args.cut
            for r in args.replay_ratio
            for g in args.gamma
            for k in args.gap_increase
            for b in args.replay_balance
            for f in args.floor
            for fb in args.floor_balance
        )
        for n_steps, cut, ratio, gamma, gap, balance, floor, floor_balance in settings:
            for behaviour in args.behaviour:
                for seed in args.seeds:
                    start = np.full_like(prior_probs, 1 / n_actions)
                    start = start if behaviour == "uniform" else prior_probs
                    torch.manual_seed(seed)
                    critic = offline_critic(
                        features, n_actions, n_steps, seed, dueling, cut, ratio,
                        critic_settings, gamma=gamma, gap_increase=gap,
                        zero_start=not args.random_start, replay_balance=balance,
                    )  # fmt: skip
                    if args.fit == "ridge":
                        critic = fit_in_closed_form(critic, features, n_actions, args.ridge_penalty)
                    rows = simulate(
                        env, critic, start, args.steps, seed, behaviour == "target",
                        args.kl_step, least=floor, floor_balance=floor_balance,
                    )  # fmt: skip
                    key = {"task": task, "behaviour": behaviour, "seed": seed,
                           "n_steps": n_steps, "dueling": dueling, "cut": cut,
                           "replay_ratio": ratio, "critic": changed, "gamma": gamma,
                           "gap_increase": gap, "zero_start": not args.random_start,
                           "floor": floor, "replay_balance": balance,
                           "floor_balance": floor_balance}  # fmt: skip
                    if args.fit == "ridge":
                        key["fit"] = f"ridge {args.ridge_penalty}"
                    out += [{**key, **row} for row in rows]
                    worst = min(r["greedy_value"] for r in rows)
                    print(
                        f"{behaviour} {setting_name(key)} seed {seed}: "
                        f"greedy value {rows[-1]['greedy_value']:.2f} at {args.steps}, "
                        f"lowest {worst:.2f}",
                        flush=True,
                    )
                    if args.ridge_check and rows:
                        rows[-1]["ridge_greedy"] = ridge_greedy(
                            env, critic, features, args.ridge_check
                        )
                    append_jsonl(args.jsonl, *({**key, **r} for r in rows))
    if args.plot is not None:
        print(f"wrote {plot(out, args.plot)}")
    return out


if __name__ == "__main__":
    main()
