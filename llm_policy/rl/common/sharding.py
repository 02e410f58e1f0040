"""Sharded full fine-tuning with FSDP2 (``torch.distributed.fsdp.fully_shard``): each process
keeps ``1/N`` of the training state (the weights the optimizer steps, their gradients and
Adam's moments) and one whole copy of the weights for its forward passes.

Why the whole weights stay gathered: FSDP's usual mode gathers a layer's weights in every
forward pass, so every process must run the same passes in the same order, and rollouts do not
(generation stops at different lengths, remembered choice scores skip passes, evaluation runs in
the main process alone). Rollouts need the whole weights in each process anyway (so do
DeepSpeed-Chat's hybrid engine and verl's rollout workers), so gym_llm keeps them gathered: the
update runs its passes on them, FSDP reduce-scatters each layer's gradients to its shard in the
backward pass, each process steps its shard, and the stepped shards are gathered again (one
all-gather per optimizer step). The update keeps the processes in step where FSDP needs it: the
same number of backward passes (:func:`lockstep_rows`) and the shared-prefix pass run by all or
none. Per process: the whole weights once plus ``1/N`` of the training state, against all of it
in plain data parallelism (ZeRO stage 2's split, with FSDP's machinery).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor

from gym_llm.policy.top_layers import decoder_of
from gym_llm.rl.common.distributed import collective_device, global_max, world_size


def requested_by_launcher() -> bool:
    """``accelerate launch --use_fsdp`` (or an accelerate config with ``distributed_type: FSDP``)
    sets ``ACCELERATE_USE_FSDP=true`` for the processes it starts."""
    return os.environ.get("ACCELERATE_USE_FSDP", "").lower() in ("1", "true", "yes")


#: accelerate's FSDP settings (environment variables its launcher sets) and the values gym_llm
#: follows. Either sharding strategy reads as this module's split (FULL_SHARD's sharded training
#: state, SHARD_GRAD_OP's whole weights in the passes); nothing is offloaded, activations are not
#: checkpointed, the model's dtype is kept.
FOLLOWED_SETTINGS = {
    "FSDP_SHARDING_STRATEGY": ("FULL_SHARD", "SHARD_GRAD_OP", "1", "2"),
    "FSDP_OFFLOAD_PARAMS": ("false", "0"),
    "FSDP_ACTIVATION_CHECKPOINTING": ("false", "0"),
    "ACCELERATE_MIXED_PRECISION": ("no",),
}


def unfollowed_settings(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The launcher's FSDP settings that ask for something gym_llm does not do."""
    return [
        f"{name}={environ[name]}"
        for name, followed in FOLLOWED_SETTINGS.items()
        if name in environ and environ[name].strip().lower() not in (v.lower() for v in followed)
    ]


def check_can_shard(uses_lora: bool, first_trainable_layer: int = 0) -> None:
    """Sharding is for full fine-tuning of every layer in a job of several processes; say so
    otherwise."""
    if uses_lora:
        raise ValueError(
            "FSDP shards full fine-tuning: build the policy with lora=None (on the command "
            "line, pass --policy.lora none). "
            "With LoRA the trainable weights are small, and plain data parallelism (no --ppo.fsdp, "
            "no --use_fsdp) is the path to use."
        )
    if first_trainable_layer != 0:
        raise ValueError(
            "FSDP trains every layer: leave trainable_layers at None (a sharded update must run "
            "the same passes in every process, and the frozen-bottom shortcut does not)."
        )
    if world_size() == 1:
        raise ValueError(
            "FSDP needs several processes: start the job with `torchrun --nproc-per-node N` or "
            "`accelerate launch --use_fsdp --num_processes N` (in one process, drop fsdp)."
        )


def fsdp_modules(module: torch.nn.Module) -> list[FSDPModule]:
    return [m for m in module.modules() if isinstance(m, FSDPModule)]


def is_sharded(module: torch.nn.Module) -> bool:
    return isinstance(module, FSDPModule)


def shard_policy(policy: Any) -> None:
    """Shard the policy's LM: one FSDP unit per decoder layer and one for the rest (embeddings,
    final norm, LM head; tied weights stay together in it). The value head stays whole in every
    process (its gradients are averaged as in plain data parallelism). The optimizer is rebuilt
    over the shards, then the whole weights are gathered."""
    unfollowed = unfollowed_settings()
    if unfollowed:
        warnings.warn(
            f"gym_llm's FSDP ignores {', '.join(unfollowed)}: it shards the training state "
            "over every process, keeps one whole copy of the weights in each, offloads nothing, "
            "does not checkpoint activations and keeps the model's dtype (see "
            "examples/accelerate_fsdp.yaml).",
            stacklevel=2,
        )
    lm = policy.lm
    named_before = dict(policy.named_parameters())
    for layer in decoder_of(lm).layers:
        fully_shard(layer)
    fully_shard(lm)
    rebuild_optimizer(policy, named_before)
    gather(lm)


