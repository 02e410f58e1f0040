"""``TrainConfig``: everything that defines a training run, saved as the run's ``config.json``.

Run-level settings (the env, the budget, evaluation, checkpoints) are its own fields; the
components' settings are its sections, the components' own configs: ``policy``
(:class:`~gym_llm.PolicyConfig`), ``ppo`` (:class:`~gym_llm.PPOConfig`) and ``dqn``
(:class:`~gym_llm.DQNConfig`). One dotted syntax changes any of them, on the command line
(``--ppo.n-epochs 2``), in sweeps and in recipes (``ppo.n_epochs=2``):
:func:`gym_llm.configs.override`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gym_llm.configs import override, to_dict
from gym_llm.evaluation.exact import exact_evaluation_supported
from gym_llm.policy.arguments import lists_a_choice, scores_listed_actions
from gym_llm.policy.config import PolicyConfig
from gym_llm.rl.dqn.config import DQNConfig
from gym_llm.rl.ppo.config import PPOConfig
from gym_llm.rl.ppo.entropy_control import check_choice_among_listed, parse_ent_coef
from gym_llm.wrappers.count_bonus import check_count_key


def run_policy() -> PolicyConfig:
    """A run's policy: choice mode unless set (the policy's own default asks the env)."""
    return PolicyConfig(action_mode="choice")


def run_ppo() -> PPOConfig:
    """A run's PPO: rollouts of 32 steps per env (8 envs: 256 turns per update)."""
    return PPOConfig(n_steps=32)


def run_dqn() -> DQNConfig:
    """A run's DQN: minibatches of 64 transitions."""
    return DQNConfig(batch_size=64)


