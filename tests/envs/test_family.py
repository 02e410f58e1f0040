"""The task family: names, the splits, the rules each kind pays for, exact evaluation."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import gym_llm  # noqa: F401  (registers gym_llm/* envs)
from gym_llm.envs.family import (
    HELD_OUT,
    NOISY_HELD_OUT,
    NOISY_TUNING,
    SPLITS,
    TUNING,
    FamilyEnv,
    make_task,
)
from gym_llm.envs.family_tasks import KINDS, NOISY_KINDS, PHRASINGS
from gym_llm.envs.tabular import TabularModel
from gym_llm.evaluation.exact import exact_optimum, exact_policy_value, exact_random_value
from gym_llm.wrappers import TextObservationWrapper

EVERY_SPLIT_TASK = [*TUNING, *HELD_OUT, *NOISY_TUNING, *NOISY_HELD_OUT]


def _parts(name: str) -> tuple[str, int, int]:
    kind, phrasing, seed = name.split("-")
    return kind, int(phrasing[1:]), int(seed[1:])


@pytest.mark.parametrize(
    ("tuning_split", "held_split", "kinds"),
    [(TUNING, HELD_OUT, set(KINDS) - set(NOISY_KINDS)),
     (NOISY_TUNING, NOISY_HELD_OUT, set(NOISY_KINDS))],
)  # fmt: skip
def test_the_splits_share_no_phrasing_and_no_generator_seed(
    tuning_split: tuple[str, ...], held_split: tuple[str, ...], kinds: set[str]
) -> None:
    tuning = [_parts(t) for t in tuning_split]
    held = [_parts(t) for t in held_split]
    assert {p for _, p, _ in tuning}.isdisjoint({p for _, p, _ in held})
    assert {s for _, _, s in tuning}.isdisjoint({s for _, _, s in held})
    # every kind in both, so that the held-out split tests the same skills in new words
    assert {k for k, _, _ in tuning} == {k for k, _, _ in held} == kinds
    assert SPLITS == {
        "tuning": TUNING,
        "held-out": HELD_OUT,
        "noisy-tuning": NOISY_TUNING,
        "noisy-held-out": NOISY_HELD_OUT,
    }


@pytest.mark.parametrize("name", EVERY_SPLIT_TASK)
def test_every_task_is_learnable_and_not_solved_by_one_action(name: str) -> None:
    env = FamilyEnv(name)
    texts = env.task.texts
    assert len(set(texts)) == len(texts)  # every state has its own text
    model = TabularModel.of(env)
    q = model.q_values()
    gap = env.optimal_return - env.random_return
    assert gap >= 0.2
    # no single action is right everywhere: "always the same word" stays far from the optimum
    for action in range(env.action_space.n):
        always = np.zeros_like(q)
        always[:, action] = 1.0
        assert model.value(always) < env.optimal_return - 0.4 * gap
    # the action words are what the instruction asks for
    for word in env.action_names:
        assert f"'{word}'" in env.instruction


def test_one_step_kinds_pay_the_rule_and_end() -> None:
    env = FamilyEnv("threshold-p0-s0")
    text = env.instruction
    threshold = int(text.split("is ")[1].split(" or")[0])
    for state, observation in enumerate(env.task.texts):
        number = int(observation.rstrip(".").split()[-1])
        right = int(number >= threshold)
        assert env.task.moves[state][right] == ((1.0, None, 1.0),)
        assert env.task.moves[state][1 - right] == ((1.0, None, 0.0),)
    compare = FamilyEnv("compare-p3-s100")  # the cheaper shop wins
    for observation, row in zip(compare.task.texts, compare.task.moves, strict=True):
        north, south = (int(w) for w in observation.split() if w.isdigit())
        assert row[0 if north < south else 1] == ((1.0, None, 1.0),)


def test_weather_pays_the_rule_by_chance_at_the_rate_it_states() -> None:
    env = FamilyEnv("weather-p1-s1")  # fish when the lake is warm enough
    words = env.instruction.split()
    chance = int(words[words.index("%") - 1]) / 100
    threshold = int(words[words.index("degrees") - 1])
    assert env.optimal_return == pytest.approx(chance) and env.random_return == pytest.approx(0.5)
    rewards: dict[bool, list[float]] = {True: [], False: []}
    for episode in range(4000):
        observation, _ = env.reset(seed=episode)
        warm = int(env.describe(observation).split()[-2]) >= threshold
        _, reward, terminated, _, _ = env.step(int(warm))  # the rule's word: fish when warm
        assert terminated
        rewards[warm].append(reward)
    for paid in rewards.values():  # the rule's word pays at the stated rate on both sides
        assert np.mean(paid) == pytest.approx(chance, abs=0.04)


def test_ice_slides_and_dice_bust_as_their_transitions_say() -> None:
    env = FamilyEnv("ice-p0-s0")
    words = env.instruction.split()
    slip = int(words[words.index("%") - 1]) / 100
    slid, moves = 0, 0
    for episode in range(400):
        observation, _ = env.reset(seed=episode)
        cell = int(env.describe(observation).split()[4].rstrip("."))
        after, _, terminated, _, _ = env.step(1)  # right
        if terminated:
            continue
        moves += 1
        slid += int(env.describe(after).split()[4].rstrip(".")) == max(cell - 1, 0) != cell + 1
    assert slid / moves == pytest.approx(slip, abs=0.06)
    dice = FamilyEnv("dice-p0-s0")
    limit = int(dice.instruction.split("divided by ")[1].split(".")[0])
    q = TabularModel.of(dice).q_values()
    totals = [int(t.split()[-1].rstrip(".")) for t in dice.task.texts]
    stop = dict(zip(totals, q[:, 1], strict=True))
    assert stop[limit] == pytest.approx(1.0) and stop[1] == pytest.approx(1 / limit)
    assert q[totals.index(1), 0] > q[totals.index(1), 1]  # roll from 1
    assert q[totals.index(limit), 1] > q[totals.index(limit), 0]  # stop at the limit
    dice.reset(seed=0)
    done, reward, rolls = False, 1.0, 0
    while not done:  # always roll: the game ends past the limit, paying 0
        _, reward, done, _, _ = dice.step(0)
        rolls += 1
    assert reward == 0.0 and 2 <= rolls <= limit


def test_deck_deals_two_cards_so_middle_hands_are_likelier() -> None:
    env = FamilyEnv("deck-p0-s1")
    hands = [int(t.split()[3].rstrip(".")) for t in env.task.texts]
    start = env.initial_state_distrib
    assert start.sum() == pytest.approx(1.0)
    by_hand = {h: start[[i for i, n in enumerate(hands) if n == h]].sum() for h in set(hands)}
    assert by_hand[2] == pytest.approx(1 / 100) and by_hand[11] == pytest.approx(10 / 100)
    drawn = [hands[int(env.reset(seed=i)[0])] for i in range(4000)]
    assert np.mean(np.array(drawn) == 11) == pytest.approx(0.10, abs=0.015)  # reset agrees
    q = TabularModel.of(env).q_values()
    assert all(q[i, 0] > q[i, 1] for i, n in enumerate(hands) if n <= 8)  # hit a low hand
    assert all(q[i, 1] > q[i, 0] for i, n in enumerate(hands) if n >= 19)  # stand near 20


def test_walks_pay_at_the_exit_and_stop_at_the_horizon() -> None:
    env = gym.make("gym_llm/Family-v0", task="walk-p0-s0")
    observation, _ = env.reset(seed=3)
    text = env.unwrapped.describe(observation)
    cell, exit_cell = (int(w.rstrip(".")) for w in text.split() if w.rstrip(".").isdigit())
    towards = 1 if exit_cell > cell else 0
    total, done = 0.0, False
    while not done:
        observation, reward, terminated, truncated, _ = env.step(towards)
        total, done = total + reward, terminated or truncated
    assert terminated and total == pytest.approx(1.0 - 0.05 * (abs(exit_cell - cell) - 1))
    env.reset(seed=3)
    away = 1 - towards
    for move in range(env.unwrapped.horizon):
        _, reward, terminated, truncated, _ = env.step(away if move % 2 == 0 else towards)
    assert truncated and not terminated


@pytest.mark.parametrize("name", ["membership-p1-s0", "grid-p1-s1"])
def test_exact_evaluation_knows_the_family(name: str) -> None:
    kwargs = {"task": name}
    env = FamilyEnv(name)
    assert exact_optimum("gym_llm/Family-v0", kwargs) == pytest.approx(env.optimal_return)
    assert exact_random_value("gym_llm/Family-v0", kwargs) == pytest.approx(env.random_return)
    text_env = TextObservationWrapper(gym.make("gym_llm/Family-v0", **kwargs))
    best = TabularModel.of(env).q_values().argmax(-1)
    answers = {text_env.format(s): env.action_names[a] for s, a in enumerate(best)}

    class Oracle:
        def predict(self, texts: list[str], deterministic: bool = True) -> tuple[list[str], None]:
            return [answers[t] for t in texts], None

    assert exact_policy_value(Oracle(), "gym_llm/Family-v0", kwargs) == pytest.approx(
        env.optimal_return
    )


def test_any_name_is_a_task_and_the_same_name_the_same_task() -> None:
    for kind in KINDS:
        for phrasing in range(PHRASINGS):
            task = make_task(f"{kind}-p{phrasing}-s7")
            assert task.texts and task.instruction
    assert make_task("range-p2-s5") == make_task("range-p2-s5")
    # seeds draw the constants: ten seeds, (almost) ten different rules
    assert len({make_task(f"range-p2-s{s}").instruction for s in range(10)}) >= 8


@pytest.mark.parametrize(
    ("name", "match"),
    [("compare", "KIND-pPHRASING-sSEED"), ("sorting-p0-s0", "unknown kind"),
     ("walk-p9-s0", "phrasing must be")],
)  # fmt: skip
def test_bad_names_say_what_is_valid(name: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FamilyEnv(name)


def test_steps_check_their_input() -> None:
    env = FamilyEnv("walk-p1-s0")
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="down, up"):
        env.step(2)
