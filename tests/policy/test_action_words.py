"""The action head in generate mode: which tokens it raises, that it starts as the LM, that it
moves replies at every position, and that it trains with exact ratios and is saved (tiny model).
The update from stored states is checked against the whole model in test_top_layers."""

from __future__ import annotations

import doctest
from pathlib import Path

import numpy as np
import pytest
import torch

import gym_llm.policy.action_words
from gym_llm import PPO, LLMPolicy
from gym_llm.policy.action_words import (
    ActionWords,
    action_words,
    decision_log_probs,
    decisions,
    distinguishing_tokens,
)
from gym_llm.spaces import TextActions, TextObservations
from gym_llm.testing import make_tiny_tokenizer
from tests.builders import learn_and_check_head, small_ppo
from tests.models import tiny_model_fixture

WORDS = ["low", "high"]
OBS = ["The number is 2.", "The number is 8.", "The number is 5."]


model_dir = tiny_model_fixture("model_dir", WORDS)


def _ppo(model_dir: Path, head: bool | None, **policy: object) -> PPO:
    """Generate mode writing free text (the head's words are what it raises there)."""
    policy = {"action_mode": "generate", "max_new_tokens": 4, "action_head": head,
              "reply_constraint": "off", **policy}  # fmt: skip
    return small_ppo(
        model_dir, "gym_llm/HighLow-v0", policy=policy, n_steps=8, batch_size=16, n_epochs=2,
        learning_rate=1e-2,
    )  # fmt: skip


def test_docstring_examples() -> None:
    assert doctest.testmod(gym_llm.policy.action_words).failed == 0


def test_distinguishing_tokens_find_where_a_reply_commits() -> None:
    assert distinguishing_tokens([[1], [2]]) == [1, 2]
    assert distinguishing_tokens([[5, 1, 3], [5, 1, 4], [5, 2]]) == [3, 4, 2]
    assert distinguishing_tokens([[5, 1], [5, 1]]) == [None, None]  # the same spelling


def test_scores_are_added_at_their_actions_tokens_with_gradients() -> None:
    words = ActionWords(torch.tensor([1, 3, 4]), torch.tensor([0, 1, 0]))
    scores = torch.tensor([[2.0, -1.0], [0.5, 0.0]], requires_grad=True)
    out = words.add(torch.zeros(2, 6), scores)  # centred over the actions
    assert out.tolist() == [[0, 1.5, 0, -1.5, 1.5, 0], [0, 0.25, 0, -0.25, 0.25, 0]]
    assert torch.equal(words.add(torch.zeros(2, 6), scores + 7.0), out)  # no common part
    out3 = words.add(torch.ones(2, 3, 6), scores)  # every position alike
    assert torch.equal(out3, (out + 1).unsqueeze(1).expand(-1, 3, -1))
    out3[:, :, 1].sum().backward()  # token 1 belongs to action 0, at 3 positions
    assert scores.grad is not None and scores.grad.tolist() == [[1.5, -1.5], [1.5, -1.5]]


def test_the_decision_is_the_choice_at_the_first_token_that_names_an_action() -> None:
    words = ActionWords(torch.tensor([4, 5, 6]), torch.tensor([0, 1, 0]))  # two spell action 0
    logits = torch.randn(3, 4, 9, requires_grad=True)
    reply = torch.tensor([[1, 5, 4, 2], [2, 3, 3, 6], [6, 1, 2, 3]])
    valid = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    lp, found = decision_log_probs(logits, reply, valid, words, 2, temperature=0.5)
    assert found.tolist() == [True, False, True]  # row 1's action word is padding
    for row, position in ((0, 1), (2, 0)):  # by hand: each action's tokens' mass, renormalised
        p = torch.softmax(logits[row, position].detach() / 0.5, -1)
        mass = torch.stack([p[4] + p[6], p[5]])
        assert torch.allclose(lp[row].exp(), mass / mass.sum(), atol=1e-6)
    assert torch.allclose(lp[1].exp(), torch.full((2,), 0.5))  # no decision: uniform
    (-(lp[0].exp() * lp[0]).sum()).backward()  # its entropy reaches only that position's words
    assert logits.grad is not None
    touched = logits.grad.abs().sum(0).nonzero().tolist()
    assert {tuple(t) for t in touched} <= {(1, 4), (1, 5), (1, 6)}


