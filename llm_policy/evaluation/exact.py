"""Exact expected returns by dynamic programming, where the env's dynamics are known.

A Monte-Carlo estimate of a Blackjack policy needs tens of thousands of episodes to resolve
differences of 0.01, which is about what separates a decent policy from the optimum. When the
policy only sees the current state, it is cheaper and exact to ask it once per state and compute
the expected return from the transition model. This module does that for Blackjack (``Blackjack-v1``
with an infinite deck, as Gymnasium draws with replacement); other tabular envs follow the same
pattern: FrozenLake, Taxi and CliffWalking list their transitions in ``env.unwrapped.P``, so a
finite-horizon backup over the episode's step limit gives their exact values (``TabularModel``).
KeywordBandit is exact too: one question per target. gym_llm's GuessNumber and TextMaze list
their transitions in ``P`` as well; there the policy is asked only in the states it reaches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

import gymnasium as gym
import numpy as np

from gym_llm.envs.tabular import TabularModel

#: A card's value, drawn uniformly from 13 ranks (face cards count 10), as Gymnasium draws.
_CARDS: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10, 10, 10)
_P = 1.0 / len(_CARDS)

#: Blackjack observation: (player's total, dealer's shown card, usable ace 0/1).
BlackjackState = tuple[int, int, int]
STICK, HIT = 0, 1


def _total(hard: int, ace: bool) -> tuple[int, bool]:
    """Hand total and whether an ace counts as 11 (``hard`` counts every ace as 1)."""
    if ace and hard + 10 <= 21:
        return hard + 10, True
    return hard, False


@cache
def _dealer_outcomes(hard: int, ace: bool) -> Mapping[int, float]:
    """Distribution of the dealer's final total (0 = bust) from a hand, hitting below 17."""
    total, _ = _total(hard, ace)
    if total > 21:
        return {0: 1.0}
    if total >= 17:
        return {total: 1.0}
    out: dict[int, float] = {}
    for card in _CARDS:
        for final, p in _dealer_outcomes(hard + card, ace or card == 1).items():
            out[final] = out.get(final, 0.0) + _P * p
    return out


@cache
def _stick_value(player: int, shown: int) -> float:
    """Expected reward of sticking on ``player`` against a dealer showing ``shown``."""
    value = 0.0
    for hidden in _CARDS:
        for final, p in _dealer_outcomes(shown + hidden, shown == 1 or hidden == 1).items():
            value += _P * p * ((player > final) - (player < final))
    return value


def blackjack_states() -> list[BlackjackState]:
    """Every decision state a policy can see: hard totals 4-21, soft totals 12-21, 10 dealer cards."""
    states = [(total, shown, 0) for total in range(4, 22) for shown in range(1, 11)]
    states += [(total, shown, 1) for total in range(12, 22) for shown in range(1, 11)]
    return states


def blackjack_value(
    policy: Mapping[BlackjackState, float] | Callable[[BlackjackState], float],
) -> float:
    """Exact expected return of a policy on ``Blackjack-v1`` (sab/natural False).

    ``policy`` maps each state of :func:`blackjack_states` to the probability of hitting: 0
    (stick) or 1 (hit) for a deterministic policy, anything between for a stochastic one (e.g. 0.5
    where an unparseable reply makes the env pick a random action).
    """
    act = policy if callable(policy) else policy.__getitem__

    @cache
    def value(hard: int, ace: bool, shown: int) -> float:
        total, usable = _total(hard, ace)
        p_hit = float(act((total, shown, int(usable))))
        if not 0.0 <= p_hit <= 1.0:
            raise ValueError(
                f"policy gave {p_hit} for {(total, shown, int(usable))}, not in [0, 1]."
            )
        stick = _stick_value(total, shown) if p_hit < 1.0 else 0.0
        hit = _hit_value(hard, ace, shown, value) if p_hit > 0.0 else 0.0
        return (1.0 - p_hit) * stick + p_hit * hit

    return _initial_expectation(value)


def blackjack_optimum() -> tuple[float, dict[BlackjackState, int]]:
    """The optimal expected return and an optimal policy (hit iff hitting is strictly better)."""
    best: dict[BlackjackState, int] = {}

    @cache
    def value(hard: int, ace: bool, shown: int) -> float:
        total, usable = _total(hard, ace)
        stick = _stick_value(total, shown)
        hit = _hit_value(hard, ace, shown, value)
        best[(total, shown, int(usable))] = HIT if hit > stick else STICK
        return max(stick, hit)

    optimum = _initial_expectation(value)
    for hard, ace, shown in (
        (h, a, s) for h in range(4, 22) for a in (False, True) for s in range(1, 11)
    ):
        value(hard, ace, shown)  # fill in states the initial deal can only reach by hitting
    return optimum, best


