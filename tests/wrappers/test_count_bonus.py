from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.callbacks import BaseCallback

from gym_llm import PPO, LLMPolicy, make_text_env
from gym_llm.experiments.train_config import TrainConfig
from gym_llm.testing import save_tiny_model
from gym_llm.wrappers import CountBonusWrapper
from gym_llm.wrappers.count_bonus import NoveltyCounts, count_bonus, count_key

RIGHT, LEFT = 2, 0  # FrozenLake's actions


def test_bonus_falls_with_the_count_and_the_decay() -> None:
    assert count_bonus(1, 0.2, 0, None) == pytest.approx(0.2)
    assert count_bonus(9, 0.3, 10**9, None) == pytest.approx(0.1)
    assert count_bonus(1, 0.2, 25, 100) == pytest.approx(0.15)
    assert count_bonus(4, 0.2, 50, 100) == pytest.approx(0.05)
    assert count_bonus(1, 0.2, 100, 100) == 0.0
    assert count_bonus(1, 0.2, 500, 100) == 0.0  # never negative after the decay


def test_a_count_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="count must be >= 1"):
        count_bonus(0, 0.1, 0, None)


def test_keys_are_hashable_and_equal_for_equal_observations() -> None:
    a, b = np.array([1, 2], dtype=np.int64), np.array([1, 2], dtype=np.int64)
    assert count_key(a) == count_key(b) and hash(count_key(a)) == hash(count_key(b))
    assert count_key(np.array([1, 3])) != count_key(a)
    assert count_key({"x": [1]}) == count_key({"x": [1]})
    assert count_key("a cell") == "a cell" and count_key(3) == 3


def test_first_visit_pays_the_scale_and_the_env_reward_is_kept() -> None:
    env = CountBonusWrapper(gym.make("FrozenLake-v1", is_slippery=False), scale=0.1)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(RIGHT)
    assert reward == pytest.approx(0.1)
    assert info["intrinsic_reward"] == pytest.approx(0.1) and info["extrinsic_reward"] == 0.0
    env.reset(seed=0)
    _, reward, _, _, _ = env.step(RIGHT)
    assert reward == pytest.approx(0.1 / math.sqrt(2))
    assert env.counts.steps == 2


def test_state_action_counts_each_action_in_a_state() -> None:
    env = CountBonusWrapper(
        gym.make("FrozenLake-v1", is_slippery=False), scale=1.0, key="state_action"
    )
    env.reset(seed=0)
    _, left_once, *_ = env.step(LEFT)  # stays in cell 0: (0, left) is new
    _, left_twice, *_ = env.step(LEFT)  # (0, left) again
    _, right_once, *_ = env.step(RIGHT)  # (0, right) is new
    assert (left_once, left_twice, right_once) == pytest.approx((1.0, 1 / math.sqrt(2), 1.0))


def test_the_bonus_decays_to_zero_over_the_shared_steps() -> None:
    env = CountBonusWrapper(gym.make("FrozenLake-v1", is_slippery=False), 0.4, decay_steps=2)
    env.reset(seed=0)
    bonuses = [env.step(LEFT)[4]["intrinsic_reward"] for _ in range(3)]
    # step 0: new cell 0 (count 1); step 1: cell 0 again at half the scale; step 2: none
    assert bonuses == pytest.approx([0.4, 0.2 / math.sqrt(2), 0.0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scale": -0.1}, "scale must be"),
        ({"scale": float("nan")}, "scale must be"),
        ({"decay_steps": 0}, "decay_steps must be"),
        ({"key": "state"}, "key must be"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CountBonusWrapper(gym.make("FrozenLake-v1"), **kwargs)


def test_copies_of_a_vectorised_env_share_one_set_of_counts() -> None:
    vec = make_text_env(
        "FrozenLake-v1", n_envs=2, env_kwargs={"is_slippery": False}, seed=0, count_bonus=0.1
    )
    vec.reset()
    _, rewards, _, infos = vec.step(np.array(["right", "right"], dtype=object))
    # both reach cell 1: the first copy finds it new, the second sees it for the second time
    assert rewards == pytest.approx([0.1, 0.1 / math.sqrt(2)])
    assert [info["extrinsic_reward"] for info in infos] == [0.0, 0.0]
    shared = {id(env.counts) for env in vec.envs}
    assert len(shared) == 1


def test_monitor_records_the_task_reward_not_the_bonus() -> None:
    """The logs' episode returns (and SB3's evaluate_policy) stay the task's own."""
    vec = make_text_env(
        "FrozenLake-v1", n_envs=1, env_kwargs={"is_slippery": False}, seed=0, count_bonus=0.5
    )
    vec.reset()
    total, episode = 0.0, None
    for move in ["down", "down", "right", "right", "down", "right"]:  # the path to the goal
        _, rewards, dones, infos = vec.step(np.array([move], dtype=object))
        total += float(rewards[0])
        if dones[0]:
            episode = infos[0]["episode"]
    assert episode is not None and episode["r"] == pytest.approx(1.0)
    assert total > 1.0  # the agent was paid the bonus on top


def test_without_a_bonus_the_env_is_not_wrapped() -> None:
    vec = make_text_env("FrozenLake-v1", n_envs=1)
    assert not isinstance(vec.envs[0], CountBonusWrapper)
    assert NoveltyCounts().steps == 0


def test_train_config_checks_the_bonus_settings() -> None:
    with pytest.raises(ValueError, match="count_bonus must be >= 0"):
        TrainConfig(count_bonus=-1.0)
    with pytest.raises(ValueError, match="count_bonus_until in"):
        TrainConfig(count_bonus=0.1, count_bonus_until=0.0)
    with pytest.raises(ValueError, match="count_bonus_key"):
        TrainConfig(count_bonus_key="state")


def test_ppo_logs_the_bonus_it_was_paid(tmp_path: Path) -> None:
    model_dir = save_tiny_model(tmp_path / "model", words=["left", "down", "right", "up"])
    env = make_text_env(
        "FrozenLake-v1", n_envs=2, env_kwargs={"is_slippery": False}, seed=0, count_bonus=0.1
    )
    model = PPO(
        LLMPolicy,
        env,
        policy_kwargs={"model": str(model_dir), "lora": {"r": 4}},
        n_steps=4,
        batch_size=8,
        n_epochs=1,
        seed=0,
        device="cpu",
    )
    paid: list[float] = []  # what PPO logged per rollout
    bonuses: list[list[float]] = [[]]  # what the env paid, step by step

    class Read(BaseCallback):
        def _on_step(self) -> bool:
            bonuses[-1].extend(info["intrinsic_reward"] for info in self.locals["infos"])
            return True

        def _on_rollout_end(self) -> None:
            paid.append(self.logger.name_to_value["rollout/intrinsic_reward"])
            bonuses.append([])

    model.learn(16, callback=Read())
    assert len(paid) == 2
    assert all(0.0 < p <= 0.1 for p in paid)  # per env step: at most a first visit's bonus
    # the mean bonus per env step of that rollout (8 = 4 steps x 2 envs), whatever was visited
    assert paid == pytest.approx([sum(b) / 8 for b in bonuses[:2]])
    assert all(len(b) == 8 for b in bonuses[:2])


def test_the_examples_in_the_docstrings_hold() -> None:
    import doctest

    from gym_llm.wrappers import count_bonus as module

    result = doctest.testmod(module)
    assert result.attempted >= 8 and result.failed == 0
