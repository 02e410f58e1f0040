"""The reply corpus: replies with the verdict a careful reader gives, the parser's standard.

``tests/fixtures/replies.jsonl`` holds hand-written replies (the phrasings that once sent the
wrong action, and the common ways of deciding, hedging, negating and listing) and replies
SmolLM2-135M really wrote in generate mode on the suite's envs
(``python -m benchmarks.studies.reply_corpus sample``), each read by a person; replies whose meaning a
reader could not settle were left out rather than labelled by the parser. ``expected`` is the
action's name, or ``null`` where the reply decides on no single action (the parser must declare
it invalid).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from gym_llm.wrappers.parsing import DiscreteParser
from tests.paths import FIXTURES

CORPUS = FIXTURES / "replies.jsonl"
ROWS: list[dict[str, Any]] = [json.loads(line) for line in CORPUS.read_text().splitlines()]


def _verdict(row: dict[str, Any]) -> str | None:
    parser = DiscreteParser(row["actions"], aliases=row.get("aliases"))
    result = parser(row["reply"])
    assert result.valid == (result.error is None)
    return None if result.action is None else parser.names[result.action - parser.start]


def test_the_corpus_is_large_and_mixed() -> None:
    sources = Counter(row["source"].split("-")[0] for row in ROWS)
    assert len(ROWS) >= 600 and sources["smollm2"] >= 300 and sources["issue"] >= 20
    verdicts = Counter(row["expected"] is None for row in ROWS)
    assert verdicts[True] >= 150 and verdicts[False] >= 150  # both kinds of verdict, many each


@pytest.mark.parametrize("row", ROWS, ids=[f"{i}" for i in range(len(ROWS))])
def test_every_reply_gets_the_readers_verdict(row: dict[str, Any]) -> None:
    assert _verdict(row) == row["expected"], row["reply"]
