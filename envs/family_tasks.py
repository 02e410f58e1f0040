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

Noisy kinds, where one reward says little and a greedy learner is easily misled (as in Blackjack
and slippery FrozenLake):

- ``weather``: ``threshold`` with a chance reward: the right word pays 1 on 70-80 % of days,
  the other word on the rest (10 states; the optimum is that chance, random 0.5).
- ``ice``: ``walk`` on an icy path: a move slides the other way 20-30 % of the time.
- ``dice``: push your luck: ``roll`` adds a die (1-6) to your total, ``stop`` is paid the total
  over the limit, a total past the limit pays 0 (one state per total; random draws decide).
- ``cards``: a duel shaped like Blackjack: hit or stand on your hand against the house's first
  card, the house then draws to a set total, and the result pays +1, 0 or −1 (60 states):
  many states, each seen rarely, with a reward whose single draws say little.
- ``deck``: ``cards`` at Blackjack's scale: cards of 1 to 10, hands dealt as two cards' sum (so
  some hands are rare), the house showing 1 to 10 (180-210 states). A state's less played move
  may be played only a few times in thousands of env steps, each play paying ±1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: One result of a move: ``(probability, next state or None when the episode ends, reward)``.
Outcome = tuple[float, int | None, float]
#: ``[state][action] -> outcomes`` (probabilities summing to 1; one outcome: a sure move).
Moves = tuple[tuple[tuple[Outcome, ...], ...], ...]

#: Reward per move of the walking kinds, and for reaching the goal.
MOVE_COST, GOAL_REWARD = -0.05, 1.0


@dataclass(frozen=True)
class Task:
    """One task of the family, as data (the env in :mod:`gym_llm.envs.family` plays it).

    ``moves[s][a]`` lists where action ``a`` may lead from state ``s``, how likely and what it
    pays; episodes start in a state drawn from ``starts`` (each entry alike, so a state listed
    twice is twice as likely) and are cut after ``horizon`` moves.
    """

    name: str
    instruction: str
    action_names: tuple[str, ...]
    texts: tuple[str, ...]
    moves: Moves
    starts: tuple[int, ...]
    horizon: int


def _one_step(
    name: str,
    instruction: str,
    actions: tuple[str, ...],
    cases: list[tuple[str, int]],
    chance: float = 1.0,
) -> Task:
    """A one-step task: each case is (observation text, index of the right action); the right
    action pays 1 with probability ``chance`` (else 0), any other action 1 with probability
    ``1 - chance``, and every reply ends the episode."""

    def pays(p: float) -> tuple[Outcome, ...]:
        if p in (0.0, 1.0):  # a sure reward: one outcome, so the env draws nothing
            return ((1.0, None, p),)
        return ((p, None, 1.0), (1.0 - p, None, 0.0))

    moves = tuple(
        tuple(pays(chance if a == right else 1.0 - chance) for a in range(len(actions)))
        for _, right in cases
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
    step: Callable[[int, int], int], horizon: int, slip: float = 0.0,
) -> Task:  # fmt: skip
    """A walk: each state is (text, your cell, goal cell) with your cell ≠ the goal's; ``step``
    moves a cell (staying put off the edge); reaching the goal pays 1 and ends the episode. With
    ``slip``, a move goes the other way (two actions: left and right) that often."""
    index = {(cell, goal): s for s, (_, cell, goal) in enumerate(cells)}

    def result(cell: int, goal: int, action: int) -> tuple[int | None, float]:
        nxt = step(cell, action)
        return (None, GOAL_REWARD) if nxt == goal else (index[nxt, goal], MOVE_COST)

    moves = []
    for _, cell, goal in cells:
        row: list[tuple[Outcome, ...]] = []
        for action in range(len(actions)):
            sure = result(cell, goal, action)
            if slip == 0:
                row.append(((1.0, *sure),))
            else:
                row.append(((1.0 - slip, *sure), (slip, *result(cell, goal, 1 - action))))
        moves.append(tuple(row))
    texts = tuple(text for text, _, _ in cells)
    return Task(name, instruction, actions, texts, tuple(moves), tuple(range(len(cells))), horizon)


