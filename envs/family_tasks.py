"""The generators of the task family: small text tasks with known optima, several phrasings each.

A task is plain data (:class:`Task`): the instruction, the action words, one text per state and
the exact transitions. Each *kind* is a rule an untrained LM does not follow from the text alone
(SmolLM2-135M answers the same word in every state), so only learning from reward beats the
random policy; each *phrasing* words the same rule differently (other words, other actions,
another story); each *generator seed* draws the rule's constants (the threshold, the interval,
the values compared, the member words, the length of the walk). :mod:`gym_llm.envs.family` makes
a Gymnasium env of a task and splits the family into a tuning and a held-out split.

Kinds:

- ``threshold``: one number against a set-point stated in the instruction (10 states).
- ``range``: is one number inside an interval (12 states).
- ``compare``: which of two numbers in the observation is larger (20 states) — a *relation*
  between two things in the text, not a rule over one.
- ``membership``: is a word in a list given in the instruction (10 states).
- ``walk``: walk to an exit on a line; your cell and the exit's cell are in the observation and
  the exit moves every episode (6-7 cells, 30-42 states; −0.05 a move, +1 at the exit).
- ``grid``: walk to a goal on a 3×3 grid, your cell and the goal's in the text (72 states).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: ``[state][action] -> (next state or None when the episode ends, reward)``.
Moves = tuple[tuple[tuple[int | None, float], ...], ...]

#: Reward per move of the walking kinds, and for reaching the goal.
MOVE_COST, GOAL_REWARD = -0.05, 1.0


@dataclass(frozen=True)
class Task:
    """One task of the family, as data (the env in :mod:`gym_llm.envs.family` plays it).

    ``moves[s][a]`` is where action ``a`` leads from state ``s`` and what it pays; episodes start
    uniformly in ``starts`` and are cut after ``horizon`` moves.
    """

    name: str
    instruction: str
    action_names: tuple[str, ...]
    texts: tuple[str, ...]
    moves: Moves
    starts: tuple[int, ...]
    horizon: int


def _one_step(
    name: str, instruction: str, actions: tuple[str, ...], cases: list[tuple[str, int]]
) -> Task:
    """A one-step task: each case is (observation text, index of the right action); the right
    action pays 1, any other 0, and every reply ends the episode."""
    moves = tuple(
        tuple((None, 1.0 if a == right else 0.0) for a in range(len(actions))) for _, right in cases
    )
    texts = tuple(text for text, _ in cases)
    return Task(name, instruction, actions, texts, moves, tuple(range(len(cases))), 1)


# Each phrasing: (instruction template, observation template, (action when false, when true)).
THRESHOLD = (
    ("You read a gauge. Reply 'high' if the reading is {t} or more, 'low' otherwise. Reward 1 "
     "for the right word.", "The reading is {n}.", ("low", "high")),
    ("A thermostat is set to {t} degrees. Reply 'off' when the room is at or above the "
     "set-point and 'heat' when it is below it.", "The room is at {n} degrees.", ("heat", "off")),
    ("Sell when the price is {t} or higher, buy when it is lower. Reply 'buy' or 'sell'.",
     "Price today: {n}.", ("buy", "sell")),
    ("Riders must be at least {t} inches tall. Reply 'yes' if this rider may ride, 'no' if not.",
     "The rider is {n} inches tall.", ("no", "yes")),
)  # fmt: skip
RANGE = (
    ("Reply 'inside' if the number is from {a} to {b} (both included), 'outside' otherwise.",
     "Number: {n}.", ("outside", "inside")),
    ("A safe pressure is from {a} to {b}. Reply 'ok' if the pressure is safe, 'alarm' if not.",
     "The pressure reads {n}.", ("alarm", "ok")),
    ("Guests aged {a} to {b} get a discount. Reply 'discount' for them and 'full' for everyone "
     "else.", "The guest is {n} years old.", ("full", "discount")),
    ("Accept parcels that weigh from {a} to {b} kg and reject the others. Reply 'accept' or "
     "'reject'.", "A parcel of {n} kg arrives.", ("reject", "accept")),
)  # fmt: skip
COMPARE = (
    ("Two numbers are shown. Reply 'first' if the first one is larger, 'second' if the second "
     "one is.", "First: {x}. Second: {y}.", ("second", "first")),
    ("Two players scored points. Reply with the name of the winner, 'Alice' or 'Bob'.",
     "Alice scored {x}, Bob scored {y}.", ("Bob", "Alice")),
    ("Two boxes are weighed. Reply 'left' or 'right': the side of the heavier box.",
     "The left box weighs {x} kg and the right box {y} kg.", ("right", "left")),
    ("Buy from the shop that charges less. Reply 'north' or 'south'.",
     "Milk costs {y} at the north shop and {x} at the south shop.", ("north", "south")),
)  # fmt: skip
MEMBERSHIP = (
    ("Fruits on today's list: {members}. Reply 'yes' if the named fruit is on the list, 'no' "
     "otherwise.", "Fruit: {w}.", ("no", "yes"),
     ("apple", "banana", "cherry", "grape", "lemon", "mango", "melon", "orange", "peach", "plum")),
    ("Colours allowed on the flag: {members}. Reply 'allowed' or 'banned' for the colour shown.",
     "The colour is {w}.", ("banned", "allowed"),
     ("red", "blue", "green", "yellow", "black", "white", "purple", "orange", "pink", "brown")),
    ("Animals that live in the park: {members}. Reply 'park' if the animal lives in the park, "
     "'zoo' if it does not.", "You see a {w}.", ("zoo", "park"),
     ("fox", "owl", "deer", "hare", "duck", "bear", "wolf", "lion", "seal", "goat")),
    ("Cities with a train station: {members}. Reply 'train' if you can go by train, 'bus' if "
     "not.", "You travel to {w}.", ("bus", "train"),
     ("Paris", "Rome", "Oslo", "Lima", "Cairo", "Delhi", "Tokyo", "Quito", "Dakar", "Perth")),
)  # fmt: skip
WALK = (
    ("You are on a path of {L} cells numbered 0 to {last}. Reply 'left' or 'right' to move one "
     "cell. Each move costs 0.05; reaching the exit pays 1 and ends the game.",
     "You are at cell {p}. The exit is at cell {e}.", ("left", "right")),
    ("You are in a lift in a building with floors 0 to {last}. Reply 'down' or 'up' to move one "
     "floor. Each move costs 0.05; reaching your meeting's floor pays 1.",
     "You are on floor {p}. Your meeting is on floor {e}.", ("down", "up")),
    ("You deliver along a street of houses 0 to {last}, numbered from west to east. Reply "
     "'west' or 'east' to walk one house. Each step costs 0.05; the delivery pays 1.",
     "You stand at house {p}. The parcel goes to house {e}.", ("west", "east")),
    ("A marker moves on a track of positions 0 to {last}. Reply 'back' to lower its position by "
     "one or 'forward' to raise it by one. Each move costs 0.05; hitting the target pays 1.",
     "Marker at {p}, target at {e}.", ("back", "forward")),
)  # fmt: skip
GRID = (
    ("You are on a 3 by 3 grid; rows 0-2 from the top, columns 0-2 from the left. Reply "
     "'north', 'east', 'south' or 'west' to move one cell. Each move costs 0.05; reaching the "
     "goal pays 1.", "You are at row {r}, column {c}. The goal is at row {gr}, column {gc}.",
     ("north", "east", "south", "west")),
    ("A robot works on a 3 by 3 floor; rows 0-2 top to bottom, columns 0-2 left to right. Reply "
     "'up', 'right', 'down' or 'left' to move it. Each move costs 0.05; the charger pays 1.",
     "Robot: row {r}, column {c}. Charger: row {gr}, column {gc}.", ("up", "right", "down", "left")),
    ("Move a piece on a 3 by 3 board (rows 0-2 from the top, columns 0-2 from the left) with "
     "'up', 'right', 'down' or 'left'. Each move costs 0.05; the target square pays 1.",
     "The piece is on row {r}, column {c}; the target is row {gr}, column {gc}.",
     ("up", "right", "down", "left")),
    ("You walk a 3 by 3 block of streets; rows 0-2 from north to south, columns 0-2 from west to "
     "east. Reply 'north', 'east', 'south' or 'west'. Each block costs 0.05; the cafe pays 1.",
     "You are at row {r}, column {c}. The cafe is at row {gr}, column {gc}.",
     ("north", "east", "south", "west")),
)  # fmt: skip


def threshold(name: str, rng: np.random.Generator, phrasing: int) -> Task:
    instruction, observation, actions = THRESHOLD[phrasing]
    low = int(rng.integers(0, 60))
    t = low + int(rng.integers(3, 8))
    cases = [(observation.format(n=n), int(n >= t)) for n in range(low, low + 10)]
    return _one_step(name, instruction.format(t=t), actions, cases)


def in_range(name: str, rng: np.random.Generator, phrasing: int) -> Task:
    instruction, observation, actions = RANGE[phrasing]
    low = int(rng.integers(10, 60))
    a = low + int(rng.integers(2, 5))
    b = a + int(rng.integers(4, 7)) - 1
    cases = [(observation.format(n=n), int(a <= n <= b)) for n in range(low, low + 12)]
    return _one_step(name, instruction.format(a=a, b=b), actions, cases)


def compare(name: str, rng: np.random.Generator, phrasing: int) -> Task:
    instruction, observation, actions = COMPARE[phrasing]
    values = sorted(int(v) for v in rng.choice(np.arange(2, 40), size=5, replace=False))
    cases = [(observation.format(x=x, y=y), int(x > y)) for x in values for y in values if x != y]
    if phrasing == 3:  # "less" wins: the shop named second in the text charges x
        cases = [(text, 1 - right) for text, right in cases]
    return _one_step(name, instruction, actions, cases)


def membership(name: str, rng: np.random.Generator, phrasing: int) -> Task:
    instruction, observation, actions, pool = MEMBERSHIP[phrasing]
    members = {pool[i] for i in rng.choice(len(pool), size=5, replace=False)}
    listed = ", ".join(w for w in pool if w in members)
    cases = [(observation.format(w=w), int(w in members)) for w in pool]
    return _one_step(name, instruction.format(members=listed), actions, cases)


def _walking(
    name: str, instruction: str, actions: tuple[str, ...], cells: list[tuple[str, int, int]],
    step: Callable[[int, int], int], horizon: int,
) -> Task:  # fmt: skip
    """A walk: each state is (text, your cell, goal cell) with your cell ≠ the goal's; ``step``
    moves a cell (staying put off the edge); reaching the goal pays 1 and ends the episode."""
    index = {(cell, goal): s for s, (_, cell, goal) in enumerate(cells)}
    moves = []
    for _, cell, goal in cells:
        row = []
        for action in range(len(actions)):
            nxt = step(cell, action)
            row.append((None, GOAL_REWARD) if nxt == goal else (index[nxt, goal], MOVE_COST))
        moves.append(tuple(row))
    texts = tuple(text for text, _, _ in cells)
    return Task(name, instruction, actions, texts, tuple(moves), tuple(range(len(cells))), horizon)


def walk(name: str, rng: np.random.Generator, phrasing: int) -> Task:
    instruction, observation, actions = WALK[phrasing]
    length = int(rng.integers(6, 8))
    cells = [
        (observation.format(p=p, e=e), p, e) for p in range(length) for e in range(length) if p != e
    ]

    def step(cell: int, action: int) -> int:
        return min(max(cell + (1 if action == 1 else -1), 0), length - 1)

    text = instruction.format(L=length, last=length - 1)
    return _walking(name, text, actions, cells, step, horizon=3 * length)


def grid(name: str, rng: np.random.Generator, phrasing: int) -> Task:
    instruction, observation, actions = GRID[phrasing]
    # The seed draws which cells are goals (5 of 9) so that seeds differ in their states.
    goals = sorted(int(g) for g in rng.choice(9, size=5, replace=False))
    cells = [
        (observation.format(r=p // 3, c=p % 3, gr=g // 3, gc=g % 3), p, g)
        for g in goals
        for p in range(9)
        if p != g
    ]
    deltas = ((-1, 0), (0, 1), (1, 0), (0, -1))  # north/up, east/right, south/down, west/left

    def step(cell: int, action: int) -> int:
        row, col = cell // 3 + deltas[action][0], cell % 3 + deltas[action][1]
        return row * 3 + col if 0 <= row < 3 and 0 <= col < 3 else cell

    return _walking(name, instruction, actions, cells, step, horizon=12)


#: Kind name → generator ``(task name, rng, phrasing) -> Task``.
KINDS: dict[str, Callable[[str, np.random.Generator, int], Task]] = {
    "threshold": threshold,
    "range": in_range,
    "compare": compare,
    "membership": membership,
    "walk": walk,
    "grid": grid,
}
#: Phrasings per kind (0..PHRASINGS-1).
PHRASINGS = 4
