"""TextArena's single-player games through textarena_env, with the real package.

``make test`` installs TextArena (``pip install "gym_llm[textarena]"``); elsewhere the tests skip
without it (:mod:`tests.real_packages`).
"""

from __future__ import annotations

import re

from gymnasium.utils.env_checker import check_env

from tests.real_packages import require

require("textarena")


def test_guess_the_number_is_played_to_the_end_with_its_reward() -> None:
    from gym_llm.envs import textarena_env

    env = textarena_env("GuessTheNumber-v0")
    low, high = 1, 20
    text, _ = env.reset(seed=0)
    assert "Guess The Number" in text
    reward, done, turns = 0.0, False, 0
    while not done:
        guess = (low + high) // 2
        text, reward, terminated, truncated, _ = env.step(f"My guess: [{guess}]")
        done, turns = terminated or truncated, turns + 1
        hints = re.findall(r"number is (higher|lower)", text)
        if hints and hints[-1] == "higher":
            low = guess + 1
        elif hints:
            high = guess - 1
    assert reward > 0 and turns <= 5  # binary search over 1..20 finds it
    # A second episode starts clean: no history carried over from the first.
    text, _ = env.reset(seed=1)
    assert "[Player]" not in text


def test_the_adapted_game_passes_gymnasiums_checker() -> None:
    from gym_llm.envs import textarena_env

    check_env(textarena_env("GuessTheNumber-v0"), skip_render_check=True)
