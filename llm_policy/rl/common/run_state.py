"""The random state of a run, as JSON: what a resumed run needs to draw the same numbers.

A checkpoint must be inert (no pickle is ever loaded), so every generator's state is written as
plain JSON: Python's ``random``, NumPy's global generator, torch's CPU (and CUDA) generators, any
``numpy.random.Generator`` (PPO's minibatch shuffle) and each env's ``np_random``. Restoring all
of them is what makes a resumed run draw the same actions and episodes as an uninterrupted one.
"""

from __future__ import annotations

import base64
import random
import warnings
from collections import deque
from typing import Any

import numpy as np
import torch


def _tensor_to_text(state: torch.Tensor) -> str:
    return base64.b64encode(state.cpu().numpy().tobytes()).decode("ascii")


def _text_to_tensor(text: str) -> torch.Tensor:
    return torch.from_numpy(np.frombuffer(base64.b64decode(text), dtype=np.uint8).copy())


def global_rng_state() -> dict[str, Any]:
    """Python's, NumPy's and torch's global generators (CUDA's where it is in use)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    py_version, py_state, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "python": [py_version, list(py_state), py_gauss],
        "numpy": [kind, [int(k) for k in keys], int(pos), int(has_gauss), float(gauss)],
        "torch": _tensor_to_text(torch.get_rng_state()),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = [_tensor_to_text(s) for s in torch.cuda.get_rng_state_all()]
    return state


def restore_global_rng_state(state: dict[str, Any]) -> None:
    """Undo :func:`global_rng_state` (CUDA's only where this process uses CUDA too)."""
    py_version, py_state, py_gauss = state["python"]
    random.setstate((py_version, tuple(py_state), py_gauss))
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(_text_to_tensor(state["torch"]))
    if "cuda" in state and torch.cuda.is_available():
        cuda = [_text_to_tensor(s) for s in state["cuda"]]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)


def generator_state(generator: np.random.Generator) -> dict[str, Any]:
    """A NumPy ``Generator``'s bit-generator state (plain ints and strings: JSON as it is)."""
    return dict(generator.bit_generator.state)


def generator_from_state(state: dict[str, Any]) -> np.random.Generator:
    """A new ``Generator`` in the state :func:`generator_state` recorded."""
    name = state["bit_generator"]
    bit_generator_class = getattr(np.random, name, None)
    if bit_generator_class is None:
        raise ValueError(f"Unknown NumPy bit generator {name!r} in the saved random state.")
    bit_generator = bit_generator_class()
    bit_generator.state = state
    return np.random.Generator(bit_generator)


def _samplers(env: Any) -> list[Any]:
    """The action-space copies along ``env``'s wrapper chain, outermost first, whose generators
    an invalid reply's random fallback draws from (``ActionResolver``)."""
    samplers: list[Any] = []
    level = env
    while level is not None:
        sampler = getattr(vars(level).get("resolver"), "_sampler", None)
        if sampler is not None:
            samplers.append(sampler)
        level = vars(level).get("env")
    return samplers


def episode_rng_state(env: Any) -> dict[str, Any] | None:
    """The generator state of ``env`` itself (``None`` if it has not made one yet)."""
    generator = getattr(env.unwrapped, "_np_random", None)
    return generator_state(generator) if generator is not None else None


def env_rng_states(envs: Any) -> list[dict[str, Any]]:
    """For each env of a vector env that holds its envs in this process (``envs.envs``), the
    generator state before the reset that began its current episode (kept by ``TextVecEnv``;
    ``None`` elsewhere) and the states of its wrappers' fallback samplers."""
    episode_starts = getattr(envs, "episode_rng_states", None)
    states: list[dict[str, Any]] = []
    for i, env in enumerate(getattr(envs, "envs", [])):
        samplers = [getattr(s, "_np_random", None) for s in _samplers(env)]
        states.append(
            {
                "episode_start": episode_starts[i] if episode_starts is not None else None,
                "samplers": [generator_state(g) if g is not None else None for g in samplers],
            }
        )
    return states


