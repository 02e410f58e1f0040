"""Which action a free-text reply decides on, or why it decides on none.

A model's reply reasons before it decides ("If I hit I might bust, so I stick."), and English uses
action words for other things ("nothing left to try", "look it up", "the right move"). Taking the
last action word anywhere sent the wrong action for a quarter of hand-written replies, so a reply
is read clause by clause:

- the text is split into sentences (``. ! ?``, new lines, ``;``) and each sentence into clauses
  (commas, colons and ``so``/``therefore``/``thus``/``hence``/``but``/``then``);
- a mention in a question (``Should I hit?``), a condition (``if I hit ...``), a reason
  (``..., because the hole is to the right``) or a hedge (``maybe hit``) decides nothing;
- a mention after a negation in its clause (``not``, ``never``, ``don't``, ``avoid``,
  ``instead of``, ``rather than``, any ``n't``) is a negated mention;
- a mention inside a known idiom of its word is no mention at all;
- a mention the reply rules out (``0 chance I hit``, ``zero chance``, ``no way I'd hit``) is a
  negated mention;
- a plan of several moves decides its first: once a clause has plainly named an action, a clause
  after ``then`` (or starting ``next``, ``afterwards``, ``after that``, ``later``, ``followed by``)
  begins the later moves, which decide nothing (``hit, then stick`` sends ``hit``; after a
  condition, ``if ..., then hit``, ``then`` is its consequence, which decides);
- the **last clause** with a plain mention decides. If it names two different actions
  (``left or right``), or ends a list of them (``left, down, up``), the reply is invalid; if that action is negated in the same or a later
  clause the reply is invalid; a reply whose only mentions are negated, questions or conditions is
  invalid, with an error that says which.

Numbers follow one rule everywhere: a number stands for an action only when it stands alone, so
``2 steps``, ``0 risk`` and ``1 more card`` are quantities, while ``2.``, ``2 (right)`` or
``8 because ...`` are choices.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

_SENTENCES = re.compile(r"(?<=[.!?])\s+|[\n;]+")
_CLAUSES = re.compile(r"([,:]|\b(?:so|therefore|thus|hence|but|then)\b)", re.IGNORECASE)
#: A clause that states a condition, a reason or a hedge decides nothing.
_CONDITION = re.compile(
    r"^\W*(?:if|when|whether|unless|in case|once|because|since|as|maybe|perhaps|possibly)\b",
    re.IGNORECASE,
)
_NEGATION = re.compile(
    r"\b(?:not|no|never|nor|without|avoid|avoiding|dont|wont|cannot)\b|n't\b|n’t\b"
    r"|\binstead of\b|\brather than\b"
    r"|\b(?:0|zero)\s*(?:%|percent\b|per\s*cent\b|chance\b|probability\b|odds\b|way\b)",
    re.IGNORECASE,
)
#: A clause that begins the later moves of a plan ("... then stick", "Next, ...").
_SEQUEL = re.compile(
    r"^\W*(?:and\s+)?(?:then|next|afterwards|after\s+that|later|followed\s+by|subsequently)\b",
    re.IGNORECASE,
)
_STRUCK = re.compile(r"~~.*?~~|<(s|del|strike)>.*?</\1>", re.IGNORECASE | re.DOTALL)
#: Words after a number that still leave it standing for a choice ("8 because ...").
_AFTER_CHOICE = frozenset(
    [
        "is",
        "as",
        "because",
        "since",
        "so",
        "then",
        "and",
        "or",
        "but",
        "which",
        "now",
        "please",
        "it",
        "for",
        "this",
        "that",
        "here",
        "again",
        "instead",
        "seems",
        "looks",
        "would",
        "will",
        "should",
    ]
)
_WORD_AFTER = re.compile(r"\s*([A-Za-z]+)")
#: Idioms in which an action word is not an action (the word is matched case-insensitively).
_IDIOMS: dict[str, tuple[str, ...]] = {
    "left": (
        r"\b(?:nothing|anything|something|none|much|little|few|many|time|moves|cards|turns"
        r"|tries|guesses|options|choices|lives)\s+left\b",
        r"\bleft\s+(?:over|behind|alone|with|of|to\s+(?:try|do|guess|explore|check))\b",
        r"\bon\s+the\s+left\b",
    ),
    "up": (
        r"\b(?:look|looked|looking|give|gave|giving|set|make|end|ends|ended|wake|show|come"
        r"|comes|sum|pick|picked|back|line|lined|fill|filled|mix|mixed)\s+(?:\w+\s+)?up\b",
        r"\bup\s+to\b",
    ),
    "hit": (r"\bhit\s+or\s+miss\b",),
    "down": (
        r"\b(?:calm|break|write|narrow|slow|comes|boils|come|boil|settle|let|track|cut)"
        r"\s+(?:\w+\s+)?down\b",
        r"\bdown\s+to\b",
    ),
    "right": (
        r"\bright\s+(?:now|away|after|before|here|there|on|off)\b",
        r"\b(?:that's|thats|that is|you're|youre|you are|i'm|i am|all)\s+right\b",
        r"\bon\s+the\s+right\b|\bright\s+of\b",
        r"\b(?:the|a|my)\s+right\s+(?:move|choice|action|answer|decision|thing|option|way"
        r"|call|play|one|step|idea|time)\b",
    ),
}
_IDIOM_RES = {word: [re.compile(p, re.IGNORECASE) for p in ps] for word, ps in _IDIOMS.items()}


def without_struck(text: str) -> str:
    """``text`` with markdown strikethrough and ``<s>``/``<del>`` spans blanked out."""
    return _STRUCK.sub(lambda m: " " * len(m.group()), text)


_RANGE_AFTER = re.compile(r"\s*(?:-|–|to\b)\s*\d")
_RANGE_BEFORE = re.compile(
    r"(?:\d\s*(?:-|–|to)|\b(?:from|between)|\bbetween\s+\d+\s+and|\bout\s+of|/)\s*$",
    re.IGNORECASE,
)
#: A list item's number at the start of a line ("1. There are ..."; "14." alone is an answer).
_ENUMERATION = re.compile(r"^([ \t]*)\d+[.)][ \t]+(?=\S)", re.MULTILINE)


def number_stands_alone(text: str, start: int, end: int) -> bool:
    """Whether the number at ``text[start:end]`` is a choice, not a quantity (``2 steps``), a
    range (``1 to 16``) or a fraction (``1/30``)."""
    if re.match(r"%|/|-[A-Za-z]", text[end : end + 2]) or _RANGE_BEFORE.search(
        text[max(0, start - 24) : start]
    ):
        return False
    if _RANGE_AFTER.match(text, end):
        return False
    following = _WORD_AFTER.match(text, end)
    if following is None:  # end of text, punctuation, a bracket, a dash: a choice
        return True
    return following.group(1).lower() in _AFTER_CHOICE


@dataclass(frozen=True)
class Mention:
    """An action named in a clause."""

    action: int
    start: int
    end: int


@dataclass(frozen=True)
class Clause:
    text: str
    question: bool
    condition: bool
    #: After a connective (``so``, ``but``, ...): a conclusion, never an item of a list.
    concludes: bool
    #: After ``then`` (or starting ``next``, ``afterwards``, ...): a later move, if a plan.
    sequel: bool = False


def clauses(text: str) -> Iterator[Clause]:
    """The clauses of ``text`` in order, each with whether it asks or states a condition."""
    for sentence in _SENTENCES.split(text):
        question = sentence.rstrip(" \t\"'*)`]").endswith("?")
        concludes = sequel = False
        for i, piece in enumerate(_CLAUSES.split(sentence)):
            if i % 2:  # a separator
                concludes = concludes or piece not in ",:"
                sequel = sequel or piece.lower() == "then"
            elif piece.strip():
                sequel = sequel or bool(_SEQUEL.match(piece))
                yield Clause(piece, question, is_condition(piece), concludes, sequel)
                # "Next," alone: the clause after it is the later move
                sequel = bool(_SEQUEL.match(piece)) and not re.sub(_SEQUEL, "", piece).strip(
                    " \t.,:;!"
                )
                concludes = False


def _bare(clause: str, mentions: list[Mention]) -> bool:
    """Whether a clause is nothing but action names (an item of a list: ``left, down, up``)."""
    rest = list(clause)
    for m in mentions:
        rest[m.start : m.end] = " " * (m.end - m.start)
    return not re.sub(r"\b(?:and|or)\b|[\W_]", "", "".join(rest))


def _in_idiom(clause: str, mention: Mention) -> bool:
    for idiom in _IDIOM_RES.get(clause[mention.start : mention.end].lower(), ()):
        for match in idiom.finditer(clause):
            if match.start() <= mention.start and mention.end <= match.end():
                return True
    return False


def is_condition(clause: str) -> bool:
    """Whether a clause states a condition, a reason or a hedge (it decides nothing)."""
    return bool(_CONDITION.search(clause))


def negated_before(clause: str, position: int) -> bool:
    """Whether a negation comes before ``position`` in its clause (``I can't decide between hit
    and stick`` negates both)."""
    return bool(_NEGATION.search(clause[:position]))


@dataclass(frozen=True)
class Decision:
    """The action a reply decides on (``None`` with an ``error`` when it decides on none)."""

    action: int | None
    error: str | None = None


MentionFinder = Callable[[str], list[Mention]]


def decide(text: str, find: MentionFinder, name: Callable[[int], str]) -> Decision:
    """The action ``text`` decides on, clause by clause (see the module's rules).

    ``find`` gives the action mentions of one clause (positions within it); ``name`` an action's
    name for error messages.
    """
    text = _ENUMERATION.sub(lambda m: " " * len(m.group()), text)
    plain: list[tuple[int, set[int], Clause, bool]] = []  # (index, actions, clause, bare)
    negated: list[tuple[int, int]] = []
    asked, conditional = False, False
    for i, clause in enumerate(clauses(text)):
        if clause.sequel and plain:
            break  # a plan: its later moves decide nothing
        found = [m for m in find(clause.text) if not _in_idiom(clause.text, m)]
        if not found:
            continue
        if clause.question:
            asked = True
            continue
        if clause.condition:
            conditional = True
            continue
        positive: set[int] = set()
        for m in found:
            if negated_before(clause.text, m.start):
                negated.append((i, m.action))
            else:
                positive.add(m.action)
        if positive:
            plain.append((i, positive, clause, _bare(clause.text, found)))
    if not plain:
        if negated:
            names = ", ".join(sorted({name(a) for _, a in negated}))
            return Decision(None, f"the reply only rules out actions ({names}); name one to take")
        if asked:
            return Decision(None, "the reply asks instead of deciding; state one action")
        if conditional:
            return Decision(None, "the reply names actions only in conditions; state one action")
        return Decision(None)
    index, actions, clause, bare = plain[-1]
    listed = bare and not clause.concludes  # after "so", "but": a conclusion, not a list item
    if listed and len(plain) > 1 and plain[-2][0] == index - 1 and plain[-2][3]:
        actions = actions | plain[-2][1]  # a list of actions, not a choice
    if len(actions) > 1:
        names = " and ".join(name(a) for a in sorted(actions))
        return Decision(None, f"the reply names two different actions ({names}); state one")
    (action,) = actions
    if any(j >= index and a == action for j, a in negated):
        return Decision(None, f"the reply both takes and rules out {name(action)}; state one")
    return Decision(action)
