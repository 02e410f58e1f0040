"""Action values for PPO's advantages in choice mode (``advantage_estimator="q"``).

Sampled returns say little per turn when rewards are noisy (a card draw, a slippery step), and
an on-policy estimate of ``Q^pi`` can favour the wrong action in a state for as long as the
policy still plays badly after it (benchmarks/RESULTS.md, "PPO on noisy returns"). This critic
learns ``Q(s, a)`` of every listed action off-policy instead, from a replay of every step the
run has taken, on the frozen model's features: by TD steps on an MLP head as
:class:`gym_llm.DQN` does (:mod:`~gym_llm.rl.ppo.td_values`, the default), or refitted in closed
form after each rollout (:mod:`~gym_llm.rl.ppo.ridge_values`). The values have their own
discount (``q_gamma``, lower than PPO's: the features of different states are nearly the same,
and bootstrapping multiplies their fitting error by up to ``1 / (1 - gamma)``) and start at
exactly 0. The features do not change while the adapter trains, so a step replayed a thousand
updates later is still exact.

The advantage of a turn is ``Q(s, a) - sum_b pi_old(b | s) Q(s, b)``, and
``policy_update="target"`` tilts each state's whole distribution by ``Q(s, .)`` at once, played
or not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch

from gym_llm.policy.outputs import PolicyStep
from gym_llm.rl.common.distributed import world_size
from gym_llm.rl.common.frozen_features import FrozenFeatures
from gym_llm.rl.dqn.config import DQNConfig
from gym_llm.rl.dqn.replay import TextReplayBuffer
from gym_llm.rl.ppo.config import Q_CUT, Q_N_STEPS, Q_REPLAY_RATIO
from gym_llm.rl.ppo.ridge_values import RidgeFit, check_q_fit
from gym_llm.rl.ppo.td_values import Q_DEFAULTS, TDFit

__all__ = ["Q_DEFAULTS", "QCritic", "ValueFit", "q_unavailable", "state_advantages"]


def q_unavailable(policy: Any) -> str | None:
    """Why PPO cannot learn action values with ``policy``, or ``None`` where it can (what
    ``advantage_estimator="auto"`` asks)."""
    actions = getattr(policy.action_space, "actions", None)
    if not policy.scores_listed_actions or policy.per_state or not actions:
        return (
            "advantage_estimator='q' needs choice mode over one fixed list of actions (the Q "
            "head has one output per listed action); use 'gae' in generate mode or with "
            "per-state action lists."
        )
    if not policy.uses_lora:
        return (
            "advantage_estimator='q' needs LoRA (the head reads the model's features with the "
            "adapter off); with lora=None use 'gae'."
        )
    if world_size() > 1:
        return (
            "advantage_estimator='q' trains in one process (each process would learn its own "
            "action values); use 'gae' with several processes."
        )
    return None


class ValueFit(Protocol):
    """How the action values are learned from the replay: :class:`TDFit` or :class:`RidgeFit`."""

    @property
    def q_net(self) -> torch.nn.Module: ...

    def train(
        self, replay: Any, features: Any, num_timesteps: int, new_steps: int
    ) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any], resume: bool) -> None: ...


class QCritic:
    """The replay of every step a run took, the frozen features, and the action values learned
    from them by one :class:`ValueFit`; advantages for a rollout's turns.

    Args:
        policy: the :class:`~gym_llm.policy.llm_policy.LLMPolicy` (choice mode, one list of
            actions, LoRA): its frozen features are the values' input.
        n_envs: envs stepped together (the replay keeps each env's steps in order).
        gamma: the values' discount.
        n_steps, cut, replay_ratio, seed, settings, gap_increase, zero_start, replay_balance:
            the TD steps' settings (:class:`~gym_llm.rl.ppo.td_values.TDFit`); ``settings``
            also sizes the replay.
        fit: ``"td"``, the head trained by TD steps on replayed batches; ``"ridge"``, the
            values refitted after each rollout in closed form from every step held
            (:mod:`gym_llm.rl.ppo.ridge_values`; the TD settings then go unused).
    """

    def __init__(
        self,
        policy: Any,
        n_envs: int,
        gamma: float,
        n_steps: int = Q_N_STEPS,
        cut: float = Q_CUT,
        replay_ratio: float = Q_REPLAY_RATIO,
        seed: int | None = None,
        settings: DQNConfig = Q_DEFAULTS,
        gap_increase: float = 0.0,
        zero_start: bool = True,
        replay_balance: float = 0.0,
        fit: str = "td",
    ) -> None:
        check_q_fit(fit)
        reason = q_unavailable(policy)
        if reason is not None:
            raise ValueError(reason)
        n_actions = len(policy.action_space.actions)
        self.gamma, self.n_envs = gamma, n_envs
        self.features = FrozenFeatures(policy, prior=False)  # the TD target reads no prior
        hidden = int(policy.lm.config.get_text_config().hidden_size)
        #: How the values are learned: TD steps on a head, or a closed-form fit.
        self.fit: ValueFit
        if fit == "ridge":
            self.fit = RidgeFit(hidden, n_actions, gamma, device=policy.device)
        else:
            self.fit = TDFit(
                hidden, n_actions, gamma, n_steps, cut, replay_ratio, seed, settings,
                gap_increase, zero_start, replay_balance, device=policy.device,
            )  # fmt: skip
        self.replay = TextReplayBuffer(settings.buffer_size, n_envs, n_actions)

    @property
    def q_net(self) -> torch.nn.Module:
        """The values read: the TD-trained head, or the closed-form fit with ``fit="ridge"``."""
        return self.fit.q_net

    def add_turns(
        self,
        observations: Any,
        step: PolicyStep,
        new_observations: Any,
        rewards: np.ndarray,
        dones: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """One vector step of a PPO rollout into the replay (:meth:`TextReplayBuffer.add_step`):
        the policy's ``step`` (with the probabilities its actions were sampled with), then what
        the env returned."""
        assert step.action_probs is not None, "choice mode scores every listed action"
        chosen = np.array([int(a[0]) for a in step.actions])
        self.replay.add_step(
            observations, new_observations, chosen, rewards, dones, infos, step.action_probs
        )

    def train(self, num_timesteps: int, new_steps: int) -> dict[str, float]:
        """The values learned from the replay after ``new_steps`` more env steps
        (``num_timesteps`` in all); the fit's figures."""
        return self.fit.train(self.replay, self.features, num_timesteps, new_steps)

    @torch.no_grad()
    def values(self, observations: Sequence[Any]) -> np.ndarray:
        """``(n, K)`` action values of each observation."""
        return self.q_net(self.features(observations)[1]).double().cpu().numpy()  # type: ignore[no-any-return]

    def rollout_advantages(self, steps: int) -> np.ndarray:
        """``(steps, n_envs)`` ``Q(s, a) - sum_b pi(b | s) Q(s, b)`` of the newest ``steps``
        vector steps (a rollout's turns, in its buffer's order), with the probabilities each
        action was sampled with; NaN for a turn whose reward was not finite, so PPO leaves it
        out and counts it as it does with GAE."""
        observations, actions, probs = self.replay.latest(steps)
        table = state_advantages(
            self.values(list(observations.ravel())), probs.reshape(-1, probs.shape[-1])
        )
        chosen: np.ndarray = table[np.arange(len(table)), actions.ravel()]
        chosen[~self.replay.latest_valid(steps).ravel()] = np.nan
        return chosen.reshape(actions.shape)

    def state_table(
        self, observations: Sequence[str], action_probs: dict[str, np.ndarray]
    ) -> tuple[list[str], np.ndarray, np.ndarray]:
        """``(states, A, visits)`` as :func:`~gym_llm.rl.ppo.target_update.state_action_advantages`
        gives them, but with every action's advantage from the values, played or not, under
        each state's ``action_probs``."""
        visits = Counter(observations)
        states = list(visits)
        probs = np.stack([action_probs[state] for state in states])
        table = state_advantages(self.values(states), probs)
        return states, table, np.array([visits[s] for s in states], dtype=np.float64)

    def state_dict(self) -> dict[str, Any]:
        """The fit's state, the replay and its observations' features: all a resumed run
        needs to learn the same values as one that never stopped."""
        return {
            **self.fit.state_dict(),
            "replay": (replay := self.replay.state_dict()),
            "features": self.features.state_dict(replay["texts"]),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The replay comes back where it fits (an agent loaded with as many envs as it was
        saved with, to resume training); otherwise, as for agents saved before it was saved,
        it starts empty and refills."""
        resume = "replay" in state and self.replay.fits(state["replay"])
        if resume:
            self.replay.load_state_dict(state["replay"])
            self.features.load_state_dict(state["features"])
        self.fit.load_state_dict(state, resume)


def state_advantages(q: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """``(n, K)`` advantage of every action, ``Q(s, a) - sum_b pi(b | s) Q(s, b)``: how much
    better than the policy's own average each action is.

    >>> state_advantages(np.array([[1.0, 0.0]]), np.array([[0.25, 0.75]])).tolist()
    [[0.75, -0.25]]
    """
    q, probs = np.asarray(q, dtype=np.float64), np.asarray(probs, dtype=np.float64)
    if q.shape != probs.shape:
        raise ValueError(f"q and probs must have one shape, got {q.shape} and {probs.shape}.")
    return q - (probs * q).sum(-1, keepdims=True)  # type: ignore[no-any-return]
