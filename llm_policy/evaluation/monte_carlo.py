"""Monte-Carlo evaluation of a text agent, with the numbers a learning curve needs.

SB3's ``evaluate_policy`` gives a mean and a std; comparing two agents also needs the standard
error (how sure the mean is) and, for an LLM, how often its replies could not be parsed. This
wraps ``evaluate_policy`` and collects both from the same episodes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecEnv

from gym_llm.evaluation.scores import Score


@dataclass(frozen=True)
class EvalStats:
    """Episode returns of one evaluation, summarised."""

    mean: float
    std: float
    #: Standard error of the mean (``std / sqrt(episodes)``): a 95% interval is ``mean ± 1.96 sem``.
    sem: float
    episodes: int
    #: Share of steps whose reply the env could not parse.
    invalid_action_rate: float
    steps: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)

    def score(self) -> Score:
        """As the one result type the rest of the library reads."""
        return Score(self.mean, self.sem, "mc", self.episodes)

    def __str__(self) -> str:
        return (
            f"{self.mean:+.3f} ± {1.96 * self.sem:.3f} (95% CI, {self.episodes} episodes, "
            f"invalid actions {self.invalid_action_rate:.1%})"
        )


def evaluate(
    model: Any, env: VecEnv, n_episodes: int = 100, *, deterministic: bool = True
) -> EvalStats:
    """Play ``n_episodes`` with ``model.predict`` and summarise returns and invalid replies.

    ``deterministic=True`` (the default, as in SB3) evaluates the greedy policy: the most likely
    action in choice mode, greedy decoding in generate mode.
    """
    if n_episodes < 1:
        raise ValueError(f"n_episodes must be >= 1, got {n_episodes}.")
    counts = {"steps": 0, "invalid": 0}

    def count(local: dict[str, Any], _: dict[str, Any]) -> None:
        counts["steps"] += 1
        counts["invalid"] += not local["info"].get("action_valid", True)

    returns, _ = evaluate_policy(
        model,
        env,
        n_eval_episodes=n_episodes,
        deterministic=deterministic,
        return_episode_rewards=True,
        callback=count,
    )
    values = np.asarray(returns, dtype=np.float64)
    std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
    return EvalStats(
        mean=float(values.mean()),
        std=std,
        sem=std / math.sqrt(len(values)),
        episodes=len(values),
        invalid_action_rate=counts["invalid"] / max(counts["steps"], 1),
        steps=counts["steps"],
    )


def random_baseline(
    env_id: str, env_kwargs: dict[str, Any] | None = None, episodes: int = 2000, seed: int = 0
) -> EvalStats:
    """Mean return of uniformly random actions on the raw env: the floor a learner must beat.

    Measured rather than looked up, so it is right for any env id and kwargs. Text-native envs
    sample from their action space too (``TextActions`` samples a listed action).
    """
    import gymnasium as gym

    env = gym.make(env_id, **(env_kwargs or {}))
    env.action_space.seed(seed)
    returns = np.zeros(episodes)
    steps = 0
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        done = False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            returns[episode] += float(reward)
            steps += 1
            done = terminated or truncated
    env.close()
    std = float(returns.std(ddof=1)) if episodes > 1 else 0.0
    return EvalStats(
        mean=float(returns.mean()),
        std=std,
        sem=std / math.sqrt(episodes),
        episodes=episodes,
        invalid_action_rate=0.0,
        steps=steps,
    )


def known_optimum(env_id: str, env_kwargs: dict[str, Any] | None = None) -> float | None:
    """The env's optimal expected return, if known: computed exactly (``gym_llm.evaluation.exact``) or
    from the env's own ``optimal_return`` attribute (text-native envs such as KeywordBandit)."""
    from gym_llm.evaluation.exact import exact_evaluation_supported, exact_optimum

    kwargs = env_kwargs or {}
    if exact_evaluation_supported(env_id, kwargs):
        return exact_optimum(env_id, kwargs)
    import gymnasium as gym

    try:
        env = gym.make(env_id, **kwargs)
    except Exception:  # an unknown id is reported by whoever builds the env for real
        return None
    value = getattr(env.unwrapped, "optimal_return", None)
    env.close()
    return float(value) if isinstance(value, int | float) else None


def reference_returns(
    env_id: str, env_kwargs: dict[str, Any] | None = None, *, measure_random: bool = True
) -> dict[str, float]:
    """The lines a learning curve is read against: ``random`` (exact where
    :mod:`gym_llm.evaluation.exact` can compute it, else measured with :func:`random_baseline` when
    ``measure_random``) and ``optimum`` (where known). Missing keys are unknown."""
    from gym_llm.evaluation.exact import exact_evaluation_supported, exact_random_value

    kwargs = env_kwargs or {}
    references: dict[str, float] = {}
    if exact_evaluation_supported(env_id, kwargs):
        references["random"] = exact_random_value(env_id, kwargs)
    elif measure_random:
        references["random"] = random_baseline(env_id, kwargs).mean
    optimum = known_optimum(env_id, kwargs)
    if optimum is not None:
        references["optimum"] = optimum
    return references
