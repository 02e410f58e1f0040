"""GEM, TextWorld-Express and TextArena through their one-call adapters, on fake packages of the
same shape (the real packages: ``tests/envs/test_ecosystems_real.py``): what a player sees
reaches the prompt, the game's verdict on a move is counted, every episode is a fresh game."""

from __future__ import annotations

import subprocess
import sys
import types
from typing import Any, ClassVar

import pytest

from gym_llm.envs import TextGameEnv, gem_env, textarena_env, textworld_express_env
from gym_llm.envs.ecosystems import MissingPackage, make_game
from gym_llm.rl.common.vec_env import make_text_env


class FakeRewards:
    """GEM's ``LanguageGameReward``: its games read the constants when they pay them."""

    invalid_action_reward = 0.0
    format_error_reward = -0.1


class FakeMinesweeper:
    """GEM's shape: rules at reset, the board only in ``info["suffix"]``, ``\\boxed{}`` moves, a
    refusal paid ``invalid_action_reward`` and an unreadable move ``format_error_reward``."""

    seeds: ClassVar[list[int | None]] = []

    def __init__(self) -> None:
        self.revealed: set[str] = set()

    def _suffix(self) -> dict[str, Any]:
        return {"suffix": f"Board: {sorted(self.revealed)}"}

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        FakeMinesweeper.seeds.append(seed)
        self.revealed = set()
        return "Rules: reveal cells with \\boxed{reveal r c}.", self._suffix()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if "\\boxed{" not in action:
            return (
                "At turn 1, you did not provide a valid guess.",
                FakeRewards.format_error_reward,
                True,
                False,
                self._suffix(),
            )
        cell = action.split("\\boxed{", 1)[1].split("}")[0]
        if cell in self.revealed:
            text = f"you chose to reveal cell {cell}, which has already been revealed."
            return text, FakeRewards.invalid_action_reward, False, False, self._suffix()
        if cell == "9 9":  # a refusal in words no list of messages holds
            return (
                "the disk is too big for that.",
                FakeRewards.invalid_action_reward,
                False,
                False,
                self._suffix(),
            )
        self.revealed.add(cell)
        return f"you revealed {cell}.", 0.3, False, False, self._suffix()


class FakeTwx:
    """TextWorld-Express's shape: the task and valid actions only in ``infos``; games split by
    seed range (an explicit seed picks the game whatever ``gameFold`` says, as in the real one);
    ``close`` stops its server."""

    seeds: ClassVar[list[int | None]] = []
    closed: ClassVar[int] = 0

    def __init__(self, envStepLimit: int = 50) -> None:
        self.game = ""

    def getValidSeedsTrain(self) -> list[int]:
        return list(range(1000))

    def getValidSeedsDev(self) -> list[int]:
        return list(range(10000, 11000))

    def getValidSeedsTest(self) -> list[int]:
        return list(range(20000, 21000))

    def close(self) -> None:
        FakeTwx.closed += 1

    def load(self, gameName: str, gameParams: str) -> None:
        self.game = gameName

    def _infos(self) -> dict[str, Any]:
        return {
            "taskDescription": "Your task is to find the coin.",
            "validActions": ["take coin", "look around"],
            "score": 0.0,
        }

    def reset(
        self, seed: int | None = None, gameFold: str | None = None
    ) -> tuple[str, dict[str, Any]]:
        FakeTwx.seeds.append(seed)
        return "You are in the kitchen. There is a coin.", self._infos()

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if action not in ("take coin", "look around"):
            return "Unknown action: I'm not sure what you mean.", 0.0, False, self._infos()
        done = action == "take coin"
        return "You take the coin." if done else "A kitchen.", float(done), done, self._infos()


class FakeArenaState:
    def __init__(self) -> None:
        self.messages: list[str] = []

    def set_invalid_move(self, reason: str | None, reward: float = -1.0) -> None:
        self.messages.append(f"You attempted an invalid move. Reason: {reason}")


