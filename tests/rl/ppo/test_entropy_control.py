"""``ent_coef="auto"``: the pure rule, and PPO holding the entropy at a target (tiny model)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from gym_llm import PPO
from gym_llm.rl.ppo.entropy_control import (
    MAX_COEF,
    MIN_COEF,
    check_entropy_of,
    check_listed_actions,
    default_target,
    floor_loss,
    marginal_entropy,
    next_ent_coef,
    parse_ent_coef,
)
from tests.builders import small_ppo
from tests.models import tiny_model_fixture


def test_parse_reads_sb3_spellings_and_names_the_fix() -> None:
    assert parse_ent_coef(0) == (0.0, False)
    assert parse_ent_coef("auto_0.2") == (0.2, True)
    for bad in ("adaptive", "auto_x", "auto_5", -0.1, True):
        with pytest.raises(ValueError, match="ent_coef"):
            parse_ent_coef(bad)


def test_the_rule_moves_toward_the_target_and_stays_bounded() -> None:
    target = default_target(2)
    assert target == pytest.approx(0.3 * math.log(2))
    assert next_ent_coef(0.01, 0.0, target, 2) == pytest.approx(0.01 * math.exp(0.3))
    assert next_ent_coef(0.01, target, target, 2) == pytest.approx(0.01)
    assert next_ent_coef(MAX_COEF, 0.0, target, 2) == MAX_COEF
    assert next_ent_coef(MIN_COEF, 5.0, target, 2) == MIN_COEF
    with pytest.raises(ValueError, match="at least 2 actions"):
        default_target(1)


def test_the_marginal_entropy_tells_a_learned_rule_from_a_collapse() -> None:
    rule = torch.tensor([[0.99, 0.01], [0.01, 0.99]])  # certain per state, by state
    collapse = torch.tensor([[0.99, 0.01], [0.99, 0.01]])  # the same action everywhere
    per_state = float(-(rule * rule.log()).sum(1).mean())
    assert per_state < 0.06  # both look alike to the per-state entropy ...
    assert marginal_entropy([rule]) == pytest.approx(math.log(2))  # ... not to the marginal
    assert marginal_entropy([collapse]) == pytest.approx(per_state, rel=1e-5)
    assert marginal_entropy([rule[:1], rule[1:]]) == pytest.approx(marginal_entropy([rule]))
    assert next_ent_coef(0.01, marginal_entropy([rule]), None, 2) < 0.01  # the rule: it shrinks
    assert next_ent_coef(0.01, marginal_entropy([collapse]), None, 2) > 0.01  # the collapse


def test_the_module_examples_hold() -> None:
    import doctest

    from gym_llm.rl.ppo import entropy_control

    assert doctest.testmod(entropy_control).failed == 0


def test_entropy_of_is_checked() -> None:
    assert check_entropy_of("marginal", adaptive=True) == "marginal"
    with pytest.raises(ValueError, match="'state' or 'marginal'"):
        check_entropy_of("batch", adaptive=True)
    with pytest.raises(ValueError, match="set ent_coef='auto' as well"):
        check_entropy_of("marginal", adaptive=False)


model_dir = tiny_model_fixture("model_dir", ["low", "high"])


def _ppo(model_dir: Path, **kwargs: Any) -> PPO:
    policy = kwargs.pop("policy", {})
    return small_ppo(
        model_dir, "gym_llm/HighLow-v0", policy=policy, n_steps=8, batch_size=16, **kwargs
    )


def test_auto_follows_the_rule_after_every_optimizer_step(model_dir: Path, tmp_path: Path) -> None:
    # near-certain choices at first (temperature 0.01, uncalibrated): entropy far below 0.3 log 2
    policy = {"temperature": 0.01, "choice_calibration": False}
    model = _ppo(model_dir, ent_coef="auto", n_epochs=2, policy=policy)
    steps: list[tuple[float, float]] = []  # (coefficient before, minibatch entropy)
    adapt = model._adapt_ent_coef

    def spy(entropy: float) -> None:
        steps.append((model.ent_coef, entropy))
        adapt(entropy)

    model._adapt_ent_coef = spy
    model.learn(32)
    assert len(steps) == 4  # 2 updates x 2 epochs x 1 minibatch
    target = default_target(2)
    assert steps[0][0] == 0.01 and steps[0][1] < target
    assert steps[1][0] > 0.01  # below the target: it grew
    for (coef, entropy), (after, _) in zip(steps, [*steps[1:], (model.ent_coef, 0.0)], strict=True):
        assert after == pytest.approx(next_ent_coef(coef, entropy, target, 2))
    assert model.logger.name_to_value["train/ent_coef"] == model.ent_coef
    # saved as adaptive, resuming from where it got to
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert loaded.ent_coef_auto and loaded.ent_coef == pytest.approx(model.ent_coef)


def test_auto_needs_a_choice_among_listed_actions(model_dir: Path) -> None:
    free_text = {"action_mode": "generate", "reply_constraint": "off"}
    with pytest.raises(ValueError, match="action_head=True"):
        _ppo(model_dir, ent_coef="auto", policy=free_text)
    with pytest.raises(ValueError, match="target_entropy"):
        _ppo(model_dir, ent_coef="auto", target_entropy=0.0)


def test_generate_mode_holds_the_entropy_of_each_replys_decision(model_dir: Path) -> None:
    policy = {"action_mode": "generate", "action_head": True, "max_new_tokens": 4}
    model = _ppo(model_dir, ent_coef="auto", n_epochs=2, micro_batch_size=16, policy=policy)
    held: list[float] = []
    adapt = model._adapt_ent_coef

    def spy(entropy: float) -> None:
        held.append(entropy)
        adapt(entropy)

    expected: list[float] = []
    evaluate = model.policy.evaluate_actions

    def keep(*args: object, **kwargs: object) -> object:
        ev = evaluate(*args, **kwargs)
        assert ev.decision_log_probs is not None and ev.decision_found is not None
        lp = ev.decision_log_probs.detach()[ev.decision_found]
        expected.append(float(-(lp.exp() * lp).sum(-1).mean()) if len(lp) else 0.0)
        return ev

    model._adapt_ent_coef = spy
    model.policy.evaluate_actions = keep
    model.learn(32)
    assert len(held) == 4  # 2 updates x 2 epochs x 1 minibatch in one pass
    assert held == pytest.approx(expected, abs=1e-6)  # the decision's entropy, not the tokens'
    assert all(0.0 < h <= math.log(2) + 1e-6 for h in held)  # replies named actions
    assert model.logger.name_to_value["train/ent_coef"] == model.ent_coef


def test_nothing_measured_leaves_the_coefficient_alone() -> None:
    assert next_ent_coef(0.02, float("nan"), None, 2) == 0.02
    assert math.isnan(marginal_entropy([torch.zeros((0, 2))]))


def test_marginal_holds_the_entropy_of_the_mean_distribution(
    model_dir: Path, tmp_path: Path
) -> None:
    policy = {"temperature": 0.01, "choice_calibration": False}
    model = _ppo(
        model_dir, ent_coef="auto", target_entropy_of="marginal", n_epochs=2, policy=policy
    )
    seen: list[float] = []
    adapt = model._adapt_ent_coef

    def spy(entropy: float) -> None:
        seen.append(entropy)
        adapt(entropy)

    probs: list[torch.Tensor] = []
    evaluate = model.policy.evaluate_actions

    def keep(*args: object, **kwargs: object) -> object:
        ev = evaluate(*args, **kwargs)
        probs.append(ev.choice_log_probs.detach().exp())
        return ev

    model._adapt_ent_coef = spy
    model.policy.evaluate_actions = keep
    model.learn(32)
    assert len(seen) == 4 and len(probs) == 4  # one pass per minibatch here
    for entropy, p in zip(seen, probs, strict=True):
        assert entropy == pytest.approx(marginal_entropy([p]), abs=1e-6)
    model.save(tmp_path / "agent")
    assert PPO.load(tmp_path / "agent", device="cpu").target_entropy_of == "marginal"
    with pytest.raises(ValueError, match="set ent_coef='auto' as well"):
        _ppo(model_dir, target_entropy_of="marginal")


def _smallest_probability(model: PPO) -> float:
    """The mean over the last rollout's observations of the least likely action's probability,
    under the policy now."""
    import numpy as np

    observations = list(model.rollout_action_probs)
    with torch.no_grad():
        ev = model.policy.evaluate_actions(observations, [np.array([0])] * len(observations))
    assert ev.choice_log_probs is not None
    return float(ev.choice_log_probs.exp().min(-1).values.mean())


@pytest.mark.parametrize("estimator", ["gae", "auto"], ids=["clipped-surrogate", "action-values"])
def test_the_floor_lifts_the_actions_a_certain_policy_has_cornered(
    model_dir: Path, estimator: str
) -> None:
    """The barrier, with either update: the clipped surrogate, or the step onto the action
    values' target (whose cross-entropy pulls the other way). The temperature scales every
    logit step a hundredfold, so the rate is small and the steps many: at 1e-2 the lift
    overshoots, and what it left on a seed was noise (under 0.05 on 7 of 10)."""
    policy = {"temperature": 0.01, "choice_calibration": False, "action_head": False}
    runs, first_floor_loss = {}, {}
    for floor in (0.0, 0.1):
        model = _ppo(
            model_dir, min_action_prob=floor, floor_mode="barrier", n_epochs=8,
            learning_rate=3e-4, policy=policy, advantage_estimator=estimator,
        )  # fmt: skip
        model.learn(16)  # one update, on the cornered policy
        first_floor_loss[floor] = model.logger.name_to_value.get("train/floor_loss")
        model.learn(16, reset_num_timesteps=False)
        runs[floor] = model
    pair = {"gae": ("gae", "clip"), "auto": ("q", "target")}[estimator]  # "auto" resolved here
    assert (runs[0.1].advantage_estimator, runs[0.1].policy_update) == pair
    plain, floored = _smallest_probability(runs[0.0]), _smallest_probability(runs[0.1])
    assert plain < 0.01  # the temperature corners one action in most states ...
    assert floored > 0.05  # ... and the floor lifts it (seeds 0-9: ≤ 3e-4 against ≥ 0.13)
    assert first_floor_loss[0.1] is not None and first_floor_loss[0.1] > 0  # the term pulled
    assert "train/floor_loss" in runs[0.1].logger.name_to_value  # (0 once the floor is met)
    assert (
        first_floor_loss[0.0] is None and "train/floor_loss" not in runs[0.0].logger.name_to_value
    )


def test_the_default_floor_is_on_with_the_action_values_and_saved_as_its_number(
    model_dir: Path, tmp_path: Path
) -> None:
    model = _ppo(model_dir)  # choice mode over two actions: the action values and their target
    assert (model.advantage_estimator, model.policy_update) == ("q", "target")
    assert model.min_action_prob == 0.05
    model.learn(16)
    assert model.floor_mode == "behaviour"  # sampled by the rollout (test_behaviour)
    model.save(tmp_path / "agent")
    assert PPO.load(tmp_path / "agent", device="cpu").min_action_prob == 0.05
    clipped = _ppo(model_dir, policy_update="clip")  # not the pair it was measured with: off
    assert clipped.min_action_prob == 0.0
    policy = {"action_mode": "generate", "reply_constraint": "off", "max_new_tokens": 4}
    assert _ppo(model_dir, policy=policy).min_action_prob == 0.0  # no action values: off


def test_the_floor_is_checked_and_saved(model_dir: Path, tmp_path: Path) -> None:
    for bad in (-0.1, 0.5):
        with pytest.raises(
            ValueError, match=r"min_action_prob must be 'auto' or a number in \[0, 0.5\)"
        ):
            _ppo(model_dir, min_action_prob=bad)
    with pytest.raises(ValueError, match="action_head=True"):
        _ppo(
            model_dir, min_action_prob=0.05,
            policy={"action_mode": "generate", "reply_constraint": "off"},
        )  # fmt: skip
    three = SimpleNamespace(
        scores_listed_actions=True, chooses_among_listed=True, actions_list=["a", "b", "c"]
    )
    check_listed_actions(three, target=False, auto=False, floor=0.3)
    with pytest.raises(ValueError, match="less than 1/3"):  # 3 x 0.4 > 1: all at the floor
        check_listed_actions(three, target=False, auto=False, floor=0.4)
    policy = {"action_mode": "generate", "action_head": True, "max_new_tokens": 4}
    model = _ppo(model_dir, min_action_prob=0.05, policy=policy)
    model.learn(16)  # generate mode: the floor at each reply's decision token
    assert math.isfinite(model.logger.name_to_value["train/floor_loss"])
    buffer = model.rollout_buffer  # its gradient reaches the action head alone
    observations = [str(o) for o in buffer.observations_text.reshape(-1)]
    model.policy.optimizer.zero_grad(set_to_none=True)
    ev = model.policy.evaluate_actions(observations, list(buffer.action_tokens.reshape(-1)))
    floor_loss(ev, 0.999 / 2).backward()  # every reply's decision sits below this floor
    head = model.policy.action_head
    assert head is not None and any(p.grad is not None for p in head.parameters())
    lora = [p for n, p in model.policy.lm.named_parameters() if "lora" in n]
    assert lora and all(p.grad is None for p in lora)
    model.save(tmp_path / "agent")
    assert PPO.load(tmp_path / "agent", device="cpu").min_action_prob == 0.05