def blackjack_q_values() -> dict[BlackjackState, tuple[float, float]]:
    """``Q*(s, stick), Q*(s, hit)`` in every state of :func:`blackjack_states`: what each action is
    worth when play is optimal after it (the target of value learning on Blackjack)."""

    @cache
    def value(hard: int, ace: bool, shown: int) -> float:
        total, _ = _total(hard, ace)
        return max(_stick_value(total, shown), _hit_value(hard, ace, shown, value))

    q: dict[BlackjackState, tuple[float, float]] = {}
    for total, shown, usable in blackjack_states():
        hard, ace = (total - 10, True) if usable else (total, False)
        q[(total, shown, usable)] = (
            _stick_value(total, shown),
            _hit_value(hard, ace, shown, value),
        )
    return q


class BlackjackTable:
    """``Blackjack-v1`` (sab and natural False) as a toy-text env lists itself: ``P[s][a] =
    [(prob, next, reward, terminated), ...]`` over the states of :func:`blackjack_states`, so
    :class:`TabularModel` and simulations on the exact model treat it as they treat FrozenLake.
    Sticking ends the episode with +1, 0 or -1 as the dealer's hand falls, so the table keeps
    the reward's noise; an episode's end leads to ``next = len(P)``, no state."""

    #: A step limit no hand reaches: from a total of 4, drawing aces busts on the 18th card.
    horizon = 21
    spec = None
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.observations = blackjack_states()
        index = {state: i for i, state in enumerate(self.observations)}
        end = len(self.observations)
        self.P: dict[int, dict[int, list[tuple[float, int, float, bool]]]] = {}
        for i, (total, shown, usable) in enumerate(self.observations):
            hard = total - 10 if usable else total  # an ace that is not usable never becomes so
            hits: dict[tuple[int, float, bool], float] = {}
            for card in _CARDS:
                new_total, new_usable = _total(hard + card, bool(usable) or card == 1)
                key = (end, -1.0, True) if new_total > 21 else (
                    index[(new_total, shown, int(new_usable))], 0.0, False)  # fmt: skip
                hits[key] = hits.get(key, 0.0) + _P
            self.P[i] = {
                STICK: [(p, end, reward, True) for reward, p in _stick_outcomes(total, shown)],
                HIT: [(p, nxt, reward, done) for (nxt, reward, done), p in hits.items()],
            }
        self.initial_state_distrib = np.zeros(end)
        for first in _CARDS:
            for second in _CARDS:
                total, usable = _total(first + second, first == 1 or second == 1)
                for shown in _CARDS:
                    self.initial_state_distrib[index[(total, shown, int(usable))]] += _P**3

    @property
    def unwrapped(self) -> BlackjackTable:
        return self


def _stick_outcomes(player: int, shown: int) -> list[tuple[float, float]]:
    """``(reward, probability)`` of sticking on ``player`` against ``shown``: win, draw, loss."""
    odds = {1.0: 0.0, 0.0: 0.0, -1.0: 0.0}
    for hidden in _CARDS:
        for final, p in _dealer_outcomes(shown + hidden, shown == 1 or hidden == 1).items():
            odds[float((player > final) - (player < final))] += _P * p
    return [(reward, p) for reward, p in odds.items() if p > 0]


def _hit_value(hard: int, ace: bool, shown: int, value: Callable[[int, bool, int], float]) -> float:
    """Expected return of hitting once, then following ``value``: a bust loses 1."""
    expected = 0.0
    for card in _CARDS:
        new_hard, new_ace = hard + card, ace or card == 1
        expected += _P * (
            value(new_hard, new_ace, shown) if _total(new_hard, new_ace)[0] <= 21 else -1.0
        )
    return expected


def _initial_expectation(value: Callable[[int, bool, int], float]) -> float:
    """Average of ``value`` over the opening deal (two player cards, the dealer's shown card)."""
    total = 0.0
    for first in _CARDS:
        for second in _CARDS:
            for shown in _CARDS:
                total += _P**3 * value(first + second, first == 1 or second == 1, shown)
    return min(1.0, max(-1.0, total))  # rounding can step just outside the possible range


#: Toy-text envs whose ``unwrapped.P[s][a]`` lists every transition ``(prob, next, reward, done)``.
TABULAR_ENVS: tuple[str, ...] = ("FrozenLake-v1", "FrozenLake8x8-v1", "Taxi-v4", "CliffWalking-v1")

#: gym_llm's text-native envs with exact models in ``unwrapped.P`` (any constructor kwargs). Their
#: state counts are larger (GuessNumber: 817), so a policy is only asked in the states it reaches.
TEXT_TABULAR_ENVS: tuple[str, ...] = (
    "gym_llm/GuessNumber-v0",
    "gym_llm/TextMaze-v0",
    "gym_llm/Family-v0",
)
#: Every env :class:`TabularModel` scores (one state per index of ``unwrapped.P``).
ALL_TABULAR_ENVS: tuple[str, ...] = TABULAR_ENVS + TEXT_TABULAR_ENVS

