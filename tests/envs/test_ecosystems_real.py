"""GEM, TextWorld-Express and TextArena with the real packages, as ``make test`` installs them
(``pip install "gym_llm[gem,textworld-express,textarena]"``; TextWorld-Express needs Java).

Where they are missing the tests skip, except under ``make test``, which sets
``GYM_LLM_REAL_GAMES=required`` so that a missing package fails instead of hiding the tests."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from gym_llm.envs.ecosystems import GEM_REFUSED, GEM_UNREADABLE, MissingPackage
from tests.real_packages import require


def test_gem_minesweeper_shows_its_board_and_counts_a_format_error() -> None:
    require("gem")
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


#: GEM's words for a refused move, game by game: the oracle the verdicts are checked against
#: (the adapter itself reads GEM's verdict from its reward, never from these words).
REFUSAL_WORDS = re.compile(
    r"outside the (?:bounds|range)|out of bounds|already (?:been )?(?:revealed|guessed|filled"
    r"|tried)|been already guessed|invalid action|not valid because|violates|doesn't change the "
    r"board|which is empty|is larger than|entries but the code has length|numbers outside the "
    r"range|cannot move|invalid move|black dot|letters but the secret word|which is of length"
    r"|did not provide a valid"  # a move GEM cannot read
)
#: Moves that each game family reads, some of which it refuses in some states.
MOVES = {
    "GuessTheNumber": ["\\boxed{999}", "\\boxed{5}", "\\boxed{5}", "\\boxed{6}"],
    "Mastermind": ["\\boxed{1}", "\\boxed{1 2 3 4}", "\\boxed{1 2 3 4}", "\\boxed{9 9 9 9}"],
    "Minesweeper": ["\\boxed{reveal 99 99}", "\\boxed{reveal 0 0}", "\\boxed{reveal 0 0}"],
    "Wordle": ["\\boxed{ab}", "\\boxed{crane}", "\\boxed{crane}"],
    "Hangman": ["\\boxed{e}", "\\boxed{e}", "\\boxed{ab}"],
    "WordSearch": ["\\boxed{99 99 99 99}", "\\boxed{0 0 1 1}", "\\boxed{0 0 0 1}"],
    "FifteenPuzzle": ["\\boxed{up}", "\\boxed{down}", "\\boxed{left}", "\\boxed{right}"],
    "Sudoku": ["\\boxed{99 99 1}", "\\boxed{1 1 1}", "\\boxed{2 2 2}"],
    "TowerofHanoi": ["\\boxed{C A}", "\\boxed{A C}", "\\boxed{A C}"],
    # Pushing one way until the board or the player can go no further.
    "Game2048": ["\\boxed{left}"] * 8 + ["\\boxed{up}"] * 8,
    "Sokoban": [f"\\boxed{{{d}}}" for d in ("up", "left", "down", "right") for _ in range(6)],
    "Crosswords": ["\\boxed{99 99 a}", "\\boxed{0 0 a}", "\\boxed{1 1 e}"],
}
#: Games whose NLTK data offline machines lack (the adapter says how to install it).
NEEDS_NLTK = ("Wordle", "Hangman", "WordSearch")
#: Game ids GEM 0.1.0 itself cannot build (its own errors, whatever the adapter does).
BROKEN_IN_GEM = {
    "game:FifteenPuzzle-v0-random": "TypeError",
    "game:Crosswords-v0-random": "ValueError",
}


def _gem_game_ids() -> list[str]:
    try:
        from gem.envs.registration import ENV_REGISTRY
    except ImportError:
        return ["game:GuessTheNumber-v0-easy"]  # the test skips (or fails under make test)
    return sorted(k for k in ENV_REGISTRY if k.startswith("game:"))


def _nltk_words_present() -> bool:
    try:
        import nltk

        nltk.data.find("corpora/words")
    except (ImportError, LookupError):
        return False
    return True


@pytest.mark.parametrize("game_id", _gem_game_ids())
def test_every_gem_game_counts_its_refusals_by_gems_own_verdict(game_id: str) -> None:
    """Each move's verdict is what GEM's words say, in every game; the real rewards come back."""
    require("gem")
    from gym_llm.envs import gem_env

    family = game_id.split(":")[1].split("-")[0]
    if game_id in BROKEN_IN_GEM:
        with pytest.raises(Exception) as err:
            gem_env(game_id).reset(seed=0)
        assert type(err.value).__name__ == BROKEN_IN_GEM[game_id]
        return
    if family in NEEDS_NLTK and not _nltk_words_present():
        with pytest.raises(MissingPackage, match=r"nltk\.downloader words"):
            gem_env(game_id)
        return
    env = gem_env(game_id, history=False)
    env.reset(seed=0)
    verdicts = []
    for move in MOVES[family]:
        text, reward, terminated, truncated, info = env.step(move)
        feedback = text.split("Now:\n", 1)[-1]
        said_refused = bool(REFUSAL_WORDS.search(feedback))
        assert info["action_valid"] is not said_refused, (move, feedback[:300])
        assert reward not in (GEM_REFUSED, GEM_UNREADABLE)
        verdicts.append(info["action_valid"])
        if terminated or truncated:
            break
    assert False in verdicts, f"no refused move tried in {game_id}: {MOVES[family]}"
    _, reward, _, _, info = _step_after_reset(gem_env(game_id), "no move here")
    assert not info["action_valid"] and reward == pytest.approx(-0.1)


def _step_after_reset(env: Any, move: str) -> tuple[Any, ...]:
    env.reset(seed=0)
    return env.step(move)  # type: ignore[no-any-return]


def test_a_refusal_on_the_last_turn_is_invalid_and_the_history_is_shown() -> None:
    require("gem")
    from gym_llm.envs import gem_env

    env = gem_env("game:GuessTheNumber-v0-easy")
    env.reset(seed=0)
    turns = env.game.env.max_turns
    for guess in range(1, turns):
        text, _, _, _, info = env.step(f"\\boxed{{{guess}}}")
        assert info["action_valid"]
    # GEM's rules: "the history of your guesses will be appended below".
    assert all(f"you guessed {g}," in text for g in range(1, turns))
    _, _, terminated, _, info = env.step("\\boxed{99}")  # out of range, on the last turn
    assert terminated and not info["action_valid"]


def test_textworld_express_coin_over_its_valid_actions() -> None:
    require("textworld_express", java=True)
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
    env.close()
    varied.close()


def test_textworld_express_folds_are_other_games_and_close_stops_java() -> None:
    require("textworld_express", java=True)
    from gym_llm.envs import textworld_express_env

    games = {}
    for fold in ("train", "test"):
        env = textworld_express_env("coin", game_params="numLocations=5", fold=fold)
        adapter = env.unwrapped.game
        games[fold] = [env.reset(seed=s)[0] for s in range(6)]
        low = {"train": 0, "test": 20000}[fold]
        assert all(low <= adapter.game_seed(s) < low + 1000 for s in range(6))
        java = adapter.env._gateway.java_process
        env.close()
        assert java.poll() is not None, "the Java server outlived env.close()"
        adapter.env.close()  # what the package's own __del__ does later: nothing left to break
    assert games["train"] != games["test"]


def test_textarena_guess_the_number_counts_an_invalid_move() -> None:
    require("textarena")
    from gym_llm.envs import textarena_env

    env = textarena_env("GuessTheNumber-v0")
    env.reset(seed=0)
    _, _, done, _, info = env.step("hello there")
    assert not done and not info["action_valid"] and "Invalid move format" in info["parse_error"]
    _, _, _, _, info = env.step("[10]")
    assert info["action_valid"] and info["invalid_actions"] == 1


PACKAGES = {"textarena": "textarena", "twx": "textworld_express", "gem": "gem"}


@pytest.mark.parametrize(
    "env_id, kwargs, move, rules",
    [
        ("textarena:GuessTheNumber-v0", {}, "[{}]", "You are playing Guess The Number"),
        ("twx:coin", {"game_params": "numLocations=3"}, "look around", "Your task is to"),
        ("gem:game:GuessTheNumber-v0-hard", {}, "\\boxed{{{}}}", "You are playing Guess The"),
    ],
)
def test_a_conversation_holds_the_rules_once(
    env_id: str, kwargs: dict[str, Any], move: str, rules: str
) -> None:
    prefix = env_id.split(":")[0]
    require(PACKAGES[prefix], java=prefix == "twx")
    from gym_llm import make_text_env

    vec = make_text_env(env_id, 1, seed=0, env_kwargs=kwargs, conversation=True)
    vec.reset()
    last = ""
    for guess in (7, 9, 11):
        obs, _, dones, _ = vec.step(np.array([move.format(guess)], dtype=object))
        if dones[0]:
            break
        last = str(np.asarray(obs)[0])
    assert last.count(rules) == 1, last[:2000]
    vec.close()


def test_the_ecosystem_envs_pass_gymnasiums_checker() -> None:
    require("gem")
    from gym_llm.envs import gem_env

    check_env(gem_env("game:GuessTheNumber-v0-easy"), skip_render_check=True)


def test_ppo_plays_textworld_express_in_choice_mode_over_its_valid_actions(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    require("textworld_express", java=True)
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
    env.close()


@pytest.mark.parametrize(
    "argv, package, says",
    [
        (["--env", "twx:coinn"], "textworld_express", "Unknown game (coinn)"),
        (
            ["--env", "twx:coin", "--env-kwargs", "game_params=numLocatons=3"],
            "textworld_express",
            "numLocatons",
        ),
        (["--env", "textarena:GuessTheNumbr-v0"], "textarena", "GuessTheNumbr-v0 not found"),
    ],
)
def test_a_game_that_cannot_start_is_a_usage_error_in_a_dry_run(
    argv: list[str],
    package: str,
    says: str,
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    require(package, java=package == "textworld_express")
    from gym_llm.cli.commands import main

    assert main(["train", *argv, "--out", str(tmp_path / "run"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and not (tmp_path / "run").exists()


def test_an_invalid_penalty_reaches_a_text_games_own_verdicts() -> None:
    require("textworld_express", java=True)
    from gym_llm import make_text_env

    vec = make_text_env(
        "twx:coin", 1, seed=0, action_kwargs={"invalid_penalty": -0.5},
        env_kwargs={"game_params": "numLocations=1"},
    )  # fmt: skip
    vec.reset()
    assert vec.action_space.per_state  # each state's actions are still there for choice mode
    _, rewards, _, infos = vec.step(np.array(["dance wildly"], dtype=object))
    assert not infos[0]["action_valid"] and rewards[0] == pytest.approx(-0.5)
    vec.close()


def test_a_textarena_forfeit_by_invalid_moves_can_be_paid_less() -> None:
    require("textarena")
    from gym_llm.envs import textarena_env

    for forfeit_reward, expected in ((None, 0.8421), (-1.0, -1.0)):
        env = textarena_env("GuessTheNumber-v0", forfeit_reward=forfeit_reward)
        env.reset(seed=0)
        env.step("[10]")
        done, reward = False, 0.0
        info: dict[str, Any] = {}
        while not done:
            _, reward, done, _, info = env.step("hello")
        assert info["forfeit"] and float(reward) == pytest.approx(expected, abs=1e-3)


def test_a_bare_gem_env_is_pointed_to_its_game_id() -> None:
    gem = require("gem")
    from gym_llm import make_text_env

    with pytest.raises(TypeError, match=r"make_text_env\('gem:game:Minesweeper-v0-easy'\)"):
        make_text_env(lambda: gem.make("game:Minesweeper-v0-easy"))
