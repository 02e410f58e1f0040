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

The critic is ``Linear(hidden, 1)`` on the last prompt token's final hidden state.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from torch import nn

from gym_llm.policy.kv_cache import ReservedCache
from gym_llm.policy.models import MODEL_REGISTRY, float32_logits, load_model
from gym_llm.policy.packed_linear import PackedLinears
from gym_llm.policy.prompts import build_conversation, build_messages, render_prompt
from gym_llm.policy.top_layers import (
    TopLayers,
    TrainableLayers,
    TurnStates,
    num_layers,
    pad_states,
    resolve_trainable_layers,
    top_layers_supported,
)
from gym_llm.spaces import TextActions

ActionMode = Literal["choice", "generate"]

#: LoraConfig fields a saved agent records when they differ from peft's defaults.
_LORA_FIELDS = (
    "layers_to_transform",
    "layers_pattern",
    "rank_pattern",
    "alpha_pattern",
    "modules_to_save",
    "use_rslora",
    "use_dora",
    "init_lora_weights",
    "fan_in_fan_out",
)
#: Shorter shared prefixes are not worth a separate pass.
_MIN_SHARED_PREFIX = 8
#: Distinct observations whose choice scores a rollout remembers (see _remembered_choice_scores),
#: and the most memory their stored states may take (the rollout buffer shares those tensors).
_MEMO_LIMIT = 4096
_MEMO_MAX_BYTES = 512 * 2**20
Normalization = Literal["sum", "mean"]


#: The observation whose action scores calibration subtracts ("Calibrate Before Use").
CONTENT_FREE_OBSERVATION = "N/A"


@dataclass
class PolicyStep:
    """What one batched policy call produced, per env."""

    #: The reply text sent to each env.
    replies: list[str]
    #: Choice mode: ``[index]``; generate mode: the sampled token ids (EOS included if sampled).
    actions: list[np.ndarray]
    #: Log-prob of each action token as sampled (choice mode: one value, the action's log-prob).
    token_log_probs: list[np.ndarray]
    #: Critic values, shape ``(n,)``.
    values: torch.Tensor
    #: Per env, the first trainable layer's inputs the update reuses (``None``: it recomputes).
    states: list[TurnStates] | None = None
    #: Choice mode: each env's whole action distribution ``(n, K)`` (for diagnostics).
    action_probs: np.ndarray | None = None


@dataclass
class UpdateWork:
    """What the update's passes computed (only passes with gradients), for FLOP counts.

    ``token_layers`` are real token positions times the decoder layers they went through
    (padding excluded; the shared prefix once per pass; one row per distinct observation in
    choice mode when the update starts from stored states), ``head_rows`` the positions the LM
    head scored, ``tokens`` the positions that reached a trainable layer (weight gradients).
    """

    token_layers: int = 0
    head_rows: int = 0
    tokens: int = 0


@dataclass
class Evaluation:
    """Differentiable re-evaluation of stored actions, for the PPO loss."""

    #: ``(n, T)`` log-prob of each action token (padded with 0 where ``mask`` is False).
    token_log_probs: torch.Tensor
    #: ``(n, T)`` which entries are real action tokens.
    mask: torch.Tensor
    #: ``(n,)`` entropy of the action distribution (generate: mean per-token entropy).
    entropy: torch.Tensor
    #: ``(n,)`` critic values.
    values: torch.Tensor


def _default_lora(target_modules: Sequence[str] | str) -> dict[str, Any]:
    # lora_dropout=0: dropout would make training-time log-probs differ from rollout log-probs.
    return {
        "r": 16,
        "lora_alpha": 32,
        "lora_dropout": 0.0,
        "target_modules": list(target_modules)
        if not isinstance(target_modules, str)
        else target_modules,
        "bias": "none",
        "task_type": "CAUSAL_LM",
    }


def _sample(log_probs: torch.Tensor) -> torch.Tensor:
    """One token per row from ``exp(log_probs)`` by inverting the CDF with one uniform per row.

    Exact sampling from the categorical (the cumulative sum is float64, so even tokens of mass
    1e-12 get their share), and cheaper than ``torch.multinomial``, which draws one exponential
    per vocabulary entry: for 8 rows x 49k tokens on the 2-core CPU it was measured on, 4.2-4.9 ms
    (0.7 ms when the allocator reuses its buffers instead of page-faulting new ones) against
    9.6-9.9 ms.
    """
    cdf = log_probs.exp().cumsum(-1, dtype=torch.float64)
    u = torch.rand((cdf.shape[0], 1), dtype=cdf.dtype, device=cdf.device) * cdf[:, -1:]
    # The first index whose cumulative mass exceeds u; a zero-mass token is never the first.
    token = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    return token.clamp(max=cdf.shape[-1] - 1)


def _lora_dict(config: Any) -> dict[str, Any]:
    """A ``peft.LoraConfig`` as the dict that rebuilds it (sets as sorted lists), JSON-able."""
    from peft import LoraConfig

    defaults = LoraConfig().to_dict()
    out: dict[str, Any] = {}
    for key, value in config.to_dict().items():
        if isinstance(value, set):
            value = sorted(value)
        if key in ("r", "lora_alpha", "lora_dropout", "target_modules", "bias", "task_type") or (
            value != defaults.get(key) and key in _LORA_FIELDS
        ):
            out[key] = value
    return out


def _linear_names(lm: nn.Module) -> list[str]:
    """The linear layers of a decoder block, by name (what peft's "all-linear" picks there; a
    list, because peft cannot restrict "all-linear" to some layers)."""
    from gym_llm.policy.top_layers import decoder_of

    block = decoder_of(lm).layers[0]
    return sorted(
        {name.split(".")[-1] for name, m in block.named_modules() if type(m) is nn.Linear}
    )


def _freeze_below(lm: nn.Module, start: int) -> None:
    """Full fine-tuning of the top layers only: everything but layers ``start..`` and the final
    norm is frozen (the embeddings too, which a tied LM head shares)."""
    from gym_llm.policy.top_layers import decoder_of

    decoder = decoder_of(lm)
    for param in lm.parameters():
        param.requires_grad_(False)
    for module in [*decoder.layers[start:], decoder.norm]:
        for param in module.parameters():
            param.requires_grad_(True)


