"""Classic RL baselines on the raw env: uniform random, and SB3 PPO/DQN with ``MlpPolicy``.

The comparison suite (:mod:`gym_llm.cli.bench`) puts an LLM agent next to what a classic agent
reaches on the *same* env with the *same* number of env steps. SB3's ``MlpPolicy`` needs a flat
``Box`` observation, so :class:`OneHotObservation` turns ``Discrete`` observations into one-hots
and Blackjack's ``Tuple`` of ``Discrete`` into concatenated one-hots (Box observations such as
CartPole's pass through).

Every agent is scored the same way: exactly where :mod:`gym_llm.evaluation.exact` has a model of the env
(the greedy action is asked once per raw state, then the same dynamic programming that scores the
LLM), by Monte-Carlo with a 95% interval elsewhere. :class:`Score` also carries the probability
of *succeeding* (ending the episode on its best terminal reward: reaching the goal), because on
CliffWalking a return of -100 beats random play by far while never reaching the goal.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import DQN
from stable_baselines3 import PPO as SB3PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from gym_llm.envs.tabular import TabularModel
from gym_llm.evaluation.curve import CurvePoint, CurveRecorder
from gym_llm.evaluation.exact import (
    ALL_TABULAR_ENVS,
    blackjack_states,
    blackjack_value,
    exact_evaluation_supported,
)
from gym_llm.evaluation.flat_env import (  # noqa: F401  (re-exported)
    OneHotObservation,
    flatten_observation,
    make_flat_env,
)
from gym_llm.evaluation.scores import Score
from gym_llm.wrappers.resolver import action_sampler_seed

ClassicAlgo = Literal["ppo", "dqn"]
#: SB3 PPO's usual rollout length (its default ``n_steps``) and minibatch size.
PPO_N_STEPS = 2048
PPO_BATCH_SIZE = 64
#: SB3 DQN's default ``train_freq``: it collects this many steps between updates.
DQN_TRAIN_FREQ = 4


# --- exact evaluation of any action table -------------------------------------------------


def tabular_supported(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> bool:
    """Whether the env is scored by :class:`~gym_llm.evaluation.exact.TabularModel` (one raw state per
    index of ``unwrapped.P``); Blackjack and KeywordBandit have their own exact evaluation."""
    return env_id in ALL_TABULAR_ENVS and exact_evaluation_supported(env_id, env_kwargs)


def exact_supported(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> bool:
    """Whether :func:`exact_score` can score a raw-observation policy on this env."""
    kwargs = dict(env_kwargs or {})
    return tabular_supported(env_id, kwargs) or (
        env_id == "Blackjack-v1" and exact_evaluation_supported(env_id, kwargs)
    )


def success_probability(env: gym.Env[Any, Any], policy: np.ndarray) -> float:
    """Probability that ``policy[s, a]`` ends an episode on the env's best terminal reward
    within the step limit (FrozenLake: the goal, not a hole; CliffWalking/Taxi: the goal)."""
    model = TabularModel.of(env)
    unwrapped: Any = env.unwrapped
    # A state whose every move is a terminal self-loop with one reward is the toy-text
    # convention for a state already over (a hole, the goal, a wall cell): it never ends a live
    # episode, so it does not say what success is. (A live state may end in place, its answers
    # paying differently: the task family's one-step questions.)
    over = {
        state
        for state, moves in unwrapped.P.items()
        if all(done and nxt == state for out in moves.values() for _, nxt, _, done in out)
        and len({float(rew) for out in moves.values() for _, _, rew, _ in out}) == 1
    }
    terminal_rewards = [
        float(rew)
        for state, moves in unwrapped.P.items()
        if state not in over
        for outcomes in moves.values()
        for _, nxt, rew, done in outcomes
        if done
    ]
    if not terminal_rewards:
        return 0.0
    best = max(terminal_rewards)
    succeed = np.zeros_like(model.reward)
    for state, moves in unwrapped.P.items():
        for action, outcomes in moves.items():
            for prob, _, rew, done in outcomes:
                if done and state not in over and float(rew) >= best - 1e-12:
                    succeed[state, action] += prob
    p = np.zeros(len(model.reward))
    step_success = (policy * succeed).sum(-1)
    transition = np.einsum("sa,sat->st", policy, model.cont)
    for _ in range(model.horizon):
        p = step_success + transition @ p
    return float(model.initial @ p)


def exact_score(
    env_id: str,
    env_kwargs: Mapping[str, Any] | None,
    act: Callable[[list[Any]], np.ndarray],
) -> Score:
    """Exact score of a policy given as ``act(raw_states) -> [state, action] probabilities``.

    The raw states are the env's own observations (Blackjack's ``(sum, dealer, ace)`` tuples,
    the tabular envs' indices), asked once each.
    """
    kwargs = dict(env_kwargs or {})
    if tabular_supported(env_id, kwargs):
        env = gym.make(env_id, **kwargs)
        n_states = len(env.unwrapped.P)  # type: ignore[attr-defined]
        policy = np.asarray(act(list(range(n_states))), dtype=np.float64)
        value = TabularModel.of(env).value(policy)
        success = success_probability(env, policy)
        env.close()
        return Score(value, 0.0, "exact", success=success)
    if env_id == "Blackjack-v1" and exact_evaluation_supported(env_id, kwargs):
        states = blackjack_states()
        policy = np.asarray(act(list(states)), dtype=np.float64)
        p_hit = {s: float(p) for s, p in zip(states, policy[:, 1], strict=True)}
        return Score(blackjack_value(p_hit), 0.0, "exact")
    raise ValueError(
        f"No exact evaluation of raw-observation policies for {env_id} with {kwargs}; "
        "use monte_carlo_score."
    )


ActionTable = Callable[[list[Any]], np.ndarray]


def sb3_action_table(
    model: BaseAlgorithm, env_id: str, env_kwargs: Mapping[str, Any] | None
) -> ActionTable:
    """``act`` for :func:`exact_score`: the SB3 model's greedy action in each raw state, asked in
    one batch of flattened observations."""
    raw_space = gym.make(env_id, **dict(env_kwargs or {})).observation_space

    def act(states: list[Any]) -> np.ndarray:
        batch = np.stack([flatten_observation(raw_space, s) for s in states])
        actions, _ = model.predict(batch, deterministic=True)
        n_actions = int(model.action_space.n)  # type: ignore[attr-defined]
        table = np.zeros((len(states), n_actions))
        table[np.arange(len(states)), np.asarray(actions, dtype=np.int64)] = 1.0
        return table

    return act


def uniform_action_table(env_id: str, env_kwargs: Mapping[str, Any] | None) -> ActionTable:
    """``act`` for :func:`exact_score`: uniformly random actions."""
    n_actions = int(gym.make(env_id, **dict(env_kwargs or {})).action_space.n)  # type: ignore[attr-defined]

    def act(states: list[Any]) -> np.ndarray:
        return np.full((len(states), n_actions), 1.0 / n_actions)

    return act


# --- Monte-Carlo ---------------------------------------------------------------------------


def _mc(returns: np.ndarray, successes: np.ndarray | None) -> Score:
    std = float(returns.std(ddof=1)) if len(returns) > 1 else 0.0
    success = float(successes.mean()) if successes is not None else None
    return Score(float(returns.mean()), std / math.sqrt(len(returns)), "mc", len(returns), success)


def monte_carlo_score(
    model: BaseAlgorithm,
    env_id: str,
    env_kwargs: Mapping[str, Any] | None,
    episodes: int,
    seed: int = 0,
    n_envs: int = 8,
) -> Score:
    """Greedy returns of an SB3 model over ``episodes`` episodes on ``n_envs`` seeded envs."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}.")
    n_envs = max(1, min(n_envs, episodes))

    def factory(index: int) -> Callable[[], gym.Env[Any, Any]]:
        return lambda: Monitor(make_flat_env(env_id, env_kwargs, seed + index))

    vec = DummyVecEnv([factory(i) for i in range(n_envs)])
    vec.seed(seed)
    returns, _ = evaluate_policy(
        model, vec, n_eval_episodes=episodes, deterministic=True, return_episode_rewards=True
    )
    vec.close()
    return _mc(np.asarray(returns, dtype=np.float64), None)


