"""Constrained replies in generate mode: every reply is a listed action, the update applies the
sampling mask again (the ratio stays exact), greedy evaluation keeps the mask, per-state lists
have their own tries, and the valid mass is logged."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from stable_baselines3.common.logger import Logger

from gym_llm import PPO, LLMPolicy, make_text_env
from gym_llm.envs import TextGameEnv
from gym_llm.policy.choice import CONTENT_FREE_OBSERVATION
from gym_llm.policy.constraints import (
    ActionTrie,
    allowed_mask,
    masked,
    node_bias,
    reply_masks,
    valid_mass,
)
from gym_llm.policy.state_actions import MASKED_LOGIT
from gym_llm.spaces import TextActions, TextObservations
from gym_llm.wrappers import ValidActionsWrapper
from tests.builders import ROOM_WORDS, Rooms, small_ppo
from tests.models import tiny_model_fixture

model_dir = tiny_model_fixture("model_dir", ["stick", "hit", "go", "north", "south", "wait"])
rooms_dir = tiny_model_fixture("rooms_dir", ROOM_WORDS, layers=4)
compass_dir = tiny_model_fixture("compass_dir", ["north", "south", "east", "west"])


# --- the trie and the masks, without a model -----------------------------------------------


def test_the_trie_allows_what_continues_an_action_and_ends_replies() -> None:
    trie = ActionTrie([[5], [5, 6], [7, 8]], stop_id=0)
    assert trie.allowed([]) == {5, 7}
    assert trie.allowed([5]) == {6, 0}  # "5" is an action, "5 6" continues it: stop may end it
    assert trie.allowed([7]) == {8}
    assert not trie.finished([5]) and trie.finished([5, 6]) and trie.finished([7, 8])
    assert trie.finished([5, 0])  # ended by the stop token
    with pytest.raises(ValueError, match="at least one token"):
        ActionTrie([[]], stop_id=0)


def test_masks_follow_each_reply_position_by_position() -> None:
    trie = ActionTrie([[1, 2], [3]], stop_id=0)
    mask = allowed_mask([trie, trie], [[], [1]], vocab=5, device="cpu")
    assert mask.tolist() == [[False, True, False, True, False], [False, False, True, False, False]]
    replies = [np.array([1, 2]), np.array([3])]
    per_position = reply_masks([trie, trie], replies, width=2, vocab=5, device="cpu")
    assert per_position[0, 1].tolist() == [False, False, True, False, False]
    assert per_position[1, 1].all()  # past the reply's end: not scored
    logits = torch.zeros(2, 5)
    out = masked(logits, mask)
    assert out[0, 0] == MASKED_LOGIT and out[0, 1] == 0.0
    assert torch.exp(torch.log_softmax(out, -1))[0, 0] == 0.0  # exactly 0 in float32
    mass = valid_mass(torch.log_softmax(logits, -1), mask)
    assert torch.allclose(mass, torch.tensor([0.4, 0.2]))


# --- a policy that writes only listed actions ------------------------------------------------


def _blackjack_policy(model_dir: Path, **kwargs: Any) -> LLMPolicy:
    env = make_text_env("Blackjack-v1", n_envs=1, env_kwargs={"sab": False}, seed=0)
    return LLMPolicy(
        env.observation_space,
        env.action_space,
        lambda _: 1e-3,
        model=str(model_dir),
        device="cpu",
        **{
            "action_mode": "generate",
            "lora": {"r": 4},
            "max_new_tokens": 6,
            "temperature": 3.0,  # a hot policy: the unmasked one would write anything
            **kwargs,
        },
    )


OBSERVATIONS = [
    "Your hand totals 15. Usable ace: no.\nThe dealer shows a 10.",
    "Your hand totals 20. Usable ace: no.\nThe dealer shows a 4.",
    "Your hand totals 15. Usable ace: no.\nThe dealer shows a 10.",
]


@pytest.mark.parametrize("reuse_states", [True, False])
def test_every_reply_is_an_action_and_the_update_scores_it_under_the_same_mask(
    model_dir: Path, reuse_states: bool
) -> None:
    policy = _blackjack_policy(
        model_dir, reply_constraint="action", reuse_rollout_states=reuse_states,
        # The masked policy alone (no calibration, no head), to compare with the free one.
        choice_calibration=False, action_head=False,
    )  # fmt: skip
    torch.manual_seed(0)
    with torch.no_grad():
        step = policy.act(OBSERVATIONS * 4)
        greedy = policy.act(OBSERVATIONS, deterministic=True)
    assert {str(r) for r in step.replies} <= {"stick", "hit"}
    assert {str(r) for r in greedy.replies} <= {"stick", "hit"}
    assert step.valid_mass is not None and ((step.valid_mass > 0) & (step.valid_mass <= 1)).all()
    policy.set_training_mode(True)
    again = policy.evaluate_actions(OBSERVATIONS * 4, step.actions, step.states)
    for i, stored in enumerate(step.token_log_probs):  # invariant 1, with the mask
        got = again.token_log_probs[i][again.mask[i]].detach().numpy()
        np.testing.assert_allclose(got, stored, atol=1e-5)
    assert torch.isfinite(again.entropy).all()
    free = _blackjack_policy(model_dir, reuse_rollout_states=reuse_states, reply_constraint="off")
    free.load_state_dict(policy.state_dict())
    with torch.no_grad():
        unmasked = free.evaluate_actions(OBSERVATIONS * 4, step.actions, None)
    assert (again.token_log_probs.detach() >= unmasked.token_log_probs - 1e-6).all()


def test_ppo_learns_with_exact_ratios_and_no_invalid_reply(model_dir: Path) -> None:
    policy = {"action_mode": "generate", "reply_constraint": "action", "max_new_tokens": 6}
    model = small_ppo(
        model_dir, "Blackjack-v1", n_envs=2, policy=policy, n_steps=8, batch_size=16,
        n_epochs=2, learning_rate=1e-3,
    )  # fmt: skip
    logger = Logger(folder=None, output_formats=[])
    model.set_logger(logger)
    seen: dict[str, float] = {}
    record = logger.record

    def keep(key: str, value: Any, exclude: Any = None) -> None:
        if isinstance(value, int | float):
            seen[key] = float(value)
        record(key, value, exclude)

    logger.record = keep
    model.learn(32)
    assert model.first_ratio_error < 1e-5  # the stored log-probs are the update's
    assert seen["rollout/invalid_action_rate"] == 0.0
    assert 0.0 < seen["rollout/valid_mass"] <= 1.0


def test_per_state_lists_constrain_each_reply_to_its_own_actions(rooms_dir: Path) -> None:
    space = TextActions(None, per_state=True, description="Answer with a valid action.")
    policy = LLMPolicy(
        TextObservations(), space, lambda _: 1e-3, model=str(rooms_dir), device="cpu",
        action_mode="generate", reply_constraint="action", max_new_tokens=6, temperature=3.0,
    )  # fmt: skip
    env = ValidActionsWrapper(TextGameEnv(Rooms))
    hall, _ = env.reset()
    vault, *_ = env.step("go north")
    batch = [hall, vault, hall, vault] * 3
    torch.manual_seed(0)
    with torch.no_grad():
        step = policy.act(batch)
    for obs, reply in zip(batch, step.replies, strict=True):
        assert str(reply) in obs.actions
    again = policy.evaluate_actions(batch, step.actions, step.states)
    for i, stored in enumerate(step.token_log_probs):
        got = again.token_log_probs[i][again.mask[i]].detach().numpy()
        np.testing.assert_allclose(got, stored, atol=1e-5)


def test_the_constraint_is_refused_where_it_cannot_apply(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="choice mode scores the listed actions already"):
        _blackjack_policy(model_dir, reply_constraint="action", action_mode="choice")
    with pytest.raises(ValueError, match="needs an env that lists its actions"):
        LLMPolicy(
            TextObservations(), TextActions(max_length=16), lambda _: 1e-3, model=str(model_dir),
            device="cpu", action_mode="generate", reply_constraint="action",
        )  # fmt: skip


def test_numbers_whose_spellings_continue_each_other_end_at_the_stop_token(
    model_dir: Path,
) -> None:
    env = make_text_env("gym_llm/GuessNumber-v0", n_envs=1, seed=0)
    numbers = set(env.action_space.actions)  # "1" ... "16": "1" is a prefix of "12"
    policy = LLMPolicy(
        env.observation_space, env.action_space, lambda _: 1e-3, model=str(model_dir),
        device="cpu", action_mode="generate", reply_constraint="action", max_new_tokens=8,
        temperature=3.0,
    )  # fmt: skip
    observations = [str(o) for o in np.asarray(env.reset())] * 24
    torch.manual_seed(0)
    with torch.no_grad():
        step = policy.act(observations)
    assert {str(r) for r in step.replies} <= numbers
    assert len({str(r) for r in step.replies}) > 3  # hot: many numbers, short and long
    again = policy.evaluate_actions(observations, step.actions, step.states)
    for i, stored in enumerate(step.token_log_probs):
        got = again.token_log_probs[i][again.mask[i]].detach().numpy()
        np.testing.assert_allclose(got, stored, atol=1e-5)


def test_calibration_sets_even_odds_after_the_content_free_observation(model_dir: Path) -> None:
    trie = ActionTrie([[5], [5, 6], [7, 8]], stop_id=0)
    assert trie.replies() == [(5, 0), (5, 6), (7, 8)]  # "5" is closed by the stop token
    trie.set_bias([(5, 0), (7, 8)], [[-0.1, -2.0], [-2.3, 0.0]])
    bias = node_bias([trie], [[]], vocab=9, device="cpu")
    assert (
        bias is not None and bias[0, 5] == pytest.approx(0.1) and bias[0, 7] == pytest.approx(2.3)
    )
    assert node_bias([ActionTrie([[1]], stop_id=0)], [[]], vocab=2, device="cpu") is None

    policy = _blackjack_policy(model_dir, reply_constraint="action")  # calibrated by default
    assert policy.calibrated
    with torch.no_grad():
        out = policy.evaluate_actions(
            [CONTENT_FREE_OBSERVATION] * 2,
            [np.asarray(r) for r in policy.actions.constraint.trie(policy.actions_list).replies()],
        )
    totals = (out.token_log_probs * out.mask).sum(-1).exp()
    assert torch.allclose(totals, torch.full((2,), 0.5), atol=1e-4)  # even odds there


def test_a_saved_agent_keeps_its_constrained_and_calibrated_replies(
    model_dir: Path, tmp_path: Path
) -> None:
    policy = {"action_mode": "generate", "reply_constraint": "action", "max_new_tokens": 6}
    model = small_ppo(model_dir, "Blackjack-v1", policy=policy, n_steps=4, batch_size=8, n_epochs=1)
    model.learn(8)
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert loaded.policy.calibrated and loaded.policy.actions.constraint is not None
    replies = [
        np.asarray(r) for r in loaded.policy.actions.constraint.trie(("stick", "hit")).replies()
    ]
    with torch.no_grad():
        a = model.policy.evaluate_actions(OBSERVATIONS[:2], replies)
        b = loaded.policy.evaluate_actions(OBSERVATIONS[:2], replies)
    torch.testing.assert_close(a.token_log_probs, b.token_log_probs, atol=1e-5, rtol=0)


# --- the default ------------------------------------------------------------------------------


@pytest.mark.parametrize(("asked", "in_effect"), [("auto", "action"), ("off", "off")])
def test_generate_mode_constrains_listed_actions_by_default_and_saves_it(
    model_dir: Path, tmp_path: Path, asked: str, in_effect: str
) -> None:
    policy = {"action_mode": "generate", "max_new_tokens": 4, "reply_constraint": asked}
    model = small_ppo(model_dir, "Blackjack-v1", policy=policy, n_steps=4, batch_size=8)
    assert model.policy.reply_constraint == in_effect
    # over a fixed list, constrained replies are calibrated and headed as choice mode is
    assert (model.policy.action_head is not None) == (in_effect == "action")
    assert model.policy.calibrated == (in_effect == "action")
    model.learn(8)
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert loaded.policy.reply_constraint == in_effect
    step = loaded.policy.act(OBSERVATIONS, deterministic=True)
    if in_effect == "action":
        assert {str(r) for r in step.replies} <= {"stick", "hit"}


# --- replies that match a pattern (gym_llm.grammar) ---------------------------------------


def _pattern_policy(compass_dir: Path, space: TextActions, **kwargs: object) -> LLMPolicy:
    return LLMPolicy(
        TextObservations(64),
        space,
        lambda _: 1e-3,
        model=str(compass_dir),
        device="cpu",
        action_mode="generate",
        lora={"r": 4},
        max_new_tokens=6,
        temperature=3.0,
        **kwargs,
    )


@pytest.mark.parametrize(
    ("declared", "pattern"),
    [
        ("env", "(north|south) (east|west)"),
        ("user", "(north|south) (east|west)"),
        ("env", "[a-z]{5}"),  # a Wordle-like guess: any word of five letters
        ("user", "[1-9][0-9]?|100"),  # a number in 1-100, GuessNumber-like
    ],
)
def test_a_policy_writes_only_matches_and_the_update_applies_the_same_mask(
    compass_dir: Path, declared: str, pattern: str
) -> None:
    if declared == "env":
        policy = _pattern_policy(compass_dir, TextActions(pattern=pattern))
    else:
        policy = _pattern_policy(compass_dir, TextActions(), reply_pattern=pattern)
    assert policy.reply_constraint == "pattern"
    observations = ["Where now?", "The door is north.", "Where now?"] * 3
    torch.manual_seed(0)
    with torch.no_grad():
        step = policy.act(observations)
        greedy = policy.act(observations, deterministic=True)
    for reply in [*step.replies, *greedy.replies]:
        assert re.fullmatch(pattern, str(reply)), reply
    policy.set_training_mode(True)
    again = policy.evaluate_actions(observations, step.actions, step.states)
    for i, stored in enumerate(step.token_log_probs):  # invariant 1 under the pattern's mask
        got = again.token_log_probs[i][again.mask[i]].detach().numpy()
        np.testing.assert_allclose(got, stored, atol=1e-5)


def test_free_text_stays_free_without_a_pattern(compass_dir: Path) -> None:
    assert _pattern_policy(compass_dir, TextActions()).reply_constraint == "off"
    with pytest.raises(ValueError, match="needs a pattern"):
        _pattern_policy(compass_dir, TextActions(), reply_constraint="pattern")


def test_a_pattern_the_user_gives_wins_over_the_env_list(compass_dir: Path) -> None:
    listed = TextActions(["north", "south"])
    assert _pattern_policy(compass_dir, listed).reply_constraint == "action"
    think = _pattern_policy(compass_dir, listed, reply_pattern="(east |west )?(north|south)")
    assert think.reply_constraint == "pattern" and think.action_head is None
    with torch.no_grad():
        step = think.act(["Where now?"] * 4)
    assert all(re.fullmatch("(east |west )?(north|south)", str(r)) for r in step.replies)
