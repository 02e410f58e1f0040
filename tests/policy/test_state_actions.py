"""Choice mode over per-state action sets: each observation brings its own actions, the batch
mixes lists of different lengths, and the log-probs stay exact (invariant 1)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from gym_llm import PPO, LLMPolicy
from gym_llm.envs import TextGameEnv
from gym_llm.policy.state_actions import MASKED_LOGIT, pad_columns, state_groups
from gym_llm.rl.common.vec_env import make_text_env
from gym_llm.spaces import TextActions, TextObservations, TextWithActions, actions_of
from gym_llm.wrappers import ValidActionsWrapper
from tests.builders import HALL, ROOM_WORDS, Rooms
from tests.models import tiny_model_fixture

WORDS = ROOM_WORDS

model_dir = tiny_model_fixture("model_dir", WORDS, layers=4)


def _policy(model_dir: Path, **kwargs: Any) -> LLMPolicy:
    space = TextActions(None, per_state=True, description="Answer with a valid action.")
    return LLMPolicy(
        TextObservations(), space, lambda _: 1e-3, model=str(model_dir), device="cpu", **kwargs
    )


def test_the_wrapper_lists_the_actions_in_the_text_and_carries_them() -> None:
    env = ValidActionsWrapper(TextGameEnv(Rooms))
    text, _ = env.reset(seed=0)
    assert text.actions == ("go north", "wait")
    assert text.endswith("Valid actions: 'go north', 'wait'")
    text, *_ = env.step("go north")
    assert actions_of(text) == ("go south", "sleep", "take gold")  # sorted: one text per state
    assert pickle.loads(pickle.dumps(text)).actions == text.actions
    text, *_ = env.step("take gold")
    assert actions_of(text) == ()  # the last state: nothing to do
    assert env.action_space.per_state and env.action_space.actions is None
    with pytest.raises(TypeError, match="text observations"):
        ValidActionsWrapper(_Numbers())


class _Numbers(TextGameEnv):
    def __init__(self) -> None:
        self.observation_space = spaces.Discrete(2)


def test_rows_are_grouped_by_their_list_and_a_text_means_one_list() -> None:
    a, b = TextWithActions("x", ["p", "q"]), TextWithActions("y", ["r"])
    assert state_groups([a, b, a]) == [(("p", "q"), [0, 2]), (("r",), [1])]
    with pytest.raises(ValueError, match="carries no valid actions"):
        state_groups([a, "plain"])
    with pytest.raises(ValueError, match="two different action lists"):
        state_groups([a, TextWithActions("x", ["p"])])
    padded = pad_columns([torch.zeros(1, 2), torch.zeros(1, 3)], MASKED_LOGIT)
    assert padded.shape == (2, 3) and padded[0, 2] == MASKED_LOGIT


@pytest.mark.parametrize("trunk_cache", [True, False])
def test_log_probs_stay_exact_across_lists_of_different_lengths(
    model_dir: Path, trunk_cache: bool
) -> None:
    policy = _policy(model_dir, trunk_cache_mb=64 if trunk_cache else 0)
    hall = ValidActionsWrapper(TextGameEnv(Rooms))
    first, _ = hall.reset()
    second, *_ = hall.step("go north")
    batch = [first, second, first, second]
    torch.manual_seed(0)
    with torch.no_grad():
        step = policy.act(batch)
        assert step.action_probs is not None
        assert np.allclose(step.action_probs.sum(-1), 1.0)
        assert step.action_probs[0, 2] == 0.0  # the hall has two actions: the third is padding
        for row, obs in enumerate(batch):
            assert step.replies[row] in obs.actions
            assert obs.actions[int(step.actions[row][0])] == step.replies[row]
        stored = np.concatenate(step.token_log_probs)
        for states in (step.states, None):  # from the rollout's states, and the whole model
            again = policy.evaluate_actions(batch, step.actions, states)
            assert np.allclose(again.token_log_probs[:, 0].numpy(), stored, atol=1e-5)
        # The reference: each row alone, scored with its own list and no cache at all.
        for row, obs in enumerate(batch):
            with policy.actions.candidates_for(obs.actions):
                logits, _ = policy.actions.uncached_scores([obs])
            reference = torch.log_softmax(logits, -1)[0, int(step.actions[row][0])]
            assert abs(float(reference) - float(stored[row])) < 1e-5


def test_gradients_flow_to_every_group(model_dir: Path) -> None:
    policy = _policy(model_dir)
    env = ValidActionsWrapper(TextGameEnv(Rooms))
    first, _ = env.reset()
    second, *_ = env.step("go north")
    ev = policy.evaluate_actions(
        [first, second], [np.array([1]), np.array([2])], None
    )  # "wait", "take gold"
    assert ev.choice_log_probs is not None and ev.choice_log_probs.shape == (2, 3)
    assert float(ev.choice_log_probs[0].detach().exp().sum()) == pytest.approx(1.0, abs=1e-5)
    ev.token_log_probs.sum().backward()
    moved = [p.grad for p in policy.parameters() if p.requires_grad and p.grad is not None]
    assert moved and all(torch.isfinite(g).all() for g in moved)


def test_ppo_trains_saves_and_loads_over_per_state_actions(model_dir: Path, tmp_path: Path) -> None:
    env = make_text_env(lambda: ValidActionsWrapper(TextGameEnv(Rooms)), 3, seed=0)
    model = PPO(
        LLMPolicy, env, n_steps=4, batch_size=6, seed=0, device="cpu",
        policy_kwargs={"model": str(model_dir)},
    )  # fmt: skip
    assert model.policy.action_mode == "choice" and model.policy.action_head is None
    model.learn(24)
    assert model.num_timesteps == 24 and model.rollout_action_probs
    model.save(tmp_path / "agent")
    loaded = PPO.load(tmp_path / "agent", device="cpu")
    assert loaded.action_space.per_state
    first, _ = ValidActionsWrapper(TextGameEnv(Rooms)).reset()
    for policy in (model.policy, loaded.policy):
        policy.set_training_mode(False)
    with torch.no_grad():
        ours, theirs = model.policy.act([first]), loaded.policy.act([first])
    assert np.array_equal(ours.action_probs, theirs.action_probs)
    action, _ = loaded.predict(first, deterministic=True)
    assert action in HALL


def test_what_needs_a_fixed_list_is_refused(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="fixed list of actions by index"):
        _policy(model_dir, action_head=True)
    with pytest.raises(ValueError, match="fixed list of actions by index"):
        _policy(model_dir, choice_calibration=True)
    env = make_text_env(lambda: ValidActionsWrapper(TextGameEnv(Rooms)), 1, seed=0)
    with pytest.raises(ValueError, match="own list in every state"):
        PPO(LLMPolicy, env, policy_update="target", policy_kwargs={"model": str(model_dir)})
    from gym_llm import DQN

    with pytest.raises(ValueError, match="per-state action lists"):
        DQN(LLMPolicy, env, policy_kwargs={"model": str(model_dir)})
