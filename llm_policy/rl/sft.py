"""Supervised warm start: fine-tune on demonstrations before (or between) PPO updates.

Online RL from a pretrained chat model can stall when the model never samples the good action
(untrained SmolLM2-135M sticks in every Blackjack state and samples ``hit`` 0.4% of the time, so
PPO has nothing to reinforce). A few passes of supervised fine-tuning on a reference policy's
choices put the good actions where PPO can find them. This module is that bridge:

* :func:`gym_llm.experiments.demos.make_demos` (``gym-llm demos``) writes such demonstrations
  from a reference policy.
* :func:`gym_llm.rl.demo_records.read_demos` reads and checks such a file (errors name the file and line).
* :func:`warm_start` fine-tunes an ``LLMPolicy`` (its LoRA adapter; never the value head) or a
  plain ``transformers`` model with TRL's ``SFTTrainer``: one prompt -> completion example per
  assistant reply, loss on the reply tokens (and the end-of-turn token) only.

The prompt of each example is tokenised exactly as the policy tokenises its prompts (the same
chat-template rendering, no extra special tokens), and the reply as choice mode scores it, so SFT
trains the very log-probs PPO later samples from. TRL's defaults that would break a policy are
switched off or undone afterwards: activation checkpointing and ``use_cache=False`` (the policy's
rollouts rely on KV caches), bf16 autocast, logging integrations, checkpoints on disk.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from gym_llm.policy.prompts import render_prompt
from gym_llm.rl.demo_records import DemoError, Record, _load_records, read_demos

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from gym_llm.policy.llm_policy import LLMPolicy


def sft_examples(
    demos: str | os.PathLike[str] | Sequence[Record], tokenizer: Any
) -> list[dict[str, list[int]]]:
    """Token ids and completion masks, one example per assistant reply.

    The prompt is every message before the reply, rendered with :func:`gym_llm.policy.prompts.render_prompt`
    and tokenised without added special tokens (as :meth:`LLMPolicy.prompt_ids` does); the
    completion is the reply tokenised on its own (as choice mode scores actions) plus the EOS token
    (where generate mode stops).
    """
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("The tokenizer has no eos_token: set tokenizer.eos_token first.")
    examples: list[dict[str, list[int]]] = []
    for messages in _load_records(demos):
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            prompt = render_prompt(tokenizer, messages[:i])
            prompt_ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
            reply_ids = list(tokenizer(message["content"], add_special_tokens=False)["input_ids"])
            reply_ids.append(int(eos))
            examples.append(
                {
                    "input_ids": prompt_ids + reply_ids,
                    "completion_mask": [0] * len(prompt_ids) + [1] * len(reply_ids),
                }
            )
    return examples


# --- fine-tuning ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _preserved(model: Any, policy: Any | None) -> Iterator[None]:
    """Undo what ``Trainer``/``SFTTrainer`` change on a model that outlives them.

    ``Trainer`` sets ``config.use_cache = False`` and leaves the model in train mode; TRL patches
    the base model's ``forward`` with a fused LM head. Each would silently change the policy's
    later rollouts, so all are restored, as are the random number generators (SFT then does not
    shift the caller's sampling streams) and ``requires_grad`` flags.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    had_forward = "forward" in vars(base)
    forward = vars(base).get("forward")
    use_cache = getattr(model.config, "use_cache", None)
    checkpointing = bool(getattr(base, "is_activation_checkpointing", False))
    modules = [model] if policy is None else [policy, model]
    training = [m.training for m in modules]
    grads = {name: p.requires_grad for name, p in model.named_parameters()}
    rng = (random.getstate(), np.random.get_state(), torch.random.get_rng_state())
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        if had_forward:
            base.forward = forward
        elif "forward" in vars(base):
            del base.forward
        if use_cache is not None:
            model.config.use_cache = use_cache
        if not checkpointing and getattr(base, "is_activation_checkpointing", False):
            base.activation_checkpointing_disable()
        for name, p in model.named_parameters():
            p.requires_grad_(grads.get(name, p.requires_grad))
        for module, mode in zip(modules, training, strict=True):
            module.train(mode)
        random.setstate(rng[0])
        np.random.set_state(rng[1])
        torch.random.set_rng_state(rng[2])
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)


#: Shorter shared prompt prefixes are not worth a separate pass.
_MIN_SHARED_PREFIX = 8