class FakeArenaGame:
    """TextArena's shape: ``step -> (done, info)``, invalid moves via ``state.set_invalid_move``."""

    def reset(self, num_players: int, seed: int | None = None) -> None:
        self.state = FakeArenaState()
        self.state.messages.append("Guess the number in [brackets].")
        self.done = False

    def get_observation(self) -> tuple[int, str]:
        return 0, "\n".join(self.state.messages)

    def step(self, action: str) -> tuple[bool, dict[str, Any]]:
        if "[" not in action:
            self.state.set_invalid_move(reason="no [number]")
        else:
            self.done = True
        return self.done, {}

    def close(self) -> tuple[dict[int, float], dict[int, Any]]:
        return {0: 1.0}, {}


@pytest.fixture
def fake_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    gem = types.ModuleType("gem")
    gem.make = lambda game_id: FakeMinesweeper()
    constants = types.ModuleType("gem.utils.constants")
    constants.LanguageGameReward = FakeRewards
    twx = types.ModuleType("textworld_express")
    twx.TextWorldExpressEnv = FakeTwx
    ta = types.ModuleType("textarena")
    ta.make = lambda game_id: FakeArenaGame()
    for name, module in {
        "gem": gem,
        "gem.utils": types.ModuleType("gem.utils"),
        "gem.utils.constants": constants,
        "textworld_express": twx,
        "textarena": ta,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    FakeMinesweeper.seeds, FakeTwx.seeds, FakeTwx.closed = [], [], 0


def test_gem_shows_the_board_and_counts_format_errors_and_refusals(fake_packages: None) -> None:
    env = gem_env("game:Minesweeper-v0-easy")
    text, _ = env.reset(seed=0)
    assert "Board: []" in text  # the board GEM keeps in info["suffix"]
    text, reward, _, _, info = env.step("\\boxed{reveal 0 0}")
    assert "Board: ['reveal 0 0']" in text and info["action_valid"] and reward == 0.3
    _, reward, terminated, _, info = env.step("\\boxed{reveal 0 0}")
    assert not info["action_valid"] and "already been revealed" in info["parse_error"]
    assert not terminated and info["invalid_actions"] == 1 and reward == 0.0
    text, reward, _, _, info = env.step("\\boxed{9 9}")
    assert not info["action_valid"] and reward == 0.0  # found by GEM's verdict, not its words
    # GEM's rules promise the history: every turn's feedback stays in view, the board once.
    assert text.count("you revealed reveal 0 0") == 1 and text.count("Board:") == 1
    assert text.index("Rules") < text.index("you revealed") < text.index("too big")
    _, reward, terminated, _, info = env.step("I reveal the corner")
    assert terminated and reward == -0.1 and not info["action_valid"]
    assert "could not read" in info["parse_error"] and info["invalid_actions"] == 3
    assert (env.total_invalid, env.total_steps) == (3, 4)
    assert (FakeRewards.invalid_action_reward, FakeRewards.format_error_reward) == (0.0, -0.1)
    latest, _ = gem_env("game:Minesweeper-v0-easy", history=False).reset(seed=0)
    assert latest.startswith("Rules")


def test_every_episode_is_a_fresh_seeded_game(fake_packages: None) -> None:
    env = gem_env("game:Minesweeper-v0-easy")
    env.reset(seed=5)
    env.reset()
    env.reset()
    first, *later = FakeMinesweeper.seeds
    assert first == 5 and all(s is not None for s in later) and later[0] != later[1]
    again = gem_env("game:Minesweeper-v0-easy")
    FakeMinesweeper.seeds = []
    again.reset(seed=5)
    again.reset()
    again.reset()
    assert FakeMinesweeper.seeds == [first, *later]  # a seeded run replays its games


def test_textworld_express_shows_the_task_and_valid_actions(fake_packages: None) -> None:
    env = textworld_express_env("coin")
    text, info = env.reset(seed=1)
    assert text.startswith("Your task is to find the coin.")
    assert text.endswith("Valid actions: 'look around', 'take coin'")
    assert text.actions == ("look around", "take coin")
    assert info["valid_actions"] == ["take coin", "look around"]
    assert env.action_space.per_state
    _, _, _, _, info = env.step("dance")
    assert not info["action_valid"] and info["invalid_actions"] == 1
    text, reward, terminated, _, info = env.step("take coin")
    assert info["action_valid"] and reward == 1.0 and terminated
    assert "Your task" in text  # the task stays in view
    env.reset()
    assert FakeTwx.seeds[1] is not None
    plain, _ = textworld_express_env("coin", valid_actions=False).reset(seed=1)
    assert "Valid actions" not in plain and not hasattr(plain, "actions")


@pytest.mark.parametrize("fold, low", [("train", 0), ("dev", 10000), ("test", 20000)])
def test_textworld_express_plays_the_games_of_its_fold(
    fake_packages: None, fold: str, low: int
) -> None:
    vec = make_text_env("twx:coin", 2, seed=0, env_kwargs={"fold": fold})
    for _ in range(3):
        vec.reset()
    assert len(FakeTwx.seeds) == 6
    assert all(s is not None and low <= s < low + 1000 for s in FakeTwx.seeds), FakeTwx.seeds
    assert len(set(FakeTwx.seeds)) > 1  # fresh games
    vec.close()
    assert FakeTwx.closed == 2  # each env's Java server is stopped


def test_textworld_express_refuses_an_unknown_fold(fake_packages: None) -> None:
    with pytest.raises(ValueError, match="train, dev, test"):
        textworld_express_env("coin", fold="valid")


def test_textarena_counts_the_games_invalid_moves(fake_packages: None) -> None:
    env = textarena_env("GuessTheNumber-v0")
    env.reset(seed=0)
    _, _, done, _, info = env.step("hello")
    assert not done and not info["action_valid"] and "no [number]" in info["parse_error"]
    _, reward, done, _, info = env.step("[5]")
    assert done and reward == 1.0 and info["action_valid"] and info["invalid_actions"] == 1


@pytest.mark.parametrize(
    "env_id", ["gem:game:Minesweeper-v0-easy", "twx:coin", "textarena:GuessTheNumber-v0"]
)
def test_game_ids_work_wherever_an_env_id_does(fake_packages: None, env_id: str) -> None:
    assert isinstance(make_game(env_id).unwrapped, TextGameEnv)
    vec = make_text_env(env_id, 2, seed=0)
    assert len(vec.reset()) == 2


def test_a_missing_package_names_its_pip_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "textworld_express", None)  # an import that fails
    with pytest.raises(MissingPackage, match=r"pip install 'gym_llm\[textworld-express\]'"):
        make_game("twx:coin")


