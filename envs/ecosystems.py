"""The text-game ecosystems LLM-agent research trains on, as Gymnasium envs in one call each.

Each adapter gives the player what the game shows a player, counts the game's own verdict on a
move as an invalid action, and starts a fresh game every episode:

- :func:`gem_env` — GEM (``pip install 'gym_llm[gem]'``): the board or state GEM returns in
  ``info["suffix"]`` follows every observation; a reply GEM cannot read (its format error, which
  ends the episode at GEM's ``format_error_reward``) and a move GEM refuses (out of bounds,
  already revealed, already guessed, ...) are invalid.
- :func:`textworld_express_env` — TextWorld-Express (``pip install 'gym_llm[textworld-express]'``,
  needs Java): the task description leads every observation and the valid actions close it (also
  in ``info["valid_actions"]``), carried with it for choice mode over each state's own actions;
  ``Unknown action`` is invalid.
- :func:`textarena_env` — TextArena single-player games (``pip install 'gym_llm[textarena]'``):
  a move the game calls invalid (``set_invalid_move``) is invalid.

The same games by name, wherever an env id is taken (``make_text_env``, ``gym-llm train --env``):
``gem:game:Minesweeper-v0-easy``, ``twx:coin``, ``textarena:GuessTheNumber-v0``.
"""

from __future__ import annotations

import contextlib
import importlib
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym

from gym_llm.envs.text_game import TextGameEnv

#: Rewards GEM's games never pay, put in place of GEM's ``invalid_action_reward`` and
#: ``format_error_reward`` while a move is played, so that the reward a game returns says which of
#: its own verdicts it reached (every GEM game pays one of those two for a refused or unreadable
#: move, and both equal rewards of legal moves: 0.0 is also a hint's reward).
GEM_REFUSED = -7777.125
GEM_UNREADABLE = -7777.375


#: Env id prefixes whose package registers them on import (the optional extras).
FAMILIES = {"BabyAI-": "minigrid", "MiniGrid-": "minigrid"}


def register_known_family(env_id: str) -> None:
    """Import the package that registers ``env_id`` (``BabyAI-*`` -> minigrid) when it is not
    registered yet, so ``--envs BabyAI-GoToObj-v0`` needs no ``module:`` prefix."""
    if env_id in gym.registry:
        return
    for prefix, module in FAMILIES.items():
        if env_id.startswith(prefix):
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise ValueError(
                    f"{env_id} needs the {module} package: pip install 'gym_llm[{module}]'."
                ) from exc


class MissingPackage(ImportError):
    """An ecosystem's package is not installed; the message is the ``pip install`` line."""