def random_score(
    env_id: str, env_kwargs: Mapping[str, Any] | None, episodes: int = 1000, seed: int = 0
) -> Score:
    """Uniform random play: exact where possible, else Monte-Carlo on the raw env."""
    if exact_supported(env_id, env_kwargs):
        return exact_score(env_id, env_kwargs, uniform_action_table(env_id, env_kwargs))
    from gym_llm.evaluation.monte_carlo import random_baseline

    stats = random_baseline(env_id, dict(env_kwargs or {}), episodes=episodes, seed=seed)
    return Score(stats.mean, stats.sem, "mc", stats.episodes)


def score_sb3(
    model: BaseAlgorithm,
    env_id: str,
    env_kwargs: Mapping[str, Any] | None,
    episodes: int,
    seed: int = 0,
) -> Score:
    """Exact where :func:`exact_supported`, else Monte-Carlo over ``episodes``."""
    if exact_supported(env_id, env_kwargs):
        return exact_score(env_id, env_kwargs, sb3_action_table(model, env_id, env_kwargs))
    return monte_carlo_score(model, env_id, env_kwargs, episodes, seed)


# --- training ------------------------------------------------------------------------------


@dataclass
class ClassicResult:
    """One SB3 run: its learning curve (the last point is the final score)."""

    algo: str
    curve: list[CurvePoint]
    env_steps: int
    train_wall_s: float
    model: BaseAlgorithm

    @property
    def final(self) -> Score:
        return self.curve[-1].score