@dataclass
class TrainConfig:
    """Everything that defines a run; saved as ``config.json`` so the run can be repeated."""

    #: Gymnasium env id (any registered id; gym_llm/<Name>-v0 after ``import gym_llm``), or a
    #: text game: gem:<GEM id> (gem:game:Minesweeper-v0-easy), twx:<TextWorld-Express game>
    #: (twx:coin; fold and game_params in env_kwargs), textarena:<id> (textarena:GuessTheNumber-v0).
    env: str = "Blackjack-v1"
    #: "ppo" (on-policy, the LM itself learns) or "dqn" (off-policy action values on the LM's
    #: frozen features with its prior; choice mode, LoRA).
    algo: str = "ppo"
    #: Keyword arguments for ``gym.make`` (e.g. ``{"sab": False}``).
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: Env steps to train for (summed over the parallel envs).
    timesteps: int = 2048
    #: Parallel envs per rollout.
    n_envs: int = 8
    #: A count-based novelty bonus on the training env's reward, ``count_bonus / sqrt(N)``, N
    #: the visits of the state reached (gym_llm.wrappers.CountBonusWrapper; 0: none). For
    #: tasks that fail at discovery; about a tenth of the task's typical reward size.
    count_bonus: float = 0.0
    #: Share of ``timesteps`` over which the bonus falls linearly to 0.
    count_bonus_until: float = 0.5
    #: What the bonus counts: "next_state", or "state_action" for bandit-like tasks.
    count_bonus_key: str = "next_state"
    #: Added to the training reward of a reply the parser cannot read, or a move the env
    #: rejects (ActionParserWrapper's invalid_penalty): <= 0, e.g. -0.1. 0: an invalid reply
    #: earns what its fallback action earns, so only the task's reward teaches the format.
    #: Evaluations score the task's own reward.
    invalid_penalty: float = 0.0
    #: Monte-Carlo episodes per evaluation (before, after, each curve point); 0 skips them where
    #: the env has an exact evaluation (gym_llm.evaluation.exact), which every point then uses.
    eval_episodes: int = 100
    #: Evaluations during training (evenly spaced), besides before and after.
    eval_points: int = 4
    #: Seed of the envs, the policy's sampling and the weights' initialisation.
    seed: int = 0
    #: "auto" (cuda, then mps, then cpu), "cpu", "cuda", "cuda:1", ...
    device: str = "auto"
    #: Save a checkpoint to run_dir/checkpoints/<steps>/ at the first rollout boundary after
    #: every N env steps (None: after every rollout; 0: none, only the final agent). ``--resume``
    #: continues from the newest one.
    checkpoint_every: int | None = None
    #: Checkpoints kept (the newest; older ones are removed once a newer one is complete).
    keep_checkpoints: int = 2
    #: Also keep the agent of the best curve point so far in run_dir/best/ (which point and its
    #: value in best/best.json): a run that reaches its best and then falls back keeps it.
    keep_best: bool = True
    #: Chat-messages JSONL of demonstrations (``gym-llm demos``,
    #: gym_llm.experiments.demos.make_demos) to fine-tune on with SFT after the "before"
    #: evaluation and before PPO (None: no warm start).
    sft_demos: str | None = None
    #: Passes over the demonstrations in that SFT warm start.
    sft_epochs: float = 1.0
    #: AdamW learning rate of the SFT warm start (decayed linearly to 0 over its steps).
    sft_learning_rate: float = 1e-4
    #: The policy's settings (gym_llm.PolicyConfig); a run defaults to choice mode.
    policy: PolicyConfig = field(default_factory=run_policy)
    #: PPO's settings (gym_llm.PPOConfig), used with algo="ppo"; a run defaults to n_steps=32.
    ppo: PPOConfig = field(default_factory=run_ppo)
    #: DQN's settings (gym_llm.DQNConfig), used with algo="dqn"; a run defaults to
    #: batch_size=64.
    dqn: DQNConfig = field(default_factory=run_dqn)

    def __post_init__(self) -> None:
        mode = self.policy.named_mode()
        if self.algo not in ("ppo", "dqn"):
            raise ValueError(f"algo must be 'ppo' or 'dqn', got {self.algo!r}.")
        if self.algo == "dqn" and (not scores_listed_actions(mode) or self.policy.lora is None):
            raise ValueError(
                "algo='dqn' learns a value per listed action on the frozen model: it needs "
                "policy.action_mode='choice' and LoRA (policy.lora not null)."
            )
        if self.algo == "dqn" and self.sft_demos is not None:
            raise ValueError("sft_demos warms up PPO's policy; algo='dqn' does not use it.")
        for name in ("timesteps", "n_envs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if self.eval_points < 0 or self.eval_episodes < 0:
            raise ValueError("eval_points and eval_episodes must be >= 0.")
        if self.count_bonus < 0 or not 0 < self.count_bonus_until <= 1:
            raise ValueError(
                f"count_bonus must be >= 0 and count_bonus_until in (0, 1], got "
                f"{self.count_bonus} and {self.count_bonus_until}."
            )
        check_count_key(self.count_bonus_key, "count_bonus_key")
        if not self.invalid_penalty <= 0:
            raise ValueError(
                f"invalid_penalty is added to an invalid reply's reward, so it must be <= 0 "
                f"(e.g. -0.1); got {self.invalid_penalty}."
            )
        if self.sft_demos is not None and self.sft_epochs <= 0:
            raise ValueError(f"sft_epochs must be > 0, got {self.sft_epochs}.")
        auto = parse_ent_coef(self.ppo.ent_coef)[1]
        floor = self.ppo.min_action_prob != "auto" and float(self.ppo.min_action_prob) > 0
        if self.algo == "dqn" and (auto or floor):
            raise ValueError(
                "ppo.ent_coef='auto' and ppo.min_action_prob are PPO's; DQN has none: leave "
                "them unset with algo='dqn'."
            )
        if self.algo == "ppo":
            among_listed = lists_a_choice(mode, bool(self.policy.action_head))
            check_choice_among_listed(auto, floor, among_listed)
        if self.checkpoint_every is not None and self.checkpoint_every < 0:
            raise ValueError(f"checkpoint_every must be >= 0, got {self.checkpoint_every}.")
        if self.keep_checkpoints < 1:
            raise ValueError(f"keep_checkpoints must be >= 1, got {self.keep_checkpoints}.")
        if self.eval_episodes == 0 and not exact_evaluation_supported(self.env, self.env_kwargs):
            raise ValueError(
                f"eval_episodes=0 needs an exact evaluation, which {self.env} does not have; "
                "give a number of Monte-Carlo episodes."
            )

    @property
    def mode(self) -> str:
        """The policy's action mode (``policy.action_mode``, which a run must name)."""
        return self.policy.named_mode()

    @property
    def rollout_steps(self) -> int:
        """Vector steps between updates: PPO's ``n_steps``, DQN's ``train_freq``."""
        if self.algo == "dqn":
            freq = self.dqn.train_freq
            return int(freq if isinstance(freq, int) else freq[0])
        return self.ppo.n_steps

    def with_settings(self, settings: Mapping[str, Any]) -> TrainConfig:
        """This config with dotted settings replacing fields (:func:`gym_llm.configs.override`):
        ``config.with_settings({"ppo.n_epochs": 2, "timesteps": 512})``."""
        return override(self, settings)

    def as_dict(self) -> dict[str, Any]:
        """The run file's JSON: run settings, then the sections as nested objects."""
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        """A config from a run file: nested sections, or the flat keys of run files written
        before the sections (``n_epochs``, ``lora_r``, ``mode``, ...), read the same."""
        return override(cls(), read_flat(data))

    def policy_kwargs(self) -> dict[str, Any]:
        """What ``PPO``/``DQN`` pass to ``LLMPolicy``."""
        return {"config": self.policy}


#: Where each key of a flat run file (written before the sections) went: ``section.field``.
FLAT_KEYS: dict[str, tuple[str, ...]] = {
    **{
        name: (f"policy.{name}",)
        for name in (
            "model", "temperature", "max_new_tokens", "trainable_layers", "value_lr_scale",
            "value_normalization", "action_head_lr_scale", "choice_calibration", "action_head",
            "action_prior_scale",
        )
    },
    "mode": ("policy.action_mode",),
    "lora_r": ("policy.lora",),
    **{
        name: (f"ppo.{name}",)
        for name in (
            "n_steps", "n_epochs", "advantage_estimator", "critic_warmup_steps", "ent_coef",
            "target_entropy_of", "min_action_prob", "kl_coef", "target_kl", "micro_batch_size",
            "fsdp",
        )
    },
    **{name: (f"ppo.{name}", f"dqn.{name}") for name in ("batch_size", "gamma", "learning_rate")},
    **{
        name: (f"dqn.{name}",)
        for name in (
            "buffer_size", "learning_starts", "train_freq", "gradient_steps",
            "target_update_interval", "exploration_fraction", "exploration_final_eps",
            "distill_interval", "distill_steps", "distill_final_steps",
        )
    },
    "dqn_n_steps": ("dqn.n_steps",),
    "dqn_alpha": ("dqn.alpha",),
    "dqn_beta": ("dqn.beta",),
}  # fmt: skip


def read_flat(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with the keys of a flat run file moved to their sections (values translated
    where the section's field differs: ``lora_r`` -> ``policy.lora``); other keys unchanged."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key not in FLAT_KEYS:
            out[key] = value
            continue
        for target in FLAT_KEYS[key]:
            out[target] = _flat_value(key, target, value)
    return out


def _flat_value(key: str, target: str, value: Any) -> Any:
    if key == "lora_r":
        return None if value == 0 else {"r": value, "lora_alpha": 2 * value}
    if key == "fsdp":
        return True if value else None  # False meant: as ``accelerate launch`` says
    if target == "dqn.learning_rate" and value is None:
        return DQNConfig.learning_rate  # None meant DQN's default
    return value