def _require(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingPackage(
            f"this game needs the {module} package: pip install 'gym_llm[{extra}]'"
        ) from exc


class GemGame:
    """A GEM env as ``reset(seed) -> (text, info)`` and ``step(text) -> five values``.

    A move GEM refuses (out of bounds, already guessed, a wall, a disk larger than the top one,
    a code of the wrong length, ...) or cannot read is found by GEM's own verdict, for every game:
    each pays ``LanguageGameReward.invalid_action_reward`` or ``format_error_reward``, which are
    set to marker values for the length of the step (:data:`GEM_REFUSED`) and the game's real
    reward is given back. A refusal on the last turn, whose message only says the turns ran out,
    is found the same way.
    """

    def __init__(self, env: Any, rewards: Any, history: bool = True) -> None:
        self.env = env
        #: GEM's ``LanguageGameReward`` class (its reward constants).
        self.rewards = rewards
        #: Show the rules and every turn's feedback so far, as GEM's rules promise ("the history
        #: of your guesses will be appended below") and its ``concat`` observation wrapper does.
        self.history = history
        #: In a conversation, show only the new feedback (the conversation holds the rest).
        self.conversation = False
        self._turns: list[str] = []

    def _shown(self, text: Any, info: dict[str, Any]) -> str:
        self._turns.append(str(text).strip())
        shown = self._turns if self.history and not self.conversation else self._turns[-1:]
        suffix = info.get("suffix")
        body = "\n\n".join(shown)
        return f"{body}\n\n{suffix}" if suffix else body

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        text, info = self.env.reset(seed=seed)
        self._turns = []
        return self._shown(text, dict(info or {})), dict(info or {})

    @contextlib.contextmanager
    def _marked_verdicts(self) -> Iterator[tuple[float, float]]:
        """GEM's two verdict rewards swapped for markers; yields their real values."""
        real = (self.rewards.invalid_action_reward, self.rewards.format_error_reward)
        self.rewards.invalid_action_reward, self.rewards.format_error_reward = (
            GEM_REFUSED,
            GEM_UNREADABLE,
        )
        try:
            yield real
        finally:
            self.rewards.invalid_action_reward, self.rewards.format_error_reward = real

    def step(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        with self._marked_verdicts() as (refused_reward, unreadable_reward):
            feedback, reward, terminated, truncated, info = self.env.step(text)
        info = dict(info or {})
        if reward == GEM_UNREADABLE:
            reward = unreadable_reward
            info.update(action_valid=False, parse_error=f"GEM could not read the move: {feedback}")
        elif reward == GEM_REFUSED:
            reward = refused_reward
            info.update(action_valid=False, parse_error=f"GEM refused the move: {feedback}")
        return self._shown(feedback, info), float(reward), terminated, truncated, info


def gem_env(game_id: str, *, history: bool = True, **kwargs: Any) -> TextGameEnv:
    """A GEM game (``pip install 'gym_llm[gem]'``) by its GEM id ``game_id``, e.g.
    ``gem_env("game:Minesweeper-v0-easy")``. Each observation is GEM's rules, every turn's
    feedback so far and the current board (``history=False``: the rules, the latest feedback
    and the board); ``kwargs`` go to :class:`TextGameEnv`.

    Wordle, Hangman and WordSearch read NLTK's ``words`` corpus, which NLTK downloads on first
    use: offline, install it first (``python -m nltk.downloader words``, or copy an
    ``nltk_data`` folder and set ``NLTK_DATA``), or the game raises a :class:`MissingPackage`
    that says so.
    """
    gem = _require("gem", "gem")
    constants = _require("gem.utils.constants", "gem")
    try:
        env = gem.make(game_id)
    except LookupError as exc:  # NLTK data a word game needs, not downloadable offline
        raise MissingPackage(_nltk_advice(game_id, exc)) from None
    game = GemGame(env, constants.LanguageGameReward, history=history)
    return TextGameEnv(game, **{"keep_first": not history, **kwargs})


def _nltk_advice(game_id: str, exc: LookupError) -> str:
    resource = next((w for w in ("words", "wordnet", "punkt") if w in str(exc)), "words")
    return (
        f"GEM's {game_id} needs NLTK's {resource!r} data, which is not on this machine and "
        f"could not be downloaded: run `python -m nltk.downloader {resource}` where the "
        "network is reachable (or copy an nltk_data folder here and set NLTK_DATA)."
    )


class TextWorldExpressGame:
    """TextWorld-Express as ``reset(seed) -> (text, info)`` and ``step(text) -> four values``."""

    UNKNOWN = "Unknown action"

    FOLDS = ("train", "dev", "test")

    def __init__(self, env: Any, game: str, params: str, fold: str) -> None:
        self.check_fold(fold)
        self.env, self.game, self.params, self.fold = env, game, params, fold
        self.task = ""
        #: In a conversation, the task leads the first observation only.
        self.conversation = False
        #: The seeds of the fold's games (train 0-999, dev 10000-10999, test 20000-20999): an
        #: explicit seed outside them would play a game of another fold, whatever ``gameFold``.
        self.seeds: list[int] = []

    @classmethod
    def check_fold(cls, fold: str) -> None:
        if fold not in cls.FOLDS:
            raise ValueError(
                f"fold={fold!r}: TextWorld-Express splits its games into {', '.join(cls.FOLDS)}."
            )

    def game_seed(self, seed: int | None) -> int | None:
        """The fold's game for an episode seed: ``seed`` picks one of the fold's seeds."""
        if seed is None:
            return None
        if not self.seeds:
            getter = getattr(self.env, f"getValidSeeds{self.fold.capitalize()}")
            self.seeds = sorted(int(s) for s in getter())
        return self.seeds[int(seed) % len(self.seeds)]

    def _shown(
        self, text: str, infos: dict[str, Any], first: bool = False
    ) -> tuple[str, dict[str, Any]]:
        info = {
            "valid_actions": list(infos.get("validActions") or []),
            "score": infos.get("score"),
            "success": bool(infos.get("tasksuccess", False)),
        }
        task = self.task if (first or not self.conversation) else ""
        return (f"{task}\n\n{text.strip()}" if task else text.strip()), info

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.env.load(gameName=self.game, gameParams=self.params)
        text, infos = self.env.reset(seed=self.game_seed(seed), gameFold=self.fold)
        self.task = str(infos.get("taskDescription") or "")
        return self._shown(str(text), infos, first=True)

    def step(self, text: str) -> tuple[str, float, bool, dict[str, Any]]:
        observation, reward, done, infos = self.env.step(text)
        shown, info = self._shown(str(observation), infos)
        if str(observation).startswith(self.UNKNOWN):
            info.update(action_valid=False, parse_error=f"the game did not know {text!r}")
        return shown, float(reward), bool(done), info

    def close(self) -> None:
        """Stop the game's Java server (~200 MB per env) and wait until it is gone: the package's
        own ``__del__`` closes again, and a second close while Java is still exiting writes to a
        broken pipe during garbage collection, wherever that happens to run."""
        close = getattr(self.env, "close", None)
        if callable(close):
            close()
        java = getattr(getattr(self.env, "_gateway", None), "java_process", None)
        if java is not None:
            try:
                java.wait(timeout=10)
            except subprocess.TimeoutExpired:
                java.kill()
                java.wait()


def textworld_express_env(
    game: str,
    *,
    game_params: str = "",
    fold: str = "train",
    step_limit: int = 50,
    valid_actions: bool = True,
    **kwargs: Any,
) -> gym.Env[str, str]:
    """A TextWorld-Express game (``coin``, ``cookingworld``, ``twc``, ``mapreader``, ``arithmetic``,
    ``sorting``, ``simonsays``, ``peckingorder``), e.g. ``textworld_express_env("coin",
    game_params="numLocations=3")``; ``kwargs`` go to :class:`TextGameEnv`. ``game_params`` are
    TextWorld-Express's (``numLocations=3,includeDoors=0``), ``fold`` its split of games
    (``train``, ``dev``, ``test``), ``step_limit`` the moves per episode.

    The task description leads every observation (so ``keep_first`` is off); the valid actions
    are in ``info["valid_actions"]`` and, with ``valid_actions`` (the default), listed at the end
    of every observation, which carries them (:class:`gym_llm.wrappers.ValidActionsWrapper`):
    a policy in choice mode scores exactly each state's valid actions, one in generate mode
    reads them in its prompt.
    """
    from gym_llm.wrappers.valid_actions import ValidActionsWrapper

    twx = _require("textworld_express", "textworld-express")
    TextWorldExpressGame.check_fold(fold)  # before a Java server starts for nothing
    env = twx.TextWorldExpressEnv(envStepLimit=step_limit)
    adapter = TextWorldExpressGame(env, game, game_params, fold)
    game_env = TextGameEnv(adapter, **{"keep_first": False, **kwargs})
    return ValidActionsWrapper(game_env) if valid_actions else game_env


class TextArenaGame:
    """TextArena's single-player API (``get_observation``, ``step -> (done, info)``, rewards from
    ``close()``) as ``reset(seed) -> text`` and ``step(text) -> four values``, with the game's
    ``set_invalid_move`` calls counted."""

    def __init__(self, make: Callable[[], Any], forfeit_reward: float | None = None) -> None:
        self._make = make
        #: The reward of a game lost by invalid moves (``None``: TextArena's own).
        self.forfeit_reward = forfeit_reward
        self.env: Any = None
        self._invalid: str | None = None
        #: In a conversation, each observation holds only the game's new messages (TextArena's
        #: own observation is the whole game so far, rules included, every turn).
        self.conversation = False
        #: The game's whole text as last read (the part a conversation holds already).
        self._last_text = ""

    def reset(self, seed: int | None = None) -> str:
        self.env = self._make()  # a new game object: TextArena keeps history across reset()
        self.env.reset(num_players=1, seed=seed)
        self._watch_invalid_moves()
        self._last_text = ""
        return self._observation()

    def _watch_invalid_moves(self) -> None:
        state: Any = getattr(self.env, "state", None)
        original = getattr(state, "set_invalid_move", None)
        if state is None or original is None:
            return

        def set_invalid_move(*args: Any, **kwargs: Any) -> Any:
            reason = kwargs.get("reason", args[0] if args else None)
            self._invalid = str(reason or "invalid move")
            return original(*args, **kwargs)

        state.set_invalid_move = set_invalid_move

    def _observation(self) -> str:
        _, observation = self.env.get_observation()
        if isinstance(observation, list):  # (sender, message[, type]) tuples in newer releases
            text = "\n".join(str(m[1]) if isinstance(m, tuple) else str(m) for m in observation)
        else:
            text = str(observation)
        before, self._last_text = self._last_text, text
        if self.conversation and before and text.startswith(before):
            return text[len(before) :].strip() or text  # only what the game added this turn
        return text

    def step(self, text: str) -> tuple[str, float, bool, dict[str, Any]]:
        self._invalid = None
        done, info = self.env.step(action=text)
        info = dict(info or {})
        if self._invalid is not None:
            info.update(action_valid=False, parse_error=f"TextArena: {self._invalid}")
        if not done:
            return self._observation(), 0.0, False, info
        rewards, game_info = self.env.close()
        reward = float(rewards.get(0, 0.0)) if isinstance(rewards, dict) else float(rewards or 0)
        forfeit = self._invalid is not None  # the game ended on an invalid move
        if forfeit and self.forfeit_reward is not None:
            reward = self.forfeit_reward
        return (
            "The game is over.",
            reward,
            True,
            {**info, "game_info": game_info, "forfeit": forfeit},
        )


def textarena_env(
    game_id: str, *, forfeit_reward: float | None = None, **kwargs: Any
) -> TextGameEnv:
    """A TextArena single-player game (``pip install 'gym_llm[textarena]'``) by its TextArena id
    ``game_id``, e.g. ``textarena_env("GuessTheNumber-v0")``; ``kwargs`` go to
    :class:`TextGameEnv`.

    TextArena ends a game after a few invalid moves and pays the progress made so far (in
    GuessTheNumber, 0.84 for one close guess and then invalid replies): a policy can learn to
    forfeit. ``forfeit_reward`` pays a game lost that way this instead (``info["forfeit"]``
    says which games ended so); ``None`` keeps TextArena's reward.
    """
    ta = _require("textarena", "textarena")
    # TextArena's observations already carry the rules and every earlier turn.
    game = TextArenaGame(lambda: ta.make(game_id), forfeit_reward)
    return TextGameEnv(game, **{"keep_first": False, **kwargs})


#: Env id prefix -> the ecosystem's one call.
GAMES: dict[str, Callable[..., gym.Env[str, str]]] = {
    "gem:": gem_env,
    "twx:": textworld_express_env,
    "textarena:": textarena_env,
}


def is_game_id(env_id: str) -> bool:
    """Whether ``env_id`` names an ecosystem game (``gem:``, ``twx:``, ``textarena:``)."""
    return env_id.startswith(tuple(GAMES))


def make_game(env_id: str, **kwargs: Any) -> gym.Env[str, str]:
    """The env for an ecosystem game id; ``kwargs`` go to the ecosystem's adapter."""
    for prefix, maker in GAMES.items():
        if env_id.startswith(prefix):
            return maker(env_id.removeprefix(prefix), **kwargs)
    raise ValueError(f"{env_id!r} names no game; prefixes: {', '.join(GAMES)}")