def gather(lm: torch.nn.Module) -> None:
    """Whole weights in every process, kept through any number of forward passes (a collective:
    every process calls it at the same point)."""
    for module in fsdp_modules(lm):
        module.unshard()
        module.set_reshard_after_forward(False, recurse=False)


@contextmanager
def sharded_update(lm: torch.nn.Module) -> Iterator[None]:
    """The update: the whole weights stay gathered through every forward and backward pass
    (rollouts hold them anyway, so the peak does not rise), each layer's gradients are
    reduce-scattered to its shard as the backward pass leaves it, and the optimizer steps each
    process's shard; :func:`refresh` gathers the stepped weights before the next pass."""
    modules = fsdp_modules(lm)
    for module in modules:
        module.set_reshard_after_backward(False, recurse=False)
    with warnings.catch_warnings():
        # FSDP warns that the LM's outputs are views, in case a caller changes them in place;
        # the update only reads them (its gradients equal the unsharded ones': tested).
        warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view")
        yield
    for module in modules:
        module.set_reshard_after_backward(True, recurse=False)


def refresh(lm: torch.nn.Module) -> None:
    """After an optimizer step: the whole weights gathered again from the stepped shards (a
    collective; every process steps together)."""
    for module in fsdp_modules(lm):
        module.reshard()
    gather(lm)


def lockstep_rows(n: int, rows: int) -> int:
    """Turns per pass so that every process runs the same number of passes over its ``n``
    turns: the most any process needs at its own ``rows``, split evenly."""
    passes = global_max(-(-n // max(rows, 1)))
    return -(-n // passes)


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This process's part of a sharded tensor (the tensor itself otherwise)."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def shard_like(full: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """``full`` split the way ``param`` is (FSDP: dim 0 in ``torch.chunk`` pieces), as a
    ``DTensor``; a tensor of another shape (Adam's step count) is returned as it is."""
    if not isinstance(param, DTensor) or full.shape != param.shape:
        return full
    pieces = torch.chunk(full, world_size(), dim=0)
    rank = dist.get_rank()
    part = pieces[rank] if rank < len(pieces) else full[:0]
    return DTensor.from_local(
        part.to(param.device).contiguous(),
        param.device_mesh,
        param.placements,
        shape=param.shape,
        stride=param.stride(),
    )


def full_optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer.state_dict()`` with every sharded moment gathered whole (a collective, in
    the same order in every process), so a checkpoint loads into any number of processes."""
    state = optimizer.state_dict()  # its entries are the optimizer's own dicts: not changed
    state["state"] = {
        index: {
            key: value.full_tensor() if isinstance(value, DTensor) else value
            for key, value in sorted(state["state"][index].items())
        }
        for index in sorted(state["state"])
    }
    return state


def rebuild_optimizer(policy: Any, named_before: dict[str, torch.nn.Parameter]) -> None:
    """A new optimizer over the sharded parameters (``fully_shard`` replaced the objects the old
    one held), carrying over its learning rates and any moments it had (a loaded checkpoint's),
    split the way the parameters are."""
    old = policy.optimizer
    old_state = {name: old.state[p] for name, p in named_before.items() if p in old.state}
    lrs = [group["lr"] for group in old.param_groups]
    policy.optimizer = type(old)(  # the policy's own groups: weights, then the value head
        policy._param_groups(lrs[0]), lr=lrs[0], **policy.optimizer_kwargs
    )
    for group, lr in zip(policy.optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr
    for name, param in policy.named_parameters():
        if name in old_state:
            policy.optimizer.state[param] = {
                key: shard_like(value, param) for key, value in old_state[name].items()
            }


def clip_grad_norm(parameters: Iterable[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` over a mix of sharded (FSDP) and replicated (value
    head) gradients: the sharded parts' squares are summed over the processes, the replicated
    ones (already averaged, so equal everywhere) counted once."""
    grads = [p.grad for p in parameters if p.grad is not None]
    sharded_sq = torch.zeros((), dtype=torch.float64)
    replicated_sq = torch.zeros((), dtype=torch.float64)
    for grad in grads:
        square = local(grad).detach().double().pow(2).sum().cpu()
        if isinstance(grad, DTensor):
            sharded_sq += square
        else:
            replicated_sq += square
    if world_size() > 1:
        total = sharded_sq.to(collective_device())
        dist.all_reduce(total)
        sharded_sq = total.cpu()
    norm = (sharded_sq + replicated_sq).sqrt()
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for grad in grads:
        local(grad).mul_(coef.to(grad.device, grad.dtype))
    return norm.float()
