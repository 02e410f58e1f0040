"""Non-Gymnasium text games through TextGameEnv: methods named, step shapes normalised, the rules
kept in view, long texts cut, a fresh game per episode, PPO on top."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gymnasium.utils.env_checker import check_env

from gym_llm.envs import TextGameEnv


class Riddle:
    """Rules on the first turn only; the answer is 'seven'; three tries."""

    episodes = 0

    def __init__(self) -> None:
        Riddle.episodes += 1
        self.tries = 0

    def start(self) -> str:
        self.tries = 0
        return "Rules: answer with one word. What is 3 + 4?"

    def answer(self, text: str) -> tuple[str, float, bool, dict[str, Any]]:
        self.tries += 1
        right = "seven" in text.lower()
        return (
            ("Right." if right else "Wrong, try again."),
            float(right),
            right or self.tries >= 3,
            {},
        )


def test_methods_are_named_and_the_rules_stay_in_every_observation() -> None:
    env = TextGameEnv(Riddle(), reset="start", step="answer", instruction="Solve riddles.")
    first, _ = env.reset(seed=0)
    assert first.startswith("Rules:")
    text, reward, terminated, truncated, _ = env.step("six")
    assert "Rules: answer with one word" in text and text.endswith("Wrong, try again.")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert env.step("It is seven")[1:3] == (1.0, True)
    assert env.observation_space.instruction == "Solve riddles."


def test_the_wrapped_game_passes_gymnasiums_env_checker() -> None:
    check_env(TextGameEnv(Riddle(), reset="start", step="answer"), skip_render_check=True)


def test_a_factory_gives_each_episode_a_fresh_game() -> None:
    before = Riddle.episodes
    env = TextGameEnv(Riddle, reset="start", step="answer")
    for _ in range(3):
        env.reset()
        env.step("seven")
    assert Riddle.episodes - before == 3  # the probe game, then one new game per later episode


def test_step_shapes_and_missing_methods_get_clear_errors() -> None:
    class Five:
        def reset(self) -> tuple[str, dict[str, Any]]:
            return "go", {"level": 1}

        def step(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
            return "x" * 50_000, 1.0, False, True, {}

    env = TextGameEnv(Five(), max_length=1000)
    assert env.reset() == ("go", {"level": 1, "observation_truncated": False})
    text, _, terminated, truncated, info = env.step("a")
    assert len(text) <= 1000 and "characters cut" in text and info["observation_truncated"]
    assert (terminated, truncated) == (False, True)
    with pytest.raises(TypeError, match="no method 'play'"):
        TextGameEnv(Five(), step="play")

    class Bad:
        def reset(self) -> str:
            return "go"

        def step(self, text: str) -> str:
            return "no reward"

    bad = TextGameEnv(Bad())
    bad.reset()
    with pytest.raises(TypeError, match=r"must return \(text, reward, done\)"):
        bad.step("a")


def test_make_text_env_refuses_a_raw_game_and_trains_on_an_adapted_one(
    tiny_model_dir: Path,
) -> None:
    from gym_llm import PPO, make_text_env

    with pytest.raises(TypeError, match="TextGameEnv"):
        make_text_env(Riddle)
    env = make_text_env(lambda: TextGameEnv(Riddle, reset="start", step="answer"), 2, seed=0)
    model = PPO(
        "LLMPolicy",
        env,
        n_steps=2,
        batch_size=4,
        n_epochs=1,
        policy_kwargs={"model": str(tiny_model_dir), "max_new_tokens": 4},
        seed=0,
    )
    model.learn(4)
    assert model.num_timesteps == 4
