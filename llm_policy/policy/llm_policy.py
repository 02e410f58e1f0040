"""``LLMPolicy``: a causal LM (+ LoRA) as an SB3 actor-critic policy over text.

The policy acts on batches of observation strings and returns replies together with *exact*
log-probabilities of what it sampled, so PPO's importance ratio is computed on the same numbers the
sampler used. It is built from parts, each setting its own state:

* a prompt builder (:class:`~gym_llm.policy.prompts.PromptBuilder`): observation or conversation
  -> token ids, fitted, with the prefix every prompt shares;
* the LM runner (:class:`~gym_llm.policy.lm.LMRunner`): batched passes, the shared prefix's KV
  cache, packed frozen weights, the reference model, the states an update starts from;
* the heads: the critic (:mod:`~gym_llm.policy.value_head`, on the last prompt token) and the
  action head (:mod:`~gym_llm.policy.action_head`);
* one strategy per action mode, :attr:`LLMPolicy.actions`, with ``sample()`` for rollouts and
  ``evaluate()`` for updates: :class:`~gym_llm.policy.choice.ChoiceActions` (every listed action
  scored as a continuation of the prompt) or :class:`~gym_llm.policy.generate.GeneratedActions`
  (free text sampled token by token).

Nothing outside ``policy/`` needs to know the mode: it asks :attr:`LLMPolicy.scores_listed_actions`
or :attr:`LLMPolicy.chooses_among_listed`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from torch.distributed.fsdp import FSDPModule

from gym_llm.configs import with_settings
from gym_llm.policy.action_head import ActionHead, check_prior_scale, choice_extras
from gym_llm.policy.action_words import action_words, has_own_words
from gym_llm.policy.adapters import enable_gradient_checkpointing, make_trainable, name_or_path
from gym_llm.policy.arguments import (
    ActionMode,
    Normalization,
    Sampling,
    check_arguments,
    lists_a_choice,
    resolve_mode,
    resolve_reply_constraint,
)
from gym_llm.policy.choice import CONTENT_FREE_OBSERVATION, ChoiceActions
from gym_llm.policy.config import PolicyConfig
from gym_llm.policy.constraints import ReplyConstraint
from gym_llm.policy.generate import GeneratedActions, decode
from gym_llm.policy.lm import LMRunner
from gym_llm.policy.models import MODEL_REGISTRY, float32_logits, load_model
from gym_llm.policy.outputs import Evaluation, PolicyStep, UpdateWork
from gym_llm.policy.param_groups import param_groups
from gym_llm.policy.prompts import PromptBuilder
from gym_llm.policy.top_layers import (
    TopLayers,
    TurnStates,
    num_layers,
    top_layers_supported,
)
from gym_llm.policy.trunk_cache import TrunkCache
from gym_llm.policy.value_head import ValueHead
from gym_llm.replies import Reply
from gym_llm.spaces import TextActions, as_text_batch

__all__ = [
    "CONTENT_FREE_OBSERVATION",
    "ActionMode",
    "Evaluation",
    "LLMPolicy",
    "Normalization",
    "PolicyStep",
    "UpdateWork",
]


class LLMPolicy(BasePolicy):
    """Actor-critic policy over text, built from the spaces plus its settings.

    ``LLMPolicy(observation_space, action_space, lr_schedule, config=None, **settings)``: the
    settings are :class:`PolicyConfig`'s fields, given as a config, as keyword arguments
    replacing its fields (``policy_kwargs`` of PPO and DQN), or both. The observation space's
    ``instruction`` is the system prompt; an action space that lists actions
    (:class:`~gym_llm.spaces.TextActions`) enables choice mode. ``device`` is set by PPO.
    """

    def __init__(
        self,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        lr_schedule: Callable[[float], float],
        config: PolicyConfig | None = None,
        *,
        device: torch.device | str = "auto",
        **settings: Any,
    ) -> None:
        config = with_settings(PolicyConfig, config, settings, "LLMPolicy")
        model, tokenizer = config.model, config.tokenizer
        check_arguments(observation_space, action_space, model, tokenizer, config.temperature)
        super().__init__(
            observation_space,
            action_space,
            optimizer_class=config.optimizer_class,
            optimizer_kwargs=config.optimizer_kwargs,
        )
        listed = action_space.actions if isinstance(action_space, TextActions) else None
        #: Each observation brings its own actions (``TextActions(per_state=True)``).
        self.per_state = bool(getattr(action_space, "per_state", False))
        choices = bool(listed) or self.per_state
        self.action_mode = resolve_mode(config.action_mode, choices, config.choice_normalization)
        #: The constraint in effect on generate mode's replies, ``"action"`` or ``"off"``.
        #: The pattern generate mode's replies match (``reply_constraint == "pattern"``).
        self.reply_pattern = config.reply_pattern or getattr(action_space, "pattern", None)
        self.reply_constraint = resolve_reply_constraint(
            config.reply_constraint,
            self.action_mode,
            choices,
            self.reply_pattern,
            user_pattern=config.reply_pattern is not None,
        )
        name = model if isinstance(model, str) else name_or_path(model)
        spec = MODEL_REGISTRY.get(name.lower())
        self.model_name = name
        # A ConversationWrapper's space says its observations are conversations.
        conversation = config.conversation or bool(
            getattr(observation_space, "conversation", False)
        )
        #: The env's listed actions (empty: free text; per state: each observation's own).
        self.actions_list = tuple(listed or ())

        tokenizer = self._load_lm(config, spec, device)
        lm = self.lm
        hidden = int(lm.config.get_text_config().hidden_size)
        self.value_head = ValueHead(hidden, lm.device, normalize=config.value_normalization)
        action_head, choice_calibration, self.centred_critic = choice_extras(
            self.action_mode,
            config.action_head,
            config.choice_calibration,
            config.centred_critic,
            frozen_below=bool(self.first_trainable_layer),
            per_state=self.per_state,
            listed=bool(listed),
            constrained=self.reply_constraint == "action",
            own_words=self._own_words(config, tokenizer),
        )
        self.action_head = (
            ActionHead(hidden, len(self.actions_list), device=lm.device) if action_head else None
        )
        generating = bool(action_head) and self.action_mode == "generate"
        check_prior_scale(config.action_prior_scale, generating)
        words = (
            action_words(tokenizer, self.actions_list, lm.device, config.action_prior_scale)
            if generating
            else None
        )

        #: Observation -> prompt token ids.
        self.prompts = PromptBuilder(
            tokenizer,
            observation_space,
            action_space,
            system_prompt=config.system_prompt,
            conversation=conversation,
            max_prompt_tokens=config.max_prompt_tokens,
        )
        top = (
            TopLayers(lm, self.first_trainable_layer)
            if self.first_trainable_layer and top_layers_supported(lm)
            else None
        )
        #: Batched passes of the LM and the caches that make them cheap.
        self.runner = LMRunner(
            lm,
            self.prompts,
            self.value_head,
            self.action_head,
            first_trainable_layer=self.first_trainable_layer,
            centred_critic=self.centred_critic,
            gradient_checkpointing=config.gradient_checkpointing,
            reuse_rollout_states=config.reuse_rollout_states,
            pack_frozen_weights=config.pack_frozen_weights,
            top=top,
        )
        self.share_prefix = config.share_prefix
        if config.share_prefix:
            self.prompts.find_shared_prefix()
        self.trunk_cache_mb = float(config.trunk_cache_mb)
        #: The action mode's strategy: what the policy samples and how it re-evaluates it.
        self.actions = self._strategy(config, spec, words)
        self.value_lr_scale = config.value_lr_scale
        self.action_head_lr_scale = config.action_head_lr_scale
        self.optimizer = self.optimizer_class(  # type: ignore[call-arg]
            self._param_groups(lr_schedule(1)), lr=lr_schedule(1), **self.optimizer_kwargs
        )
        if choice_calibration and isinstance(self.actions, GeneratedActions):
            self.actions.calibrate(CONTENT_FREE_OBSERVATION)  # constrained replies
            self.invalidate_prefix_cache()
        elif choice_calibration:
            self.choice_calibration = self.content_free_scores()

    def _load_lm(self, config: PolicyConfig, spec: Any, device: torch.device | str) -> Any:
        """The LM with its trainable part (LoRA or the top layers) set up; returns the
        tokenizer (the model object's, or the one loaded with the named model)."""
        model, tokenizer = config.model, config.tokenizer
        if isinstance(model, str):
            lm, tokenizer = load_model(model, device=device, dtype=config.dtype)
        elif str(device) != "auto":
            lm = model.to(device)
        else:
            lm = model
        float32_logits(lm)  # exact log-probs in bf16 too (invariant 1)
        trainable = make_trainable(lm, config.lora, config.trainable_layers, spec)
        self.lora_settings = trainable.lora_settings
        self.trainable_layers = trainable.trainable_layers
        self.first_trainable_layer = trainable.first_trainable_layer
        self.lm = trainable.lm
        self.uses_lora = self.lora_settings is not None
        if config.gradient_checkpointing:
            enable_gradient_checkpointing(self.lm, self.uses_lora)
        return tokenizer

    def _own_words(self, config: PolicyConfig, tokenizer: Any) -> bool:
        """Whether the generate-mode head could be on by default: every listed action has a
        word token of its own (only asked where the default decides)."""
        asked = config.action_head is None and self.reply_constraint == "action"
        return not asked or has_own_words(tokenizer, self.actions_list)

    def _strategy(
        self, config: PolicyConfig, spec: Any, words: Any
    ) -> ChoiceActions | GeneratedActions:
        """The action mode's part, sharing the sampling settings with the policy."""
        #: Temperature and the modes' decoding settings, shared with the strategy.
        self.sampling = Sampling(
            temperature=float(config.temperature),
            max_new_tokens=config.max_new_tokens or (spec.max_new_tokens if spec else 24),
            reserve_kv_cache=config.reserve_kv_cache,
            memoize_choice_scores=config.memoize_choice_scores,
            choice_normalization=config.choice_normalization,
        )
        if self.action_mode == "choice":
            choice = ChoiceActions(
                self.runner,
                self.actions_list,
                per_state=self.per_state,
                sampling=self.sampling,
                action_head=self.action_head,
            )
            # What decides the frozen layers' output, for a cache shared by policies on it.
            lm = self.lm
            frozen = (self.model_name.lower(), str(lm.dtype), str(lm.device))
            identity = (
                (*frozen, self.first_trainable_layer, config.pack_frozen_weights)
                if isinstance(config.model, str)
                else None
            )
            choice.use_trunk(config.trunk_cache_mb, identity)
            return choice
        tokenizer = self.prompts.tokenizer
        constraint = (
            ReplyConstraint(
                tokenizer,
                tokenizer.eos_token_id,
                self.actions_list,
                self.per_state,
                self.reply_pattern if self.reply_constraint == "pattern" else None,
                budget=self.sampling.max_new_tokens,
            )
            if self.reply_constraint != "off"
            else None
        )
        return GeneratedActions(
            self.runner,
            self.actions_list,
            sampling=self.sampling,
            stop_ids=self.prompts.stop_token_ids(self.lm),
            action_head=self.action_head,
            action_words=words,
            constraint=constraint,
        )

    # --- the parts, as users and the learners read them ----------------------------------------

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer over the trainable weights and the heads (its parameters are what the
        caches' weights version follows)."""
        return self._optimizer

    @optimizer.setter
    def optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        self._optimizer = optimizer
        self.runner.track(optimizer)

    @property
    def device(self) -> torch.device:
        return self.runner.device

    @property
    def tokenizer(self) -> Any:
        return self.prompts.tokenizer

    @property
    def conversation(self) -> bool:
        """Observations may be whole conversations (JSON lists of user/assistant turns)."""
        return self.prompts.conversation

    @property
    def system_prompt(self) -> str | None:
        return self.prompts.system_prompt

    @property
    def max_prompt_tokens(self) -> int | None:
        return self.prompts.max_prompt_tokens

    @property
    def truncated_prompts(self) -> int:
        """Prompts cut to ``max_prompt_tokens`` so far (distinct observations)."""
        return self.prompts.truncated_prompts

    @property
    def shared_prefix(self) -> list[int]:
        """Token ids every prompt starts with (``[]``: none found, or ``share_prefix=False``)."""
        return self.prompts.shared_prefix

    def prompt_text(self, observation: str) -> str:
        """The exact prompt the model sees for ``observation``."""
        return self.prompts.prompt_text(observation)

    def prompt_ids(self, observation: str) -> list[int]:
        """Token ids of the prompt, memoised."""
        return self.prompts.prompt_ids(observation)

    @property
    def temperature(self) -> float:
        return self.sampling.temperature

    @temperature.setter
    def temperature(self, value: float) -> None:
        self.sampling.temperature = float(value)

    @property
    def max_new_tokens(self) -> int:
        return self.sampling.max_new_tokens

    @max_new_tokens.setter
    def max_new_tokens(self, value: int) -> None:
        self.sampling.max_new_tokens = int(value)

    @property
    def reserve_kv_cache(self) -> bool:
        return self.sampling.reserve_kv_cache

    @reserve_kv_cache.setter
    def reserve_kv_cache(self, value: bool) -> None:
        self.sampling.reserve_kv_cache = bool(value)

    @property
    def memoize_choice_scores(self) -> bool:
        return self.sampling.memoize_choice_scores

    @memoize_choice_scores.setter
    def memoize_choice_scores(self, value: bool) -> None:
        self.sampling.memoize_choice_scores = bool(value)

    @property
    def choice_normalization(self) -> str:
        return self.sampling.choice_normalization

    @property
    def gradient_checkpointing(self) -> bool:
        return self.runner.gradient_checkpointing

    @property
    def reuse_rollout_states(self) -> bool:
        return self.runner.reuse_rollout_states

    @reuse_rollout_states.setter
    def reuse_rollout_states(self, value: bool) -> None:
        self.runner.reuse_rollout_states = bool(value)

    @property
    def pack_frozen_weights(self) -> bool:
        return self.runner.pack_frozen_weights

    @pack_frozen_weights.setter
    def pack_frozen_weights(self, value: bool) -> None:
        self.runner.pack_frozen_weights = bool(value)

    @property
    def top(self) -> TopLayers | None:
        """The trainable layers as a model of their own, where the update can start there."""
        return self.runner.top

    @property
    def uses_rollout_states(self) -> bool:
        """Whether rollouts keep states and the update starts at the first trainable layer."""
        return self.runner.uses_rollout_states

    @property
    def update_work(self) -> UpdateWork:
        """Running count of what the update computed (benchmarks read and reset it)."""
        return self.runner.update_work

    @property
    def packed_weight_bytes(self) -> int:
        """Memory the packed frozen weights in use hold (0 with packing off)."""
        return self.runner.packed_weight_bytes

    @property
    def action_words(self) -> Any:
        """Generate mode with the action head: the tokens its scores are added to (else ``None``)."""
        return self.actions.action_words if isinstance(self.actions, GeneratedActions) else None

    @property
    def stop_ids(self) -> list[int]:
        """Generate mode: the tokens that end a reply."""
        if isinstance(self.actions, GeneratedActions):
            return self.actions.stop_ids
        return self.prompts.stop_token_ids(self.lm)

    @property
    def choice_calibration(self) -> torch.Tensor | None:
        """Choice mode: each action's score under a content-free prompt, subtracted from its
        score (``None``: off)."""
        return self.actions.calibration if isinstance(self.actions, ChoiceActions) else None

    @choice_calibration.setter
    def choice_calibration(self, calibration: torch.Tensor | None) -> None:
        if not isinstance(self.actions, ChoiceActions):
            if calibration is None:
                return
            raise ValueError("choice_calibration is choice mode's (scores of listed actions).")
        self.actions.calibration = calibration

    @property
    def calibrated(self) -> bool:
        """Whether the choice among the listed actions is calibrated (choice mode's constants,
        or constrained replies' per-token ones, both from the content-free observation)."""
        if isinstance(self.actions, GeneratedActions):
            return self.actions.calibrated
        return self.choice_calibration is not None

    @property
    def trunk_cache(self) -> TrunkCache | None:
        """Choice mode with frozen layers below: each distinct prompt's frozen-layer output."""
        trunk = self.actions.trunk if isinstance(self.actions, ChoiceActions) else None
        return trunk.cache if trunk is not None else None

    @property
    def uses_trunk_cache(self) -> bool:
        """Whether choice-mode passes without gradients start from cached frozen-layer states."""
        return isinstance(self.actions, ChoiceActions) and self.actions.uses_trunk_cache

    @property
    def scores_listed_actions(self) -> bool:
        """Whether each step comes with a distribution over the listed actions (choice mode):
        what exact per-state entropies, a target update, shared update rows and a Q head need.
        Callers ask this instead of reading the action mode."""
        return isinstance(self.actions, ChoiceActions)

    @property
    def listed_replies(self) -> list[Reply]:
        """Choice mode over one list: the reply sent for each listed action, in the list's order
        (what a learner that picks the action itself sends, e.g. PPO's behaviour floor)."""
        if not isinstance(self.actions, ChoiceActions) or self.per_state:
            raise ValueError("listed_replies needs choice mode over one fixed list of actions.")
        return list(self.actions.replies)

    @property
    def chooses_among_listed(self) -> bool:
        """Whether the policy's decision is a choice among listed actions it can hold an entropy
        or a floor on: choice mode, or generate mode with the action head's action words."""
        return lists_a_choice(self.action_mode, self.action_words is not None)

    def _param_groups(self, lr: float) -> list[dict[str, Any]]:
        """The LM's weights, the action head and the value head, each at its own rate."""
        heads = self.value_head, self.action_head
        scales = self.value_lr_scale, self.action_head_lr_scale
        return param_groups(self.parameters(), *heads, lr, *scales)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            model=self.model_name,
            conversation=self.conversation,
            reserve_kv_cache=self.reserve_kv_cache,
            pack_frozen_weights=self.pack_frozen_weights,
            action_mode=self.action_mode,
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            system_prompt=self.system_prompt,
            choice_normalization=self.choice_normalization,
            share_prefix=self.share_prefix,
            trainable_layers=self.trainable_layers,
            reuse_rollout_states=self.reuse_rollout_states,
            memoize_choice_scores=self.memoize_choice_scores,
            trunk_cache_mb=self.trunk_cache_mb,
            max_prompt_tokens=self.max_prompt_tokens,
            action_head=self.action_head is not None,
            centred_critic=self.centred_critic,
            value_normalization=self.value_head.normalize,
            choice_calibration=self.choice_calibration is not None,
            action_prior_scale=self.action_words.prior_scale if self.action_words else 1.0,
        )
        return data

    # --- acting ---------------------------------------------------------------------------------

    def act(self, observations: Sequence[str], deterministic: bool = False) -> PolicyStep:
        """Replies for a batch of observations, with exact log-probs and values (one LM batch)."""
        with self.runner.rollout_kernels():
            return self.actions.sample(observations, deterministic)

    def forward(self, obs: Any, deterministic: bool = False) -> PolicyStep:
        return self.act(list(obs), deterministic)

    def _predict(self, observation: Any, deterministic: bool = False) -> torch.Tensor:
        raise NotImplementedError("LLMPolicy returns strings; use predict().")

    def predict(  # type: ignore[override]
        self,
        observation: str | Sequence[str] | np.ndarray,
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """Replies (``dtype=object`` array of str) for one observation string or a batch."""
        batch, single = as_text_batch(observation)
        self.set_training_mode(False)
        with torch.inference_mode(), self.runner.without_states():
            step = self.act(batch, deterministic=deterministic)
        replies = np.array(step.replies, dtype=object)
        return (replies[0] if single else replies), state

    def predict_values(self, observations: Sequence[str]) -> torch.Tensor:
        """Critic values ``(n,)`` (no candidates, no generation: just the prompt pass)."""
        with self.runner.rollout_kernels(), self.runner.without_states():
            return self.runner.prompt_pass(observations)[1]

    def decode(self, token_ids: np.ndarray) -> str:
        """Reply text from sampled ids (stop tokens dropped)."""
        return decode(self.tokenizer, self.stop_ids, token_ids)

    def reply(self, token_ids: np.ndarray) -> Reply:
        """The reply sent to the env for sampled ids (generate mode)."""
        assert isinstance(self.actions, GeneratedActions), "choice mode sends listed actions"
        return self.actions.reply(token_ids)

    # --- choice mode's scores ------------------------------------------------------------------

    def _choice(self, what: str) -> ChoiceActions:
        if not isinstance(self.actions, ChoiceActions) or self.actions.candidates is None:
            raise ValueError(
                f"{what} needs choice mode (action_mode='choice'): the env must list its actions."
            )
        return self.actions

    def prior_choice_scores(self, observations: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(n, K)`` log-probs of the listed actions as the policy starts (the LM with its
        adapter off, the calibration as set, no action head) and ``(n, d)`` features: the last
        prompt token's hidden state where the action head reads it, the first trainable layer's
        input. Neither depends on anything training changes, so a caller may keep them per
        observation for a whole run: off-policy value learning (``gym_llm.DQN``) acts on the
        first and regresses action values from the second."""
        choice = self._choice("prior_choice_scores")
        if not self.uses_lora:
            raise ValueError(
                "prior_choice_scores needs LoRA: the prior is the model with its adapter off, "
                "and lora=None trains the base weights themselves."
            )
        return choice.prior_scores(observations)

    def content_free_scores(self) -> torch.Tensor:
        """Each action's score after the content-free observation ``"N/A"`` ("Calibrate Before
        Use", Zhao et al. 2021): the model's prior over the action strings, which calibration
        divides out of the policy."""
        scores = self._choice("content_free_scores").content_free_scores()
        self.invalidate_prefix_cache()
        return scores

    def trunk_states(self, observations: Sequence[str]) -> list[TurnStates]:
        """Each observation's frozen-layer states (prompt and candidates), from the trunk cache
        or computed once for the prompts it does not hold."""
        choice = self._choice("trunk_states")
        assert choice.trunk is not None, "the trunk cache is off"
        prompts = [self.prompts.prompt_ids(str(o)) for o in observations]
        return choice.trunk.states(prompts, choice.candidates)

    def calibrate_action_head(self, observations: Sequence[str]) -> bool:
        """Set the action head's centre and scale from these observations, once, before its first
        step (its weights are zero: no logit moves). Whether it calibrated now."""
        head = self.action_head
        if head is None or head.is_calibrated:
            return False
        if self.centred_critic and bool(self.value_head.weight.detach().any()):
            raise RuntimeError(  # centring its input now would change its values
                "The critic has trained already: calibrate before the first update (PPO does)."
            )
        distinct = list(dict.fromkeys(str(o) for o in observations))
        runner = self.runner
        with torch.no_grad(), runner.rollout_kernels(), runner.without_states():
            features = torch.cat(
                [runner.prompt_pass(distinct[i : i + 32])[5] for i in range(0, len(distinct), 32)]
            )
        head.calibrate(features)
        return True

    # --- the update -----------------------------------------------------------------------------

    def evaluate_actions(
        self,
        observations: Sequence[str],
        actions: Sequence[np.ndarray],
        states: Sequence[TurnStates | None] | None = None,
    ) -> Evaluation:
        """Log-probs (per action token), entropy and values of stored actions, with gradients.

        ``states`` (from the rollout's :attr:`PolicyStep.states`) let the pass start at the first
        trainable layer (:mod:`gym_llm.policy.top_layers`); without them the whole model runs.
        Both give the same numbers to float rounding.
        """
        return self.actions.evaluate(observations, actions, states)

    def reference_log_probs(
        self,
        observations: Sequence[str],
        actions: Sequence[np.ndarray],
        states: Sequence[TurnStates | None] | None = None,
    ) -> torch.Tensor:
        """Log-probs under the reference model: the same weights with the LoRA adapter off."""
        if not self.uses_lora:
            raise ValueError(
                "A KL penalty to the reference model needs LoRA (lora=None trains all weights)."
            )
        with torch.no_grad(), self.runner.reference():
            return self.evaluate_actions(observations, actions, states).token_log_probs

    def update_bytes_per_turn(
        self, observations: Sequence[str], actions: Sequence[np.ndarray]
    ) -> int:
        """A generous estimate of the memory one turn of the largest kind in this batch holds
        during the update's forward and backward pass (activations kept for the backward, the
        attention weights, and the logits at the scored positions), for choosing micro-batches.

        Per layer run and token, a Llama-style block keeps about ``10 d + 5 ffn`` values for
        its backward (norm inputs, q/k/v, attention output, MLP gate/up/activation), plus
        ``heads x context`` attention weights; per layer and turn, the keys and values over the
        whole context, once as cached and once repeated to every query head. Only the trainable
        layers count when the update starts from the rollout's states (:attr:`uses_rollout_states`).
        """
        config = self.lm.config.get_text_config()
        total = num_layers(self.lm)
        layers = total - self.first_trainable_layer if self.uses_rollout_states else total
        prompts = [len(self.prompts.prompt_ids(str(o))) for o in observations]
        prefix = len(self.shared_prefix)
        extra, scored = self.actions.scored_tokens(actions)
        new_tokens = max(prompts) - prefix + max(len(a) for a in actions) + extra
        d = int(config.hidden_size)
        ffn = int(getattr(config, "intermediate_size", 4 * d))
        heads = int(config.num_attention_heads)
        kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(config, "head_dim", None) or d // heads)
        context = max(prompts) + max(len(a) for a in actions)
        per_token_layer = 10 * d + 5 * ffn + heads * context
        # Keys and values over the whole context (the shared prefix's too) in every layer run:
        # the cache's, and their copies repeated to every query head (measured on SmolLM2: a
        # third of a Blackjack turn's update memory).
        per_layer = 2 * (heads + kv_heads) * head_dim * context
        element = torch.finfo(self.lm.dtype).bits // 8
        logits = scored * int(config.vocab_size) * 4 * 3  # fp32 logits, log-softmax, gradient
        return int((new_tokens * per_token_layer + per_layer) * layers * element + logits)

    def set_training_mode(self, mode: bool) -> None:
        if mode:
            self.invalidate_prefix_cache()  # the weights are about to change
        super().set_training_mode(mode)

    def invalidate_prefix_cache(self) -> None:
        """Forget what was computed with the current weights (the prefix KV cache, remembered
        choice scores). Never needed for correctness (both follow the weights' version); it
        frees their memory."""
        self.runner.invalidate()
        if isinstance(self.actions, ChoiceActions):
            self.actions.forget()

    # --- what training changes, saved and loaded ------------------------------------------------

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """Only what training changes (LoRA + value head, or everything without LoRA), plus the
        action head's centre and scale (set from the first rollout)."""
        state = {
            name: p.detach().cpu().clone() for name, p in self.named_parameters() if p.requires_grad
        }
        state.update(self._head_buffers())
        return state

    def _head_buffers(self) -> dict[str, torch.Tensor]:
        return {
            name: b.detach().cpu().clone()
            for name, b in self.named_buffers()
            if name.startswith(("action_head.", "value_head."))
        }

    def load_trainable_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if isinstance(self.lm, FSDPModule):  # the gathered copy would be dropped at the update
            raise ValueError(
                "This policy's weights are sharded (FSDP, since its first learn()); load saved "
                "weights into a freshly built agent (PPO.load) before learning."
            )
        params: dict[str, torch.Tensor] = dict(self.named_parameters())
        params.update(
            (n, b) for n, b in self.named_buffers() if n.startswith(("action_head.", "value_head."))
        )
        missing = [name for name, p in params.items() if p.requires_grad and name not in state]
        missing += [name for name in self._head_buffers() if name not in state]
        unknown = [name for name in state if name not in params]
        if missing or unknown:
            raise ValueError(
                f"Saved weights do not match this policy (missing {missing[:3]}, unknown "
                f"{unknown[:3]}): was it saved with another model or LoRA config?"
            )
        with torch.no_grad():
            for name, tensor in state.items():
                params[name].copy_(tensor.to(params[name].device, params[name].dtype))
        self.invalidate_prefix_cache()
