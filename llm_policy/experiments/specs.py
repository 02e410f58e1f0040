"""Env specs and env keyword arguments as written on command lines, parsed in one place.

``KEY=VALUE,KEY=VALUE`` (values typed: ``true``/``false``, ``none``, numbers, JSON lists and
objects, else strings) or a JSON object, for every command's ``--env-kwargs``; ``ID`` or
``ID:KEY=VALUE,...`` for ``gym-llm bench --envs``; and the default suite of envs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from gym_llm.envs.ecosystems import register_known_family

#: How env kwargs are written, for error messages.
SYNTAX = (
    "expected KEY=VALUE pairs separated by commas, e.g. sab=False,natural=True, "
    'or a JSON object, e.g. \'{"layout": ["..G"]}\''
)
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_value(raw: str) -> Any:
    """A command-line value: ``true``/``false``, ``none``, an int, a float, JSON (``[..]``,
    ``{..}``, ``"..."``), else the string itself."""
    text = raw.strip()
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text[:1] in '[{"':
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def parse_settings(items: Sequence[str], flag: str) -> dict[str, Any]:
    """``["ppo.n_epochs=2", "policy.action_head=false"]`` -> ``{"ppo.n_epochs": 2,
    "policy.action_head": False}``: dotted settings (:func:`gym_llm.configs.override`) as
    written on a command line or in a recipe, values typed as :func:`parse_value` reads them.

    Raises:
        ValueError: an item without ``=`` or a name that is not dotted identifiers, naming
            ``flag``.
    """
    settings: dict[str, Any] = {}
    for item in items:
        name, eq, raw = item.partition("=")
        name = name.strip()
        if not eq or not all(_KEY.fullmatch(part) for part in name.split(".")):
            raise ValueError(
                f"{flag}: {item!r} is not NAME=VALUE; write settings as dotted names, e.g. "
                "ppo.n_epochs=2 policy.action_head=false timesteps=512."
            )
        settings[name] = parse_value(raw)
    return settings


def parse_env_kwargs(text: str | Sequence[str], flag: str = "--env-kwargs") -> dict[str, Any]:
    """``"sab=False,map_name=4x4"``, the same as separate items, or a JSON object →
    ``{"sab": False, "map_name": "4x4"}``.

    Raises:
        ValueError: a pair without ``=``, a key that is not a Python identifier, a repeated key,
            or invalid JSON; the message names ``flag`` and shows the expected syntax.
    """
    text = (text if isinstance(text, str) else ",".join(text)).strip()
    if not text:
        return {}
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{flag} {text!r} is not valid JSON ({exc}); {SYNTAX}.") from None
        if not isinstance(value, dict):
            raise ValueError(f"{flag} {text!r} must be a JSON object; {SYNTAX}.")
        return value
    kwargs: dict[str, Any] = {}
    for pair in _split_pairs(text):
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not _KEY.fullmatch(key):
            raise ValueError(f"{flag}: cannot read {pair.strip()!r} in {text!r}; {SYNTAX}.")
        if key in kwargs:
            raise ValueError(f"{flag}: {key!r} is given twice in {text!r}.")
        kwargs[key] = parse_value(raw)
    return kwargs


def _split_pairs(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and quotes (``a=[1,2],b=3`` → 2 pairs)."""
    pairs, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            pairs.append(text[start:i])
            start = i + 1
    pairs.append(text[start:])
    return pairs


@dataclass(frozen=True)
class EnvSpec:
    """One env of the comparison: a Gymnasium id and its kwargs."""

    id: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        if not self.kwargs:
            return self.id
        return f"{self.id} ({', '.join(f'{k}={v}' for k, v in self.kwargs.items())})"

    @property
    def slug(self) -> str:
        """A file name for the env's plot."""
        parts = [self.id.split("/")[-1]] + [f"{k}={v}" for k, v in self.kwargs.items()]
        return re.sub(r"[^A-Za-z0-9_.=-]+", "_", "-".join(parts))

    @property
    def kwargs_json(self) -> str:
        return json.dumps(self.kwargs, sort_keys=True)


#: The default suite (``--envs suite``). The text-native envs keep numeric Discrete spaces, so
#: SB3 plays them too.
SUITE: tuple[EnvSpec, ...] = (
    EnvSpec("Blackjack-v1", {"sab": False}),
    EnvSpec("FrozenLake-v1", {"is_slippery": False}),
    EnvSpec("FrozenLake-v1", {"is_slippery": True}),
    EnvSpec("Taxi-v4"),
    EnvSpec("CliffWalking-v1", {"max_episode_steps": 100}),
    EnvSpec("CartPole-v1"),
    EnvSpec("gym_llm/GuessNumber-v0"),
    EnvSpec("gym_llm/TextMaze-v0"),
)


def parse_env_spec(text: str) -> EnvSpec:
    """``"FrozenLake-v1:is_slippery=False,map_name=4x4"`` → :class:`EnvSpec`; the env is built
    once so that an unknown id or kwarg fails here, with a message, not an hour into a run."""
    import gym_llm.envs  # noqa: F401  (registers gym_llm/<Name>-v0)

    env_id, _, rest = text.strip().partition(":")
    if not env_id:
        raise ValueError(f"Env spec {text!r} has no env id; write ID or ID:key=value,...")
    kwargs = parse_env_kwargs(rest, flag=f"Env spec {text!r}")
    register_known_family(env_id)
    try:
        gym.make(env_id, **kwargs).close()
    except gym.error.Error as exc:
        raise ValueError(f"Env spec {text!r}: unknown env id {env_id!r} ({exc}).") from exc
    except TypeError as exc:
        raise ValueError(
            f"Env spec {text!r}: {env_id} does not take these kwargs ({exc})."
        ) from exc
    return EnvSpec(env_id, kwargs)


def family_specs(split: str) -> list[EnvSpec]:
    """A split of the task family (``tuning``, ``held-out``, ``noisy-tuning``,
    ``noisy-held-out``) as specs of ``gym_llm/Family-v0``."""
    from gym_llm.envs.family import ENV_ID, SPLITS

    return [EnvSpec(ENV_ID, {"task": task}) for task in SPLITS[split]]


#: ``--envs`` groups besides ``suite``: the task family's splits.
GROUPS = ("family-tuning", "family-held-out", "family-noisy-tuning", "family-noisy-held-out")


def parse_envs(items: Sequence[str]) -> list[EnvSpec]:
    """``--envs`` items: ``suite`` (every env of :data:`SUITE` that is registered),
    ``family-tuning`` / ``family-held-out`` / ``family-noisy-tuning`` / ``family-noisy-held-out``
    (the task family's splits) or specs."""
    specs: list[EnvSpec] = []
    for item in items:
        if item == "suite":
            specs.extend(s for s in SUITE if _registered(s.id))
        elif item in GROUPS:
            specs.extend(family_specs(item.removeprefix("family-")))
        else:
            specs.append(parse_env_spec(item))
    return specs


def _registered(env_id: str) -> bool:
    import gym_llm.envs  # noqa: F401

    return env_id in gym.registry
