"""``PPOConfig``: every setting of :class:`gym_llm.PPO`, one documented field each, checked once.

``PPO(LLMPolicy, env, n_epochs=2)`` and ``PPO(LLMPolicy, env, PPOConfig(n_epochs=2))`` are the
same agent: keyword arguments replace fields. SB3's PPO arguments keep their meaning and their
defaults except ``n_steps`` (64: an LLM step costs a forward pass), ``n_epochs`` (4) and
``max_grad_norm`` (1.0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from stable_baselines3.common.type_aliases import Schedule

from gym_llm.rl.common.rates import FULL_FINETUNE_LEARNING_RATE, LORA_LEARNING_RATE
from gym_llm.rl.ppo.advantages import Estimator, check_estimator
from gym_llm.rl.ppo.behaviour import check_floor_mode
from gym_llm.rl.ppo.entropy_control import check_entropy_of, check_floor, parse_ent_coef
from gym_llm.rl.ppo.ridge_values import check_q_fit

#: Passes over each rollout. Four, not two, measured on the task family's tuning split (10 seeds
#: per task, benchmarks/RESULTS.md, "More learning per env step"): never fewer seeds reaching
#: 90 % of the gap on any task, more on the grid (8 against 3), the walk and the range rule,
#: for ~1.7x the update time per env step.
DEFAULT_N_EPOCHS = 4


#: ``advantage_estimator="q"``: rewards summed before the values' TD target bootstraps, and
#: where the sum stops (1: never). One step: a longer sum on a noisy task runs through the
#: exploring policy's moves, so the values stop being the greedy policy's (RESULTS.md, "The
#: grid's action values").
Q_N_STEPS, Q_CUT = 1, 1.0
#: ``advantage_estimator="q"``: how many times the values replay each env step on average.
#: Twice DQN's 8: the values of a path of several moves climb through several target copies and
#: need enough TD steps between two copies to fit each (RESULTS.md, "The dip is too few TD steps
#: per target copy").
Q_REPLAY_RATIO = 16.0
#: ``advantage_estimator="q"``: the action values' discount, below PPO's 0.99. With 0.99 the
#: values of a state's moves differ by ~1 % of the state's value (a wasted move costs one step
#: of discount), less than the values' own error on the frozen model's nearly identical
#: features, so the greedy move follows the error (RESULTS.md, "The action values' discount").
Q_GAMMA = 0.95
#: ``advantage_estimator="q"``: the values' TD loss is the squared error (a Huber threshold of
#: ``inf``). SB3's Huber loss (threshold 1) fits a noisy ±1 reward between its mean and its
#: median: on Blackjack it underrated sticking by ~0.2 where the replay's own outcomes were
#: right (RESULTS.md, "Why the values underrate sticking on Blackjack").
Q_HUBER_DELTA = math.inf


#: ``min_action_prob="auto"`` with the action values and the step onto their target: each listed
#: action keeps at least this probability, and all K floors together at most
#: :data:`Q_FLOOR_TOTAL` (so 0.05 each up to four actions, ``0.2 / K`` beyond). Without it the
#: target commits to the move the values rate best while they are still wrong on a noisy task,
#: and stops visiting the moves that would correct them (RESULTS.md, "A floor on every move for
#: PPO's action values").
Q_FLOOR, Q_FLOOR_TOTAL = 0.05, 0.2


def resolve_floor(floor: float | str, estimator: str, update: str, n_actions: int) -> float:
    """``min_action_prob`` made concrete once ``"auto"`` estimator and update are: ``"auto"``
    is :data:`Q_FLOOR` (at most ``Q_FLOOR_TOTAL / n_actions``) under ``"q"`` with ``"target"``,
    the pair it was measured with, and 0 (off) otherwise; a number stays as given.

    >>> resolve_floor("auto", "q", "target", 4), resolve_floor("auto", "q", "target", 10)
    (0.05, 0.02)
    >>> resolve_floor("auto", "gae", "clip", 4), resolve_floor(0.1, "gae", "clip", 4)
    (0.0, 0.1)
    """
    if floor != "auto":
        return float(floor)
    if estimator != "q" or update != "target" or n_actions < 1:
        return 0.0
    return min(Q_FLOOR, Q_FLOOR_TOTAL / n_actions)


def resolve_auto(estimator: str, update: str, q_applies: bool) -> tuple[Estimator, str]:
    """The ``"auto"`` settings made concrete once the policy is built (``q_applies``: PPO can
    learn action values with it). The estimator is ``"q"`` where it applies, else ``"gae"``;
    the update is ``"target"`` with ``"q"`` where it applies, since the clipped surrogate gives a
    state that has committed to one action an advantage of ~0 whatever the values say, else
    ``"clip"`` (so an explicit ``"q"`` that cannot apply fails on its own reason, not the
    target's)."""
    if estimator == "auto":
        estimator = "q" if q_applies else "gae"
    if update == "auto":
        update = "target" if estimator == "q" and q_applies else "clip"
    return check_estimator(estimator), update


def default_learning_rate(policy_kwargs: dict[str, Any] | None) -> float:
    """:data:`LORA_LEARNING_RATE`, or :data:`FULL_FINETUNE_LEARNING_RATE` with ``lora=None``."""
    kwargs = policy_kwargs or {}
    config = kwargs.get("config")  # a PolicyConfig, whose lora the keywords replace
    full = kwargs.get("lora", getattr(config, "lora", "default")) is None
    return FULL_FINETUNE_LEARNING_RATE if full else LORA_LEARNING_RATE


@dataclass
class PPOConfig:
    """The settings of :class:`gym_llm.PPO` (the policy's are in ``policy_kwargs``)."""

    #: ``None``: 5e-4 with LoRA, 1e-5 for full fine-tuning (:func:`default_learning_rate`,
    #: measured); a float or an SB3 schedule otherwise.
    learning_rate: float | Schedule | None = None
    #: Vector steps per rollout (each steps every env once).
    n_steps: int = 64
    #: Turns per minibatch (one optimizer step each).
    batch_size: int = 64
    #: Passes over each rollout (SB3's PPO: 10; measured, :data:`DEFAULT_N_EPOCHS`).
    n_epochs: int = DEFAULT_N_EPOCHS
    #: Discount factor.
    gamma: float = 0.99
    #: GAE's lambda.
    gae_lambda: float = 0.95
    #: The clip range of the policy ratio.
    clip_range: float = 0.2
    #: Centre each rollout's advantages and scale them by the run's running std.
    normalize_advantage: bool = True
    #: Weight of the entropy bonus; ``"auto"`` (or ``"auto_0.05"``, its start) adapts it after
    #: every optimizer step to hold the mean per-state entropy at ``target_entropy``
    #: (:mod:`gym_llm.rl.ppo.entropy_control`; a choice among listed actions). ``train/ent_coef``.
    ent_coef: float | str = 0.0
    #: The entropy ``"auto"`` holds, in nats; ``None``: 0.3 of ``log K``.
    target_entropy: float | None = None
    #: ``"state"`` (the mean per-state entropy) or ``"marginal"`` (that of the batch's mean
    #: action distribution: high for a state-dependent policy, however certain).
    target_entropy_of: str = "state"
    #: A floor on every listed action's probability in every state, held by a log-barrier in
    #: the loss (:func:`~gym_llm.rl.ppo.loss_terms.probability_floor`) or by how the rollout
    #: samples (``floor_mode``); 0: off. ``"auto"``, the
    #: default: 0.05 (at most ``0.2 / K`` over K actions) with the action values and their
    #: target, off otherwise (:func:`resolve_floor`).
    min_action_prob: float | str = "auto"
    #: Where the floor acts: ``"behaviour"``, the rollout samples from ``(1 - K·f)·pi + f``
    #: and nothing in the loss holds the policy there (:mod:`gym_llm.rl.ppo.behaviour`; choice
    #: mode with ``policy_update="target"``); ``"barrier"``, a log-barrier in the loss on the
    #: policy. ``"auto"``, the default: the first where it applies, else the second
    #: (:func:`~gym_llm.rl.ppo.behaviour.resolve_floor_mode`).
    floor_mode: str = "auto"
    #: ``floor_mode="behaviour"``: the floor's mass shared among a state's moves ∝
    #: ``(n + 1)^-β``, ``n`` the plays of each the action values' replay holds (0, the default:
    #: evenly; :func:`~gym_llm.rl.ppo.behaviour.rare_first`), so a move the policy has left is
    #: played more and its value corrected by more outcomes.
    floor_balance: float = 0.0
    #: ``"clip"``: PPO's clipped surrogate. ``"target"`` (choice mode): cross-entropy to the old
    #: policy tilted by each state's mean advantage per action, a step of ``kl_step`` nats
    #: (:mod:`gym_llm.rl.ppo.target_update`), whose gradient does not fade at p ~ 0.
    #: ``"auto"``: ``"target"`` with the action values (``advantage_estimator="q"``), else
    #: ``"clip"`` (:func:`resolve_auto`).
    policy_update: str = "auto"
    #: ``policy_update="target"``: the mean ``KL(target || pi_old)`` per update, nats.
    kl_step: float = 0.05
    #: Weight of the value loss.
    vf_coef: float = 0.5
    #: Gradients are clipped to this global norm.
    max_grad_norm: float = 1.0
    #: Stop an update's epochs when the approximate KL passes 1.5x this (``None``: never).
    target_kl: float | None = None
    #: Weight of the KL penalty to the reference model (the adapter disabled); 0: off.
    kl_coef: float = 0.0
    #: Turns per forward/backward pass (gradients accumulate over the minibatch); ``None``: as
    #: many as fit the update's memory budget (``UPDATE_MEMORY_BUDGET_MB`` of
    #: :mod:`gym_llm.rl.ppo.passes` on the CPU, a quarter of the free memory on a GPU).
    micro_batch_size: int | None = None
    #: (prompt, reply, reward) examples written to TensorBoard per rollout.
    n_logged_samples: int = 4
    #: ``"gae"`` (turn-level GAE with the critic), a critic-free one: ``"rebn"``, ``"grpo"``,
    #: ``"rloo"``, ``"gigpo"`` (:mod:`gym_llm.rl.ppo.advantages`; the critic still trains), or
    #: ``"q"`` (choice mode over one list: action values learned off-policy on a replay of the
    #: run, :mod:`gym_llm.rl.ppo.q_critic`; for noisy returns). ``"auto"``, the default:
    #: ``"q"`` where the policy allows it (choice mode over one fixed list, LoRA, one process),
    #: else ``"gae"``.
    advantage_estimator: str = "auto"
    #: ``advantage_estimator="q"``: rewards summed before the action values' TD target
    #: bootstraps (DQN's ``n_steps``; :data:`Q_N_STEPS`: 3 for long noiseless paths).
    q_n_steps: int = Q_N_STEPS
    #: With ``q_n_steps > 1``: the sum stops before the first later action whose value is below
    #: its state's best by more than this share of the state's value range (0: any action but
    #: the greedy one, Watkins's Q(lambda), so the values stay the greedy policy's; 1, the
    #: default: never, the behaviour's own return).
    q_cut: float = Q_CUT
    #: ``advantage_estimator="q"``: how many times the action values replay each env step on
    #: average (TD steps x batch / env steps; :data:`Q_REPLAY_RATIO`). They train on the frozen
    #: model's features, so a TD step costs a small MLP's pass.
    q_replay_ratio: float = Q_REPLAY_RATIO
    #: ``advantage_estimator="q"``: steps are replayed with probability ∝ ``n(s, a)^-β``, ``n``
    #: the steps held with that observation and action (0, the default: every step alike; 1:
    #: every (state, move) pair alike, so a move the policy has stopped playing is still fitted).
    q_replay_balance: float = 0.0
    #: ``advantage_estimator="q"``: how the action values are fitted: ``"td"`` (the default),
    #: an MLP head trained by TD steps on replayed batches; ``"ridge"``, refitted after each
    #: rollout in closed form (ridge fitted Q iteration on the frozen features, the penalty
    #: chosen by leave-one-out error; :mod:`gym_llm.rl.ppo.ridge_values`), which lends a
    #: rarely played move its neighbours' outcomes.
    q_fit: str = "td"
    #: ``advantage_estimator="q"``: the action values' discount (:data:`Q_GAMMA`); ``gamma``
    #: stays the discount of the returns the value head learns.
    q_gamma: float = Q_GAMMA
    #: ``advantage_estimator="q"``: the TD loss's Huber threshold in reward units (DQN's
    #: ``huber_delta``; :data:`Q_HUBER_DELTA`, ``inf``: the squared error, whose fit is a noisy
    #: reward's mean; 1: SB3's Huber loss).
    q_huber_delta: float = Q_HUBER_DELTA
    #: Clip the value loss around the rollout's values (SB3's ``clip_range_vf``); ``None``: off.
    clip_range_vf: float | None = None
    #: Every reward is multiplied by this before advantages and returns (logged episode returns
    #: stay unscaled).
    reward_scale: float = 1.0
    #: For the first this many env steps only the value head trains.
    critic_warmup_steps: int = 0
    #: The NaN guard skips an optimizer step whose loss, gradient or value is not finite; after
    #: this many in a row training stops with a
    #: :class:`~gym_llm.rl.ppo.guard.NonFiniteTrainingError` naming the last checkpoint.
    max_consecutive_skips: int = 10
    #: Shard full fine-tuning over the processes (FSDP2, :mod:`gym_llm.rl.common.sharding`);
    #: ``None``: as ``accelerate launch --use_fsdp`` says. Needs ``lora=None``.
    fsdp: bool | None = None

    def __post_init__(self) -> None:
        self.clip_range, self.kl_step = float(self.clip_range), float(self.kl_step)
        self.reward_scale = float(self.reward_scale)
        for name in ("batch_size", "n_epochs", "n_steps", "q_n_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise ValueError(
                "micro_batch_size must be >= 1 (or None: chosen by memory), got "
                f"{self.micro_batch_size}."
            )
        if self.clip_range_vf is not None and self.clip_range_vf <= 0:
            raise ValueError(
                f"clip_range_vf must be > 0 (or None: no clipping), got {self.clip_range_vf}."
            )
        if self.max_consecutive_skips < 1:
            raise ValueError(
                f"max_consecutive_skips must be >= 1, got {self.max_consecutive_skips}."
            )
        if self.critic_warmup_steps < 0:
            raise ValueError(f"critic_warmup_steps must be >= 0, got {self.critic_warmup_steps}.")
        if self.advantage_estimator != "auto":
            check_estimator(self.advantage_estimator)
        auto = parse_ent_coef(self.ent_coef)[1]
        if self.target_entropy is not None and not self.target_entropy > 0:
            raise ValueError(
                f"target_entropy must be > 0 nats (or None), got {self.target_entropy}."
            )
        check_entropy_of(self.target_entropy_of, auto)
        if self.min_action_prob != "auto":
            self.min_action_prob = check_floor(self.min_action_prob)
        check_floor_mode(self.floor_mode)
        self.floor_balance = float(self.floor_balance)
        if not self.floor_balance >= 0:
            raise ValueError(
                f"floor_balance must be >= 0 (0: the floor shared evenly), got {self.floor_balance}."
            )
        if self.policy_update not in ("clip", "target", "auto"):
            raise ValueError(
                f"policy_update must be 'clip', 'target' or 'auto', got {self.policy_update!r}."
            )
        if not 0 <= self.q_cut <= 1:
            raise ValueError(f"q_cut must be a share in [0, 1], got {self.q_cut}.")
        self.q_replay_ratio = float(self.q_replay_ratio)
        if not self.q_replay_ratio > 0:
            raise ValueError(f"q_replay_ratio must be > 0, got {self.q_replay_ratio}.")
        self.q_replay_balance = float(self.q_replay_balance)
        if not self.q_replay_balance >= 0:
            raise ValueError(
                f"q_replay_balance must be >= 0 (0: every step alike), got {self.q_replay_balance}."
            )
        check_q_fit(self.q_fit, self.q_n_steps, self.q_replay_balance)
        self.q_gamma = float(self.q_gamma)
        if not self.q_huber_delta > 0:
            raise ValueError(
                f"q_huber_delta must be > 0 (inf: squared error), got {self.q_huber_delta}."
            )
        if not 0 <= self.q_gamma <= 1:
            raise ValueError(f"q_gamma must be a discount in [0, 1], got {self.q_gamma}.")
        if not self.kl_step > 0:
            raise ValueError(f"kl_step must be > 0 nats, got {self.kl_step}.")
