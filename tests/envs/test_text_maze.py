"""``gym_llm/TextMaze-v0``: API conformance, seeding, text, and exact values that agree with
simulated play."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import gym_llm
from gym_llm.envs import DescribesItself
from gym_llm.envs.text_maze import DEFAULT_LAYOUT, TextMazeEnv
from gym_llm.evaluation.exact import (
    TabularModel,
    exact_optimum,
    exact_policy_value,
    exact_random_value,
)
from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper

ENV_ID = "gym_llm/TextMaze-v0"


def test_registered_and_checked_by_gymnasium_and_sb3() -> None:
    env = gym.make(ENV_ID)
    assert isinstance(env.unwrapped, TextMazeEnv)
    assert isinstance(env.unwrapped, DescribesItself)
    assert env.spec is not None and env.spec.max_episode_steps == 50
    check_env(env.unwrapped)
    sb3_check_env(TextMazeEnv(), warn=True)
    check_env(ActionParserWrapper(TextObservationWrapper(gym.make(ENV_ID))))


def test_text_has_the_map_position_and_open_directions() -> None:
    vec = gym_llm.make_text_env(ENV_ID, n_envs=1, seed=0)
    instruction = vec.observation_space.instruction
    assert "\n".join(DEFAULT_LAYOUT) in instruction and "row 0, column 4" in instruction
    assert vec.action_space.actions == ("north", "east", "south", "west")
    env = TextMazeEnv()
    assert env.describe(0) == "You are at row 0, column 0. Open directions: east, south."
    assert env.describe(env.goal) == "You are at row 0, column 4: you reached the goal."


def test_walls_cost_a_step_and_keep_you_in_place() -> None:
    env = TextMazeEnv()
    env.reset(seed=0)
    env._state = 0
    obs, reward, terminated, _, info = env.step(0)  # north: the edge of the map
    assert (int(obs), reward, terminated, info["hit_wall"]) == (0, -1.0, False, True)
    obs, *_ = env.step(1)  # east
    assert int(obs) == 1


def test_seeded_starts_repeat_and_cover_the_maze() -> None:
    env = TextMazeEnv()
    first = [int(env.reset(seed=s)[0]) for s in range(60)]
    assert first == [int(env.reset(seed=s)[0]) for s in range(60)]
    assert set(first) <= set(env.starts) and len(set(first)) > 10


def _shortest_paths(layout: tuple[str, ...]) -> dict[tuple[int, int], int]:
    """Independent BFS over the layout strings."""
    goal = next((r, c) for r, row in enumerate(layout) for c, ch in enumerate(row) if ch == "G")
    dist, queue = {goal: 0}, deque([goal])
    while queue:
        r, c = queue.popleft()
        for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            inside = 0 <= nr < len(layout) and 0 <= nc < len(layout[0])
            if inside and layout[nr][nc] != "#" and (nr, nc) not in dist:
                dist[(nr, nc)] = dist[(r, c)] + 1
                queue.append((nr, nc))
    return dist


def test_optimum_is_minus_the_mean_shortest_path() -> None:
    dist = _shortest_paths(DEFAULT_LAYOUT)
    starts = [d for d in dist.values() if d > 0]
    assert len(starts) == 17
    assert exact_optimum(ENV_ID) == pytest.approx(-np.mean(starts), abs=1e-12)  # -100/17
    assert TextMazeEnv().optimal_return == pytest.approx(-100 / 17)
    assert -50 < exact_random_value(ENV_ID) < exact_optimum(ENV_ID)


def _simulate(policy: Callable[[TextMazeEnv], int], episodes: int) -> np.ndarray:
    env = gym.make(ENV_ID)
    maze: Any = env.unwrapped
    returns = np.zeros(episodes)
    for episode in range(episodes):
        env.reset(seed=episode)
        done = False
        while not done:
            _, reward, terminated, truncated, _ = env.step(policy(maze))
            returns[episode] += float(reward)
            done = terminated or truncated
    return returns


def _table(env: TextMazeEnv, policy: Callable[[TextMazeEnv], int]) -> np.ndarray:
    table = np.full((env.observation_space.n, 4), 0.25)
    for state in env.starts:
        env._state = state
        table[state] = 0.0
        table[state, policy(env)] = 1.0
    return table


def _east_then_north(env: TextMazeEnv) -> int:
    """A poor fixed policy: east when open, else north (it loops and times out from some cells)."""
    return 1 if "east" in env.open_directions(env._state) else 0


@pytest.mark.parametrize(
    "name, policy",
    [
        ("reference", TextMazeEnv.reference_action),
        ("east-north", _east_then_north),
        ("random", None),
    ],
)
def test_exact_values_match_simulation(name: str, policy: Any) -> None:
    env = gym.make(ENV_ID)
    model = TabularModel.of(env)
    if policy is None:
        rng = np.random.default_rng(0)
        exact = model.value(np.full(model.reward.shape, 0.25))
        returns = _simulate(lambda e: int(rng.integers(4)), 3000)
    else:
        exact = model.value(_table(env.unwrapped, policy))
        returns = _simulate(policy, 3000)
    sem = returns.std() / np.sqrt(len(returns))
    assert abs(returns.mean() - exact) < 4 * sem + 1e-9, (name, exact, returns.mean())


def test_reference_action_is_optimal_and_exact_llm_evaluation_agrees() -> None:
    env = TextMazeEnv()
    model = TabularModel.of(gym.make(ENV_ID))
    assert model.value(_table(env, TextMazeEnv.reference_action)) == pytest.approx(
        model.optimum(), abs=1e-12
    )

    class Agent:
        def __init__(self) -> None:
            self.state_of_text = {env.describe(s): s for s in env.starts}
            self.asked = 0

        def predict(self, observations: list[str], deterministic: bool = True) -> tuple[Any, None]:
            self.asked += len(observations)
            replies = []
            for text in observations:
                env._state = self.state_of_text[text]
                replies.append(f"I go {env.action_names[env.reference_action()]}.")
            return replies, None

    agent = Agent()
    assert exact_policy_value(agent, ENV_ID) == pytest.approx(-100 / 17, abs=1e-12)
    assert agent.asked == len(env.starts)


def test_custom_layouts_are_validated() -> None:
    small = TextMazeEnv(layout=("..G",))
    assert small.optimal_return == pytest.approx(-1.5)
    for layout in (("..",), ("G.", "."), ("G.x",), ("G#.",), ("GG.",)):
        with pytest.raises(ValueError):
            TextMazeEnv(layout=layout)
