"""Action values trained by TD steps (``PPO(q_fit="td")``, the default): an MLP head on the
frozen features, double Q-learning on batches drawn from the replay, a target copy, and a rate
that decays in env steps, as :class:`gym_llm.DQN` learns them.

:class:`TDFit` is the part :class:`~gym_llm.rl.ppo.q_critic.QCritic` composes for it, beside
:class:`~gym_llm.rl.ppo.ridge_values.RidgeFit`; the critic holds the replay and the features,
and each fit reads them when it trains.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from typing import Any

import numpy as np
import torch

from gym_llm.policy.q_head import QHead
from gym_llm.rl.dqn.config import DQNConfig
from gym_llm.rl.dqn.schedules import harmonic_rate_factor
from gym_llm.rl.dqn.td import QHeads, td_step
from gym_llm.rl.ppo.config import Q_CUT, Q_HUBER_DELTA, Q_N_STEPS, Q_REPLAY_RATIO

#: The Q head's settings: DQN's defaults, chosen on the task family's tuning split, with the
#: squared error for a loss (:data:`~gym_llm.rl.ppo.config.Q_HUBER_DELTA`).
Q_DEFAULTS = DQNConfig(huber_delta=Q_HUBER_DELTA)


class TDFit:
    """A Q head trained by TD steps on replayed batches.

    Args:
        hidden: the features' size.
        n_actions: the listed actions.
        gamma: the discount of the TD target.
        n_steps: rewards summed before the TD target bootstraps.
        cut: with ``n_steps > 1``, stop summing before the first later action whose value is
            below its state's best by more than this share of the state's value range: 0, any
            action but the greedy one (Watkins's Q(lambda)), so the values stay the greedy
            policy's; 1, never (the behaviour's n-step return); between, near-ties continue.
        replay_ratio: how many times each env step is replayed on average.
        seed: the replay's sampling seed.
        settings: the head's width and rate, the TD batch, the target copy's interval (in env
            steps) and the gradient clip, as :class:`gym_llm.DQN` reads them.
        gap_increase: advantage learning's share in each TD target (0: plain Q-learning).
        zero_start: every value starts at 0 and stays there until a reward is seen, so that
            before any reward the target update leaves the policy as it is rather than tilting
            it by the head's initial output; ``False``: a random start, as DQN's.
        replay_balance: steps are replayed with probability ∝ ``n(s, a)^-replay_balance``
            (``n``: the steps held with that observation and action), so that a move the
            policy has stopped playing is still fitted (0: every step alike).
        device: where the head lives.
    """

    def __init__(
        self,
        hidden: int,
        n_actions: int,
        gamma: float,
        n_steps: int = Q_N_STEPS,
        cut: float = Q_CUT,
        replay_ratio: float = Q_REPLAY_RATIO,
        seed: int | None = None,
        settings: DQNConfig = Q_DEFAULTS,
        gap_increase: float = 0.0,
        zero_start: bool = True,
        replay_balance: float = 0.0,
        device: torch.device | str | None = None,
    ) -> None:
        if replay_ratio <= 0 or n_steps < 1 or not 0 <= cut <= 1 or replay_balance < 0:
            raise ValueError(
                f"Need replay_ratio > 0, n_steps >= 1, 0 <= cut <= 1 and replay_balance >= 0, "
                f"got {replay_ratio}, {n_steps}, {cut} and {replay_balance}."
            )
        self.gamma, self.replay_ratio = gamma, replay_ratio
        self.n_steps, self.cut, self.settings = n_steps, cut, settings
        self.gap_increase, self.replay_balance = gap_increase, replay_balance
        online = QHead(
            hidden, n_actions, width=settings.q_width, device=device, zero_start=zero_start
        )
        lr = float(settings.learning_rate)  # type: ignore[arg-type]
        self.heads = QHeads(
            online,
            copy.deepcopy(online).requires_grad_(False),
            online,  # greedy actions are PPO's policy's: no averaged head
            torch.optim.Adam([p for p in online.parameters() if p.requires_grad], lr=lr),
        )
        self.base_rate = lr
        self.rng = np.random.default_rng(seed)
        #: TD steps taken, and those skipped for a non-finite loss.
        self.td_steps = self.skipped_steps = 0
        self._owed = 0.0  # fractional TD steps carried to the next rollout

    @property
    def q_net(self) -> QHead:
        """The values read: the online head."""
        return self.heads.online

    def train(
        self, replay: Any, features: Any, num_timesteps: int, new_steps: int
    ) -> dict[str, float]:
        """TD steps on ``replay`` (a :class:`~gym_llm.rl.dqn.replay.TextReplayBuffer`) for
        ``new_steps`` env steps collected (``replay_ratio`` replays each), at DQN's rate decayed
        to ``num_timesteps``; the mean loss and Q. The head's input scale is fixed from the
        observations seen before its first step; ``features`` maps observations to
        ``(prior, features)``."""
        online = self.heads.online
        if not online.is_calibrated:
            online.calibrate(features(replay.distinct_observations())[1])
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
            sample = replay.sample(
                batch,
                self.n_steps,
                self.gamma,
                self.rng,
                follows=None if self.cut >= 1 else functools.partial(self.follows, features),
                balance=self.replay_balance,
            )
            done = td_step(
                self.heads, sample, features, alpha=1.0, beta=0.0,
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
    def follows(self, features: Any, observations: list[str], actions: np.ndarray) -> np.ndarray:
        """Whether each action's online value is within ``cut`` of its observation's value
        range below the best."""
        q = self.heads.online(features(observations)[1])
        taken = q.gather(-1, torch.as_tensor(actions, device=q.device)[:, None])[:, 0]
        best, worst = q.max(-1).values, q.min(-1).values
        return (taken >= best - self.cut * (best - worst)).cpu().numpy()  # type: ignore[no-any-return]

    def state_dict(self) -> dict[str, Any]:
        """The heads, their optimizer and the sampling state: all a resumed run needs to take
        the same TD steps as one that never stopped."""
        return {
            "q_net": self.heads.online.state_dict(),
            "q_target": self.heads.target.state_dict(),
            "optimizer": self.heads.optimizer.state_dict(),
            "td_steps": torch.tensor(self.td_steps),
            "skipped_steps": torch.tensor(self.skipped_steps),
            "owed": torch.tensor(self._owed, dtype=torch.float64),
            "rng": json.dumps(self.rng.bit_generator.state),
        }

    def load_state_dict(self, state: dict[str, Any], resume: bool) -> None:
        """The heads and their optimizer; with ``resume`` (the replay came back too), the
        sampling state as well."""
        self.heads.online.load_state_dict(state["q_net"])
        self.heads.target.load_state_dict(state["q_target"])
        self.heads.optimizer.load_state_dict(state["optimizer"])
        self.td_steps = int(state["td_steps"])
        if resume:
            self.rng.bit_generator.state = json.loads(state["rng"])
            self.skipped_steps = int(state["skipped_steps"])
            self._owed = float(state["owed"])
