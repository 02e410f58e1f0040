"""``TextVecEnv``: SB3's vectorised-env interface for text-in/text-out envs.

SB3's ``DummyVecEnv`` preallocates numeric observation buffers from the space and cannot hold
strings; this one keeps observations and replies in ``dtype=object`` arrays and otherwise behaves
like ``DummyVecEnv`` (auto-reset, ``terminal_observation`` and ``TimeLimit.truncated`` in ``info``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.env_util import is_wrapped
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env.base_vec_env import (
    VecEnv,
    VecEnvIndices,
    VecEnvObs,
    VecEnvStepReturn,
)

from gym_llm.rl.common.run_state import episode_rng_state
from gym_llm.spaces import NOT_TEXT_HELP
from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper
from gym_llm.wrappers.conversation import ConversationWrapper
from gym_llm.wrappers.count_bonus import CountBonusWrapper, CountKey, NoveltyCounts
from gym_llm.wrappers.resolver import InvalidActionError


def check_text_env(env: gym.Env[Any, Any] | VecEnv) -> None:
    """Raise a ``TypeError`` saying how to wrap ``env`` when it is not text-in/text-out."""
    if not isinstance(env.observation_space, spaces.Text) or not isinstance(
        env.action_space, spaces.Text
    ):
        raise TypeError(
            f"The env has observation space {env.observation_space} and action space "
            f"{env.action_space}. " + NOT_TEXT_HELP
        )


def wrap_text_env(env: gym.Env[Any, Any] | VecEnv, monitor_wrapper: bool = True) -> VecEnv:
    """What PPO and DQN train on: a text env as a :class:`TextVecEnv` (with SB3's ``Monitor``
    for episode returns), a vec env as it is; either checked to speak text."""
    check_text_env(env)
    if isinstance(env, VecEnv):
        return env
    wrapped: gym.Env[Any, Any] = env
    if monitor_wrapper and not is_wrapped(env, Monitor):
        wrapped = Monitor(env)
    return TextVecEnv([lambda: wrapped])


class EnvStepError(RuntimeError):
    """An env raised while taking a reply (or resetting after it); the message names the env,
    the reply and what the parser made of it, and the env's own exception is chained."""


def _step_error(env: gym.Env[Any, Any], index: int, reply: str, exc: Exception) -> EnvStepError:
    name = type(env.unwrapped).__name__
    spec = getattr(env.unwrapped, "spec", None)
    label = f"{name} ({spec.id})" if spec is not None else name
    return EnvStepError(
        f"env {index} ({label}) raised {type(exc).__name__}: {exc} while taking the reply "
        f"{reply[:300]!r}{' ...' if len(reply) > 300 else ''}. A reply that names no valid "
        "move should not raise: a parser returns None (ActionParserWrapper then counts it "
        "invalid), and a game reports info['action_valid'] = False. Fix the env or its "
        "parser; the traceback above this one is the env's own."
    )