def test_the_head_only_decision_has_the_same_value_and_moves_only_the_head() -> None:
    words = ActionWords(torch.tensor([4, 5, 6]), torch.tensor([0, 1, 0]))
    logits = torch.randn(2, 3, 9, requires_grad=True)
    scores = torch.randn(2, 2, requires_grad=True)
    reply = torch.tensor([[1, 5, 2], [6, 1, 2]])
    valid = torch.ones(2, 3, dtype=torch.bool)
    whole, _ = decision_log_probs(words.add(logits, scores), reply, valid, words, 2)
    by_head, _ = decision_log_probs(logits.detach(), reply, valid, words, 2, scores=scores)
    assert torch.allclose(whole, by_head, atol=1e-6)
    by_head[:, 1].sum().backward()
    assert logits.grad is None and scores.grad is not None and scores.grad.abs().sum() > 0


def test_action_words_are_each_actions_own_tokens() -> None:
    tokenizer = make_tiny_tokenizer(WORDS)
    words = action_words(tokenizer, WORDS)
    by_action = {k: [tokenizer.decode([int(t)]).strip() for t, o in
                     zip(words.ids, words.owners, strict=True) if int(o) == k]
                 for k in range(2)}  # fmt: skip
    assert "low" in by_action[0] and "high" in by_action[1]
    assert all(t.lower().startswith("l") for t in by_action[0])  # nothing of "high"'s
    # a character-level tokenizer: the first letters are all there is, and they differ
    chars = action_words(make_tiny_tokenizer([]), ["apple", "banana"])
    assert len(set(chars.owners.tolist())) == 2
    with pytest.raises(ValueError, match=r"\['go', 'go'\] share all"):
        action_words(tokenizer, ["go", "go"])


def test_the_head_needs_a_fixed_list_of_actions(model_dir: Path) -> None:
    free = TextActions(max_length=16)  # free text: no words to raise
    with pytest.raises(ValueError, match="lists none"):
        LLMPolicy(TextObservations(64), free, lambda _: 1e-3, model=str(model_dir),
                  action_mode="generate", action_head=True)  # fmt: skip
    per_state = TextActions(max_length=16, per_state=True)
    with pytest.raises(ValueError, match="per_state=True"):
        LLMPolicy(TextObservations(64), per_state, lambda _: 1e-3, model=str(model_dir),
                  action_mode="generate", action_head=True)  # fmt: skip
    with pytest.raises(ValueError, match="choice_calibration needs choice mode"):
        _ppo(model_dir, None, choice_calibration=True)


def test_free_text_keeps_the_head_off_unless_asked(model_dir: Path) -> None:
    model = _ppo(model_dir, None)
    assert model.policy.action_head is None and model.policy.action_words is None


def test_constrained_replies_have_the_head_by_default(model_dir: Path) -> None:
    model = _ppo(model_dir, None, reply_constraint="auto")
    assert model.policy.reply_constraint == "action"
    assert model.policy.action_head is not None and model.policy.action_words is not None