def test_the_cli_says_how_to_install_a_missing_ecosystem(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gym_llm.cli.commands import main

    monkeypatch.setitem(sys.modules, "gem", None)
    status = main(["train", "--env", "gem:game:GuessTheNumber-v0-easy", "--out", "/nonexistent"])
    err = capsys.readouterr().err
    assert status == 2 and "pip install 'gym_llm[gem]'" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "env_id, move, rules",
    [
        ("gem:game:Minesweeper-v0-easy", "\\boxed{reveal 0 0}", "Rules: reveal cells"),
        ("twx:coin", "look around", "Your task is to find the coin."),
        ("textarena:GuessTheNumber-v0", "[3]", "Guess the number in [brackets]."),
    ],
)
def test_a_conversation_never_repeats_the_rules(
    fake_packages: None, env_id: str, move: str, rules: str
) -> None:
    vec = make_text_env(env_id, 1, seed=0, conversation=True)
    vec.reset()
    for _ in range(3):
        vec.step_async([move])
        obs = vec.step_wait()[0]
    assert str(next(iter(obs))).count(rules) == 1


def test_babyai_ids_need_no_import_of_minigrid() -> None:
    code = (
        "from gym_llm import make_text_env\n"
        "import sys\nassert 'minigrid' not in sys.modules\n"
        "print(len(make_text_env('BabyAI-GoToRedBall-v0', 1, seed=0).reset()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("1")


def test_the_cli_trains_a_free_text_game_in_generate_mode_by_default(
    fake_packages: None, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    import json

    from gym_llm.cli.commands import main

    env = ["--env", "gem:game:Minesweeper-v0-easy", "--out", str(tmp_path / "run"), "--dry-run"]
    assert main(["train", *env]) == 0
    out = capsys.readouterr().out
    assert (
        "generate mode" in out
        and json.loads(out[out.index("{") :])["policy"]["action_mode"] == "generate"
    )
    assert main(["train", *env, "--policy.action-mode", "choice"]) == 2
    assert "use --policy.action-mode generate" in capsys.readouterr().err