def _name_or_path(model: Any) -> str:
    """The hub id or path a model object was loaded from ("" for one built in memory)."""
    name = getattr(model, "name_or_path", None) or getattr(
        getattr(model, "config", None), "_name_or_path", None
    )
    return str(name or "")


class LLMPolicy(BasePolicy):
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
            the model's chat template (:func:`gym_llm.prompts.build_conversation`); a plain
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
            the reply (:class:`gym_llm.kv_cache.ReservedCache`) instead of growing it with
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
        choice_calibration: choice mode: subtract from each action's score its score after the
            content-free observation ``"N/A"`` (Zhao et al. 2021), so that the start policy is
            not the LM's prior over the action strings (untrained SmolLM2 samples Blackjack's
            ``hit`` 0.4% of the time). Fixed at construction, part of the policy (log-probs stay
            exact), saved with the agent.
        memoize_choice_scores: in choice-mode rollouts, score each distinct observation once
            per weights version and sample every turn afresh from those scores (envs revisit
            observations constantly); the numbers are the same either way.
        device: where the model lives (set by PPO).
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
        value_lr_scale: float = 1.0,
        choice_calibration: bool = False,
        device: torch.device | str = "auto",
        optimizer_class: type[torch.optim.Optimizer] = torch.optim.AdamW,
        optimizer_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(observation_space, spaces.Text) or not isinstance(
            action_space, spaces.Text
        ):
            from gym_llm.spaces import NOT_TEXT_HELP

            raise TypeError(
                f"LLMPolicy got observation space {observation_space} and action space "
                f"{action_space}. " + NOT_TEXT_HELP
            )
        if not isinstance(model, str):
            if not hasattr(model, "config") or not callable(model):
                raise TypeError(
                    "policy_kwargs['model'] must be a registry name, a path or a Hugging Face "
                    f"causal LM object; got {type(model).__name__}, which is not a model object "
                    "(it has no .config or is not callable)."
                )
            if tokenizer is None:
                raise ValueError(
                    "LLMPolicy(model=<model object>) needs its tokenizer too: pass tokenizer=..."
                )
        super().__init__(
            observation_space,
            action_space,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
        )
        listed = action_space.actions if isinstance(action_space, TextActions) else None
        if action_mode is None:
            action_mode = "choice" if listed else "generate"
        if action_mode not in ("choice", "generate"):
            raise ValueError(f"action_mode must be 'choice' or 'generate', got {action_mode!r}.")
        if action_mode == "choice" and not listed:
            raise ValueError(
                "action_mode='choice' needs an action space that lists the valid actions "
                "(gym_llm.spaces.TextActions with actions=...); use action_mode='generate'."
            )
        if choice_normalization not in ("sum", "mean"):
            raise ValueError(
                f"choice_normalization must be 'sum' or 'mean', got {choice_normalization!r}."
            )
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}.")
        name = model if isinstance(model, str) else _name_or_path(model)
        spec = MODEL_REGISTRY.get(name.lower())
        self.model_name = name
        self.conversation = conversation
        self.action_mode: ActionMode = action_mode
        self.actions_list: tuple[str, ...] = tuple(listed or ())
        self.max_new_tokens = max_new_tokens or (spec.max_new_tokens if spec else 24)
        self.temperature = float(temperature)
        self.system_prompt = system_prompt
        self.choice_normalization: Normalization = choice_normalization

        if isinstance(model, str):
            lm, self.tokenizer = load_model(model, device=device, dtype=dtype)
        else:
            lm, self.tokenizer = model, tokenizer
            if str(device) != "auto":
                lm = lm.to(device)
        float32_logits(lm)  # exact log-probs in bf16 too (invariant 1)
        total_layers = num_layers(lm)
        if isinstance(lora, str):
            if lora != "default":
                raise ValueError(
                    f"lora must be 'default', a dict of LoraConfig fields, a LoraConfig or None "
                    f"(full fine-tuning); got {lora!r}."
                )
            lora = {}
        if isinstance(lora, dict):
            from peft import LoraConfig

            targets = spec.lora_target_modules if spec else _linear_names(lm)
            lora = LoraConfig(**{**_default_lora(targets), **lora})
        #: The LoRA settings in effect, as a JSON-able dict (``None``: full fine-tuning), before
        #: ``trainable_layers`` restricts them to some layers; what ``PPO.save`` records.
        self.lora_settings: dict[str, Any] | None = _lora_dict(lora) if lora is not None else None
        own_layers = lora is not None and lora.layers_to_transform is not None
        if own_layers and trainable_layers == "auto":
            trainable_layers = None  # the caller chose LoRA's layers; nothing to resolve
        #: How many top layers train (``None``: all), as resolved from the argument.
        self.trainable_layers = resolve_trainable_layers(
            trainable_layers, total_layers, uses_lora=lora is not None
        )
        #: Index of the first decoder layer that trains (0: all of them).
        self.first_trainable_layer = total_layers - (self.trainable_layers or total_layers)
        if lora is not None:
            from peft import get_peft_model

            if self.first_trainable_layer:
                if own_layers:
                    raise ValueError(
                        "Give either trainable_layers or LoRA's layers_to_transform, not both: "
                        f"got trainable_layers={trainable_layers!r} and layers_to_transform="
                        f"{lora.layers_to_transform} (pass trainable_layers=None to keep yours)."
                    )
                lora = copy.copy(lora)  # the caller's config object stays as it was
                lora.layers_to_transform = list(range(self.first_trainable_layer, total_layers))
            lm = get_peft_model(lm, lora)
        elif self.first_trainable_layer:
            _freeze_below(lm, self.first_trainable_layer)
        if gradient_checkpointing:
            # transformers 5 renamed it; the old name still works but warns.
            if hasattr(lm, "activation_checkpointing_enable"):
                lm.activation_checkpointing_enable({"use_reentrant": False})
            else:
                lm.gradient_checkpointing_enable(
                    gradient_checkpointing_kwargs={"use_reentrant": False}
                )
            if lora is not None:
                lm.enable_input_require_grads()
        self.lm = lm
        self.uses_lora = lora is not None
        hidden = int(lm.config.get_text_config().hidden_size)
        self.value_head = nn.Linear(hidden, 1, device=lm.device, dtype=torch.float32)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

        self.stop_ids = self._stop_token_ids()
        self.gradient_checkpointing = gradient_checkpointing
        self.reuse_rollout_states = reuse_rollout_states
        self.memoize_choice_scores = memoize_choice_scores
        #: The trainable layers as a model of their own, where the update can start there.
        self.top: TopLayers | None = (
            TopLayers(lm, self.first_trainable_layer)
            if self.first_trainable_layer and top_layers_supported(lm)
            else None
        )
        self._prefix_states: torch.Tensor | None = None
        #: Choice mode: observation -> (action logits, value, states) under the current weights.
        self._memo: dict[str, tuple[torch.Tensor, torch.Tensor, TurnStates | None]] = {}
        self._memo_version: tuple[tuple[int, float], float, str, float | None] | None = None
        self._memo_bytes = 0
        self._states_wanted = True
        self._prompt_cache: dict[str, list[int]] = {}
        #: Token ids every prompt starts with, encoded once and shared (see _prefix_cache).
        self.share_prefix = share_prefix
        self.shared_prefix: list[int] = self._find_shared_prefix() if share_prefix else []
        self.reserve_kv_cache = reserve_kv_cache
        self.pack_frozen_weights = pack_frozen_weights
        #: Built on the first rollout with packing on, and kept if packing is switched off.
        self._packed: PackedLinears | None = None
        self._prefix_kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self._prefix_version: tuple[int, float] | None = None
        self._candidates = self._tokenize_candidates() if self.action_mode == "choice" else None
        self._reference_mode = False
        #: Running count of what the update computed (benchmarks read and reset it).
        self.update_work = UpdateWork()
        if value_lr_scale <= 0:
            raise ValueError(f"value_lr_scale must be > 0, got {value_lr_scale}.")
        self.value_lr_scale = float(value_lr_scale)
        self.optimizer = self.optimizer_class(  # type: ignore[call-arg]
            self._param_groups(lr_schedule(1)), lr=lr_schedule(1), **self.optimizer_kwargs
        )
        #: Choice mode: each action's score under a content-free prompt, subtracted from its
        #: score (a constant of the parameterisation, fixed at construction; saved with agents).
        self.choice_calibration: torch.Tensor | None = None
        if choice_calibration:
            if self.action_mode != "choice":
                raise ValueError(
                    "choice_calibration needs choice mode (the env must list actions)."
                )
            self.choice_calibration = self.content_free_scores()

    def content_free_scores(self) -> torch.Tensor:
        """Each action's score (sum or mean of its token log-probs) after the content-free
        observation ``"N/A"`` ("Calibrate Before Use", Zhao et al. 2021): the model's prior
        over the action strings, which calibration divides out of the policy."""
        calibration, self.choice_calibration = self.choice_calibration, None
        try:
            with torch.no_grad(), self._without_states():
                logits, _, _ = self._choice_scores([CONTENT_FREE_OBSERVATION])
        finally:
            self.choice_calibration = calibration
        self.invalidate_prefix_cache()
        return (logits[0] * self.temperature).detach()

    # --- construction helpers ------------------------------------------------------------------

    def _param_groups(self, lr: float) -> list[dict[str, Any]]:
        """The policy's trainable weights, then the value head with its own learning rate
        (``lr_scale``: PPO's schedule multiplies it; TWOSOME and RAGEN train the critic 10-30x
        faster than the policy)."""
        value = [p for p in self.value_head.parameters() if p.requires_grad]
        ids = {id(p) for p in value}
        policy = [p for p in self.parameters() if p.requires_grad and id(p) not in ids]
        groups: list[dict[str, Any]] = [{"params": policy, "lr": lr, "lr_scale": 1.0}]
        scale = self.value_lr_scale
        groups.append({"params": value, "lr": lr * scale, "lr_scale": scale})
        return [g for g in groups if g["params"]]

    def _stop_token_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        configured = getattr(getattr(self.lm, "generation_config", None), "eos_token_id", None)
        if isinstance(configured, int):
            ids.add(configured)
        elif isinstance(configured, list | tuple):
            ids.update(configured)
        return sorted(i for i in ids if i is not None)

    def _tokenize_candidates(self) -> tuple[torch.Tensor, torch.Tensor]:
        encoded = [
            self.tokenizer(action, add_special_tokens=False)["input_ids"]
            for action in self.actions_list
        ]
        if any(len(ids) == 0 for ids in encoded):
            raise ValueError(f"Some actions tokenize to nothing: {self.actions_list!r}.")
        return self._pad(encoded, left=False)

    @property
    def device(self) -> torch.device:
        return torch.device(self.lm.device)

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
        )
        return data

    # --- prompts -------------------------------------------------------------------------------

    def prompt_text(self, observation: str) -> str:
        """The exact prompt the model sees for ``observation``."""
        build = build_conversation if self.conversation else build_messages
        messages = build(observation, self.observation_space, self.action_space, self.system_prompt)
        return render_prompt(self.tokenizer, messages)

    def prompt_ids(self, observation: str) -> list[int]:
        """Token ids of the prompt, memoised: envs revisit the same observations constantly."""
        ids = self._prompt_cache.get(observation)
        if ids is None:
            ids = self.tokenizer(self.prompt_text(observation), add_special_tokens=False)[
                "input_ids"
            ]
            if len(self._prompt_cache) > 100_000:
                self._prompt_cache.clear()
            self._prompt_cache[observation] = ids
        return ids

    def _find_shared_prefix(self) -> list[int]:
        """Token ids every prompt starts with (system message, instruction, chat scaffolding).

        Found as the common prefix of two prompts with different observations; each batch still
        checks that its prompts really start with it (BPE may merge across the boundary), so a
        wrong guess only costs speed, never correctness.
        """
        first, second = self.prompt_ids("0 a"), self.prompt_ids("1 b")
        length = 0
        for a, b in zip(first, second, strict=False):
            if a != b:
                break
            length += 1
        return list(first[:length]) if length >= _MIN_SHARED_PREFIX else []

    def _split_prefix(self, prompts: Sequence[list[int]]) -> int:
        """Length of the shared prefix usable for this batch (0: encode prompts whole)."""
        prefix = self.shared_prefix
        if not prefix or (self.training and self.gradient_checkpointing):
            # Checkpointed layers drop past_key_values, so training must not rely on a cache.
            return 0
        size = len(prefix)
        if all(len(p) > size and p[:size] == prefix for p in prompts):
            return size
        return 0

    def _prefix_cache(self, n: int, reserve: int | None = None) -> Any:
        """A KV cache holding the shared prefix for ``n`` rows (with ``reserve`` free positions
        after it in a :class:`ReservedCache` if given, else a ``DynamicCache``).

        Without gradients (rollouts, evaluation) the prefix is encoded once per
        :meth:`weights_version` and reused across steps. With gradients it is encoded once per
        micro-batch, and the gradients of every row flow back through that one pass.
        """
        from transformers import DynamicCache

        if torch.is_grad_enabled() or self._reference_mode:
            layers = self._encode_prefix()
        else:
            version = self.weights_version()
            if self._prefix_kv is None or version != self._prefix_version:
                self._prefix_kv, self._prefix_version = self._encode_prefix(), version
            layers = self._prefix_kv
        rows = [(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in layers]
        if reserve is not None:
            return ReservedCache(len(layers), reserve, initial=rows)
        return DynamicCache(ddp_cache_data=rows, config=self.lm.config)

    def _encode_prefix(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        ids = torch.tensor([self.shared_prefix], dtype=torch.long, device=self.device)
        out = self.lm(input_ids=ids, use_cache=True, logits_to_keep=1)
        return [(layer.keys, layer.values) for layer in out.past_key_values.layers]

    def invalidate_prefix_cache(self) -> None:
        """Forget what was computed with the current weights (the prefix KV cache, remembered
        choice scores). Never needed for correctness (both follow :meth:`weights_version`); it
        frees their memory."""
        self._prefix_kv = None
        self._forget_scores()

    def set_training_mode(self, mode: bool) -> None:
        if mode:
            self.invalidate_prefix_cache()  # the weights are about to change
        super().set_training_mode(mode)

    def _encode_prompts(
        self,
        observations: Sequence[str],
        extra: tuple[torch.Tensor, torch.Tensor] | None = None,
        reserve: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any, int]:
        """Inputs for one batched pass: (ids, full attention mask, position ids, cache, width).

        ``ids`` are the left-padded prompt suffixes (after the shared prefix, which lives in
        ``cache``), followed by ``extra`` columns if given (e.g. replies); the mask covers prefix,
        suffix and extra columns. ``width`` is the number of prompt columns in ``ids``, so the last
        prompt token is column ``width - 1``. Pads sit between prefix and suffix, masked out,
        with positions counting only real tokens. ``reserve``: the cache is a
        :class:`ReservedCache` with room for the prompt and ``reserve`` more tokens.
        """
        prompts = [self.prompt_ids(str(o)) for o in observations]
        size = self._split_prefix(prompts)
        ids, mask = self._pad([p[size:] for p in prompts], left=True)
        width = ids.shape[1]
        if extra is not None:
            ids, extra_mask = torch.cat([ids, extra[0]], -1), extra[1]
            mask = torch.cat([mask, extra_mask], -1)
        if size:
            ones = torch.ones((len(prompts), size), dtype=mask.dtype, device=self.device)
            mask = torch.cat([ones, mask], -1)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, size:]
        if size:
            # The prefix is the cache's first write, so its room must cover the prompt suffix too.
            room = None if reserve is None else ids.shape[1] + reserve
            cache = self._prefix_cache(len(prompts), room)
        elif reserve is not None:  # the prompt itself is the first write
            cache = ReservedCache(int(self.lm.config.get_text_config().num_hidden_layers), reserve)
        else:
            cache = None
        return ids, mask, positions, cache, width

    def _pad(
        self, seqs: Sequence[Sequence[int] | np.ndarray], *, left: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Token sequences as a padded ``(n, width)`` id matrix plus attention mask."""
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), int(self.tokenizer.pad_token_id), dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, seq in enumerate(seqs):
            cols = slice(width - len(seq), width) if left else slice(0, len(seq))
            ids[i, cols] = torch.as_tensor(np.asarray(seq, dtype=np.int64))
            mask[i, cols] = 1
        return ids.to(self.device), mask.to(self.device)

    # --- model passes --------------------------------------------------------------------------

    def _collects_states(self) -> bool:
        """Whether model calls now keep states for the update: rollouts (no gradients) of a
        policy whose update starts from them, outside evaluation."""
        return self.uses_rollout_states and self._states_wanted and not torch.is_grad_enabled()

    def _forget_scores(self) -> None:
        self._memo.clear()
        self._memo_bytes = 0

    def _capturing(self) -> contextlib.AbstractContextManager[list[torch.Tensor]]:
        """Collects the first trainable layer's inputs of the model calls inside (see
        :meth:`_collects_states`); elsewhere a no-op yielding an empty list."""
        if self.top is None or not self._collects_states():
            return contextlib.nullcontext([])
        return self.top.capture()

    def _prompt_pass(
        self, observations: Sequence[str], reserve: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, Any, torch.Tensor, list[TurnStates] | None]:
        """Run the prompts once: next-token logits, values, KV cache, the full mask and (when
        collected) each row's states for the update."""
        ids, mask, positions, cache, _ = self._encode_prompts(observations, reserve=reserve)
        with self._capturing() as captured:
            out = self.lm(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                output_hidden_states=True,
                logits_to_keep=1,
            )
        last_hidden = out.hidden_states[-1][:, -1].float()
        values = self.value_head(last_hidden).squeeze(-1)
        states = None
        if captured:
            offset, width = mask.shape[1] - ids.shape[1], ids.shape[1]
            lengths = mask[:, offset:].sum(-1).tolist()
            states = [
                TurnStates(captured[0][i, width - length :], offset)
                for i, length in enumerate(lengths)
            ]
        return out.logits[:, -1], values, out.past_key_values, mask, states

    def _choice_scores(
        self, observations: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor, list[TurnStates] | None]:
        """``(n, K)`` action logits (candidate scores / temperature), ``(n,)`` values and (when
        collected) each row's states for the update."""
        assert self._candidates is not None
        if self.training and self.gradient_checkpointing:
            return (*self._choice_scores_uncached(observations), None)
        cand_ids = self._candidates[0]
        logits, values, cache, mask, states = self._prompt_pass(observations)
        n, k, width = mask.shape[0], cand_ids.shape[0], cand_ids.shape[1]
        first = torch.log_softmax(logits.float(), dim=-1)  # (n, V) next-token dist
        # First candidate token: from the shared prompt pass.
        token_lp = first[:, cand_ids[:, 0]].unsqueeze(-1)  # (n, K, 1)
        if width > 1:
            cache.batch_repeat_interleave(k)
            full_mask, positions = self._follow_layout(mask)
            with self._capturing() as captured:
                out = self.lm(
                    input_ids=cand_ids[:, :-1].repeat(n, 1),  # all but each candidate's last
                    attention_mask=full_mask,
                    position_ids=positions,
                    past_key_values=cache,
                    use_cache=True,
                )
            token_lp = torch.cat([token_lp, self._follow_log_probs(out.logits, n)], dim=-1)
            if states is not None and captured:
                follow = captured[0].view(n, k, width - 1, -1)
                for i, turn in enumerate(states):
                    turn.action = follow[i]
        return self._scores(token_lp), values, states

    def _follow_layout(self, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention mask and positions for feeding every candidate's tokens but its last after
        each of ``n`` prompts (``mask``: the prompts' full mask), in ``n * K`` rows."""
        assert self._candidates is not None
        cand_mask = self._candidates[1]
        n, k, width = mask.shape[0], cand_mask.shape[0], cand_mask.shape[1]
        full = torch.cat([mask.repeat_interleave(k, 0), cand_mask[:, :-1].repeat(n, 1)], dim=-1)
        positions = mask.sum(-1).repeat_interleave(k).unsqueeze(-1) + torch.arange(
            width - 1, device=mask.device
        )
        return full, positions

    def _follow_log_probs(self, logits: torch.Tensor, n: int) -> torch.Tensor:
        """``(n, K, W-1)`` log-probs of candidate tokens 2..W from the follow pass's logits."""
        assert self._candidates is not None
        cand_ids = self._candidates[0]
        k, width = cand_ids.shape
        log_dist = torch.log_softmax(logits.float(), dim=-1)  # (n*K, W-1, V)
        targets = cand_ids[:, 1:].repeat(n, 1).unsqueeze(-1)
        return log_dist.gather(-1, targets).squeeze(-1).view(n, k, width - 1)

    def _scores(self, token_lp: torch.Tensor) -> torch.Tensor:
        """``(n, K, width)`` candidate token log-probs -> ``(n, K)`` action logits."""
        assert self._candidates is not None
        cand_mask = self._candidates[1]
        scores = (token_lp * cand_mask.unsqueeze(0)).sum(-1)
        if self.choice_normalization == "mean":
            scores = scores / cand_mask.sum(-1).unsqueeze(0)
        if self.choice_calibration is not None:
            scores = scores - self.choice_calibration.to(scores.device, scores.dtype)
        return scores / self.temperature

    def _choice_scores_uncached(
        self, observations: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Choice scores from whole (prompt + candidate) sequences, without any KV cache.

        K times the compute of the cached path; used where caches are unavailable (training with
        gradient checkpointing) and as the reference the cached path is tested against.
        """
        assert self._candidates is not None
        cand_ids, cand_mask = self._candidates
        ids, mask = self._pad([self.prompt_ids(str(o)) for o in observations], left=True)
        n, k, width = ids.shape[0], cand_ids.shape[0], cand_ids.shape[1]
        full_ids = torch.cat([ids.repeat_interleave(k, 0), cand_ids.repeat(n, 1)], -1)
        full_mask = torch.cat([mask.repeat_interleave(k, 0), cand_mask.repeat(n, 1)], -1)
        out = self.lm(
            input_ids=full_ids,
            attention_mask=full_mask,
            position_ids=(full_mask.cumsum(-1) - 1).clamp(min=0),
            output_hidden_states=True,
            logits_to_keep=width + 1,
        )
        log_dist = torch.log_softmax(out.logits[:, :-1].float(), dim=-1)
        token_lp = log_dist.gather(-1, cand_ids.repeat(n, 1).unsqueeze(-1)).squeeze(-1)
        last_prompt = out.hidden_states[-1][::k, ids.shape[1] - 1].float()
        values = self.value_head(last_prompt).squeeze(-1)
        return self._scores(token_lp.view(n, k, width)), values

    def _generate(
        self, observations: Sequence[str], deterministic: bool
    ) -> tuple[list[np.ndarray], list[np.ndarray], torch.Tensor, list[TurnStates] | None]:
        """Sample replies for all envs at once; a row leaves the decode batch at its stop token,
        so short replies do not pay for the longest one."""
        reserve = self.max_new_tokens if self.reserve_kv_cache else None
        logits, values, cache, mask, states = self._prompt_pass(observations, reserve)
        n = mask.shape[0]
        next_logits = logits
        stop = torch.tensor(self.stop_ids, device=self.device)
        rows = list(range(n))  # which original row each batch row is
        tokens: list[list[int]] = [[] for _ in range(n)]
        log_probs: list[list[float]] = [[] for _ in range(n)]
        fed: list[list[torch.Tensor]] = [[] for _ in range(n)]  # states of tokens fed back
        position = mask.sum(-1)
        for step in range(self.max_new_tokens):
            dist = torch.log_softmax(next_logits.float() / self.temperature, dim=-1)
            token = dist.argmax(-1) if deterministic else _sample(dist)
            chosen_lp = dist.gather(-1, token.unsqueeze(-1)).squeeze(-1)
            for row, tok, lp in zip(rows, token.tolist(), chosen_lp.tolist(), strict=True):
                tokens[row].append(tok)
                log_probs[row].append(lp)
            going = ~torch.isin(token, stop)
            if not bool(going.any()) or step == self.max_new_tokens - 1:
                break  # the last sampled tokens are never fed back: no logits are needed after them
            if not bool(going.all()):
                keep = going.nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                rows = [rows[i] for i in keep.tolist()]
                token, mask, position = token[keep], mask[keep], position[keep]
            ones = torch.ones((len(rows), 1), dtype=mask.dtype, device=self.device)
            mask = torch.cat([mask, ones], -1)
            with self._capturing() as captured:
                out = self.lm(
                    input_ids=token.unsqueeze(-1),
                    attention_mask=mask,
                    position_ids=position.unsqueeze(-1),
                    past_key_values=cache,
                    use_cache=True,
                )
            for row, hidden in zip(rows, captured[0] if captured else (), strict=False):
                fed[row].append(hidden)
            cache, next_logits, position = out.past_key_values, out.logits[:, -1], position + 1
        actions = [np.asarray(t, dtype=np.int64) for t in tokens]
        token_lps = [np.asarray(lp, dtype=np.float32) for lp in log_probs]
        if states is not None:
            for turn, hidden in zip(states, fed, strict=True):
                turn.action = torch.cat(hidden) if hidden else None
        return actions, token_lps, values, states

    def decode(self, token_ids: np.ndarray) -> str:
        """Reply text from sampled ids (stop tokens dropped)."""
        ids = [int(t) for t in token_ids if int(t) not in self.stop_ids]
        return str(self.tokenizer.decode(ids, skip_special_tokens=True)).strip()

    # --- the policy interface ------------------------------------------------------------------

    def rollout_kernels(self) -> contextlib.AbstractContextManager[None]:
        """The block inside which no-gradient passes use the packed frozen weights (if on)."""
        if not self.pack_frozen_weights:
            return contextlib.nullcontext()
        if self._packed is None:
            self._packed = PackedLinears(self.lm)
        return self._packed.active()

    @property
    def packed_weight_bytes(self) -> int:
        """Memory the packed frozen weights in use hold (0 with packing off)."""
        return self._packed.packed_bytes if self.pack_frozen_weights and self._packed else 0

    def act(self, observations: Sequence[str], deterministic: bool = False) -> PolicyStep:
        """Replies for a batch of observations, with exact log-probs and values (one LM batch)."""
        with self.rollout_kernels():
            return self._act(observations, deterministic)

    def _act(self, observations: Sequence[str], deterministic: bool) -> PolicyStep:
        if self.action_mode == "choice":
            logits, values, states = self._remembered_choice_scores(observations)
            dist = torch.distributions.Categorical(logits=logits)
            chosen = logits.argmax(-1) if deterministic else dist.sample()
            lps = dist.log_prob(chosen).float().cpu().numpy()
            indices = chosen.cpu().numpy()
            return PolicyStep(
                replies=[self.actions_list[int(i)] for i in indices],
                actions=[np.array([int(i)], dtype=np.int64) for i in indices],
                token_log_probs=[np.array([lp], dtype=np.float32) for lp in lps],
                values=values,
                states=states,
                action_probs=dist.probs.float().cpu().numpy(),
            )
        actions, token_lps, values, states = self._generate(observations, deterministic)
        return PolicyStep(
            replies=[self.decode(a) for a in actions],
            actions=actions,
            token_log_probs=token_lps,
            values=values,
            states=states,
        )

    def weights_version(self) -> tuple[int, float]:
        """Changes whenever a trainable weight does, so the caches computed with the old weights
        (the prefix KV cache, the remembered choice scores) are dropped by their owner, never by
        a caller who might forget.

        Version counters alone miss writes that bypass them (Hugging Face's Trainer, as used by
        SFT, updates weights without bumping them: measured; ``p.data`` writes too), so a
        fingerprint of the trainable tensors' values is part of it: their norms, in one fused
        call and one sync (the sum of sums would miss updates that cancel out)."""
        # The optimizer's parameters: what trains (found without walking the model's modules).
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        counters = sum(p._version for p in params)
        with torch.no_grad():
            norms = torch._foreach_norm([p.detach() for p in params])
            if not norms:
                return counters, 0.0
            stacked = torch.stack(norms).double()
            # Weighted by position, so two tensors trading norms still changes the sum.
            weights = torch.arange(1, len(norms) + 1, dtype=stacked.dtype, device=stacked.device)
            fingerprint = float((stacked * weights).sum())
        return counters, fingerprint

    def _scores_version(self) -> tuple[tuple[int, float], float, str, float | None]:
        """Changes whenever the choice scores could: a trainable weight (:meth:`weights_version`),
        the temperature, the normalisation or the calibration constants."""
        calibration = self.choice_calibration
        return (
            self.weights_version(),
            self.temperature,
            self.choice_normalization,
            None if calibration is None else float(calibration.double().sum()),
        )

    @contextlib.contextmanager
    def _without_states(self) -> Iterator[None]:
        """Calls inside keep no states (evaluation: nothing will be trained on them)."""
        wanted, self._states_wanted = self._states_wanted, False
        try:
            yield
        finally:
            self._states_wanted = wanted

    def _remembered_choice_scores(
        self, observations: Sequence[str]
    ) -> tuple[torch.Tensor, torch.Tensor, list[TurnStates] | None]:
        """:meth:`_choice_scores` with each distinct observation scored once per weights version.

        Envs revisit observations all the time (Blackjack has 280 states, KeywordBandit 4 per
        option set), and under the same weights a prompt's scores and value are the same numbers,
        so a rollout scores each distinct observation once and samples every turn afresh from
        them. The memory is forgotten whenever :meth:`_scores_version` changes (any trainable
        weight, the temperature, the normalisation, the calibration).
        """
        if not self.memoize_choice_scores or torch.is_grad_enabled() or self._reference_mode:
            return self._choice_scores(observations)
        version = self._scores_version()
        keys = [str(o) for o in observations]
        need_states = self._collects_states()
        todo = list(
            dict.fromkeys(
                k for k in keys if k not in self._memo or (need_states and self._memo[k][2] is None)
            )
        )
        if version != self._memo_version or len(self._memo) + len(todo) > _MEMO_LIMIT:
            self._forget_scores()
            self._memo_version = version
            todo = list(dict.fromkeys(keys))
        if todo:
            logits, values, states = self._choice_scores(todo)
            added = sum(t.nbytes for t in states) if states else 0
            if self._memo_bytes + added > _MEMO_MAX_BYTES:
                self._forget_scores()  # keep this batch's entries only
                self._memo_version = version
            for i, key in enumerate(todo):
                self._memo[key] = (logits[i], values[i], states[i] if states else None)
            self._memo_bytes += added
        rows = [self._memo[k] for k in keys]
        remembered = [r[2] for r in rows]
        turn_states = [s for s in remembered if s is not None]
        return (
            torch.stack([r[0] for r in rows]),
            torch.stack([r[1] for r in rows]),
            turn_states if len(turn_states) == len(rows) else None,
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
        single = isinstance(observation, str)
        batch: list[str] = (
            [str(observation)]
            if single
            else [str(o) for o in np.asarray(observation, dtype=object).ravel()]
        )
        self.set_training_mode(False)
        with torch.inference_mode(), self._without_states():
            step = self.act(batch, deterministic=deterministic)
        replies = np.array(step.replies, dtype=object)
        return (replies[0] if single else replies), state

    def predict_values(self, observations: Sequence[str]) -> torch.Tensor:
        """Critic values ``(n,)`` (no candidates, no generation: just the prompt pass)."""
        with self.rollout_kernels(), self._without_states():
            return self._prompt_pass(observations)[1]

    def evaluate_actions(
        self,
        observations: Sequence[str],
        actions: Sequence[np.ndarray],
        states: Sequence[TurnStates | None] | None = None,
    ) -> Evaluation:
        """Log-probs (per action token), entropy and values of stored actions, with gradients.

        ``states`` (from the rollout's :attr:`PolicyStep.states`) let the pass start at the first
        trainable layer (:mod:`gym_llm.policy.top_layers`); without them the whole model runs. Both give
        the same numbers to float rounding.
        """
        from_states = (
            self.uses_rollout_states and states is not None and all(s is not None for s in states)
        )
        if torch.is_grad_enabled():
            self._count_work(observations, actions, from_states)
        if from_states:
            return self._evaluate_from_states(observations, actions, list(states))  # type: ignore[arg-type]
        if self.action_mode == "choice":
            logits, values, _ = self._choice_scores(observations)
            return self._choice_evaluation(logits, values, actions)
        reply, reply_mask = self._pad(actions, left=False)
        width = reply.shape[1]
        ids, mask, positions, cache, prompt_width = self._encode_prompts(
            observations, extra=(reply, reply_mask)
        )
        out = self.lm(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=cache is not None,
            output_hidden_states=True,
            logits_to_keep=width + 1,
        )
        values = self.value_head(out.hidden_states[-1][:, prompt_width - 1].float()).squeeze(-1)
        return self._generation_evaluation(out.logits[:, :-1], values, actions)

    def _count_work(
        self, observations: Sequence[str], actions: Sequence[np.ndarray], from_states: bool
    ) -> None:
        keys = [str(o) for o in observations]
        prompts = [self.prompt_ids(k) for k in keys]
        size = self._split_prefix(prompts)
        total = num_layers(self.lm)
        layers = total - self.first_trainable_layer if from_states else total
        if self.action_mode == "choice":
            assert self._candidates is not None
            rows = list(dict.fromkeys(keys)) if from_states else keys
            lengths = {k: len(p) for k, p in zip(keys, prompts, strict=True)}
            k, width = self._candidates[0].shape
            follow = k * (width - 1)
            tokens = sum(lengths[key] - size + follow for key in rows)
            head = len(rows) * (1 + follow)
        else:
            tokens = sum(len(p) - size + len(a) for p, a in zip(prompts, actions, strict=True))
            head = sum(len(a) for a in actions)
        tokens += size  # the shared prefix, once per pass
        self.update_work.token_layers += tokens * layers
        self.update_work.head_rows += head
        self.update_work.tokens += tokens

    def _choice_evaluation(
        self, logits: torch.Tensor, values: torch.Tensor, actions: Sequence[np.ndarray]
    ) -> Evaluation:
        log_dist = torch.log_softmax(logits, dim=-1)
        index = torch.tensor([int(a[0]) for a in actions], device=self.device)
        lp = log_dist.gather(-1, index.unsqueeze(-1))
        entropy = -(log_dist.exp() * log_dist).sum(-1)
        return Evaluation(lp, torch.ones_like(lp, dtype=torch.bool), entropy, values)

    @property
    def uses_rollout_states(self) -> bool:
        """Whether rollouts keep states and the update starts at the first trainable layer."""
        return (
            self.top is not None and self.reuse_rollout_states and not self.gradient_checkpointing
        )

    def _prefix_hidden(self) -> torch.Tensor:
        """The first trainable layer's input over the shared prefix, ``(P, d)``: computed once,
        since the layers below never change."""
        assert self.top is not None
        if self._prefix_states is None:
            ids = torch.tensor([self.shared_prefix], dtype=torch.long, device=self.device)
            with torch.inference_mode(False), torch.no_grad(), self.top.capture() as captured:
                self.lm(input_ids=ids, use_cache=False, logits_to_keep=1)
            self._prefix_states = captured[0][0].clone()
        return self._prefix_states

    def _suffix_states(self, turn: TurnStates, size: int) -> torch.Tensor:
        """A turn's prompt states after the first ``size`` tokens (the batch's shared prefix)."""
        if turn.offset == size:
            return turn.prompt
        if turn.offset == 0:  # the rollout encoded the whole prompt; this batch shares the prefix
            return turn.prompt[size:]
        return torch.cat([self._prefix_hidden(), turn.prompt])  # the other way round

    def _evaluate_from_states(
        self,
        observations: Sequence[str],
        actions: Sequence[np.ndarray],
        states: list[TurnStates],
    ) -> Evaluation:
        """:meth:`evaluate_actions` running only the trainable layers on the stored states.

        Choice mode runs one row per distinct observation (turns that share an observation share
        its scores and value, so autograd sums their gradients exactly as separate rows would).
        """
        top = self.top
        assert top is not None
        keys = [str(o) for o in observations]
        size = self._split_prefix([self.prompt_ids(k) for k in keys])
        choice = self.action_mode == "choice"
        rows: list[int] = list(range(len(keys)))
        if choice:
            distinct: dict[str, int] = {}
            rows = [distinct.setdefault(k, len(distinct)) for k in keys]
            firsts = {row: i for i, row in reversed(list(enumerate(rows)))}
            states = [states[firsts[row]] for row in range(len(distinct))]
        d = states[0].prompt.shape[-1]
        extras = None
        if not choice:
            empty = states[0].prompt.new_zeros((0, d))
            extras = [t.action if t.action is not None else empty for t in states]
        hidden, mask, width = pad_states([self._suffix_states(t, size) for t in states], extras)
        n = hidden.shape[0]
        if size:
            mask = torch.cat(
                [torch.ones((n, size), dtype=mask.dtype, device=mask.device), mask], -1
            )
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, size:]
        multi_token = choice and self._candidates is not None and self._candidates[0].shape[1] > 1
        if size:
            cache = top.prefix_cache(top.encode_prefix(self._prefix_hidden()), n)
        else:
            cache = top.new_cache() if multi_token else None
        final = top(hidden, mask, positions, cache)
        values = self.value_head(final[:, width - 1].float()).squeeze(-1)
        if not choice:
            return self._generation_evaluation(top.logits(final[:, width - 1 :]), values, actions)
        assert self._candidates is not None
        cand_ids = self._candidates[0]
        first = torch.log_softmax(top.logits(final[:, width - 1]).float(), dim=-1)
        token_lp = first[:, cand_ids[:, 0]].unsqueeze(-1)
        if multi_token:
            k, cand_width = cand_ids.shape
            cache.batch_repeat_interleave(k)
            follow = torch.stack([t.action for t in states])  # type: ignore[misc]
            follow = follow.reshape(n * k, cand_width - 1, d).clone()
            full_mask, follow_positions = self._follow_layout(mask)
            out = top(follow, full_mask, follow_positions, cache)
            token_lp = torch.cat([token_lp, self._follow_log_probs(top.logits(out), n)], dim=-1)
        index = torch.tensor(rows, device=self.device)
        return self._choice_evaluation(self._scores(token_lp)[index], values[index], actions)

    def _generation_evaluation(
        self, logits: torch.Tensor, values: torch.Tensor, actions: Sequence[np.ndarray]
    ) -> Evaluation:
        """Per-token log-probs and mean entropy of replies from the logits at the last prompt
        position and at every fed reply token (``(n, >= T, V)``; extra columns are ignored)."""
        reply, reply_mask = self._pad(actions, left=False)
        log_dist = torch.log_softmax(logits[:, : reply.shape[1]].float() / self.temperature, dim=-1)
        lp = log_dist.gather(-1, reply.unsqueeze(-1)).squeeze(-1)
        token_entropy = -(log_dist.exp() * log_dist).sum(-1)
        valid = reply_mask.bool()
        entropy = (token_entropy * valid).sum(-1) / valid.sum(-1).clamp(min=1)
        return Evaluation(lp * valid, valid, entropy, values)

    def update_bytes_per_turn(
        self, observations: Sequence[str], actions: Sequence[np.ndarray]
    ) -> int:
        """A generous estimate of the memory one turn of the largest kind in this batch holds
        during the update's forward and backward pass (activations kept for the backward, the
        attention weights, and the logits at the scored positions), for choosing micro-batches.

        Per layer run and token, a Llama-style block keeps about ``10 d + 5 ffn`` values for
        its backward (norm inputs, q/k/v, attention output, MLP gate/up/activation), plus
        ``heads x context`` attention weights. Only the trainable layers count when the update
        starts from the rollout's states (:attr:`uses_rollout_states`).
        """
        config = self.lm.config.get_text_config()
        total = num_layers(self.lm)
        layers = total - self.first_trainable_layer if self.uses_rollout_states else total
        prompts = [len(self.prompt_ids(str(o))) for o in observations]
        prefix = len(self.shared_prefix)
        new_tokens = max(prompts) - prefix + max(len(a) for a in actions)
        if self.action_mode == "choice" and self._candidates is not None:
            k, width = self._candidates[0].shape
            new_tokens += k * (width - 1)
            scored = k * width
        else:
            scored = max(len(a) for a in actions)
        d = int(config.hidden_size)
        ffn = int(getattr(config, "intermediate_size", 4 * d))
        heads = int(config.num_attention_heads)
        context = max(prompts) + max(len(a) for a in actions)
        per_token_layer = 10 * d + 5 * ffn + heads * context
        element = torch.finfo(self.lm.dtype).bits // 8
        logits = scored * int(config.vocab_size) * 4 * 3  # fp32 logits, log-softmax, gradient
        return int(new_tokens * layers * per_token_layer * element + logits)

    # --- what gets saved -----------------------------------------------------------------------

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """Only what training changes (LoRA + value head, or everything without LoRA)."""
        return {
            name: p.detach().cpu().clone() for name, p in self.named_parameters() if p.requires_grad
        }

    def load_trainable_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        params = dict(self.named_parameters())
        missing = [name for name, p in params.items() if p.requires_grad and name not in state]
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
        self._reference_mode = True  # the cached prefix KV was computed with the adapter on
        try:
            with torch.no_grad(), self.lm.disable_adapter():
                return self.evaluate_actions(observations, actions, states).token_log_probs
        finally:
            self._reference_mode = False
