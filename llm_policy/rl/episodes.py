"""An Agent's episodes: the turns it acted in, what they earned, and how they become PPO's
rollout buffer (in order, one env, each episode ending in a terminal state)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gym_llm.policy.prompts import Message
from gym_llm.policy.top_layers import TurnStates
from gym_llm.rl.ppo.buffer import TextRolloutBuffer
from gym_llm.wrappers.resolver import Resolution


@dataclass
class Turn:
    """One act() call: what the model saw and sampled, and what it earned."""

    #: The policy observation: the (truncated) conversation as a JSON message list.
    prompt: str
    reply: str
    #: Sampled token ids and their log-probs, exactly as sampled.
    tokens: np.ndarray
    log_probs: np.ndarray
    value: float
    #: The env action act() returned.
    action: Any
    #: How the action was found: "extract_action", "parser:<rule>" or "fallback".
    source: str
    #: Env reward(s) assigned to this turn plus any invalid-action penalty.
    reward: float = 0.0
    #: Exchanges dropped from the start of the conversation to fit ``max_context_tokens``.
    dropped_exchanges: int = 0
    #: What the update reuses from the rollout (gym_llm.policy.top_layers), if the policy keeps it.
    states: TurnStates | None = None


@dataclass
class Episode:
    """One episode's turns and the conversation they made."""

    turns: list[Turn]
    messages: list[Message]

    @property
    def episode_return(self) -> float:
        return float(sum(t.reward for t in self.turns))


@dataclass
class Counts:
    """What went wrong with the replies since the last update."""

    extract_failures: int = 0
    parser_recovered: int = 0
    invalid_actions: int = 0
    truncated_turns: int = 0

    def add(self, outcome: Resolution, dropped_exchanges: int) -> None:
        self.truncated_turns += int(dropped_exchanges > 0)
        self.extract_failures += int(outcome.error is not None)
        self.parser_recovered += int(outcome.source.startswith("parser:"))
        self.invalid_actions += int(outcome.source == "fallback")


def _plain(value: Any) -> Any:
    """An env action as JSON can hold it (NumPy scalars and arrays as numbers and lists)."""
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return repr(value)  # only read back for statistics


def episode_record(episode: Episode) -> dict[str, Any]:
    """An episode as JSON data, for saving an Agent between updates. The rollout's cached
    hidden states are not kept: the update recomputes them from the prompt."""
    return {
        "messages": list(episode.messages),
        "turns": [
            {
                "prompt": t.prompt,
                "reply": t.reply,
                "tokens": t.tokens.tolist(),
                "log_probs": t.log_probs.tolist(),
                "value": t.value,
                "action": _plain(t.action),
                "source": t.source,
                "reward": t.reward,
                "dropped_exchanges": t.dropped_exchanges,
            }
            for t in episode.turns
        ],
    }


def episode_from_record(record: dict[str, Any]) -> Episode:
    """Undo :func:`episode_record` (token ids and log-probs exactly as sampled)."""
    turns = [
        Turn(
            **{
                **t,
                "tokens": np.asarray(t["tokens"], dtype=np.int64),
                "log_probs": np.asarray(t["log_probs"], dtype=np.float32),
            }
        )
        for t in record["turns"]
    ]
    return Episode(turns, list(record["messages"]))


#: The file of a saved Agent that holds its untrained episodes (``Agent.save``).
EPISODES_FILE = "episodes.json"


def episodes_json(
    pending: Sequence[Episode], replay: Iterable[Episode], counts: Counts
) -> dict[str, Any]:
    """``episodes.json``: the finished episodes not trained on yet, the SFT replay window and
    the reply counts since the last update."""
    return {
        "pending": [episode_record(e) for e in pending],
        "replay": [episode_record(e) for e in replay],
        "counts": asdict(counts),
    }


def read_episodes(file: Path) -> tuple[list[Episode], list[Episode], Counts]:
    """Undo :func:`episodes_json`: ``(pending, replay, counts)``."""
    saved = json.loads(file.read_text())
    return (
        [episode_from_record(r) for r in saved["pending"]],
        [episode_from_record(r) for r in saved["replay"]],
        Counts(**saved["counts"]),
    )


def episodes_buffer(
    episodes: Sequence[Episode], device: torch.device, gamma: float, gae_lambda: float
) -> TextRolloutBuffer:
    """The turns in order in a one-env buffer with returns and advantages; each episode ends in
    a terminal state, so GAE cuts at episode starts and the last turn bootstraps from nothing."""
    n_turns = sum(len(e.turns) for e in episodes)
    buffer = TextRolloutBuffer(n_turns, 1, device=device, gae_lambda=gae_lambda, gamma=gamma)
    for episode in episodes:
        for index, turn in enumerate(episode.turns):
            buffer.add_turns(
                np.array([turn.prompt], dtype=object),
                [turn.reply],
                [turn.tokens],
                [turn.log_probs],
                np.array([turn.reward], dtype=np.float32),
                np.array([index == 0], dtype=np.float32),
                torch.tensor([turn.value]),
                [turn.states] if turn.states is not None else None,
            )
    buffer.compute_returns_and_advantage(
        last_values=torch.zeros(1), dones=np.array([True], dtype=bool)
    )
    return buffer


def episode_stats(episodes: Sequence[Episode], counts: Counts) -> dict[str, float]:
    """The ``agent/*`` figures of an update."""
    turns = [t for e in episodes for t in e.turns]
    return {
        "agent/episodes": float(len(episodes)),
        "agent/turns": float(len(turns)),
        "agent/mean_return": float(np.mean([e.episode_return for e in episodes])),
        "agent/mean_turns_per_episode": len(turns) / len(episodes),
        "agent/mean_reply_tokens": float(np.mean([len(t.tokens) for t in turns])),
        "agent/extract_failures": float(counts.extract_failures),
        "agent/parser_recovered": float(counts.parser_recovered),
        "agent/invalid_actions": float(counts.invalid_actions),
        "agent/invalid_action_rate": counts.invalid_actions / len(turns),
        "agent/truncated_turns": float(counts.truncated_turns),
    }


def best_episodes(episodes: Iterable[Episode], share: float) -> list[dict[str, Any]]:
    """The top ``share`` of ``episodes`` by return (at least one), as chat-messages records."""
    ranked = sorted(episodes, key=lambda e: e.episode_return, reverse=True)
    top = ranked[: max(1, math.ceil(share * len(ranked)))]
    return [{"messages": list(e.messages)} for e in top]