#: Env options that make dynamics differ from ``P`` (Taxi's rain and fickle passenger).
_UNMODELLED = ("is_rainy", "fickle_passenger")


def _make_tabular(env_id: str, env_kwargs: Mapping[str, Any]) -> gym.Env[Any, Any]:
    return gym.make(env_id, **dict(env_kwargs))


def _greedy_distribution(
    model: Any,
    env_id: str,
    env_kwargs: Mapping[str, Any] | None,
    states: Sequence[Any],
    batch_size: int,
) -> np.ndarray:
    """``[i, action]`` probabilities of what the env plays when ``model`` is asked greedily in
    ``states[i]``: each state is formatted and each reply parsed by the same wrappers the agent
    trains with; an unparseable reply gets the wrapper's fallback action, or uniform (the wrapper
    then plays a random action)."""
    from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper

    kwargs = dict(env_kwargs or {})
    _require_supported(env_id, kwargs)
    text_env = TextObservationWrapper(gym.make(env_id, **kwargs))
    parser = ActionParserWrapper(text_env)
    n_actions = int(text_env.action_space.n)  # type: ignore[attr-defined]
    texts = [text_env.format(state) for state in states]
    policy = np.zeros((len(states), n_actions))
    for start in range(0, len(states), batch_size):
        replies, _ = model.predict(texts[start : start + batch_size], deterministic=True)
        for row, reply in enumerate(replies, start=start):
            parsed = parser.parse(str(reply))
            if parsed.valid:
                policy[row, int(parsed.action)] = 1.0
            elif parser.fallback_action is not None:
                policy[row, int(parser.fallback_action)] = 1.0
            else:
                policy[row] = 1.0 / n_actions
    text_env.close()
    return policy


def greedy_action_probabilities(
    model: Any, env_id: str, env_kwargs: Mapping[str, Any] | None = None, batch_size: int = 64
) -> np.ndarray:
    """``[state, action]`` probabilities of ``model``'s greedy policy on a tabular env, asking
    once per state (see :func:`_greedy_distribution`)."""
    n_states = len(_make_tabular(env_id, env_kwargs or {}).unwrapped.P)  # type: ignore[attr-defined]
    return _greedy_distribution(model, env_id, env_kwargs, range(n_states), batch_size)


def reachable_greedy_probabilities(
    model: Any, env_id: str, env_kwargs: Mapping[str, Any] | None = None, batch_size: int = 64
) -> np.ndarray:
    """Like :func:`greedy_action_probabilities`, but asking ``model`` only in the states its own
    greedy policy can reach from the start (level by level from the initial distribution); the
    rows of other states are uniform and cannot affect the value. A deterministic policy on
    GuessNumber reaches at most a few dozen of the 817 states."""
    tabular = TabularModel.of(_make_tabular(env_id, env_kwargs or {}))
    n_states, n_actions = tabular.reward.shape
    policy = np.full((n_states, n_actions), 1.0 / n_actions)
    seen = set(np.flatnonzero(tabular.initial > 0).tolist())
    frontier = sorted(seen)
    while frontier:
        policy[frontier] = _greedy_distribution(model, env_id, env_kwargs, frontier, batch_size)
        reached = np.einsum("sa,sat->t", policy[frontier], tabular.cont[frontier])
        frontier = sorted(set(np.flatnonzero(reached > 0).tolist()) - seen)
        seen.update(frontier)
    return policy


def _is_plain_blackjack(env_id: str, env_kwargs: Mapping[str, Any]) -> bool:
    return env_id == "Blackjack-v1" and not env_kwargs.get("sab") and not env_kwargs.get("natural")


