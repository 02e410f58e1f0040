"""The optimizer's parameter groups: each weight in one group, each head at its own rate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from gym_llm import PPO
from gym_llm.policy.param_groups import check_lr_scale, param_groups
from tests.builders import small_ppo
from tests.models import tiny_model_fixture


def _ids(params: list[nn.Parameter]) -> set[int]:
    return {id(p) for p in params}


class _Policy(nn.Module):
    def __init__(self, with_head: bool) -> None:
        super().__init__()
        self.body = nn.Linear(3, 3)
        self.frozen = nn.Linear(3, 3).requires_grad_(False)
        self.value_head = nn.Linear(3, 1)
        self.action_head = nn.Linear(3, 2) if with_head else None


def test_each_trainable_weight_lands_in_exactly_one_group_at_its_rate() -> None:
    policy = _Policy(with_head=True)
    groups = param_groups(policy.parameters(), policy.value_head, policy.action_head, 0.1, 10, 4)
    assert [g["lr_scale"] for g in groups] == [1.0, 4, 10]
    assert [g["lr"] for g in groups] == pytest.approx([0.1, 0.4, 1.0])
    body, head, value = (_ids(g["params"]) for g in groups)
    assert body == _ids(list(policy.body.parameters()))
    assert head == _ids(list(policy.action_head.parameters()))
    assert value == _ids(list(policy.value_head.parameters()))
    assert not _ids(list(policy.frozen.parameters())) & (body | head | value)


def test_no_head_no_head_group() -> None:
    policy = _Policy(with_head=False)
    groups = param_groups(policy.parameters(), policy.value_head, None, 0.1, 2.0, 4.0)
    assert [g["lr_scale"] for g in groups] == [1.0, 2.0]


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_a_scale_must_be_positive(bad: float) -> None:
    with pytest.raises(ValueError, match="action_head_lr_scale must be > 0"):
        check_lr_scale("action_head_lr_scale", bad)


model_dir = tiny_model_fixture("model_dir", ["apple", "banana", "cherry"])


def _ppo(model_dir: Path, policy_kwargs: dict[str, Any], **settings: Any) -> PPO:
    """A choice-mode PPO on KeywordBandit (4 envs x 4 steps), LoRA r=4, the head on by default."""
    return small_ppo(model_dir, n_envs=4, policy=policy_kwargs, n_steps=4, batch_size=8, **settings)


def test_ppo_keeps_the_head_rate_through_its_schedule_and_saves_it(
    model_dir: Path, tmp_path: Path
) -> None:
    model = _ppo(
        model_dir,
        {"action_head_lr_scale": 8.0},
        n_epochs=1,
        learning_rate=lambda progress: 1e-3 * progress,
    )
    head = model.policy.action_head
    assert head is not None  # on by default in choice mode
    groups = model.policy.optimizer.param_groups
    assert _ids(groups[1]["params"]) == _ids([p for p in head.parameters() if p.requires_grad])
    before = [p.detach().clone() for p in groups[1]["params"]]
    model.learn(32)
    assert groups[1]["lr"] == pytest.approx(8 * groups[0]["lr"]) and groups[0]["lr"] < 1e-3
    assert any(not torch.equal(a, p) for a, p in zip(before, groups[1]["params"], strict=True))
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert loaded.policy.action_head_lr_scale == 8.0
    assert [g["lr_scale"] for g in loaded.policy.optimizer.param_groups] == [1.0, 8.0, 1.0]


def test_an_agent_saved_with_the_head_in_the_lm_group_loads_with_its_adam_state(
    model_dir: Path, tmp_path: Path
) -> None:
    model = _ppo(model_dir, {})
    model.learn(16)
    model.save(tmp_path / "agent")
    state = torch.load(tmp_path / "agent" / "policy.pt", weights_only=True)
    lm, head, value = state["optimizer"]["param_groups"]
    state["optimizer"]["param_groups"] = [{**lm, "params": lm["params"] + head["params"]}, value]
    torch.save(state, tmp_path / "agent" / "policy.pt")  # the layout saved before the head's group
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    a, b = model.policy.optimizer.state_dict(), loaded.policy.optimizer.state_dict()
    assert [len(g["params"]) for g in b["param_groups"]] == [len(lm["params"]), 2, 2]
    for index, entry in a["state"].items():
        torch.testing.assert_close(entry["exp_avg"], b["state"][index]["exp_avg"])
