"""``TrainConfig``: everything that defines a training run (``config.json`` of a run directory;
``gym-llm train`` flags map onto its fields one to one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gym_llm.evaluation.exact import exact_evaluation_supported
from gym_llm.policy.arguments import (
    check_mode,
    check_mode_settings,
    lists_a_choice,
    scores_listed_actions,
)
from gym_llm.policy.models import DEFAULT_MODEL
from gym_llm.policy.top_layers import parse_trainable_layers
from gym_llm.rl.ppo.advantages import check_estimator
from gym_llm.rl.ppo.config import DEFAULT_N_EPOCHS
from gym_llm.rl.ppo.entropy_control import (
    check_choice_among_listed,
    check_entropy_of,
    check_floor,
    parse_ent_coef,
)
from gym_llm.wrappers.count_bonus import check_count_key


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
    #: Registry name (see ``gym-llm models``), local directory, ``.gguf`` file or hub id.
    model: str = DEFAULT_MODEL
    #: ``"choice"`` scores the listed actions; ``"generate"`` samples free text.
    mode: str = "choice"
    #: Env steps to train for (summed over the parallel envs).
    timesteps: int = 2048
    #: Parallel envs per rollout.
    n_envs: int = 8
    #: Steps per env per rollout (a rollout is n_steps * n_envs turns).
    n_steps: int = 32
    #: PPO minibatch size, in turns.
    batch_size: int = 64
    #: Passes over each rollout (PPO's default, measured).
    n_epochs: int = DEFAULT_N_EPOCHS
    #: Adam learning rate (default: PPO's, 5e-4 with LoRA and 1e-5 without, measured; DQN's
    #: 1e-4, SB3's).
    learning_rate: float | None = None
    #: LoRA rank; 0 fine-tunes all weights.
    lora_r: int = 16
    #: Advantages: gae (with the critic), or critic-free rebn, grpo, rloo, gigpo.
    advantage_estimator: str = "gae"
    #: The value head's learning rate as a multiple of the policy's.
    value_lr_scale: float = 1.0
    #: The critic learns returns in units of their running mean and std (MAPPO's value
    #: normalisation): for returns far from the reward's size, such as -1 per move.
    value_normalization: bool = False
    #: The action head's learning rate as a multiple of the policy's.
    action_head_lr_scale: float = 1.0
    #: Env steps at the start during which only the value head trains.
    critic_warmup_steps: int = 0
    #: Choice mode: subtract each action's score under a content-free prompt (default: on in
    #: choice mode).
    choice_calibration: bool | None = None
    #: A linear action head on the centred hidden state of the first trainable layer's input
    #: (the critic reads it too); see LLMPolicy's action_head (default: on in choice mode; in
    #: generate mode off unless set, and then added to the logits of the actions' word tokens).
    action_head: bool | None = None
    #: Generate mode with the action head: the share of the LM's own odds among the listed
    #: actions that each reply token keeps (1: all; 0: none, the head alone picks the action).
    action_prior_scale: float = 1.0
    #: Decoder layers that train, from the top: "auto" (a quarter with LoRA, all without),
    #: "all", a count ("8") or a share ("0.25"). The update starts from the hidden states the
    #: rollout computed below them, so fewer layers make it cheaper.
    trainable_layers: str = "auto"
    #: Entropy bonus coefficient, or "auto" ("auto_0.05": its start) to hold the mean per-state
    #: entropy at 0.3 of log K with SAC-discrete's temperature rule (choice mode, or generate
    #: mode with action_head: the entropy of each reply's decision token among the actions).
    ent_coef: float | str = 0.0
    #: With ent_coef="auto": which entropy it holds, "state" (the mean per-state entropy) or
    #: "marginal" (that of the mean action distribution over states: high for a policy that is
    #: certain in each state but answers by state, 0 for one that plays one action everywhere).
    target_entropy_of: str = "state"
    #: A floor on every listed action's probability in every state, held by a log-barrier in
    #: PPO's loss (choice mode, or generate mode with action_head); 0: off.
    min_action_prob: float = 0.0
    #: Coefficient of the KL penalty to the base model (adapter disabled).
    kl_coef: float = 0.0
    #: Stop an update's epochs early when the approximate KL exceeds this (None: never).
    target_kl: float | None = None
    #: Discount factor.
    gamma: float = 0.99
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
    #: Turns per forward/backward pass (gradient accumulation up to batch_size); none: as many
    #: as fit the update's memory budget.
    micro_batch_size: int | None = None
    #: Reply length in generate mode (None: the model's registry default).
    max_new_tokens: int | None = None
    #: Sampling temperature of the policy.
    temperature: float = 1.0
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
    #: Several processes, full fine-tuning (lora_r=0): shard the training state (weights the
    #: optimizer steps, gradients, moments) over them with FSDP; each keeps one whole copy of
    #: the weights. ``accelerate launch --use_fsdp`` turns it on too.
    fsdp: bool = False
    #: DQN: env steps held in the replay buffer.
    buffer_size: int = 1_000_000
    #: DQN: env steps of uniform exploration before the first update.
    learning_starts: int = 100
    #: DQN: env steps per env between updates.
    train_freq: int = 4
    #: DQN: gradient steps per update.
    gradient_steps: int = 1
    #: DQN: env steps between target-network copies.
    target_update_interval: int = 10_000
    #: DQN: share of the run over which epsilon falls from 1 to exploration_final_eps.
    exploration_fraction: float = 0.1
    #: DQN: the final epsilon of epsilon-uniform exploration.
    exploration_final_eps: float = 0.05
    #: DQN: rewards summed before bootstrapping (n-step returns; SB3 DQN's n_steps).
    dqn_n_steps: int = 1
    #: DQN: the posterior's temperature p_LM^beta exp(Q/alpha), in reward units.
    dqn_alpha: float = 0.01
    #: DQN: the prior's weight in the posterior (0: DQN on the LM's features; 1: the LM's
    #: choice distribution as the reference).
    dqn_beta: float = 0.0
    #: DQN: env steps between distillations of its posterior into the LoRA policy (0: none),
    #: so the LM plays well by itself (agent.policy).
    distill_interval: int = 0
    #: DQN: the LM's optimizer steps per distillation.
    distill_steps: int = 4
    #: DQN: with distillation on, the LM's steps of a last round on the final values.
    distill_final_steps: int = 32
    #: Chat-messages JSONL of demonstrations (``gym-llm demos``, gym_llm.experiments.demos.make_demos) to
    #: fine-tune on with SFT after the "before" evaluation and before PPO (None: no warm start).
    sft_demos: str | None = None
    #: Passes over the demonstrations in that SFT warm start.
    sft_epochs: float = 1.0
    #: AdamW learning rate of the SFT warm start (decayed linearly to 0 over its steps).
    sft_learning_rate: float = 1e-4

    def __post_init__(self) -> None:
        check_mode(self.mode)
        if self.algo not in ("ppo", "dqn"):
            raise ValueError(f"algo must be 'ppo' or 'dqn', got {self.algo!r}.")
        if self.algo == "dqn" and (not scores_listed_actions(self.mode) or self.lora_r == 0):
            raise ValueError(
                "algo='dqn' learns a value per listed action on the frozen model: it needs "
                "mode='choice' and LoRA (lora_r > 0)."
            )
        if self.algo == "dqn" and self.sft_demos is not None:
            raise ValueError("sft_demos warms up PPO's policy; algo='dqn' does not use it.")
        for name in ("timesteps", "n_envs", "n_steps", "batch_size", "n_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if self.eval_points < 0 or self.lora_r < 0 or self.eval_episodes < 0:
            raise ValueError("eval_points, eval_episodes and lora_r must be >= 0.")
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
        parse_trainable_layers(self.trainable_layers)  # a bad value fails here, not mid-run
        auto = parse_ent_coef(self.ent_coef)[1]
        if auto and self.algo != "ppo":
            raise ValueError("ent_coef='auto' holds an entropy target of PPO; DQN has none.")
        if self.min_action_prob and self.algo != "ppo":
            raise ValueError("min_action_prob is a term of PPO's loss; DQN has none.")
        check_floor(self.min_action_prob)
        among_listed = lists_a_choice(self.mode, bool(self.action_head))
        check_choice_among_listed(auto, self.min_action_prob > 0, among_listed)
        check_entropy_of(self.target_entropy_of, auto)
        check_estimator(self.advantage_estimator)
        check_mode_settings(
            self.mode,
            bool(self.choice_calibration),
            bool(self.action_head),
            self.action_prior_scale,
        )
        if self.checkpoint_every is not None and self.checkpoint_every < 0:
            raise ValueError(f"checkpoint_every must be >= 0, got {self.checkpoint_every}.")
        if self.keep_checkpoints < 1:
            raise ValueError(f"keep_checkpoints must be >= 1, got {self.keep_checkpoints}.")
        if self.eval_episodes == 0 and not exact_evaluation_supported(self.env, self.env_kwargs):
            raise ValueError(
                f"eval_episodes=0 needs an exact evaluation, which {self.env} does not have; "
                "give a number of Monte-Carlo episodes."
            )

    def policy_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "lora": {"r": self.lora_r, "lora_alpha": 2 * self.lora_r} if self.lora_r else None,
            "action_mode": self.mode,
            "temperature": self.temperature,
            "trainable_layers": parse_trainable_layers(self.trainable_layers),
            "value_lr_scale": self.value_lr_scale,
            "value_normalization": self.value_normalization,
            "action_head_lr_scale": self.action_head_lr_scale,
        }
        if self.action_prior_scale != 1.0:
            kwargs["action_prior_scale"] = self.action_prior_scale
        for name in ("choice_calibration", "action_head"):
            if getattr(self, name) is not None:
                kwargs[name] = getattr(self, name)
        if self.max_new_tokens is not None:
            kwargs["max_new_tokens"] = self.max_new_tokens
        return kwargs