def test_a_fresh_head_samples_what_the_lm_samples(model_dir: Path) -> None:
    steps = []
    for head in (True, False):
        policy = _ppo(model_dir, head).policy
        torch.manual_seed(3)
        with torch.inference_mode():
            steps.append(policy.act(OBS * 2))
    with_head, without = steps
    assert with_head.replies == without.replies
    for a, b in zip(with_head.token_log_probs, without.token_log_probs, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_the_head_raises_its_words_at_every_position(model_dir: Path) -> None:
    policy = _ppo(model_dir, True).policy
    assert policy.action_head is not None and policy.action_words is not None
    with torch.no_grad():
        policy.action_head.linear.bias.copy_(torch.tensor([-40.0, 40.0]))  # "high" everywhere
    observations = [*OBS, OBS[0]]  # a repeated prompt: the update shares its row
    with torch.inference_mode():
        step = policy.act(observations)
    high = set(policy.action_words.ids[policy.action_words.owners == 1].tolist())
    for tokens in step.actions:
        assert len(tokens) == 4 and set(tokens.tolist()) <= high
    assert step.states is not None
    policy.set_training_mode(True)  # every update path sees the sampler's numbers
    for rows, states in [(4, step.states), (3, step.states[:3]), (4, None)]:
        with torch.no_grad():
            ev = policy.evaluate_actions(observations[:rows], step.actions[:rows], states)
        for i, stored in enumerate(step.token_log_probs[:rows]):
            np.testing.assert_allclose(ev.token_log_probs[i, : len(stored)], stored, atol=1e-5)


def test_learning_calibrates_and_moves_the_head_with_exact_ratios(
    model_dir: Path, tmp_path: Path
) -> None:
    model = _ppo(model_dir, True)
    learn_and_check_head(model)
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert loaded.policy.action_words is not None
    torch.manual_seed(0)
    with torch.inference_mode():
        step = model.policy.act(OBS)
    for policy in (model.policy, loaded.policy):
        policy.set_training_mode(False)
    with torch.no_grad():
        ours = model.policy.evaluate_actions(OBS, step.actions).token_log_probs
        theirs = loaded.policy.evaluate_actions(OBS, step.actions).token_log_probs
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def _mass(logits: torch.Tensor, words: ActionWords, temperature: float = 1.0) -> torch.Tensor:
    """Each action's share of its words' probability at every position, by hand."""
    p = torch.softmax(logits / temperature, -1)[..., words.ids]
    return torch.stack([p[..., words.owners == k].sum(-1) for k in range(2)], -1)


@pytest.mark.parametrize("scale", [0.0, 0.5])
def test_the_prior_scale_shrinks_the_lms_odds_among_the_actions(scale: float) -> None:
    words = ActionWords(torch.tensor([4, 5, 6]), torch.tensor([0, 1, 0]), prior_scale=scale)
    plain = ActionWords(words.ids, words.owners)
    torch.manual_seed(0)
    logits = torch.randn(3, 4, 9) * 3
    zero = torch.zeros(3, 2)
    before, after = _mass(plain.add(logits, zero), plain), _mass(words.add(logits, zero), words)
    odds = (before[..., 0] / before[..., 1]).log()
    torch.testing.assert_close((after[..., 0] / after[..., 1]).log(), scale * odds)
    # the actions' total mass at each position (whether a reply names one there) stays close:
    # only the split between them moves, so a token outside the action words keeps its logit
    moved = words.add(logits, zero) - logits
    assert moved[..., [0, 1, 2, 3, 7, 8]].abs().max() == 0
    head = torch.tensor([[1.0, -1.0]] * 3)
    ruled = _mass(words.add(logits, head), words)  # the head adds its centred scores on top
    torch.testing.assert_close((ruled[..., 0] / ruled[..., 1]).log(), scale * odds + 2.0)


@pytest.mark.parametrize("scale", [1.0, 0.5, 0.0])
def test_the_decision_is_what_the_sampler_samples_at_any_prior_scale(scale: float) -> None:
    words = ActionWords(torch.tensor([4, 5, 6]), torch.tensor([0, 1, 0]), prior_scale=scale)
    torch.manual_seed(1)
    logits = (torch.randn(2, 3, 9) * 3).requires_grad_()
    scores = torch.randn(2, 2, requires_grad=True)
    reply = torch.tensor([[1, 5, 2], [6, 1, 2]])  # decisions at positions 1 and 0
    valid = torch.ones(2, 3, dtype=torch.bool)
    lp, found = decision_log_probs(logits, reply, valid, words, 2, 0.7, scores)
    assert found.tolist() == [True, True]
    sampled = _mass(words.add(logits, scores), words, 0.7)  # what the sampler's softmax gives
    for row, position in ((0, 1), (1, 0)):
        share = sampled[row, position] / sampled[row, position].sum()
        torch.testing.assert_close(lp[row].exp(), share)
    whole, by_head, _ = decisions(logits, reply, valid, words, 2, 0.7, scores)
    torch.testing.assert_close(whole, lp)
    torch.testing.assert_close(by_head, lp)
    by_head[:, 0].sum().backward()
    assert logits.grad is None and scores.grad is not None


def test_at_prior_scale_zero_a_fresh_head_gives_even_odds_and_trains_exactly(
    model_dir: Path, tmp_path: Path
) -> None:
    model = _ppo(model_dir, True, action_prior_scale=0.0)
    policy = model.policy
    assert policy.action_words is not None and policy.action_words.prior_scale == 0.0
    torch.manual_seed(0)
    with torch.inference_mode():
        step = policy.act(OBS * 3)
    assert step.states is not None
    policy.set_training_mode(True)
    for states in (step.states, None):  # from stored states and through the whole model
        with torch.no_grad():
            ev = policy.evaluate_actions(OBS * 3, step.actions, states)
        for i, stored in enumerate(step.token_log_probs):
            np.testing.assert_allclose(ev.token_log_probs[i, : len(stored)], stored, atol=1e-5)
    named = [np.array([2, int(t)]) for t in policy.action_words.ids]  # each word, 2nd token
    with torch.no_grad():
        ev = policy.evaluate_actions([OBS[0]] * len(named), named)
    assert ev.decision_log_probs is not None and ev.decision_found is not None
    assert bool(ev.decision_found.all())
    even = torch.full_like(ev.decision_log_probs, 0.5)
    torch.testing.assert_close(ev.decision_log_probs.exp(), even)
    model.learn(16)
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert loaded.policy.action_words is not None
    assert loaded.policy.action_words.prior_scale == 0.0


def test_the_prior_scale_needs_the_generate_mode_head(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="needs action_mode='generate' and action_head=True"):
        _ppo(model_dir, None, action_prior_scale=0.5)
    with pytest.raises(ValueError, match=r"in \[0, 1\], got 1.5"):
        _ppo(model_dir, True, action_prior_scale=1.5)
