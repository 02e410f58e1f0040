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

import importlib
import re
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from gym_llm.envs.text_game import TextGameEnv

#: GEM's messages for a move it refuses (its games give them reward 0, like a legal move).
GEM_REFUSALS = re.compile(
    r"outside the (?:bounds|range)|out of bounds|already (?:been )?(?:revealed|guessed|filled"
    r"|tried)|been already guessed|invalid action|is not valid|violates|doesn't change the board",
    re.IGNORECASE,
)


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
    """A GEM env as ``reset(seed) -> (text, info)`` and ``step(text) -> five values``."""

    def __init__(self, env: Any, format_error_reward: float) -> None:
        self.env = env
        self.format_error_reward = format_error_reward

    @staticmethod
    def _shown(text: Any, info: dict[str, Any]) -> str:
        suffix = info.get("suffix")
        return f"{text}\n\n{suffix}" if suffix else str(text)

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        text, info = self.env.reset(seed=seed)
        return self._shown(text, dict(info or {})), dict(info or {})

    def step(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        feedback, reward, terminated, truncated, info = self.env.step(text)
        info = dict(info or {})
        if terminated and float(reward) == self.format_error_reward:
            info.update(action_valid=False, parse_error=f"GEM could not read the move: {feedback}")
        elif GEM_REFUSALS.search(str(feedback)):
            info.update(action_valid=False, parse_error=f"GEM refused the move: {feedback}")
        return self._shown(feedback, info), float(reward), terminated, truncated, info


def gem_env(game_id: str, **kwargs: Any) -> TextGameEnv:
    """A GEM game (``pip install 'gym_llm[gem]'``) by its GEM id ``game_id``, e.g.
    ``gem_env("game:Minesweeper-v0-easy")``;
    ``kwargs`` go to :class:`TextGameEnv` (GEM's rules stay in view, as its observations do not
    repeat them)."""
    gem = _require("gem", "gem")
    constants = _require("gem.utils.constants", "gem")
    game = GemGame(gem.make(game_id), constants.LanguageGameReward.format_error_reward)
    return TextGameEnv(game, **kwargs)


class TextWorldExpressGame:
    """TextWorld-Express as ``reset(seed) -> (text, info)`` and ``step(text) -> four values``."""

    UNKNOWN = "Unknown action"

    def __init__(self, env: Any, game: str, params: str, fold: str) -> None:
        self.env, self.game, self.params, self.fold = env, game, params, fold
        self.task = ""

    def _shown(self, text: str, infos: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        info = {"valid_actions": list(infos.get("validActions") or []), "score": infos.get("score")}
        return (f"{self.task}\n\n{text.strip()}" if self.task else text.strip()), info

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.env.load(gameName=self.game, gameParams=self.params)
        text, infos = self.env.reset(seed=seed, gameFold=self.fold)
        self.task = str(infos.get("taskDescription") or "")
        return self._shown(str(text), infos)

    def step(self, text: str) -> tuple[str, float, bool, dict[str, Any]]:
        observation, reward, done, infos = self.env.step(text)
        shown, info = self._shown(str(observation), infos)
        if str(observation).startswith(self.UNKNOWN):
            info.update(action_valid=False, parse_error=f"the game did not know {text!r}")
        return shown, float(reward), bool(done), info


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
    env = twx.TextWorldExpressEnv(envStepLimit=step_limit)
    adapter = TextWorldExpressGame(env, game, game_params, fold)
    game_env = TextGameEnv(adapter, **{"keep_first": False, **kwargs})
    return ValidActionsWrapper(game_env) if valid_actions else game_env


class TextArenaGame:
    """TextArena's single-player API (``get_observation``, ``step -> (done, info)``, rewards from
    ``close()``) as ``reset(seed) -> text`` and ``step(text) -> four values``, with the game's
    ``set_invalid_move`` calls counted."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self.env: Any = None
        self._invalid: str | None = None

    def reset(self, seed: int | None = None) -> str:
        self.env = self._make()  # a new game object: TextArena keeps history across reset()
        self.env.reset(num_players=1, seed=seed)
        self._watch_invalid_moves()
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
            return "\n".join(str(m[1]) if isinstance(m, tuple) else str(m) for m in observation)
        return str(observation)

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
        return "The game is over.", reward, True, {**info, "game_info": game_info}


def textarena_env(game_id: str, **kwargs: Any) -> TextGameEnv:
    """A TextArena single-player game (``pip install 'gym_llm[textarena]'``) by its TextArena id
    ``game_id``, e.g. ``textarena_env("GuessTheNumber-v0")``; ``kwargs`` go to
    :class:`TextGameEnv`."""
    ta = _require("textarena", "textarena")
    # TextArena's observations already carry the rules and every earlier turn.
    game = TextArenaGame(lambda: ta.make(game_id))
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
