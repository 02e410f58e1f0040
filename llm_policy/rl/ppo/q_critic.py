"""Action values for PPO's advantages in choice mode (``advantage_estimator="q"``).

Sampled returns say little per turn when rewards are noisy (a card draw, a slippery step), and
an on-policy estimate of ``Q^pi`` can favour the wrong action in a state for as long as the
policy still plays badly after it (benchmarks/RESULTS.md, "PPO on noisy returns"). This critic
learns ``Q(s, a)`` of every listed action off-policy instead, as :class:`gym_llm.DQN` does and
with its defaults but twice its replays per env step: an MLP on the frozen model's features,
double Q-learning on a replay of every step the run has taken, a target copy, and a rate that
decays in env steps. Unlike DQN's, its values have their own discount (``q_gamma``, lower than
PPO's: the features of different states are nearly the same, and bootstrapping multiplies their
fitting error by up to ``1 / (1 - gamma)``) and start at exactly 0. The features do not change while the adapter trains, so a step replayed a
thousand updates later is still exact.

The advantage of a turn is ``Q(s, a) - sum_b pi_old(b | s) Q(s, b)``, and
``policy_update="target"`` tilts each state's whole distribution by ``Q(s, .)`` at once, played
or not.
"""

from __future__ import annotations

import copy
import json
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from gym_llm.policy.outputs import PolicyStep
from gym_llm.policy.q_head import QHead
from gym_llm.rl.common.distributed import world_size
from gym_llm.rl.common.frozen_features import FrozenFeatures
from gym_llm.rl.dqn.config import DQNConfig
from gym_llm.rl.dqn.replay import TextReplayBuffer
from gym_llm.rl.dqn.schedules import harmonic_rate_factor
from gym_llm.rl.dqn.td import QHeads, td_step
from gym_llm.rl.ppo.config import Q_CUT, Q_HUBER_DELTA, Q_N_STEPS, Q_REPLAY_RATIO
from gym_llm.rl.ppo.ridge_values import RidgeFit, RidgeQ, check_q_fit

#: The Q head's settings: DQN's defaults, chosen on the task family's tuning split, with the
#: squared error for a loss (:data:`~gym_llm.rl.ppo.config.Q_HUBER_DELTA`).
Q_DEFAULTS = DQNConfig(huber_delta=Q_HUBER_DELTA)


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


