"""Demonstrations from reference policies, as chat-messages JSONL for the SFT warm start.

:func:`make_demos` plays a reference policy in a built-in env and writes one line per turn, with
exactly the system and user messages the :class:`~gym_llm.LLMPolicy` sees (built by
:mod:`gym_llm.policy.prompts` from the text wrappers' instruction and formatter) and the action's
name as the assistant reply; :func:`gym_llm.rl.sft.warm_start` trains on them. ``balanced=True``
writes each state once instead of as often as episodes visit it: 200 optimal Blackjack episodes
give 307 turns over only 137 of the 280 states, dominated by a few common hands, while the
balanced set has every state, rare hands and the whole hit/stick boundary included, exactly once.
Here rather than in ``rl/``: the Blackjack reference is the exact optimum from ``evaluation/``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym

from gym_llm.evaluation.exact import blackjack_optimum, blackjack_states
from gym_llm.policy.prompts import Message, build_messages

#: Envs with a built-in reference policy, besides any env whose ``unwrapped`` has
#: ``reference_action()`` (``gym_llm/GuessNumber-v0``, ``gym_llm/TextMaze-v0``).
BLACKJACK = "Blackjack-v1"
KEYWORD_BANDIT = "gym_llm/KeywordBandit-v0"


def _text_envs(env: gym.Env[Any, Any]) -> tuple[Any, Any]:
    """The observation and action spaces the policy would see for ``env`` (wrapped if needed)."""
    from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper

    text_env = env
    if not isinstance(env.observation_space, gym.spaces.Text):
        text_env = TextObservationWrapper(env)
    parser = text_env
    if not isinstance(env.action_space, gym.spaces.Text):
        parser = ActionParserWrapper(text_env)
    return text_env, parser


def supported_demo_envs() -> list[str]:
    """Env ids :func:`make_demos` has a reference policy for."""
    ids = [f"{BLACKJACK} (sab=False)", KEYWORD_BANDIT]
    for env_id, spec in gym.registry.items():
        if not env_id.startswith("gym_llm/") or env_id == KEYWORD_BANDIT:
            continue
        entry = spec.entry_point
        if isinstance(entry, str):
            module, _, name = entry.partition(":")
            try:
                cls = getattr(__import__(module, fromlist=[name]), name)
            except (ImportError, AttributeError):
                continue
        else:
            cls = entry
        if callable(getattr(cls, "reference_action", None)):
            ids.append(env_id)
    return ids


def _unsupported(env_id: str, why: str) -> ValueError:
    return ValueError(
        f"make_demos has no reference policy for {env_id}: {why}. Supported: "
        f"{', '.join(supported_demo_envs())}; or write demonstrations yourself as chat-messages "
        "JSONL (see gym_llm.rl.sft.read_demos)."
    )


def _record(system_user: list[Message], reply: str) -> dict[str, Any]:
    return {"messages": [*system_user, {"role": "assistant", "content": reply}]}


def make_demos(
    env_id: str,
    episodes: int,
    path: str | Path,
    *,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    balanced: bool = False,
) -> int:
    """Play a reference policy and write its turns as chat-messages JSONL; returns lines written.

    One line per turn: the system and user messages the policy sees for that observation (built
    with :mod:`gym_llm.policy.prompts` from the text wrappers' instruction and formatter, as PPO builds
    them) and the reference action's name as the assistant reply. Reference policies:
    ``Blackjack-v1`` (``sab=False``, ``natural=False``): the optimal strategy
    (:func:`gym_llm.evaluation.exact.blackjack_optimum`); ``gym_llm/KeywordBandit-v0``: the target; any env
    whose ``unwrapped`` has ``reference_action()`` (``gym_llm/GuessNumber-v0``,
    ``gym_llm/TextMaze-v0``): that action.

    ``balanced=False`` writes every turn of ``episodes`` episodes (reset with ``seed``), so states
    appear as often as play visits them. ``balanced=True`` writes each state once: every Blackjack
    decision state (280, from :func:`gym_llm.evaluation.exact.blackjack_states`) and every KeywordBandit
    target, where ``episodes`` is not used; for other envs each distinct observation met in
    ``episodes`` episodes. Prefer it for SFT: episodes repeat common states and miss rare ones
    (200 optimal Blackjack episodes: 307 turns over 137 of the 280 states).
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}.")
    kwargs = dict(env_kwargs or {})
    if env_id == BLACKJACK:
        if kwargs.get("sab") or kwargs.get("natural"):
            raise _unsupported(
                env_id, "the optimal strategy is computed for sab=False, natural=False"
            )
        records = _blackjack_demos(episodes, seed, kwargs, balanced)
    else:
        try:
            env = gym.make(env_id, **kwargs)
        except gym.error.Error as exc:
            raise _unsupported(env_id, f"Gymnasium cannot make it ({exc})") from None
        try:
            if env_id == KEYWORD_BANDIT or hasattr(env.unwrapped, "observation_for"):
                records = _keyword_demos(env, episodes, seed, balanced)
            elif callable(getattr(env.unwrapped, "reference_action", None)):
                records = _reference_demos(env, episodes, seed, balanced)
            else:
                raise _unsupported(env_id, "it has no reference_action()")
        finally:
            env.close()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as file:
        for record in records:
            file.write(json.dumps(record, ensure_ascii=False) + "\n")
    return len(records)


def _blackjack_demos(
    episodes: int, seed: int, kwargs: dict[str, Any], balanced: bool
) -> list[dict[str, Any]]:
    _, best = blackjack_optimum()
    env = gym.make(BLACKJACK, **{**kwargs, "sab": False})
    text_env, parser = _text_envs(env)
    names = parser.action_space.actions

    def turn(state: tuple[int, int, int]) -> dict[str, Any]:
        messages = build_messages(
            text_env.format(state), text_env.observation_space, parser.action_space
        )
        return _record(messages, names[best[state]])

    if balanced:
        return [turn(state) for state in blackjack_states()]
    records = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed if episode == 0 else None)
        done = False
        while not done:
            state = (int(obs[0]), int(obs[1]), int(obs[2]))
            records.append(turn(state))
            obs, _, terminated, truncated, _ = env.step(best[state])
            done = terminated or truncated
    env.close()
    return records


def _keyword_demos(
    env: gym.Env[Any, Any], episodes: int, seed: int, balanced: bool
) -> list[dict[str, Any]]:
    unwrapped: Any = env.unwrapped

    def turn(text: str, target: str) -> dict[str, Any]:
        messages = build_messages(text, env.observation_space, env.action_space)
        return _record(messages, target)

    if balanced:
        return [turn(unwrapped.observation_for(t), t) for t in unwrapped.options]
    records = []
    for episode in range(episodes):
        text, info = env.reset(seed=seed if episode == 0 else None)
        records.append(turn(text, info["target"]))
    return records


def _reference_demos(
    env: gym.Env[Any, Any], episodes: int, seed: int, balanced: bool
) -> list[dict[str, Any]]:
    text_env, parser = _text_envs(env)
    names = parser.action_space.actions
    start = int(getattr(env.action_space, "start", 0))
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    for episode in range(episodes):
        text, _ = text_env.reset(seed=seed if episode == 0 else None)
        done = False
        while not done:
            action = int(env.unwrapped.reference_action())  # type: ignore[attr-defined]
            if not balanced or text not in seen:
                seen.add(text)
                messages = build_messages(text, text_env.observation_space, parser.action_space)
                records.append(_record(messages, names[action - start]))
            text, _, terminated, truncated, _ = text_env.step(action)
            done = terminated or truncated
    return records
