"""What a small LM really writes in generate mode, and what the parser makes of it.

``sample``: the default model (SmolLM2-135M) acts in generate mode on the suite's envs with the
library's own prompts; every reply is written to a JSONL file with the env, its action names and
the parser's verdict at the time. ``rates``: the invalid rate per env of the parser now in the
library over a file of replies (run it before and after a parser change: the replies stay the
same, the verdicts move). The hand-labelled corpus in ``tests/fixtures/replies.jsonl`` was drawn
from these replies.

    python -m benchmarks.studies.reply_corpus sample --per-env 40 --jsonl benchmarks/results/replies/smollm2.jsonl
    python -m benchmarks.studies.reply_corpus rates --jsonl benchmarks/results/replies/smollm2.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

#: (label, env id, env kwargs): the suite's envs whose actions are words or numbers.
ENVS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("blackjack", "Blackjack-v1", {"sab": False}),
    ("frozenlake", "FrozenLake-v1", {"is_slippery": False}),
    ("guessnumber", "gym_llm/GuessNumber-v0", {}),
    ("textmaze", "gym_llm/TextMaze-v0", {}),
    ("threshold", "gym_llm/Family-v0", {"task": "threshold-p2-s100"}),
)


def _parser_of(env: Any) -> Any:
    """The ActionParserWrapper inside a Monitor-wrapped text env."""
    from gym_llm.wrappers import ActionParserWrapper

    inner = env
    while not isinstance(inner, ActionParserWrapper):
        inner = inner.env
    return inner


def sample(args: argparse.Namespace) -> None:
    import gym_llm  # noqa: F401  (registers the gym_llm/ envs)
    from gym_llm import PPO, LLMPolicy
    from gym_llm.rl.common.vec_env import make_text_env

    out = Path(args.jsonl)
    out.parent.mkdir(parents=True, exist_ok=True)
    for label, env_id, kwargs in ENVS:
        vec = make_text_env(env_id, args.n_envs, env_kwargs=kwargs, seed=args.seed)
        model = PPO(
            LLMPolicy,
            vec,
            n_steps=8,
            seed=args.seed,
            device="cpu",
            # What the model writes unaided: free text.
            policy_kwargs={
                "model": args.model,
                "action_mode": "generate",
                "reply_constraint": "off",
            },
        )
        names = list(_parser_of(vec.envs[0]).action_space.actions)
        obs = vec.reset()
        written = 0
        with out.open("a") as sink:
            while written < args.per_env:
                step = model.policy.act(list(obs))
                obs, _, _, infos = vec.step(step.replies)
                for reply, info in zip(step.replies, infos, strict=True):
                    row = {
                        "env": label,
                        "actions": names,
                        "reply": str(reply),
                        "valid": bool(info["action_valid"]),
                        "action": None if info["action"] is None else int(info["action"]),
                    }
                    sink.write(json.dumps(row) + "\n")
                    written += 1
        print(f"{label}: {written} replies")


def rates(args: argparse.Namespace) -> dict[str, tuple[int, int]]:
    """``env -> (invalid, total)`` under the parser in the library now (and the file's own)."""
    from gym_llm.wrappers.parsing import DiscreteParser

    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    parsers: dict[tuple[str, ...], DiscreteParser] = {}
    for line in Path(args.jsonl).read_text().splitlines():
        row = json.loads(line)
        names = tuple(row["actions"])
        parser = parsers.setdefault(names, DiscreteParser(names))
        c = counts[row["env"]]
        c[0] += int(not parser(row["reply"]).valid)
        c[1] += int(not row["valid"])
        c[2] += 1
    print("| env | replies | invalid when sampled | invalid now |")
    print("|---|---:|---:|---:|")
    for env, (now, then, total) in sorted(counts.items()):
        print(f"| {env} | {total} | {then / total:.1%} | {now / total:.1%} |")
    return {env: (c[0], c[2]) for env, c in counts.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample", help="sample replies of the model in generate mode")
    s.add_argument("--model", default="smollm2-135m", help="registry name or local model path")
    s.add_argument("--per-env", type=int, default=40, help="replies per env")
    s.add_argument("--n-envs", type=int, default=4, help="envs stepped side by side")
    s.add_argument("--seed", type=int, default=0, help="env and sampling seed")
    s.add_argument("--jsonl", required=True, help="append the replies here")
    r = sub.add_parser("rates", help="invalid rate per env under the parser now")
    r.add_argument("--jsonl", required=True, help="a file written by sample")
    args = parser.parse_args(argv)
    (sample if args.command == "sample" else rates)(args)


if __name__ == "__main__":
    main()