def _line_walk(name: str, phrasing: int, length: int, slip: float = 0.0) -> Task:
    """A walk on a line of ``length`` cells in :data:`WALK`'s words (icy with ``slip``)."""
    instruction, observation, actions = WALK[phrasing]
    cells = [
        (observation.format(p=p, e=e), p, e) for p in range(length) for e in range(length) if p != e
    ]

    def step(cell: int, action: int) -> int:
        return min(max(cell + (1 if action == 1 else -1), 0), length - 1)

    text = instruction.format(L=length, last=length - 1)
    if slip:
        text += ICE.format(pct=round(100 * slip))
    return _walking(name, text, actions, cells, step, horizon=3 * length, slip=slip)


def walk(name: str, rng: np.random.Generator, phrasing: int) -> Task:
    return _line_walk(name, phrasing, length=int(rng.integers(6, 8)))


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


# The noisy kinds. WEATHER: (instruction, observation, (action when below the set-point, at or
# above it)); the action named for a side pays 1 on {pct} % of its days.
WEATHER = (
    ("When the barometer reads {t} or more, the day stays dry {pct} % of the time; below {t} it "
     "rains {pct} % of the time. Reply 'umbrella' or 'sunglasses': the one that suits the day's "
     "weather pays 1.", "The barometer reads {n}.", ("umbrella", "sunglasses")),
    ("Fish bite on {pct} % of mornings when the lake is {t} degrees or warmer, and on {rest} % "
     "of colder mornings. Reply 'fish' or 'sleep': fishing when they bite or sleeping when they "
     "do not pays 1.", "The lake is {n} degrees.", ("sleep", "fish")),
    ("A street market is crowded on {pct} % of days after {t} or more flyers go out, and on "
     "{rest} % of days after fewer. Reply 'open' or 'close' for your stall: opening on a crowded "
     "day or closing on a quiet one pays 1.", "{n} flyers went out.", ("close", "open")),
    ("The bus runs late on {pct} % of days with {t} or more centimetres of snow, and on {rest} % "
     "of days with less. Reply 'wait' or 'walk': walking when it runs late or waiting when it "
     "is on time pays 1.", "Snow today: {n} centimetres.", ("wait", "walk")),
)  # fmt: skip
#: The sentence an icy walk adds to :data:`WALK`'s instruction.
ICE = " The way is icy: {pct} % of moves slide one step the other way instead."
# DICE: (instruction, observation, (add, stop)).
DICE = (
    ("Push your luck: reply 'roll' to roll a die (1 to 6) and add it to your total, or 'stop' to "
     "be paid your total divided by {limit}. A total over {limit} pays 0 and ends the game.",
     "Your total is {n}.", ("roll", "stop")),
    ("Cards show 1 to 6, each as likely. Reply 'draw' to add a card to your hand or 'hold' to be "
     "paid the hand's sum divided by {limit}; a sum over {limit} is bust and pays 0.",
     "Your hand sums to {n}.", ("draw", "hold")),
    ("Each pump blows 1 to 6 litres of air into a balloon, at random. Reply 'pump' or 'cash': "
     "cashing pays the litres in it divided by {limit}; past {limit} litres it bursts and pays "
     "0.", "The balloon holds {n} litres.", ("pump", "cash")),
    ("Each dig finds 1 to 6 coins, at random. Reply 'dig' or 'leave': leaving pays your coins "
     "divided by {limit}; more than {limit} coins tear your bag and you lose them all.",
     "You carry {n} coins.", ("dig", "leave")),
)  # fmt: skip
# CARDS: (instruction, observation, (draw, stand)); {stop}: the total the house stands on.
CARDS = (
    ("Card duel: cards show 1 to 6, each as likely. Reply 'hit' to add a card to your hand or "
     "'stand'. A hand over {limit} loses 1 at once. When you stand, the house draws until it "
     "holds {stop} or more: a house over {limit} loses, otherwise the higher hand wins 1 and the "
     "lower loses 1 (a tie pays 0).", "Your hand is {n}. The house shows {c}.", ("hit", "stand")),
    ("Boat race: each 'row' moves your boat 1 to 6 miles at random; 'moor' ends your turn. Past "
     "{limit} miles you hit the rocks and lose 1. Then the rival rows until it has {stop} miles "
     "or more: past {limit} it hits the rocks and you win 1, else whoever went further wins 1 "
     "and the other loses 1 (even: 0).", "You are at {n} miles; the rival starts at {c}.",
     ("row", "moor")),
    ("Two miners race. Reply 'dig' to find 1 to 6 more gold or 'rest' to stop. More than {limit} "
     "gold collapses your tunnel: you lose 1. When you rest, your rival digs until it has {stop} "
     "or more; a rival over {limit} loses, otherwise more gold wins 1 and less loses 1 (equal: "
     "0).", "You have {n} gold. Your rival starts with {c}.", ("dig", "rest")),
    ("A stacking contest: 'add' puts a block of 1 to 6 cm on your tower, 'done' stops. A tower "
     "over {limit} cm falls and loses 1. Then the other player adds blocks until theirs is "
     "{stop} cm or more: if it falls past {limit} you win 1, otherwise the taller tower wins 1 "
     "and the shorter loses 1 (a tie: 0).", "Your tower: {n} cm. Theirs starts at {c} cm.",
     ("add", "done")),
)  # fmt: skip