def _shared_prefix_length(examples: Sequence[Mapping[str, list[int]]]) -> int:
    """Tokens every example starts with (system message, instruction, chat scaffolding), capped
    one short of the shortest prompt so the suffix still predicts every reply token; 0 when
    shorter than :data:`_MIN_SHARED_PREFIX`."""
    first = examples[0]["input_ids"]
    length = min(e["completion_mask"].index(1) for e in examples) - 1
    for example in examples[1:]:
        ids = example["input_ids"]
        length = next((i for i in range(length) if ids[i] != first[i]), length)
    return length if length >= _MIN_SHARED_PREFIX else 0


def _shared_prefix_trainer(size: int) -> type[Any]:
    """``SFTTrainer`` that encodes the ``size`` tokens every example starts with once per batch.

    Policy prompts share a long head (on Blackjack ~150 of ~190 tokens: system message and
    instruction), so running it once per batch and the rest on its KV cache, as PPO's update does,
    needs about a third of the tokens. The loss is the same token-mean NLL over the reply tokens
    as TRL's (a test compares the two), and the gradients of every row flow back through the one
    prefix pass. Falls back to TRL's own loss where a cache cannot be used (activation
    checkpointing) and for evaluation.
    """
    from transformers import DynamicCache
    from trl.trainer.sft_trainer import SFTTrainer

    class SharedPrefixSFTTrainer(SFTTrainer):
        def compute_loss(
            self,
            model: Any,
            inputs: dict[str, torch.Tensor],
            return_outputs: bool = False,
            num_items_in_batch: Any = None,
        ) -> Any:
            base = model.get_base_model() if hasattr(model, "get_base_model") else model
            if return_outputs or not model.training or base.is_activation_checkpointing:
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            ids, labels, mask = inputs["input_ids"], inputs["labels"], inputs["attention_mask"]
            n = ids.shape[0]
            head = model(input_ids=ids[:1, :size], use_cache=True, logits_to_keep=1)
            rows = [
                (layer.keys.expand(n, -1, -1, -1), layer.values.expand(n, -1, -1, -1))
                for layer in head.past_key_values.layers
            ]
            out = model(
                input_ids=ids[:, size:],
                attention_mask=mask,
                position_ids=(mask.cumsum(-1) - 1).clamp(min=0)[:, size:],
                past_key_values=DynamicCache(ddp_cache_data=rows, config=model.config),
                use_cache=True,
            )
            targets = labels[:, size + 1 :]
            valid = targets != -100
            log_probs = torch.log_softmax(out.logits[:, :-1].float(), dim=-1)
            token_lp = log_probs.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            count = valid.sum() if num_items_in_batch is None else num_items_in_batch
            loss = -(token_lp * valid).sum() / torch.as_tensor(count).to(ids.device).clamp(min=1)
            with torch.no_grad():  # the metrics TRL logs
                correct = ((log_probs.argmax(-1) == targets) & valid).sum()
                entropy = -(log_probs.exp() * log_probs).sum(-1)
                tokens = valid.sum().clamp(min=1)
                metrics = self._metrics["train"]
                metrics["mean_token_accuracy"].append((correct / tokens).item())
                metrics["entropy"].append(((entropy * valid).sum() / tokens).item())
                self._total_train_tokens += int(mask.sum().item())
                metrics["num_tokens"] = [self._total_train_tokens]
            return loss

    return SharedPrefixSFTTrainer


