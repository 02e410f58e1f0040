"""``LLMPolicy``: a causal LM (+ LoRA) as an SB3 actor-critic policy over text.

The policy acts on batches of observation strings and returns replies together with *exact*
log-probabilities of what it sampled, so PPO's importance ratio is computed on the same numbers the
sampler used. Two action modes share one network:

* ``choice``: every valid action string (listed by :class:`gym_llm.spaces.TextActions`) is scored
  as a continuation of the prompt; the prompt is run once and its KV cache shared by all
  candidates. The action distribution is ``softmax(score / temperature)`` where the score is the
  sum (or per-token mean) of the candidate's token log-probs.
* ``generate``: free text is sampled token by token from ``softmax(logits / temperature)`` (no
  top-k/top-p, whose truncation the stored log-probs would not account for); sampled token ids and
  their log-probs are kept as sampled, never decoded and re-tokenised.

The critic is a linear head (:mod:`~gym_llm.policy.value_head`) on the last prompt token's final
hidden state. The class is built in layers, one module each, every layer using only those below it:
:mod:`~gym_llm.policy.encoding` (prompts, the shared prefix's KV cache, the prompt pass),
:mod:`~gym_llm.policy.scoring` (action distributions for rollouts),
:mod:`~gym_llm.policy.update` (re-evaluation with gradients), and this module (construction and
the SB3 policy interface).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from gym_llm.policy.action_head import ActionHead, check_prior_scale, choice_extras
from gym_llm.policy.action_words import action_words
from gym_llm.policy.adapters import enable_gradient_checkpointing, make_trainable, name_or_path
from gym_llm.policy.arguments import check_arguments, lists_a_choice, resolve_mode
from gym_llm.policy.models import MODEL_REGISTRY, float32_logits, load_model
from gym_llm.policy.outputs import Evaluation, PolicyStep, UpdateWork
from gym_llm.policy.param_groups import check_lr_scale, param_groups
from gym_llm.policy.scoring import (
    CONTENT_FREE_OBSERVATION,
    ActionMode,
    Normalization,
)
from gym_llm.policy.top_layers import TopLayers, TrainableLayers, top_layers_supported
from gym_llm.policy.trunk_cache import DEFAULT_TRUNK_CACHE_MB
from gym_llm.policy.update import UpdatePasses
from gym_llm.policy.value_head import ValueHead
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


class LLMPolicy(UpdatePasses):
    """Actor-critic policy over text built from the spaces plus ``policy_kwargs``.

    Args:
        observation_space: a ``gymnasium.spaces.Text`` (its ``instruction``, if any, is the
            system prompt).
        action_space: a ``gymnasium.spaces.Text``; a :class:`TextActions` listing actions enables
            choice mode.
        lr_schedule: SB3 learning-rate schedule.
        model: registry name or path; or a loaded Hugging Face causal LM object (then
            ``tokenizer`` is required, and ``PPO.save`` records the model's ``name_or_path`` so
            ``load`` can rebuild it, refusing when it has none).
        tokenizer: the tokenizer of a ``model`` object (ignored for names and paths).
        conversation: observations may be whole conversations: a JSON list of
            ``{"role", "content"}`` user/assistant turns, rendered after the system message by
            the model's chat template (:func:`gym_llm.policy.prompts.build_conversation`); a plain
            string is still one user turn.
        lora: LoRA settings: ``"default"`` (the model's registry settings: r=16, alpha 32, the
            attention and MLP projections), a dict of ``peft.LoraConfig`` fields overriding
            them, or a ``LoraConfig``; ``None`` fine-tunes all weights (full fine-tuning: a
            several times slower update and optimizer state for every weight).
        action_mode: ``"choice"`` (default when actions are listed) or ``"generate"``.
        max_new_tokens: reply budget in generate mode (default: the registry's, else 24).
        temperature: sampling temperature (generate: over tokens; choice: over action scores).
        system_prompt: text put before the env's instruction in the system message.
        choice_normalization: ``"sum"`` of candidate token log-probs, or per-token ``"mean"``.
        dtype: model weights dtype (``None``: bf16 on GPU, fp32 on CPU).
        gradient_checkpointing: trade compute for memory in the update.
        share_prefix: encode the prompt part every observation shares (system message,
            instruction) once and reuse its KV cache: per policy version in rollouts, per
            micro-batch (with gradients) in training. Results are the same either way.
        reserve_kv_cache: in generate mode, decode into a KV cache allocated once with room for
            the reply (:class:`gym_llm.policy.kv_cache.ReservedCache`) instead of growing it with
            ``torch.cat`` every token. Results are the same either way.
        pack_frozen_weights: on the CPU, run rollouts (no-gradient passes) through oneDNN with
            the frozen linear weights packed once (:mod:`gym_llm.policy.packed_linear`) instead of
            MKL re-packing them every call; costs one more copy of those weights in memory.
            Log-probs agree with the update's recomputation to float32 rounding. No effect on
            GPUs or on trainable weights.
        trainable_layers: how many of the top decoder layers train (LoRA on those layers;
            without LoRA, their weights and the final norm), besides the value head: an ``int``
            counts layers, a ``float`` in ``(0, 1)`` is a share of them, ``None`` trains all.
            ``"auto"`` (default): the top quarter with LoRA (8 of SmolLM2-135M's 30), all
            without. The layers below stay as pretrained, so the update can start where they
            end (``reuse_rollout_states``), which makes it several times cheaper.
        reuse_rollout_states: with ``trainable_layers``, keep from each rollout the hidden
            states entering the first trainable layer and run only the trainable layers in the
            update (:mod:`gym_llm.policy.top_layers`): the same numbers as recomputing the whole model
            (the frozen layers' inputs and weights are the same), for a fraction of the work.
            Costs ``new positions x hidden_size x 4`` bytes per stored turn.
        value_lr_scale: the value head's learning rate as a multiple of the policy's (a separate
            optimizer parameter group; PPO's learning-rate schedule scales both).
        value_normalization: the critic learns returns in units of their running mean and std
            (as MAPPO, :mod:`gym_llm.policy.value_head`), for returns far from the reward's size
            (-1 per move), which a zero-started head needs thousands of steps to reach.
        action_head_lr_scale: the action head's learning rate as a multiple of the policy's
            (Adam moves the zero-initialised head by about its rate per step, so this sets how
            many updates it needs to tell the states apart).
        choice_calibration: choice mode: subtract from each action's score its score after the
            content-free observation ``"N/A"`` (Zhao et al. 2021), so that the start policy is
            not the LM's prior over the action strings (untrained SmolLM2 samples Blackjack's
            ``hit`` 0.4% of the time). Fixed at construction, part of the policy (log-probs stay
            exact), saved with the agent. ``None`` (default): on in choice mode.
        action_head: choice mode: add to the action logits a zero-initialised linear map of the
            last prompt token's hidden state at the first trainable layer's input, centred and
            scaled over the first rollout's observations (:mod:`gym_llm.policy.action_head`):
            what tells states apart, which the LoRA gradient barely moves (99 % shared).
            ``None`` (default): on in choice mode when layers below the trainable ones are
            frozen (the default ``trainable_layers``; with the calibration, it learned the task
            family's tuning split where the plain policy learned none of it). In generate mode
            (off unless ``True``; the env must list its actions) its scores are added to the
            logits of each action's word tokens at every reply position
            (:mod:`gym_llm.policy.action_words`).
        action_prior_scale: generate mode with the action head: how much of the LM's own
            preference among the listed actions each reply token keeps, in ``[0, 1]``. 1 (the
            default) keeps all of it; 0 keeps none: every position gives the actions even odds
            before the head's scores, so the LM still words the reply and decides where it names
            an action, and the head alone decides which. For tasks whose rule contradicts what
            the model knows, where the policy is otherwise certain of the wrong word from the
            start (``docs/training.md``).
        centred_critic: the critic reads the head's centred features too (its raw input is
            99.9 % the same in every state); ``None``: on with ``action_head``.
        max_prompt_tokens: the most prompt tokens a turn may take (``None``: no limit). Longer
            prompts are fitted, the same way in rollouts and updates (a function of the
            observation): a conversation drops its oldest exchanges, keeping the first
            observation (rules) and the latest; what is still too long keeps its head and tail
            with a cut mark. Counted in :attr:`truncated_prompts`.
        memoize_choice_scores: in choice-mode rollouts, score each distinct observation once
            per weights version and sample every turn afresh from those scores (envs revisit
            observations constantly); the numbers are the same either way.
        trunk_cache_mb: with ``trainable_layers`` in choice mode, keep each distinct prompt's
            frozen-layer output (the first trainable layer's input) for the whole run, up to
            this many MB (least recently used out first; ``0``: off), so that a revisited
            observation costs only the trainable layers in rollouts, evaluation and the update
            (:mod:`gym_llm.policy.trunk`). Policies on the same named model in one process
            share it. The numbers are the same either way.
        device: where the model lives (set by PPO).
        optimizer_class: SB3's: the optimizer (AdamW), saved by its import path.
        optimizer_kwargs: SB3's: the optimizer's keyword arguments.
    """

    def __init__(
        self,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        lr_schedule: Callable[[float], float],
        *,
        model: str | Any = "smollm2-135m",
        tokenizer: Any = None,
        conversation: bool = False,
        lora: dict[str, Any] | Any | None = "default",
        action_mode: ActionMode | None = None,
        max_new_tokens: int | None = None,
        temperature: float = 1.0,
        system_prompt: str | None = None,
        choice_normalization: Normalization = "sum",
        dtype: str | None = None,
        gradient_checkpointing: bool = False,
        share_prefix: bool = True,
        reserve_kv_cache: bool = True,
        pack_frozen_weights: bool = True,
        trainable_layers: TrainableLayers = "auto",
        reuse_rollout_states: bool = True,
        memoize_choice_scores: bool = True,
        trunk_cache_mb: float = DEFAULT_TRUNK_CACHE_MB,
        max_prompt_tokens: int | None = None,
        value_lr_scale: float = 1.0,
        value_normalization: bool = False,
        action_head_lr_scale: float = 1.0,
        choice_calibration: bool | None = None,
        action_head: bool | None = None,
        centred_critic: bool | None = None,
        action_prior_scale: float = 1.0,
        device: torch.device | str = "auto",
        optimizer_class: type[torch.optim.Optimizer] = torch.optim.AdamW,
        optimizer_kwargs: dict[str, Any] | None = None,
    ) -> None:
        check_arguments(observation_space, action_space, model, tokenizer, temperature)
        super().__init__(
            observation_space,
            action_space,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
        )
        listed = action_space.actions if isinstance(action_space, TextActions) else None
        self.per_state = bool(getattr(action_space, "per_state", False))
        choices = bool(listed) or self.per_state
        self.action_mode = resolve_mode(action_mode, choices, choice_normalization)
        name = model if isinstance(model, str) else name_or_path(model)
        spec = MODEL_REGISTRY.get(name.lower())
        self.model_name = name
        # A ConversationWrapper's space says its observations are conversations.
        self.conversation = conversation or bool(getattr(observation_space, "conversation", False))
        if max_prompt_tokens is not None and max_prompt_tokens < 16:
            raise ValueError(f"max_prompt_tokens must be >= 16 (or None), got {max_prompt_tokens}.")
        self.max_prompt_tokens = max_prompt_tokens
        #: Prompts cut to ``max_prompt_tokens`` so far (distinct observations).
        self.truncated_prompts = 0
        self.actions_list = tuple(listed or ())
        self.max_new_tokens = max_new_tokens or (spec.max_new_tokens if spec else 24)
        self.temperature = float(temperature)
        self.system_prompt = system_prompt
        self.choice_normalization = choice_normalization

        if isinstance(model, str):
            lm, self.tokenizer = load_model(model, device=device, dtype=dtype)
        else:
            lm, self.tokenizer = model, tokenizer
            if str(device) != "auto":
                lm = lm.to(device)
        float32_logits(lm)  # exact log-probs in bf16 too (invariant 1)
        trainable = make_trainable(lm, lora, trainable_layers, spec)
        self.lora_settings = trainable.lora_settings
        self.trainable_layers = trainable.trainable_layers
        self.first_trainable_layer = trainable.first_trainable_layer
        self.lm = lm = trainable.lm
        self.uses_lora = self.lora_settings is not None
        if gradient_checkpointing:
            enable_gradient_checkpointing(lm, self.uses_lora)
        hidden = int(lm.config.get_text_config().hidden_size)
        self.value_head = ValueHead(hidden, lm.device, normalize=value_normalization)
        action_head, choice_calibration, self.centred_critic = choice_extras(
            self.action_mode,
            action_head,
            choice_calibration,
            centred_critic,
            frozen_below=bool(self.first_trainable_layer),
            per_state=self.per_state,
            listed=bool(listed),
        )
        self.action_head = (
            ActionHead(hidden, len(self.actions_list), device=lm.device) if action_head else None
        )
        generating = bool(action_head) and self.action_mode == "generate"
        check_prior_scale(action_prior_scale, generating)
        self.action_words = (
            action_words(self.tokenizer, self.actions_list, lm.device, action_prior_scale)
            if generating
            else None
        )

        self.stop_ids = self._stop_token_ids()
        self.gradient_checkpointing = gradient_checkpointing
        self.reuse_rollout_states = reuse_rollout_states
        self.memoize_choice_scores = memoize_choice_scores
        self.top = (
            TopLayers(lm, self.first_trainable_layer)
            if self.first_trainable_layer and top_layers_supported(lm)
            else None
        )
        self._memo = {}
        self._memo_version = None
        self._memo_bytes = 0
        self._states_wanted = True
        self._prompt_cache, self._prompt_cache_tokens = {}, 0
        self.share_prefix = share_prefix
        self.shared_prefix = self._find_shared_prefix() if share_prefix else []
        self.reserve_kv_cache = reserve_kv_cache
        self.pack_frozen_weights = pack_frozen_weights
        self._packed = None  # built on the first rollout with packing on
        self._prefix_kv = None
        self._prefix_version = None
        fixed = self.action_mode == "choice" and not self.per_state
        self._candidates = self._tokenize_candidates() if fixed else None
        self._in_group, self._candidate_sets = False, {}
        # What decides the frozen layers' output, for a cache shared by policies on this model.
        frozen = (name.lower(), str(lm.dtype), str(lm.device), self.first_trainable_layer)
        frozen_identity = (*frozen, pack_frozen_weights) if isinstance(model, str) else None
        self._init_trunk(trunk_cache_mb, frozen_identity)
        self._reference_mode = False
        self.update_work = UpdateWork()
        self.value_lr_scale = check_lr_scale("value_lr_scale", value_lr_scale)
        self.action_head_lr_scale = check_lr_scale("action_head_lr_scale", action_head_lr_scale)
        self.optimizer = self.optimizer_class(  # type: ignore[call-arg]
            self._param_groups(lr_schedule(1)), lr=lr_schedule(1), **self.optimizer_kwargs
        )
        self.choice_calibration = None  # content_free_scores scores without one
        if choice_calibration:
            self.choice_calibration = self.content_free_scores()

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

    @property
    def scores_listed_actions(self) -> bool:
        """Whether each step comes with a distribution over the listed actions (choice mode):
        what exact per-state entropies, a target update, shared update rows and a Q head need.
        Callers ask this instead of reading the action mode."""
        return self.action_mode == "choice"

    @property
    def chooses_among_listed(self) -> bool:
        """Whether the policy's decision is a choice among listed actions it can hold an entropy
        or a floor on: choice mode, or generate mode with the action head's action words."""
        return lists_a_choice(self.action_mode, self.action_words is not None)

    def act(self, observations: Sequence[str], deterministic: bool = False) -> PolicyStep:
        """Replies for a batch of observations, with exact log-probs and values (one LM batch)."""
        with self.rollout_kernels():
            return self._act(observations, deterministic)

    def _act(self, observations: Sequence[str], deterministic: bool) -> PolicyStep:
        if self._splits():  # per-state action lists: one pass per list (state_actions.py)
            return self._act_in_groups(observations, self._act, deterministic)
        if self.action_mode == "choice":
            logits, values, states = self._remembered_choice_scores(observations)
            dist = torch.distributions.Categorical(logits=logits)
            chosen = logits.argmax(-1) if deterministic else dist.sample()
            lps = dist.log_prob(chosen).float().cpu().numpy()
            indices = chosen.cpu().numpy()
            return PolicyStep(
                replies=[self._choice_replies[int(i)] for i in indices],
                actions=[np.array([int(i)], dtype=np.int64) for i in indices],
                token_log_probs=[np.array([lp], dtype=np.float32) for lp in lps],
                values=values,
                states=states,
                action_probs=dist.probs.float().cpu().numpy(),
            )
        actions, token_lps, values, states = self._generate(observations, deterministic)
        return PolicyStep(
            replies=[self.reply(a) for a in actions],
            actions=actions,
            token_log_probs=token_lps,
            values=values,
            states=states,
        )

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
        with torch.inference_mode(), self._without_states():
            step = self.act(batch, deterministic=deterministic)
        replies = np.array(step.replies, dtype=object)
        return (replies[0] if single else replies), state

    def predict_values(self, observations: Sequence[str]) -> torch.Tensor:
        """Critic values ``(n,)`` (no candidates, no generation: just the prompt pass)."""
        with self.rollout_kernels(), self._without_states():
            return self._prompt_pass(observations)[1]
