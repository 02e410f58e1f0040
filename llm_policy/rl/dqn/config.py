"""``DQNConfig``: every setting of :class:`gym_llm.DQN`, one documented field each, checked once.

``DQN(LLMPolicy, env, alpha=0.05)`` and ``DQN(LLMPolicy, env, DQNConfig(alpha=0.05))`` are the
same agent: keyword arguments replace fields. SB3's DQN arguments keep their meaning; five
defaults differ, for budgets of 10³–10⁴ env steps: the target network every 100 env steps (SB3:
10,000), ε over the first 20 % (SB3: 10 %), one TD step per env per phase (SB3: one), a rate
that halves by 1,024 env steps (SB3: constant) and the squared TD error (SB3: Huber).
:data:`SB3_DEFAULTS` gives SB3's back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from stable_baselines3.common.type_aliases import Schedule

from gym_llm.rl.common.rates import LORA_LEARNING_RATE

#: SB3 DQN's own values of the settings whose defaults differ here:
#: ``DQN(LLMPolicy, env, **SB3_DEFAULTS)``.
SB3_DEFAULTS: dict[str, Any] = {
    "learning_rate_decay": 0,
    "target_update_interval": 10_000,
    "exploration_fraction": 0.1,
    "gradient_steps": 1,
    "huber_delta": 1.0,
}


@dataclass
class DQNConfig:
    """The settings of :class:`gym_llm.DQN` (the policy's are in ``policy_kwargs``)."""

    #: The Q head's learning rate (a float or an SB3 schedule).
    learning_rate: float | Schedule = 1e-4
    #: Env steps by which the Q head's rate has halved: it is multiplied by
    #: ``1 / (1 + t / learning_rate_decay)`` after ``t`` env steps, so the values average ever
    #: more replayed returns (noisy returns otherwise flip the greedy action between
    #: evaluations); it needs no budget and survives ``learn`` called in pieces. 0: constant
    #: (SB3).
    learning_rate_decay: int = 1024
    #: Transitions the replay buffer holds.
    buffer_size: int = 1_000_000
    #: Env steps collected before the first TD step.
    learning_starts: int = 100
    #: Transitions per TD step.
    batch_size: int = 32
    #: Polyak coefficient of the target network (1: a hard copy every ``target_update_interval``).
    tau: float = 1.0
    #: Discount factor.
    gamma: float = 0.99
    #: Env steps (or ``(n, "episode")``) between TD phases.
    train_freq: int | tuple[int, str] = 4
    #: TD steps per phase; ``None``: one per env, so each env step is replayed as often
    #: (``batch_size / train_freq`` times) whatever the number of envs, as SB3's one-env DQN
    #: replays it; -1: one per env step collected (SB3's meaning).
    gradient_steps: int | None = None
    #: n-step returns.
    n_steps: int = 1
    #: Env steps between target-network refreshes (SB3's 10,000 is more than most LLM budgets:
    #: a target never refreshed never learns a multi-step task).
    target_update_interval: int = 100
    #: Polyak coefficient, per TD step, of the averaged Q head that greedy ``predict``,
    #: evaluation and the saved agent act with (so a policy reached is not lost to the next
    #: noisy updates); 1: the online head itself, as SB3.
    average_tau: float = 1.0
    #: Share of the run over which ε decays from its initial to its final value.
    exploration_fraction: float = 0.2
    #: ε at the start.
    exploration_initial_eps: float = 1.0
    #: ε after ``exploration_fraction`` of the run.
    exploration_final_eps: float = 0.05
    #: Gradients are clipped to this global norm.
    max_grad_norm: float = 10.0
    #: The posterior's temperature, in reward units: how much a difference in ``Q`` outweighs
    #: the prior. Small ``alpha`` acts (nearly) greedily on ``Q``.
    alpha: float = 0.01
    #: The prior's weight: 0 is DQN on the LM's features, 1 keeps the LM's choice distribution
    #: as the reference the values tilt.
    beta: float = 0.0
    #: Hidden units of the Q head's two layers.
    q_width: int = 256
    #: Where the TD loss turns from squared to linear, in reward units; ``inf`` (default): the
    #: squared error, whose fit is the mean of a noisy reward. SB3's Huber loss (1) lets a rare
    #: large error pull no harder, and its fit leans from the mean toward the median.
    huber_delta: float = math.inf
    #: Env steps between distillation rounds of the posterior into the LoRA policy
    #: (:mod:`gym_llm.rl.dqn.distill`); 0: none while learning (call ``distill`` yourself).
    distill_interval: int = 0
    #: Optimizer steps of the LM per round.
    distill_steps: int = 4
    #: With ``distill_interval`` on, the steps of one more round at the end of ``learn`` on the
    #: final values, so the LM ``learn`` leaves is distilled from them; 0: none.
    distill_final_steps: int = 32
    #: Distinct replayed observations per distillation step.
    distill_batch_size: int = 32
    #: The LM's learning rate in distillation (PPO's LoRA default).
    distill_learning_rate: float = LORA_LEARNING_RATE

    def __post_init__(self) -> None:
        if self.gradient_steps is not None and self.gradient_steps < -1:
            raise ValueError(f"gradient_steps must be None, -1 or >= 0, got {self.gradient_steps}.")
        if self.learning_rate_decay < 0:
            raise ValueError(
                f"learning_rate_decay must be >= 0 env steps (0: a constant rate), got "
                f"{self.learning_rate_decay}."
            )
        for name in ("n_steps", "batch_size", "q_width"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if not self.huber_delta > 0:
            raise ValueError(
                f"huber_delta must be > 0 reward units (inf: the squared error), got "
                f"{self.huber_delta}."
            )
        if not 0 < self.average_tau <= 1:
            raise ValueError(f"average_tau must be in (0, 1], got {self.average_tau}.")
        if not self.alpha > 0:
            raise ValueError(f"alpha (the posterior's temperature) must be > 0, got {self.alpha}.")
        if self.beta < 0:
            raise ValueError(f"beta (the prior's weight) must be >= 0, got {self.beta}.")
        if not 0 <= self.exploration_final_eps <= self.exploration_initial_eps <= 1:
            raise ValueError(
                "Need 0 <= exploration_final_eps <= exploration_initial_eps <= 1, got "
                f"{self.exploration_final_eps} and {self.exploration_initial_eps}."
            )
        steps, batch = self.distill_steps, self.distill_batch_size
        if min(steps, batch) < 1 or min(self.distill_interval, self.distill_final_steps) < 0:
            raise ValueError(
                "Need distill_interval, distill_final_steps >= 0 and distill_steps, "
                f"distill_batch_size >= 1, got {self.distill_interval}, "
                f"{self.distill_final_steps}, {steps} and {batch}."
            )
