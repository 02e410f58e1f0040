"""What a resumed run needs beyond the weights: the random state, the envs' next episodes, the
episode statistics. Part of :class:`gym_llm.PPO` (the layer under its checkpointing).

A checkpoint taken between rollouts (where ``gym-llm train`` takes them) resumes exactly: the
same generators, the same observations the envs were showing, the same minibatch order. Gymnasium
envs cannot hand over their inner state, so an episode that was in progress at the checkpoint
starts over on resume (from the env's restored generator); with one-step episodes, or
checkpoints at episode ends, the resumed run is the uninterrupted run, bit for bit on the CPU.
"""

from __future__ import annotations

import warnings
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from gym_llm.rl.common.run_state import (
    env_rng_states,
    generator_from_state,
    generator_state,
    global_rng_state,
    restore_env_rng_states,
    restore_global_rng_state,
)
from gym_llm.rl.ppo.update import PPOUpdate


class TrainingState(PPOUpdate):
    """:meth:`training_state` for ``save``, :meth:`restore_training_state` for ``load``, and the
    resumed ``learn(..., reset_num_timesteps=False)`` that uses it."""

    #: Where the last :meth:`save` wrote (``None`` before the first); named by the NaN guard.
    last_checkpoint: Path | None
    #: Episodes that were in progress at the checkpoint and started over on resume.
    restarted_episodes: int
    _pending_resume: dict[str, Any] | None
    _in_rollout: bool

    def training_state(self) -> dict[str, Any]:
        """The run's random state and bookkeeping, as JSON-ready data."""
        boundary = not self._in_rollout and self._last_obs is not None
        starts = self._last_episode_starts
        return {
            "rng": global_rng_state(),
            "shuffle_rng": generator_state(self._shuffle_rng),
            "env_rngs": env_rng_states(self.env) if self.env is not None else [],
            # Mid-rollout the observations are the step's, not the next rollout's: not resumable.
            "last_obs": [str(o) for o in self._last_obs] if boundary else None,  # type: ignore[union-attr]
            "last_episode_starts": [bool(x) for x in starts] if starts is not None else None,
            "episode_num": int(self._episode_num),
            "ep_info_buffer": list(self.ep_info_buffer or []),
            "ep_success_buffer": [bool(x) for x in self.ep_success_buffer or []],
            "first_greedy": dict(self._first_greedy),
            "skipped_steps": int(self.skipped_steps),
        }

    def restore_training_state(self, state: dict[str, Any]) -> None:
        """Restore the generators now; the envs' part waits for ``learn(...,
        reset_num_timesteps=False)`` (a fresh ``learn`` resets the envs as usual)."""
        restore_global_rng_state(state["rng"])
        self._shuffle_rng = generator_from_state(state["shuffle_rng"])
        self._first_greedy = {str(k): int(v) for k, v in state["first_greedy"].items()}
        self.skipped_steps = int(state.get("skipped_steps", 0))
        self._episode_num = int(state["episode_num"])
        self._pending_resume = state

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: Any = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ) -> tuple[int, BaseCallback]:
        pending, self._pending_resume = self._pending_resume, None
        if pending is not None and not reset_num_timesteps and self.env is not None:
            self._resume_envs(pending)
        return super()._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
        )

    def _resume_envs(self, state: dict[str, Any]) -> None:
        """The envs as the checkpoint left them: each env's current episode begins again from
        the same reset (its recorded generator state or seed). Where the checkpoint was taken
        between episodes that is exactly the checkpoint's state; an episode in progress starts
        over (counted in :attr:`restarted_episodes`). Envs whose resets cannot be replayed
        (other vector envs) start fresh episodes from their own generators."""
        env = self.env
        assert env is not None
        env._reset_seeds()  # not the construction seed: that would replay the run's start
        replayed = restore_env_rng_states(env, state["env_rngs"])
        observations = env.reset()
        last_obs, starts = state["last_obs"], state["last_episode_starts"]
        size = self._stats_window_size
        self.ep_info_buffer = deque(state["ep_info_buffer"], maxlen=size)
        self.ep_success_buffer = deque(state["ep_success_buffer"], maxlen=size)
        self._last_obs = observations  # type: ignore[assignment]
        self._last_episode_starts = np.ones(env.num_envs, dtype=bool)
        self.restarted_episodes = (
            env.num_envs if starts is None or not replayed else sum(not s for s in starts)
        )
        at_boundary = last_obs is not None and starts is not None and all(starts)
        if replayed and at_boundary and [str(o) for o in observations] != last_obs:
            warnings.warn(
                "Resuming: the envs' replayed resets show other observations than at the "
                "checkpoint (an env whose reset draws randomness outside its np_random, or "
                "another env). Training continues on the new episodes.",
                RuntimeWarning,
                stacklevel=4,
            )