def exact_evaluation_supported(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> bool:
    """Whether :func:`exact_policy_value` can evaluate this env exactly: Blackjack-v1 (sab and
    natural False), gym_llm/KeywordBandit-v0, and FrozenLake/Taxi/CliffWalking with a step limit
    (their own, or ``max_episode_steps=``)."""
    kwargs = env_kwargs or {}
    if env_id in TABULAR_ENVS:
        if any(kwargs.get(k) for k in _UNMODELLED):
            return False
        try:
            spec = gym.spec(env_id)
        except gym.error.Error:
            return False
        return kwargs.get("max_episode_steps", spec.max_episode_steps) is not None
    return (
        _is_plain_blackjack(env_id, kwargs)
        or env_id == KEYWORD_BANDIT
        or env_id in TEXT_TABULAR_ENVS
    )


KEYWORD_BANDIT = "gym_llm/KeywordBandit-v0"


def keyword_bandit_value(model: Any, env_kwargs: Mapping[str, Any] | None = None) -> float:
    """Exact expected reward of ``model``'s greedy replies on KeywordBandit: each target is
    equally likely and fully determines the observation, so one question per target suffices."""
    env = gym.make(KEYWORD_BANDIT, **dict(env_kwargs or {})).unwrapped
    targets = list(env.options)  # type: ignore[attr-defined]
    texts = [env.observation_for(t) for t in targets]  # type: ignore[attr-defined]
    replies, _ = model.predict(texts, deterministic=True)
    return sum(env.score(str(r), t) for r, t in zip(replies, targets, strict=True)) / len(targets)  # type: ignore[attr-defined]


def greedy_hit_probabilities(
    model: Any, env_id: str, env_kwargs: Mapping[str, Any] | None = None, batch_size: int = 64
) -> dict[BlackjackState, float]:
    """What ``model``'s greedy policy (``predict(deterministic=True)``) plays in every Blackjack
    state, as the probability of hitting (0.5 where an unparseable reply makes the env play a
    random action; see :func:`_greedy_distribution`)."""
    states = blackjack_states()
    policy = _greedy_distribution(model, env_id, env_kwargs, states, batch_size)
    return {state: float(p_hit) for state, p_hit in zip(states, policy[:, HIT], strict=True)}


def exact_policy_value(
    model: Any, env_id: str, env_kwargs: Mapping[str, Any] | None = None, batch_size: int = 64
) -> float:
    """Exact expected return of ``model``'s greedy policy: one query per state, then dynamic
    programming over the env's dynamics (see :func:`greedy_hit_probabilities`). Raises
    ``ValueError`` for envs without an exact model here."""
    _require_supported(env_id, env_kwargs)
    if env_id == KEYWORD_BANDIT:
        return keyword_bandit_value(model, env_kwargs)
    if env_id in ALL_TABULAR_ENVS:
        ask = (
            reachable_greedy_probabilities
            if env_id in TEXT_TABULAR_ENVS
            else greedy_action_probabilities
        )
        policy = ask(model, env_id, env_kwargs, batch_size)
        return TabularModel.of(_make_tabular(env_id, env_kwargs or {})).value(policy)
    return blackjack_value(greedy_hit_probabilities(model, env_id, env_kwargs, batch_size))


def blackjack_chart(p_hit: Mapping[BlackjackState, float]) -> str:
    """A basic-strategy style chart: rows are your total, columns the dealer's card; H = hit,
    S = stick, ? = random (unparseable reply)."""
    symbol = {0.0: "S", 1.0: "H"}
    header = "        dealer: A  2  3  4  5  6  7  8  9  10"
    lines = [header]
    for usable, totals, label in ((0, range(4, 22), "hard"), (1, range(12, 22), "soft")):
        for total in totals:
            row = [symbol.get(p_hit[(total, shown, usable)], "?") for shown in range(1, 11)]
            lines.append(f"{label} {total:>2}        " + "  ".join(row))
    return "\n".join(lines)


def exact_optimum(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> float:
    """The optimal expected return, by dynamic programming."""
    _require_supported(env_id, env_kwargs)
    if env_id == KEYWORD_BANDIT:
        return 1.0
    if env_id in ALL_TABULAR_ENVS:
        return TabularModel.of(_make_tabular(env_id, env_kwargs or {})).optimum()
    return blackjack_optimum()[0]


def exact_random_value(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> float:
    """The expected return of uniformly random actions."""
    _require_supported(env_id, env_kwargs)
    if env_id == KEYWORD_BANDIT:
        return float(gym.make(KEYWORD_BANDIT, **dict(env_kwargs or {})).unwrapped.random_return)  # type: ignore[attr-defined]
    if env_id in ALL_TABULAR_ENVS:
        model = TabularModel.of(_make_tabular(env_id, env_kwargs or {}))
        n_actions = model.reward.shape[1]
        return model.value(np.full(model.reward.shape, 1.0 / n_actions))
    return blackjack_value(lambda _: 0.5)


def _require_supported(env_id: str, env_kwargs: Mapping[str, Any] | None) -> None:
    if not exact_evaluation_supported(env_id, env_kwargs):
        raise ValueError(
            f"No exact evaluation for {env_id} with {dict(env_kwargs or {})}; supported: "
            f"Blackjack-v1 with sab=False and natural=False, {KEYWORD_BANDIT}, "
            f"{', '.join(TEXT_TABULAR_ENVS)}, and "
            f"{', '.join(TABULAR_ENVS)} with a step limit (max_episode_steps=...) and default "
            "dynamics. Use gym_llm.evaluation.monte_carlo.evaluate (Monte-Carlo) instead."
        )
