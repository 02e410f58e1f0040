"""GEM, TextWorld-Express and TextArena with the real packages (slow; not installed by
``make test``): ``pip install "gym_llm[gem,textworld-express,textarena]"`` then
``pytest -m slow tests/test_ecosystems_real.py``. TextWorld-Express needs Java."""

from __future__ import annotations

import shutil

import pytest
from gymnasium.utils.env_checker import check_env

pytestmark = pytest.mark.slow


def test_gem_minesweeper_shows_its_board_and_counts_a_format_error() -> None:
    pytest.importorskip("gem")
    from gym_llm.envs import gem_env

    env = gem_env("game:Minesweeper-v0-easy")
    text, _ = env.reset(seed=0)
    assert "current board layout" in text and " 0  .  .  ." in text  # the board, not only rules
    text, _, terminated, _, info = env.step("\\boxed{reveal 0 0}")
    assert info["action_valid"] and not terminated and "revealed cell (0, 0)" in text
    _, reward, terminated, _, info = env.step("I reveal the corner")
    assert terminated and reward == pytest.approx(-0.1) and not info["action_valid"]
    assert env.total_invalid == 1
    first, _ = env.reset()
    assert "current board layout" in first


def test_textworld_express_coin_over_its_valid_actions() -> None:
    pytest.importorskip("textworld_express")
    if shutil.which("java") is None:
        pytest.skip("TextWorld-Express needs Java")
    from gym_llm.envs import textworld_express_env

    env = textworld_express_env("coin", game_params="numLocations=1,numDistractorItems=0")
    text, info = env.reset(seed=0)
    assert text.startswith("Your task is to search the environment and find the coin")
    assert "take coin" in info["valid_actions"] and "take coin" in text.actions
    _, _, _, _, info = env.step("dance wildly")
    assert not info["action_valid"] and env.unwrapped.total_invalid == 1
    _, reward, terminated, _, info = env.step("take coin")
    assert info["action_valid"] and reward > 0 and terminated
    varied = textworld_express_env("coin", game_params="numLocations=4")
    varied.reset(seed=0)
    seen = {varied.reset()[0] for _ in range(4)}  # fresh games, not the first one again
    assert len(seen) > 1


def test_textarena_guess_the_number_counts_an_invalid_move() -> None:
    pytest.importorskip("textarena")
    from gym_llm.envs import textarena_env

    env = textarena_env("GuessTheNumber-v0")
    env.reset(seed=0)
    _, _, done, _, info = env.step("hello there")
    assert not done and not info["action_valid"] and "Invalid move format" in info["parse_error"]
    _, _, _, _, info = env.step("[10]")
    assert info["action_valid"] and info["invalid_actions"] == 1


def test_the_ecosystem_envs_pass_gymnasiums_checker() -> None:
    pytest.importorskip("gem")
    from gym_llm.envs import gem_env

    check_env(gem_env("game:GuessTheNumber-v0-easy"), skip_render_check=True)


def test_ppo_plays_textworld_express_in_choice_mode_over_its_valid_actions(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    pytest.importorskip("textworld_express")
    if shutil.which("java") is None:
        pytest.skip("TextWorld-Express needs Java")
    from gym_llm import PPO, LLMPolicy, make_text_env
    from gym_llm.testing import save_tiny_model

    model_dir = save_tiny_model(tmp_path_factory.mktemp("twx"), words=["take", "coin", "look"])
    env = make_text_env("twx:coin", 2, env_kwargs={"game_params": "numLocations=2"}, seed=0)
    model = PPO(
        LLMPolicy, env, n_steps=4, batch_size=8, seed=0, device="cpu",
        policy_kwargs={"model": str(model_dir)},
    )  # fmt: skip
    assert model.policy.action_mode == "choice" and model.policy.per_state
    model.learn(16)
    assert model.num_timesteps == 16