def warm_start(
    target: LLMPolicy | PreTrainedModel,
    demos: str | os.PathLike[str] | Sequence[Mapping[str, Any]],
    *,
    tokenizer: Any = None,
    epochs: float = 1.0,
    learning_rate: float = 1e-4,
    batch_size: int = 8,
    max_steps: int = -1,
    output_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """Supervised fine-tuning on demonstrations with TRL's ``SFTTrainer``.

    Args:
        target: an :class:`~gym_llm.LLMPolicy` (its LoRA adapter is trained, or all LM weights
            when it has none; the value head never) or a ``transformers`` causal LM (a
            ``peft`` model trains its adapter, a plain one all its weights).
        demos: a chat-messages JSONL path (see :func:`read_demos`) or the same records in memory.
        tokenizer: needed for a plain model; an ``LLMPolicy`` brings its own.
        epochs: passes over the examples (fractions allowed).
        learning_rate: AdamW learning rate, decayed linearly to 0 over the run.
        batch_size: examples per optimizer step.
        max_steps: optimizer steps; overrides ``epochs`` when > 0.
        output_dir: where the trainer may write (its ``trainer_state.json`` with the loss log is
            kept there); default a temporary directory, removed afterwards. No checkpoints, no
            hub, no logging integrations.
        seed: data order and any randomness of the run; the caller's RNG states are restored.

    Returns:
        ``sft/loss`` (mean over the run), ``sft/final_loss`` and ``sft/token_accuracy`` (the last
        logged values), ``sft/examples`` (assistant replies trained on), ``sft/steps``,
        ``sft/epochs``, ``sft/wall_s``, ``sft/shared_prefix_tokens`` (the prompt head every example
        shares, encoded once per batch; 0 if none).

    With an ``LLMPolicy`` its prefix KV cache is invalidated afterwards (the weights changed).
    """
    from gym_llm.policy.llm_policy import LLMPolicy

    if not (epochs > 0 or max_steps > 0):
        raise ValueError(f"Give epochs > 0 or max_steps > 0 (got epochs={epochs}, {max_steps=}).")
    if learning_rate <= 0 or batch_size < 1:
        raise ValueError(
            f"learning_rate must be > 0 and batch_size >= 1, got {learning_rate} and {batch_size}."
        )
    policy = target if isinstance(target, LLMPolicy) else None
    model: Any = target.lm if policy is not None else target
    tokenizer = tokenizer if tokenizer is not None else getattr(policy, "tokenizer", None)
    if tokenizer is None:
        raise ValueError("warm_start on a model needs its tokenizer: pass tokenizer=...")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("The model has no trainable parameters (all requires_grad=False).")
    examples = sft_examples(demos, tokenizer)
    steps_per_epoch = math.ceil(len(examples) / batch_size)
    total_steps = max_steps if max_steps > 0 else math.ceil(epochs * steps_per_epoch)
    device = next(model.parameters()).device

    from datasets import Dataset
    from trl.trainer.sft_config import SFTConfig
    from trl.trainer.sft_trainer import SFTTrainer

    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if output_dir is None:
            out = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gym_llm-sft-")))
        else:
            out = Path(output_dir)
            out.mkdir(parents=True, exist_ok=True)
        stack.enter_context(_preserved(model, policy))
        args = SFTConfig(
            output_dir=str(out),
            num_train_epochs=float(epochs),
            max_steps=max_steps,
            learning_rate=learning_rate,
            per_device_train_batch_size=batch_size,
            seed=seed,
            data_seed=seed,
            # TRL turns these on by default; they break the policy's KV caches / fp32 numerics.
            activation_checkpointing=False,
            bf16=False,
            fp16=False,
            use_cache=bool(getattr(model.config, "use_cache", True)),
            use_cpu=device.type == "cpu",
            max_length=None,  # never cut a reply off
            completion_only_loss=True,
            packing=False,
            report_to="none",
            save_strategy="no",
            push_to_hub=False,
            logging_strategy="steps",
            logging_steps=max(1, total_steps // 10),
            dataloader_num_workers=0,
        )
        prefix = _shared_prefix_length(examples)
        trainer_class = _shared_prefix_trainer(prefix) if prefix else SFTTrainer
        trainer = trainer_class(
            model=model,
            args=args,
            train_dataset=Dataset.from_list(examples),
            processing_class=tokenizer,
        )
        output = trainer.train()
        history = list(trainer.state.log_history)
        if output_dir is not None:
            trainer.state.save_to_json(str(out / "trainer_state.json"))
        del trainer
    logged = [h for h in history if "loss" in h]
    last = logged[-1] if logged else {}
    return {
        "sft/loss": float(output.training_loss),
        "sft/final_loss": float(last.get("loss", output.training_loss)),
        "sft/token_accuracy": float(last.get("mean_token_accuracy", float("nan"))),
        "sft/examples": float(len(examples)),
        "sft/steps": float(output.global_step),
        "sft/epochs": float(output.global_step / steps_per_epoch),
        "sft/wall_s": time.perf_counter() - start,
        "sft/shared_prefix_tokens": float(prefix),
    }


__all__ = ["DemoError", "Record", "read_demos", "sft_examples", "warm_start"]