# DECK: (instruction, observation, (draw, stand)); cards of 1 to 10, {stop} as in CARDS.
DECK = (
    ("Cards show 1 to 10, each as likely; you are dealt two. Reply 'hit' to take a card or "
     "'stand'. A hand over {limit} loses 1 at once. When you stand, the house draws until it "
     "holds {stop} or more: a house over {limit} loses, otherwise the higher hand wins 1 and the "
     "lower loses 1 (a tie pays 0).", "Your hand is {n}. The house shows {c}.", ("hit", "stand")),
    ("Fishing contest: you start with two fish, and each 'cast' lands one more of 1 to 10 kg at "
     "random; 'stop' ends your turn. Over {limit} kg your boat sinks: you lose 1. Then your "
     "rival fishes until it holds {stop} kg or more: over {limit} it sinks and you win 1, else "
     "the heavier catch wins 1 and the lighter loses 1 (equal: 0).",
     "Your catch: {n} kg. The rival starts with {c} kg.", ("cast", "stop")),
    ("Hiking race: you have walked two stages, and each 'walk' covers 1 to 10 km more at random; "
     "'camp' stops. Past {limit} km you get lost and lose 1. Then the other hiker walks until it "
     "has {stop} km or more: past {limit} it gets lost and you win 1, otherwise the longer "
     "distance wins 1 and the shorter loses 1 (a tie: 0).",
     "You have walked {n} km; the other hiker starts at {c} km.", ("walk", "camp")),
    ("Loading a truck: it starts with two crates, and 'load' adds one more of 1 to 10 tonnes at "
     "random; 'leave' stops. Over {limit} tonnes the truck breaks: you lose 1. Then a rival loads "
     "until it has {stop} tonnes or more: a rival over {limit} loses, otherwise the heavier load "
     "wins 1 and the lighter loses 1 (same: 0).",
     "Your truck holds {n} tonnes. The rival's starts at {c}.", ("load", "leave")),
)  # fmt: skip


def weather(name: str, rng: np.random.Generator, phrasing: int) -> Task:
    instruction, observation, actions = WEATHER[phrasing]
    low = int(rng.integers(0, 60))
    t = low + int(rng.integers(3, 8))
    chance = float(rng.choice([0.7, 0.75, 0.8]))
    pct = round(100 * chance)
    cases = [(observation.format(n=n), int(n >= t)) for n in range(low, low + 10)]
    text = instruction.format(t=t, pct=pct, rest=100 - pct)
    return _one_step(name, text, actions, cases, chance)


def ice(name: str, rng: np.random.Generator, phrasing: int) -> Task:
    length = int(rng.integers(6, 8))
    return _line_walk(name, phrasing, length, slip=float(rng.choice([0.2, 0.25, 0.3])))


def dice(name: str, rng: np.random.Generator, phrasing: int) -> Task:
    instruction, observation, actions = DICE[phrasing]
    limit = int(rng.integers(15, 22))
    totals = list(range(1, limit + 1))  # a game starts at one die's total, 1-6
    index = {n: s for s, n in enumerate(totals)}
    moves = []
    for n in totals:
        roll = tuple(
            (1 / 6, None, 0.0) if n + d > limit else (1 / 6, index[n + d], 0.0) for d in range(1, 7)
        )
        moves.append((roll, ((1.0, None, n / limit),)))
    texts = tuple(observation.format(n=n) for n in totals)
    starts = tuple(index[d] for d in range(1, 7))
    return Task(name, instruction.format(limit=limit), actions, texts, tuple(moves), starts, limit)