class TextVecEnv(VecEnv):
    """Steps ``n`` text envs one after another in this process, with string arrays (SB3's
    ``DummyVecEnv`` for text: observations and replies as ``dtype=object`` arrays of ``str``).

    Args:
        env_fns: one factory per env, each returning a text env (both wrappers applied).
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env[Any, Any]]]) -> None:
        if not env_fns:
            raise ValueError("TextVecEnv needs at least one env factory.")
        self.envs = [fn() for fn in env_fns]
        first = self.envs[0]
        check_text_env(first)
        super().__init__(len(self.envs), first.observation_space, first.action_space)
        self._actions: np.ndarray = np.empty(self.num_envs, dtype=object)
        #: How each env's current episode began: its generator state just before the reset, or
        #: ``{"seed": s}`` for a seeded reset. Resuming from a checkpoint replays that reset.
        self.episode_rng_states: list[dict[str, Any] | None] = [None] * self.num_envs

    def reset(self) -> VecEnvObs:
        observations = np.empty(self.num_envs, dtype=object)
        for i, env in enumerate(self.envs):
            seed = self._seeds[i]
            self.episode_rng_states[i] = (
                episode_rng_state(env) if seed is None else {"seed": int(seed)}
            )
            observations[i], self.reset_infos[i] = env.reset(seed=seed, options=self._options[i])
        self._reset_seeds()
        self._reset_options()
        return observations

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions, dtype=object)

    def step_wait(self) -> VecEnvStepReturn:
        observations = np.empty(self.num_envs, dtype=object)
        rewards = np.zeros(self.num_envs, dtype=np.float32)
        dones = np.zeros(self.num_envs, dtype=bool)
        infos: list[dict[str, Any]] = []
        for i, env in enumerate(self.envs):
            action = self._actions[i]  # a Reply keeps its token ids (a str subclass)
            reply = action if isinstance(action, str) else str(action)
            try:
                obs, reward, terminated, truncated, info = env.step(reply)
                info = dict(info)
                dones[i] = terminated or truncated
                info["TimeLimit.truncated"] = truncated and not terminated
                if dones[i]:
                    info["terminal_observation"] = obs
                    self.episode_rng_states[i] = episode_rng_state(env)
                    obs, self.reset_infos[i] = env.reset()
            except InvalidActionError:  # the declared on_invalid="raise" policy: its own message
                raise
            except Exception as exc:  # the user's env or parser: say which reply did it
                raise _step_error(env, i, reply, exc) from exc
            observations[i], rewards[i] = obs, float(reward)
            infos.append(info)
        return observations, rewards, dones, infos

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def _targets(self, indices: VecEnvIndices) -> list[gym.Env[Any, Any]]:
        return [self.envs[i] for i in self._get_indices(indices)]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return [env.get_wrapper_attr(attr_name) for env in self._targets(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        for env in self._targets(indices):
            env.set_wrapper_attr(attr_name, value)

    def env_method(
        self,
        method_name: str,
        *method_args: Any,
        indices: VecEnvIndices = None,
        **method_kwargs: Any,
    ) -> list[Any]:
        return [
            env.get_wrapper_attr(method_name)(*method_args, **method_kwargs)
            for env in self._targets(indices)
        ]

    def env_is_wrapped(
        self, wrapper_class: type[gym.Wrapper[Any, Any, Any, Any]], indices: VecEnvIndices = None
    ) -> list[bool]:
        return [is_wrapped(env, wrapper_class) for env in self._targets(indices)]


def make_env(env_id: str, **kwargs: Any) -> gym.Env[Any, Any]:
    """``gym.make`` that also takes the ecosystems' game ids (``gem:...``, ``twx:...``,
    ``textarena:...``) and imports the package of a known family (``BabyAI-*`` needs no
    ``import minigrid``)."""
    from gym_llm.envs.ecosystems import is_game_id, make_game, register_known_family

    if is_game_id(env_id):
        return make_game(env_id, **kwargs)
    register_known_family(env_id)
    return gym.make(env_id, **kwargs)


def _not_an_env(env: Any) -> str:
    """What to do with a factory's object that is not a ``gymnasium.Env``: an ecosystem's own
    object is built by its game id instead (its adapter keeps the board and the verdicts)."""
    from gym_llm.envs.ecosystems import GAMES

    name = type(env).__name__
    package = type(env).__module__.partition(".")[0]
    ids = {"gem": "gem:game:Minesweeper-v0-easy", "textarena": "textarena:GuessTheNumber-v0",
           "textworld_express": "twx:coin"}  # fmt: skip
    if package in ids:
        return (
            f"make_text_env's factory returned {package}'s {name}, not a gymnasium.Env. Name "
            f"the game instead, e.g. make_text_env({ids[package]!r}): its adapter shows the "
            "board and counts the game's own verdicts (prefixes: " + ", ".join(GAMES) + ")."
        )
    return (
        f"make_text_env's factory returned {name}, not a gymnasium.Env. For a text game with "
        "reset() -> text and step(text) -> (text, reward, done), wrap it in "
        "gym_llm.envs.TextGameEnv first; for GEM, TextWorld-Express or TextArena, pass its id "
        "(gem:..., twx:..., textarena:...)."
    )


def make_text_env(
    env_id: str | Callable[[], gym.Env[Any, Any]],
    n_envs: int = 1,
    *,
    env_kwargs: dict[str, Any] | None = None,
    observation_kwargs: dict[str, Any] | None = None,
    action_kwargs: dict[str, Any] | None = None,
    seed: int | None = None,
    monitor: bool = True,
    conversation: bool = False,
    count_bonus: float = 0.0,
    count_bonus_decay_steps: int | None = None,
    count_bonus_key: CountKey = "next_state",
) -> TextVecEnv:
    """``n_envs`` copies of an env with both text wrappers (and SB3's ``Monitor``), vectorised.

    ``env_id`` is a Gymnasium id, an ecosystem game id (``gem:game:Minesweeper-v0-easy``,
    ``twx:coin``, ``textarena:GuessTheNumber-v0``) or a factory. ``observation_kwargs``/``action_kwargs`` go to
    :class:`TextObservationWrapper` / :class:`ActionParserWrapper`. A space that is already text
    is wrapped only when its kwargs are given (to add an instruction, history, a length limit, a
    parser, ...): never wrapped twice for nothing, and the kwargs never dropped.
    ``conversation=True``: each observation is the episode so far
    (:class:`gym_llm.wrappers.conversation.ConversationWrapper`); the policy reads it as a chat.
    ``env_kwargs`` go to ``gym.make`` (or the game's adapter), ``seed`` seeds env ``i`` with
    ``seed + i`` on the first reset, and ``monitor`` adds SB3's ``Monitor`` (episode returns for
    the logs and ``evaluate_policy``). ``count_bonus > 0`` adds a novelty bonus to the reward
    (:class:`gym_llm.wrappers.count_bonus.CountBonusWrapper`, outside ``Monitor``, one set of
    counts for all ``n_envs`` copies) that falls to 0 over ``count_bonus_decay_steps`` env
    steps of them all; ``count_bonus_key`` says what it counts (the state reached, or the state
    and the action).
    """
    if n_envs < 1:
        raise ValueError(f"n_envs must be >= 1, got {n_envs}.")
    counts = NoveltyCounts()

    def factory() -> gym.Env[Any, Any]:
        env = make_env(env_id, **(env_kwargs or {})) if isinstance(env_id, str) else env_id()
        if not isinstance(env, gym.Env):
            raise TypeError(_not_an_env(env))
        if observation_kwargs or not isinstance(env.observation_space, spaces.Text):
            env = TextObservationWrapper(env, **(observation_kwargs or {}))
        if action_kwargs or not isinstance(env.action_space, spaces.Text):
            env = ActionParserWrapper(env, **(action_kwargs or {}))
        if conversation:
            env = ConversationWrapper(env)
        env = Monitor(env) if monitor else env
        if count_bonus:
            env = CountBonusWrapper(
                env, count_bonus, count_bonus_decay_steps, count_bonus_key, counts
            )
        return env

    vec_env = TextVecEnv([factory] * n_envs)
    if seed is not None:
        vec_env.seed(seed)
    return vec_env
