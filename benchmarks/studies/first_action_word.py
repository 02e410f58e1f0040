"""Does a generate-mode reply's first action word name the action the parser reads?

The generate-mode action head (``LLMPolicy(action_mode="generate", action_head=True)``) adds its
scores to the action words' logits at every reply position, which makes a learned greedy reply
repeat the word ("Low low low ..."). Adding them only up to the first action word would be the
right place only if the parser's verdict is that word whenever the reply is valid; the parser
reads the *last* clause that plainly names an action, so a reply such as ``"Low. No, high."``
would take its action from a later word. This samples replies in every
state of a family task and counts, per reply: no action word, or a first action word that the
parser agrees with, disagrees with, or finds invalid (a condition, a question, two actions).

    python -m benchmarks.studies.first_action_word --task threshold-p0-s0 --rounds 4
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from benchmarks.cli_args import new_parser
from gym_llm.policy.models import DEFAULT_MODEL


def first_action(tokens: Sequence[int], owner: Mapping[int, int]) -> int | None:
    """The action of the first token in ``tokens`` that is one of an action's words.

    >>> first_action([5, 9, 7, 9], {7: 0, 9: 1})
    1
    >>> first_action([5, 6], {7: 0}) is None
    True
    """
    return next((owner[int(t)] for t in tokens if int(t) in owner), None)


def verdict(first: int | None, parsed: int | None) -> str:
    """One reply's outcome: ``none`` (no action word), else ``agree``/``disagree``/``invalid``."""
    if first is None:
        return "none" if parsed is None else "parsed without an action word"
    if parsed is None:
        return "invalid"
    return "agree" if parsed == first else "disagree"


def measure(task: str, rounds: int, model: str, seed: int) -> dict[str, Any]:
    """Counts of :func:`verdict` over ``rounds`` sampled replies in every state (fresh head: the
    LM's own replies), and a few examples of replies that name an action."""
    import torch

    from benchmarks.studies.state_replies import state_texts
    from gym_llm import PPO, make_text_env

    env = make_text_env("gym_llm/Family-v0", 2, env_kwargs={"task": task}, seed=seed)
    # The free-text head this study is about.
    policy_kwargs = {"model": model, "action_mode": "generate", "action_head": True,
                     "reply_constraint": "off"}  # fmt: skip
    policy = PPO("LLMPolicy", env, n_steps=8, seed=seed, policy_kwargs=policy_kwargs).policy
    texts, parser = state_texts(task)
    words = policy.action_words
    assert words is not None
    owner = dict(zip(words.ids.tolist(), words.owners.tolist(), strict=True))
    counts: Counter[str] = Counter()
    examples: list[dict[str, Any]] = []
    torch.manual_seed(seed)
    with torch.inference_mode():
        for _ in range(rounds):
            for tokens in policy.act(texts).actions:
                reply = policy.decode(np.asarray(tokens))
                parsed = parser.parse(reply)
                first = first_action(tokens.tolist(), owner)
                counts[verdict(first, int(parsed.action) if parsed.valid else None)] += 1
                if first is not None and len(examples) < 8:
                    examples.append({"reply": reply, "first": first, "valid": parsed.valid})
    return {"task": task, "rounds": rounds, "seed": seed, "counts": dict(counts),
            "examples": examples}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = new_parser("python -m benchmarks.studies.first_action_word", __doc__)
    parser.add_argument("--task", default="threshold-p0-s0", help="a task family task")
    parser.add_argument("--rounds", type=int, default=4, help="replies per state")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="registry name or local path")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    args: argparse.Namespace = parser.parse_args(argv)
    print(json.dumps(measure(args.task, args.rounds, args.model, args.seed), indent=1))


if __name__ == "__main__":
    main()
