"""``Agent.save`` and ``Agent.load``: the Agent's part of a checkpoint, on top of ``PPO.save``.

A saved Agent is ``PPO.save``'s directory (adapter, value head, optimizer, config, random state)
plus ``agent.json`` (the Agent's own settings) and ``episodes.json`` (the finished episodes not
trained on yet), so that an agent saved between two updates and loaded again continues training
where it stopped, the way a resumed ``PPO.learn`` does.
"""

from __future__ import annotations

import os
from collections import deque
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch

from gym_llm.rl.agent_config import agent_json, saved_arguments
from gym_llm.rl.common.checkpoint_files import agent_path
from gym_llm.rl.episodes import EPISODES_FILE, Counts, Episode, episodes_json, read_episodes

if TYPE_CHECKING:
    from gym_llm.rl.ppo import PPO

SelfSaving = TypeVar("SelfSaving", bound="AgentSaving")


class AgentSaving:
    """The save/load half of :class:`gym_llm.Agent`."""

    FORMAT: ClassVar[str]
    ppo: PPO
    episodes: list[Episode]
    _replay: deque[Episode]
    _counts: Counts

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the checkpoint (see the module). The episode in progress is not kept: finish
        it (``terminate_episode``) before saving. The base weights only where nothing else
        names them (an agent built from a model object: ``base_model/``)."""
        episodes = episodes_json(self.episodes, self._replay, self._counts)
        self.ppo.save(path, extra_json={"agent.json": agent_json(self), EPISODES_FILE: episodes})

    @classmethod
    def load(
        cls: type[SelfSaving],
        path: str | os.PathLike[str],
        device: torch.device | str = "auto",
        **kwargs: Any,
    ) -> SelfSaving:
        """Rebuild an agent saved by :meth:`save` (call it on your subclass:
        ``BlackjackAgent.load(dir)``). ``kwargs`` override saved constructor arguments, e.g.
        ``action_space=`` for a non-Discrete space, ``tensorboard_log=``, or ``model=`` when the
        base model moved."""
        directory = agent_path(path)
        arguments = {**saved_arguments(directory, cls.FORMAT), "device": device}
        arguments.update(kwargs)
        agent = cls(**arguments)
        agent.ppo.load_policy_state(directory)
        if (directory / EPISODES_FILE).is_file():  # older agents had no pending episodes
            agent.episodes, replay, agent._counts = read_episodes(directory / EPISODES_FILE)
            agent._replay.extend(replay)
        return agent