class QCritic:
    """A Q head trained on replayed steps; advantages for a rollout's turns.

    Args:
        policy: the :class:`~gym_llm.policy.llm_policy.LLMPolicy` (choice mode, one list of
            actions, LoRA): its frozen features are the head's input.
        n_envs: envs stepped together (the replay keeps each env's steps in order).
        gamma: the discount of the TD target.
        n_steps: rewards summed before the TD target bootstraps.
        cut: with ``n_steps > 1``, stop summing before the first later action whose value is
            below its state's best by more than this share of the state's value range: 0, any
            action but the greedy one (Watkins's Q(lambda)), so the values stay the greedy
            policy's; 1, never (the behaviour's n-step return); between, near-ties continue.
        replay_ratio: how many times each env step is replayed on average.
        seed: the replay's sampling seed.
        settings: the head's width and rate, the replay's size, the TD batch, the target copy's
            interval (in env steps) and the gradient clip, as :class:`gym_llm.DQN` reads them.
        gap_increase: advantage learning's share in each TD target (0: plain Q-learning).
        zero_start: every value starts at 0 and stays there until a reward is seen, so that
            before any reward the target update leaves the policy as it is rather than tilting
            it by the head's initial output; ``False``: a random start, as DQN's.
        replay_balance: steps are replayed with probability ∝ ``n(s, a)^-replay_balance``
            (``n``: the steps held with that observation and action), so that a move the
            policy has stopped playing is still fitted (0: every step alike).
        fit: ``"td"``, the head trained by TD steps on replayed batches; ``"ridge"``, the
            values refitted after each rollout in closed form from every step held
            (:mod:`gym_llm.rl.ppo.ridge_values`; the TD settings above then go unused).
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
        if replay_ratio <= 0 or n_steps < 1 or not 0 <= cut <= 1 or replay_balance < 0:
            raise ValueError(
                f"Need replay_ratio > 0, n_steps >= 1, 0 <= cut <= 1 and replay_balance >= 0, "
                f"got {replay_ratio}, {n_steps}, {cut} and {replay_balance}."
            )
        reason = q_unavailable(policy)
        if reason is not None:
            raise ValueError(reason)
        actions = list(policy.action_space.actions)
        self.gamma, self.replay_ratio, self.n_envs = gamma, replay_ratio, n_envs
        self.n_steps, self.cut, self.settings = n_steps, cut, settings
        self.gap_increase, self.replay_balance = gap_increase, replay_balance
        self.features = FrozenFeatures(policy, prior=False)  # the TD target reads no prior
        hidden = int(policy.lm.config.get_text_config().hidden_size)
        online = QHead(
            hidden, len(actions), width=settings.q_width, device=policy.device,
            zero_start=zero_start,
        )  # fmt: skip
        lr = float(settings.learning_rate)  # type: ignore[arg-type]
        self.heads = QHeads(
            online,
            copy.deepcopy(online).requires_grad_(False),
            online,  # greedy actions are PPO's policy's: no averaged head
            torch.optim.Adam([p for p in online.parameters() if p.requires_grad], lr=lr),
        )
        self.base_rate = lr
        #: ``fit="ridge"``: the values fitted in closed form, read instead of the TD head.
        self.ridge = (
            RidgeFit(hidden, len(actions), gamma, device=policy.device) if fit == "ridge" else None
        )
        self.replay = TextReplayBuffer(settings.buffer_size, n_envs, len(actions))
        self.rng = np.random.default_rng(seed)
        #: TD steps taken, and those skipped for a non-finite loss.
        self.td_steps = self.skipped_steps = 0
        self._owed = 0.0  # fractional TD steps carried to the next rollout

    @property
    def q_net(self) -> QHead | RidgeQ:
        """The values read: the TD-trained head, or the closed-form fit with ``fit="ridge"``."""
        return self.heads.online if self.ridge is None else self.ridge.q_net

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
        """TD steps for ``new_steps`` env steps collected (``replay_ratio`` replays each), at
        DQN's rate decayed to ``num_timesteps``; the mean loss and Q. The head's input scale is
        fixed from the observations seen before its first step. With ``fit="ridge"``: the
        closed-form fit to every step held instead."""
        if self.ridge is not None:
            return self.ridge.train(self.replay, self.features)
        online = self.heads.online
        if not online.is_calibrated:
            online.calibrate(self.features(self.replay.distinct_observations())[1])
            self.heads.target.load_state_dict(online.state_dict())
        settings = self.settings
        rate = self.base_rate * harmonic_rate_factor(num_timesteps, settings.learning_rate_decay)
        for group in self.heads.optimizer.param_groups:
            group["lr"] = rate
        batch = settings.batch_size
        self._owed += self.replay_ratio * new_steps / batch
        steps, self._owed = int(self._owed), self._owed - int(self._owed)
        # the target refreshed as often per replayed step as DQN's (every 100 env steps there)
        refresh = max(1, round(settings.target_update_interval * self.replay_ratio / batch))
        losses, q_means = [], []
        for _ in range(steps):
            sample = self.replay.sample(
                batch,
                self.n_steps,
                self.gamma,
                self.rng,
                follows=None if self.cut >= 1 else self._follows,
                balance=self.replay_balance,
            )
            done = td_step(
                self.heads, sample, self.features, alpha=1.0, beta=0.0,
                max_grad_norm=settings.max_grad_norm, average_tau=1.0,
                gap_increase=self.gap_increase, huber_delta=settings.huber_delta,
            )  # fmt: skip
            self.td_steps += 1
            if done is None:
                self.skipped_steps += 1
            else:
                losses.append(done[0])
                q_means.append(done[1])
            if self.td_steps % refresh == 0:
                self.heads.target.load_state_dict(online.state_dict())
        return {
            "q_loss": float(np.mean(losses)) if losses else math.nan,
            "q_mean": float(np.mean(q_means)) if q_means else math.nan,
            "q_td_steps": float(steps),
            "q_skipped_steps": float(self.skipped_steps),
        }

    @torch.no_grad()
    def _follows(self, observations: list[str], actions: np.ndarray) -> np.ndarray:
        """Whether each action's online value is within ``cut`` of its observation's value
        range below the best."""
        q = self.q_net(self.features(observations)[1])
        taken = q.gather(-1, torch.as_tensor(actions, device=q.device)[:, None])[:, 0]
        best, worst = q.max(-1).values, q.min(-1).values
        return (taken >= best - self.cut * (best - worst)).cpu().numpy()  # type: ignore[no-any-return]

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
        """The heads, their optimizer, the replay, its observations' features and the sampling
        state: all a resumed run needs to take the same TD steps as one that never stopped."""
        return {
            "q_net": self.heads.online.state_dict(),
            "q_target": self.heads.target.state_dict(),
            "optimizer": self.heads.optimizer.state_dict(),
            "td_steps": torch.tensor(self.td_steps),
            "skipped_steps": torch.tensor(self.skipped_steps),
            "owed": torch.tensor(self._owed, dtype=torch.float64),
            "rng": json.dumps(self.rng.bit_generator.state),
            "replay": (replay := self.replay.state_dict()),
            "features": self.features.state_dict(replay["texts"]),
            **({} if self.ridge is None else {"ridge": self.ridge.q_net.state_dict()}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The replay comes back where it fits (an agent loaded with as many envs as it was
        saved with, to resume training); otherwise, as for agents saved before it was saved,
        it starts empty and refills."""
        self.heads.online.load_state_dict(state["q_net"])
        if self.ridge is not None:
            self.ridge.q_net.load_state_dict(state["ridge"])
        self.heads.target.load_state_dict(state["q_target"])
        self.heads.optimizer.load_state_dict(state["optimizer"])
        self.td_steps = int(state["td_steps"])
        if "replay" in state and self.replay.fits(state["replay"]):
            self.replay.load_state_dict(state["replay"])
            self.features.load_state_dict(state["features"])
            self.rng.bit_generator.state = json.loads(state["rng"])
            self.skipped_steps = int(state["skipped_steps"])
            self._owed = float(state["owed"])


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
