"""Sharded full fine-tuning (FSDP2, issue 18 item 4): two gloo processes with sharded weights end
where two with whole weights do, hold half the weights each between updates, save whole, and the
example accelerate config starts it; plus the pure helpers in one process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.tensor import DTensor, Shard, distribute_tensor, init_device_mesh

from gym_llm import PPO
from gym_llm.rl.common import distributed, sharding
from tests.models import tiny_model_fixture
from tests.paths import ROOT
from tests.system.launch import HELPER, run_job, torchrun

ACCELERATE_FSDP = [
    sys.executable, "-m", "accelerate.commands.launch", "--config_file",
    str(ROOT / "examples" / "accelerate_fsdp.yaml"), "--main_process_port", "0",
]  # fmt: skip


model_dir = tiny_model_fixture("model_dir", ["apple", "banana", "cherry"])


def _weights(directory: Path, rank: int, suffix: str = "") -> dict[str, torch.Tensor]:
    weights: dict[str, torch.Tensor] = torch.load(directory / f"rank{rank}{suffix}.pt")
    return weights


def _distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    weights = [k for k in a if a[k].is_floating_point()]  # not the head's "calibrated" flag
    return float(sum(((a[k] - b[k]) ** 2).sum() for k in weights) ** 0.5)


@pytest.mark.parametrize("kind", ["choice", "generate"])
def test_sharded_full_fine_tuning_ends_where_the_whole_weights_do(
    model_dir: Path, tmp_path: Path, kind: str
) -> None:
    whole, parts = tmp_path / "whole", tmp_path / "sharded"
    done = torchrun(str(HELPER), "full", str(model_dir), str(whole), kind)
    assert done.returncode == 0, done.stderr[-3000:]
    if kind == "choice":  # the example config and ACCELERATE_USE_FSDP, fsdp=None in PPO
        args = [str(HELPER), "fsdp-env", str(model_dir), str(parts), kind]
        sharded = run_job([*ACCELERATE_FSDP, *args])
    else:
        sharded = torchrun(str(HELPER), "fsdp", str(model_dir), str(parts), kind)
    assert sharded.returncode == 0, sharded.stderr[-3000:]
    start = PPO.load(whole / "middle")  # a whole agent, loaded in one process
    reports = {
        name: [json.loads((d / f"rank{r}.json").read_text()) for r in (0, 1)]
        for name, d in (("whole", whole), ("sharded", parts))
    }
    # The same rollouts (same observations in each process), the same step count...
    for r in (0, 1):
        assert reports["whole"][r]["observations"] == reports["sharded"][r]["observations"]
        assert reports["sharded"][r]["num_timesteps"] == 64
    # (the update's shared-prefix pass, which every process must agree to run, is exercised)
    assert reports["sharded"][0]["shared_prefix"] > 0
    # ... half of the weights held in each process between updates ...
    # (the small action head is held whole by each)
    held = [report["held_elements"] for report in reports["sharded"]]
    replicated = reports["sharded"][0]["replicated_elements"]
    all_weights = reports["whole"][0]["held_elements"]
    assert replicated < 0.02 * all_weights
    assert sum(held) - replicated == all_weights
    assert max(held) - replicated <= 0.51 * (all_weights - replicated)
    # ... and the same weights in the end: equal in both processes, and equal to the whole run's
    # to float rounding (measured: 1.8e-6 and 8.6e-7 of the distance they moved; SGD keeps
    # rounding from growing), after moving far from where they were half-way.
    a, b = _weights(whole, 0), _weights(parts, 0)
    assert all(torch.equal(b[k], _weights(parts, 1)[k]) for k in b)
    middle = {k: v.detach() for k, v in start.policy.trainable_state_dict().items()}
    moved = _distance(a, middle)
    assert moved > 1e-3
    assert _distance(a, b) < 1e-4 * moved
    # Loaded into a new agent (sharded: the loaded momentum split onto the shards), training
    # goes on as it does with whole weights.
    a2, b2 = _weights(whole, 0, "-continued"), _weights(parts, 0, "-continued")
    assert _distance(a2, a) > 1e-3
    assert _distance(a2, b2) < 1e-4 * _distance(a2, a)
    # The saved agent holds whole weights and whole momentum buffers, equal to the whole run's.
    for run in (whole, parts):
        assert PPO.load(run / "agent").num_timesteps == 64
    saved = torch.load(parts / "agent" / "policy.pt")
    reference = torch.load(whole / "agent" / "policy.pt")
    assert _distance(saved["trainable"], a) < 1e-4 * moved
    for index, entry in reference["optimizer"]["state"].items():
        buffer = saved["optimizer"]["state"][index]["momentum_buffer"]
        assert not isinstance(buffer, DTensor)
        assert buffer.shape == entry["momentum_buffer"].shape
        torch.testing.assert_close(buffer, entry["momentum_buffer"], rtol=1e-4, atol=1e-6)


def test_the_command_line_trains_sharded(model_dir: Path, tmp_path: Path) -> None:
    flags = [
        "--env", "gym_llm/KeywordBandit-v0", "--policy.model", str(model_dir), "--timesteps", "64",
        "--n-envs", "2", "--ppo.n-steps", "4", "--ppo.batch-size", "8", "--eval-episodes", "4",
        "--eval-points", "1", "--quiet", "--policy.lora", "none",
    ]  # fmt: skip
    done = torchrun(
        "-m", "gym_llm.cli", "train", *flags, "--ppo.fsdp", "--out", str(tmp_path / "r")
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "r" / "result.json").read_text())
    assert result["processes"] == 2 and result["timesteps"] == 64
    assert json.loads((tmp_path / "r" / "config.json").read_text())["ppo"]["fsdp"] is True
    assert (tmp_path / "r" / "checkpoints" / "latest").is_file()  # saved between updates
    assert PPO.load(tmp_path / "r" / "agent").policy.uses_lora is False
    with_lora = torchrun("-m", "gym_llm.cli", "train", *flags[:-2], "--ppo.fsdp", "--out", "x")
    assert with_lora.returncode != 0 and "pass --policy.lora none" in with_lora.stderr
    one = run_job(
        [sys.executable, "-m", "gym_llm.cli", "train", *flags, "--ppo.fsdp", "--out", "y"]
    )
    assert one.returncode != 0 and "FSDP needs several processes" in one.stderr


def test_settings_gym_llm_does_not_follow_are_named() -> None:
    assert sharding.unfollowed_settings({}) == []
    followed = {"FSDP_SHARDING_STRATEGY": "SHARD_GRAD_OP", "FSDP_OFFLOAD_PARAMS": "false"}
    assert sharding.unfollowed_settings(followed) == []
    asked = {
        "FSDP_OFFLOAD_PARAMS": "true",
        "FSDP_SHARDING_STRATEGY": "HYBRID_SHARD",
        "ACCELERATE_MIXED_PRECISION": "bf16",
    }
    assert sharding.unfollowed_settings(asked) == [
        "FSDP_SHARDING_STRATEGY=HYBRID_SHARD",
        "FSDP_OFFLOAD_PARAMS=true",
        "ACCELERATE_MIXED_PRECISION=bf16",
    ]


def test_what_cannot_be_sharded_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    assert sharding.requested_by_launcher() is False
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    assert sharding.requested_by_launcher() is True
    with pytest.raises(ValueError, match="lora=None"):
        sharding.check_can_shard(uses_lora=True)
    with pytest.raises(ValueError, match="trainable_layers"):
        sharding.check_can_shard(uses_lora=False, first_trainable_layer=2)
    with pytest.raises(ValueError, match="several processes"):
        sharding.check_can_shard(uses_lora=False)


def test_one_process_helpers_are_plain() -> None:
    assert sharding.lockstep_rows(10, 3) == 3  # ceil(10 / 4 passes)
    assert sharding.lockstep_rows(10, 10) == 10
    params = [torch.nn.Parameter(torch.randn(5, 3)) for _ in range(3)]
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for p, c in zip(params, copies, strict=True):
        p.grad = torch.randn_like(p) * 4
        c.grad = p.grad.clone()
    norm = sharding.clip_grad_norm(params, 1.0)
    expected = torch.nn.utils.clip_grad_norm_(copies, 1.0)
    torch.testing.assert_close(norm, expected)
    for p, c in zip(params, copies, strict=True):
        torch.testing.assert_close(p.grad, c.grad)
    plain = torch.ones(4, 2)
    assert sharding.shard_like(plain, params[0]) is plain


def _sharded_helpers(rank: int, directory: str) -> None:
    torch.set_num_threads(1)
    init = f"file://{directory}/init"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        torch.manual_seed(0)  # the same full tensors in both processes
        full = [torch.randn(7, 3), torch.randn(4)]
        mesh = init_device_mesh("cpu", (2,))
        params = [torch.nn.Parameter(distribute_tensor(t.clone(), mesh, [Shard(0)])) for t in full]
        # shard_like splits a whole tensor the way the parameter is split.
        for t, p in zip(full, params, strict=True):
            part = sharding.shard_like(t * 2, p)
            assert isinstance(part, DTensor)
            assert torch.equal(part.to_local(), (p.to_local() * 2))
            assert torch.equal(part.full_tensor(), t * 2)
        # clip_grad_norm over sharded gradients and a replicated one: the whole vectors' norm.
        grads = [torch.randn_like(t) * 3 for t in full]
        for p, g in zip(params, grads, strict=True):
            p.grad = distribute_tensor(g.clone(), mesh, [Shard(0)])
        replicated = torch.nn.Parameter(torch.zeros(2))
        replicated.grad = torch.tensor([3.0, 4.0])
        norm = sharding.clip_grad_norm([*params, replicated], 1.0)
        whole = torch.cat([*(g.flatten() for g in grads), torch.tensor([3.0, 4.0])])
        torch.testing.assert_close(norm, whole.norm())
        clipped = [p.grad.full_tensor() for p in params]
        for c, g in zip(clipped, grads, strict=True):
            torch.testing.assert_close(c, g / (whole.norm() + 1e-6))
        Path(directory, f"rank{rank}.ok").touch()
    except BaseException:
        dist.destroy_process_group()
        raise
    distributed.leave_job()  # the results are written


def test_sharded_helpers_in_two_processes(tmp_path: Path) -> None:
    mp.spawn(_sharded_helpers, args=(str(tmp_path),), nprocs=2, join=True)
    assert sorted(p.name for p in tmp_path.glob("*.ok")) == ["rank0.ok", "rank1.ok"]