def house_totals(start: int, stop: int, faces: int = 6) -> dict[int, float]:
    """The house's final total and its probability: from ``start`` it adds a card of 1 to
    ``faces`` (each alike) until it holds ``stop`` or more.

    >>> {t: round(p, 3) for t, p in house_totals(5, 6).items()}  # one card always
    {6: 0.167, 7: 0.167, 8: 0.167, 9: 0.167, 10: 0.167, 11: 0.167}
    >>> house_totals(2, 4)[4] == 1 / 6 + 1 / 36  # a 2, or a 1 and then a 1
    True
    >>> min(house_totals(9, 17, faces=10)), max(house_totals(9, 17, faces=10))  # 10 + 10 - 1
    (17, 26)
    """
    final: dict[int, float] = {}
    live = {start: 1.0}
    while live:
        nxt: dict[int, float] = {}
        for total, p in live.items():
            if total >= stop:
                final[total] = final.get(total, 0.0) + p
                continue
            for d in range(1, faces + 1):
                nxt[total + d] = nxt.get(total + d, 0.0) + p / faces
        live = nxt
    return dict(sorted(final.items()))


def cards(name: str, rng: np.random.Generator, phrasing: int) -> Task:
    limit = int(rng.integers(14, 19))
    stop = limit - int(rng.integers(2, 5))
    low = limit - 9  # the hands dealt are the ten highest: where hitting and standing are close
    return _duel(
        name, CARDS, phrasing, 6, limit, stop, range(low, limit + 1), [*range(low, low + 6)]
    )


def _duel(
    name: str,
    phrasings: tuple[tuple[str, str, tuple[str, str]], ...],
    phrasing: int,
    faces: int,
    limit: int,
    stop: int,
    hands: range,
    dealt: list[int],
) -> Task:
    """A hit-or-stand duel: states are (hand, house's first card) for every hand in ``hands``
    and card 1 to ``faces``; ``dealt`` lists the starting hands (repeats make a hand likelier),
    each met with every house card."""
    instruction, observation, actions = phrasings[phrasing]
    states = [(n, c) for n in hands for c in range(1, faces + 1)]
    index = {state: s for s, state in enumerate(states)}
    moves = []
    for n, c in states:
        hit = tuple(
            (1 / faces, None, -1.0) if n + d > limit else (1 / faces, index[(n + d, c)], 0.0)
            for d in range(1, faces + 1)
        )
        paid = {1.0: 0.0, 0.0: 0.0, -1.0: 0.0}
        for house, p in house_totals(c, stop, faces).items():
            paid[1.0 if house > limit or n > house else -1.0 if n < house else 0.0] += p
        stand = tuple((p, None, reward) for reward, p in paid.items() if p > 0)
        moves.append((hit, stand))
    texts = tuple(observation.format(n=n, c=c) for n, c in states)
    starts = tuple(index[(n, c)] for n in dealt for c in range(1, faces + 1))
    text = instruction.format(limit=limit, stop=stop)
    return Task(name, text, actions, texts, tuple(moves), starts, limit)


def deck(name: str, rng: np.random.Generator, phrasing: int) -> Task:
    limit = int(rng.integers(19, 23))
    stop = limit - int(rng.integers(2, 5))
    two_cards = [a + b for a in range(1, 11) for b in range(1, 11) if a + b <= limit]
    return _duel(name, DECK, phrasing, 10, limit, stop, range(2, limit + 1), two_cards)


#: Kind name → generator ``(task name, rng, phrasing) -> Task``.
KINDS: dict[str, Callable[[str, np.random.Generator, int], Task]] = {
    "threshold": threshold,
    "range": in_range,
    "compare": compare,
    "membership": membership,
    "walk": walk,
    "grid": grid,
    "weather": weather,
    "ice": ice,
    "dice": dice,
    "cards": cards,
    "deck": deck,
}
#: The kinds whose rewards or moves are left to chance.
NOISY_KINDS = ("weather", "ice", "dice", "cards", "deck")
#: Phrasings per kind (0..PHRASINGS-1).
PHRASINGS = 4
