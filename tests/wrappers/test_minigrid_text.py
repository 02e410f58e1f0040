"""MiniGrid / BabyAI as text: the formatter on a hand-checked grid, named actions with aliases,
the wrapped env passes Gymnasium's checker, and PPO runs on BabyAI with a tiny model."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper
from gym_llm.wrappers.minigrid_text import describe_view, relative_position

minigrid = pytest.importorskip("minigrid")


def _hand_built() -> gym.Env:
    """A 6 x 6 room, the agent at (1, 1) facing east; a red ball at (3, 1), a yellow key at
    (2, 2), a locked blue door at (1, 3) and the goal EmptyEnv puts at (4, 4)."""
    from minigrid.core.world_object import Ball, Door, Key
    from minigrid.envs import EmptyEnv

    env = EmptyEnv(size=6, agent_start_pos=(1, 1), agent_start_dir=0)
    env.reset(seed=0)
    env.grid.set(3, 1, Ball("red"))
    env.grid.set(2, 2, Key("yellow"))
    env.grid.set(1, 3, Door("blue", is_locked=True))
    return env


def test_the_view_of_a_hand_checked_grid() -> None:
    env = _hand_built()
    obs = env.gen_obs()
    text = describe_view(obs["image"], obs["direction"], obs["mission"])
    assert text == (
        "Mission: get to the green goal square.\n"
        "You face east.\n"
        "Directly in front of you: nothing.\n"
        "You see: a locked blue door 2 to the right; a yellow key 1 step ahead and 1 to the "
        "right; a red ball 2 steps ahead; the goal 3 steps ahead and 3 to the right.\n"
        "Walls: 4 steps ahead, 1 step to the left.\n"  # the view reaches 3 cells to a side
        "You carry nothing."
    )


def test_what_is_in_front_and_what_is_carried_follow_the_agent() -> None:
    from minigrid.core.world_object import Key

    env = _hand_built()
    env.step(env.actions.right)  # face south: the key is now 1 ahead and 1 to the left
    env.step(env.actions.forward)  # (1, 2): the door is directly in front
    obs = env.gen_obs()
    text = describe_view(obs["image"], obs["direction"], obs["mission"], Key("purple"))
    assert "You face south." in text
    assert "Directly in front of you: a locked blue door." in text
    assert "a yellow key 1 to the left" in text
    assert text.endswith("You carry a purple key.")


def test_relative_positions() -> None:
    assert relative_position(3, 6) == "where you stand"
    assert relative_position(3, 5) == "1 step ahead"
    assert relative_position(0, 4) == "2 steps ahead and 3 to the left"


def test_babyai_is_text_in_text_out_with_named_actions() -> None:
    env = ActionParserWrapper(TextObservationWrapper(gym.make("BabyAI-GoToObj-v0")))
    text, _ = env.reset(seed=0)
    assert text.startswith("Mission: go to the") and "You face" in text
    assert len(text) < 400  # not 553 characters of nested numbers
    assert env.action_space.actions == (
        "left", "right", "forward", "pickup", "drop", "toggle", "done"
    )  # fmt: skip
    assert "'toggle' opens or closes the door" in (env.observation_space.instruction or "")
    for reply, action in [("turn left", 0), ("I will move forward.", 2), ("pick up", 3)]:
        assert env.step(reply)[4]["action"] == action
    check_env(env, skip_render_check=True)


def test_generic_formatter_reads_the_mission_space_as_text() -> None:
    from gym_llm.wrappers.formatters import format_observation, is_text_space

    space = gym.make("BabyAI-GoToObj-v0").observation_space
    assert isinstance(space, gym.spaces.Dict)
    assert is_text_space(space["mission"])
    obs = space.sample()
    assert f"mission: {obs['mission']}" in format_observation(space, obs)


def test_ppo_steps_on_babyai(tiny_model_dir: Path) -> None:
    from gym_llm import PPO, make_text_env

    env = make_text_env("BabyAI-GoToObj-v0", 2, seed=0)
    model = PPO(
        "LLMPolicy", env, n_steps=2, batch_size=4, n_epochs=1,
        policy_kwargs={"model": str(tiny_model_dir)}, seed=0,
    )  # fmt: skip
    model.learn(4)
    assert model.num_timesteps == 4 and np.isfinite(model.first_ratio_error)