def restore_env_rng_states(envs: Any, states: list[dict[str, Any]]) -> bool:
    """Put each env's generators back, the env's own one as it was before its current episode's
    reset (or its seed for the next ``reset()``), so that the next ``reset()`` replays that
    episode's start. ``False`` where
    that cannot be done for every env (another number of envs or samplers, envs in other
    processes, no recorded episode start), in which case nothing is changed."""
    inner = getattr(envs, "envs", None)
    if inner is None or len(inner) != len(states):
        return False
    samplers = [_samplers(env) for env in inner]
    if any(len(m) != len(s["samplers"]) for m, s in zip(samplers, states, strict=True)):
        return False
    if any(s["episode_start"] is None for s in states):
        return False
    for i, (env, env_samplers, state) in enumerate(zip(inner, samplers, states, strict=True)):
        start = state["episode_start"]
        if "seed" in start:  # the episode began with a seeded reset: seed the next one alike
            envs._seeds[i] = int(start["seed"])
        else:
            env.unwrapped._np_random = generator_from_state(start)
        for sampler, sampler_state in zip(env_samplers, state["samplers"], strict=True):
            if sampler_state is not None:
                sampler._np_random = generator_from_state(sampler_state)
    return True


# --- an on-policy algorithm's run: its generators, its envs' next episodes, its statistics -------


def algorithm_state(
    algo: Any, shuffle_rng: np.random.Generator, at_boundary: bool
) -> dict[str, Any]:
    """The run's random state and SB3's episode bookkeeping, as JSON-ready data; ``at_boundary``:
    taken between rollouts (mid-rollout the observations are the step's, not the next
    rollout's: not resumable)."""
    boundary = at_boundary and algo._last_obs is not None
    starts = algo._last_episode_starts
    return {
        "rng": global_rng_state(),
        "shuffle_rng": generator_state(shuffle_rng),
        "env_rngs": env_rng_states(algo.env) if algo.env is not None else [],
        "last_obs": [str(o) for o in algo._last_obs] if boundary else None,
        "last_episode_starts": [bool(x) for x in starts] if starts is not None else None,
        "episode_num": int(algo._episode_num),
        "ep_info_buffer": list(algo.ep_info_buffer or []),
        "ep_success_buffer": [bool(x) for x in algo.ep_success_buffer or []],
    }


def resume_envs(algo: Any, state: dict[str, Any]) -> int:
    """The envs as the checkpoint left them: each env's current episode begins again from the
    same reset (its recorded generator state or seed). Where the checkpoint was taken between
    episodes that is exactly the checkpoint's state; an episode in progress starts over. Envs
    whose resets cannot be replayed (other vector envs) start fresh episodes from their own
    generators. Returns how many episodes started over.

    Gymnasium envs cannot hand over their inner state, so this is as exact as a resume gets:
    with one-step episodes, or checkpoints at episode ends, the resumed run is the
    uninterrupted run, bit for bit on the CPU."""

    env = algo.env
    env._reset_seeds()  # not the construction seed: that would replay the run's start
    replayed = restore_env_rng_states(env, state["env_rngs"])
    observations = env.reset()
    last_obs, starts = state["last_obs"], state["last_episode_starts"]
    size = algo._stats_window_size
    algo.ep_info_buffer = deque(state["ep_info_buffer"], maxlen=size)
    algo.ep_success_buffer = deque(state["ep_success_buffer"], maxlen=size)
    algo._last_obs = observations
    algo._last_episode_starts = np.ones(env.num_envs, dtype=bool)
    at_boundary = last_obs is not None and starts is not None and all(starts)
    if replayed and at_boundary and [str(o) for o in observations] != last_obs:
        warnings.warn(
            "Resuming: the envs' replayed resets show other observations than at the "
            "checkpoint (an env whose reset draws randomness outside its np_random, or "
            "another env). Training continues on the new episodes.",
            RuntimeWarning,
            stacklevel=5,
        )
    return env.num_envs if starts is None or not replayed else sum(not s for s in starts)
