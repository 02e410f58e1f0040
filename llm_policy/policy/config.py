"""``PolicyConfig``: every setting of :class:`gym_llm.LLMPolicy`, one documented field each.

``policy_kwargs={"lora": {"r": 8}}`` and ``policy_kwargs={"config": PolicyConfig(lora={"r": 8})}``
build the same policy: keyword arguments replace fields. Why each default is what it is, with the
measurements, is in ``docs/guides/training.md`` and ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from gym_llm.configs import RUNTIME_ONLY
from gym_llm.policy.arguments import (
    ActionMode,
    Normalization,
    ReplyConstraintMode,
    check_mode,
    check_mode_settings,
    check_reply_constraint,
)
from gym_llm.policy.param_groups import check_lr_scale
from gym_llm.policy.prompts import check_max_prompt_tokens
from gym_llm.policy.top_layers import TrainableLayers, parse_trainable_layers
from gym_llm.policy.trunk_cache import DEFAULT_TRUNK_CACHE_MB


@dataclass
class PolicyConfig:
    """The settings of :class:`gym_llm.LLMPolicy` (its spaces come from the env)."""

    # --- the model ------------------------------------------------------------------------------
    #: A registry name or path, or a loaded Hugging Face causal LM object (then ``tokenizer`` is
    #: required, and ``save`` records the model's ``name_or_path``, refusing when it has none).
    model: str | Any = "smollm2-135m"
    #: The tokenizer of a ``model`` object (ignored for names and paths).
    tokenizer: Any = field(default=None, metadata=RUNTIME_ONLY)
    #: Model weights' dtype (``None``: bf16 on a GPU, fp32 on the CPU).
    dtype: str | None = None
    #: LoRA: ``"default"`` (the model's registry settings), a dict of ``peft.LoraConfig`` fields
    #: overriding them, or a ``LoraConfig``; ``None`` fine-tunes every weight.
    lora: dict[str, Any] | Any | None = "default"
    #: How many top decoder layers train: an ``int``, a share in ``(0, 1)``, ``None`` (all);
    #: ``"auto"``: the top quarter with LoRA, all without.
    trainable_layers: TrainableLayers = "auto"
    #: Trade compute for memory in the update.
    gradient_checkpointing: bool = False

    # --- prompts --------------------------------------------------------------------------------
    #: Observations may be whole conversations: a JSON list of ``{"role", "content"}`` turns,
    #: rendered by the model's chat template (a plain string is still one user turn).
    conversation: bool = False
    #: Text before the env's instruction in the system message.
    system_prompt: str | None = None
    #: The most prompt tokens a turn may take (``None``: no limit); longer prompts are fitted
    #: the same way in rollouts and updates (oldest exchanges dropped, then the middle cut).
    max_prompt_tokens: int | None = None

    # --- acting ---------------------------------------------------------------------------------
    #: ``"choice"`` (the default where the env lists its actions: each scored as a continuation
    #: of the prompt) or ``"generate"`` (the reply written token by token).
    action_mode: ActionMode | None = None
    #: Sampling temperature: over tokens in generate mode, over action scores in choice mode.
    temperature: float = 1.0
    #: Generate mode: the reply budget (``None``: the registry's, else 24).
    max_new_tokens: int | None = None
    #: Generate mode: ``"action"`` decodes each reply under a mask of the tokens that continue
    #: one of the listed actions' spellings, so every reply is a valid action (the update
    #: applies the same mask: PPO's ratios stay exact); ``"off"``: the model writes any text;
    #: ``"pattern"``: each reply matches ``reply_pattern``; ``"auto"``: ``"pattern"`` where
    #: ``reply_pattern`` is given, else ``"action"`` where the env lists its actions, else
    #: ``"pattern"`` where the env declares a pattern, else ``"off"``.
    reply_constraint: ReplyConstraintMode = "auto"
    #: Generate mode: a regular expression every reply must match in full (a number in a range,
    #: a word of five letters: :mod:`gym_llm.grammar`); ``None``: the env's own, if its
    #: ``TextActions`` declares one.
    reply_pattern: str | None = None
    #: Choice mode: an action's score is the ``"sum"`` of its token log-probs or their ``"mean"``.
    choice_normalization: Normalization = "sum"
    #: Choice mode: subtract each action's score after the content-free observation ``"N/A"``
    #: (Zhao et al. 2021), fixed at construction and saved; ``None``: on in choice mode.
    choice_calibration: bool | None = None
    #: A zero-initialised linear map of the last prompt token's features at the first
    #: trainable layer, added to the action logits (in generate mode at each action's word
    #: tokens); ``None``: on where the replies choose from one fixed list (choice mode, or
    #: constrained replies) and the layers below the trainable ones are frozen.
    action_head: bool | None = None
    #: Generate mode with the action head: the share of the LM's own odds among the listed
    #: actions each reply token keeps, in ``[0, 1]`` (0: the head alone picks the action).
    action_prior_scale: float = 1.0

    # --- the critic and the learning rates ------------------------------------------------------
    #: The critic reads the action head's centred features; ``None``: on with ``action_head``.
    centred_critic: bool | None = None
    #: The critic learns returns in units of their running mean and std.
    value_normalization: bool = False
    #: The value head's learning rate as a multiple of the policy's.
    value_lr_scale: float = 1.0
    #: The action head's learning rate as a multiple of the policy's.
    action_head_lr_scale: float = 1.0
    #: SB3's: the optimizer (saved by its import path).
    optimizer_class: type[torch.optim.Optimizer] = field(
        default=torch.optim.AdamW, metadata=RUNTIME_ONLY
    )
    #: SB3's: the optimizer's keyword arguments.
    optimizer_kwargs: dict[str, Any] | None = None

    # --- speed: the same numbers either way -----------------------------------------------------
    #: Encode the prompt part every observation shares once and reuse its KV cache.
    share_prefix: bool = True
    #: Generate mode: decode into a KV cache allocated once with room for the reply.
    reserve_kv_cache: bool = True
    #: On the CPU, rollouts run the frozen linear weights packed once for oneDNN.
    pack_frozen_weights: bool = True
    #: Keep each rollout's states at the first trainable layer and run only the trainable
    #: layers in the update.
    reuse_rollout_states: bool = True
    #: Choice mode: score each distinct observation once per weights version in rollouts.
    memoize_choice_scores: bool = True
    #: Choice mode with frozen layers below: keep each distinct prompt's frozen-layer output for
    #: the run, up to this many MB (shared by policies on the same named model; 0: off).
    trunk_cache_mb: float = DEFAULT_TRUNK_CACHE_MB

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}.")
        check_max_prompt_tokens(self.max_prompt_tokens)
        self.trainable_layers = parse_trainable_layers(self.trainable_layers)  # "8" from a file
        self.value_lr_scale = check_lr_scale("value_lr_scale", self.value_lr_scale)
        self.action_head_lr_scale = check_lr_scale(
            "action_head_lr_scale", self.action_head_lr_scale
        )

    def named_mode(self) -> str:
        """The action mode, which a run must name (only a policy built on an env can ask the
        env), checked with the settings that belong to one mode."""
        if self.action_mode is None:
            raise ValueError("policy.action_mode: a run names its mode, 'choice' or 'generate'.")
        check_mode(self.action_mode)
        check_reply_constraint(self.reply_constraint, self.action_mode)
        check_mode_settings(
            self.action_mode,
            bool(self.choice_calibration),
            bool(self.action_head),
            self.action_prior_scale,
            constrained=self.reply_constraint != "off",  # "auto": the policy checks its env's
        )
        return self.action_mode