def ppo_rollout(budget: int) -> tuple[int, int]:
    """``(n_steps, total)`` for SB3 PPO on one env so that it never collects more than
    ``budget`` env steps: SB3 finishes every rollout it starts, so ``total`` is a whole number
    of rollouts of at most :data:`PPO_N_STEPS` steps (``budget`` minus at most a few steps)."""
    if budget < 2:
        raise ValueError(f"SB3 PPO needs a budget of at least 2 env steps, got {budget}.")
    rollouts = -(-budget // PPO_N_STEPS)
    n_steps = budget // rollouts
    return n_steps, n_steps * rollouts


def dqn_budget_settings(budget: int, n_envs: int = 1) -> dict[str, Any]:
    """SB3 DQN's settings where its defaults assume a budget far above ``budget``: replay buffer
    ``min(1e6, budget)``, ``learning_starts = min(100, budget // 10)``, the target network
    copied every ``clip(budget // 100, 1, 10000)`` steps and exploration decaying over the first
    20% (SB3's 10000-step target interval would never fire within 128 steps). gym_llm's
    ``DQN`` in the suite takes the same ones, with ``gradient_steps = n_envs`` so that each env
    step is replayed as often as SB3's one-env DQN replays it."""
    return {
        "buffer_size": min(1_000_000, budget),
        "learning_starts": min(100, budget // 10),
        "target_update_interval": int(np.clip(budget // 100, 1, 10_000)),
        "exploration_fraction": 0.2,
        "train_freq": DQN_TRAIN_FREQ,
        "gradient_steps": n_envs,
    }


def build_sb3(
    algo: ClassicAlgo, env: gym.Env[Any, Any], budget: int, seed: int
) -> tuple[BaseAlgorithm, int]:
    """The SB3 agent with ``MlpPolicy`` and SB3's defaults, except where a default assumes a
    budget far above ``budget``; returns it with the steps to pass to ``learn``.

    PPO: ``n_steps`` capped by :func:`ppo_rollout` (``batch_size`` ≤ ``n_steps``). DQN:
    :func:`dqn_budget_settings`.
    """
    model, total = _build_sb3(algo, env, budget, seed)
    # SB3 seeds the action space with the env's seed: its uniform exploration would replay the
    # env's own draws (on GuessNumber every random guess was the secret).
    model.action_space.seed(action_sampler_seed(seed))
    return model, total


def _build_sb3(
    algo: ClassicAlgo, env: gym.Env[Any, Any], budget: int, seed: int
) -> tuple[BaseAlgorithm, int]:
    if algo == "ppo":
        n_steps, total = ppo_rollout(budget)
        return (
            SB3PPO(
                "MlpPolicy",
                env,
                n_steps=n_steps,
                batch_size=min(PPO_BATCH_SIZE, n_steps),
                seed=seed,
                device="cpu",
            ),
            total,
        )
    if algo == "dqn":
        return (
            DQN("MlpPolicy", env, **dqn_budget_settings(budget), seed=seed, device="cpu"),
            budget - budget % DQN_TRAIN_FREQ,  # SB3 collects whole train_freq chunks
        )
    raise ValueError(f"Unknown classic algorithm {algo!r}; choose 'ppo' or 'dqn'.")


def train_sb3(
    algo: ClassicAlgo,
    env_id: str,
    env_kwargs: Mapping[str, Any] | None,
    budget: int,
    seed: int = 0,
    *,
    eval_points: int = 4,
    eval_episodes: int = 100,
) -> ClassicResult:
    """Train an SB3 agent for at most ``budget`` env steps, scoring it before, at
    ``eval_points`` evenly spaced points during, and after training."""
    threads = torch.get_num_threads()
    # A small MLP gains nothing from intra-op threads and loses a lot when the CPU is shared.
    torch.set_num_threads(1)
    try:
        return _train_sb3(algo, env_id, env_kwargs, budget, seed, eval_points, eval_episodes)
    finally:
        torch.set_num_threads(threads)


def _train_sb3(
    algo: ClassicAlgo,
    env_id: str,
    env_kwargs: Mapping[str, Any] | None,
    budget: int,
    seed: int,
    eval_points: int,
    eval_episodes: int,
) -> ClassicResult:
    env = make_flat_env(env_id, env_kwargs, seed)
    model, total = build_sb3(algo, env, budget, seed)

    def measure(agent: BaseAlgorithm) -> tuple[Score, None]:
        return score_sb3(agent, env_id, env_kwargs, eval_episodes, seed + 10_000), None

    every = max(1, total // (eval_points + 1)) if eval_points else 0
    curve = CurveRecorder(every, measure, per_rollout=algo == "ppo")
    curve.init_callback(model)
    curve.record()
    curve.restart_clock()  # training time excludes only the evaluations made while training
    model.learn(total, callback=curve)
    if curve.points[-1].timesteps != model.num_timesteps:
        curve.record()
    wall = curve.train_seconds()
    env.close()
    return ClassicResult(algo, curve.points, int(model.num_timesteps), wall, model)
