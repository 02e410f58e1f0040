"""The flags every benchmark script shares, defined once."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gym_llm.configs import by_section
from gym_llm.experiments.specs import parse_settings
from gym_llm.policy.models import DEFAULT_MODEL


def new_parser(
    prog: str,
    doc: str | None,
    formatter_class: type[argparse.HelpFormatter] = argparse.ArgumentDefaultsHelpFormatter,
) -> argparse.ArgumentParser:
    """A parser whose description is the module docstring's first paragraph, defaults shown
    (``gym_llm.cli.arguments._HelpFormatter`` for parsers with ``gym-llm train``'s generated
    flags, whose help states its defaults itself)."""
    return argparse.ArgumentParser(
        prog=prog,
        description=doc.split("\n\n")[0] if doc else None,
        formatter_class=formatter_class,
    )


def add_model_and_env(
    add: Callable[..., Any], *, mode: str = "choice", n_envs_help: str = "parallel envs"
) -> None:
    """``--model --env --env-kwargs --mode --n-envs`` (Blackjack, SmolLM2-135M, 8 envs)."""
    add("--model", default=DEFAULT_MODEL, help="registry name or local model path")
    add("--env", default="Blackjack-v1", help="Gymnasium env id")
    add("--env-kwargs", nargs="*", default=["sab=False"], metavar="KEY=VALUE", help="env kwargs")
    add("--mode", choices=["choice", "generate"], default=mode, help="action mode")
    add("--n-envs", type=int, default=8, help=n_envs_help)


def add_settings(
    add: Callable[..., Any], sections: tuple[str, ...] = ("policy", "ppo"), example: str = ""
) -> None:
    """``--set SETTING=VALUE ...``: settings by dotted name, the syntax of ``gym-llm train`` and
    ``gym-llm bench --llm``, stored grouped by section (``args.set["ppo"]``)."""
    owners = {
        "policy": "LLMPolicy",
        "ppo": "PPO",
        "parser": "the training env's ActionParserWrapper",
    }
    add(
        "--set",
        nargs="+",
        action=_Settings,
        sections=sections,
        default={section: {} for section in sections},
        metavar="SETTING=VALUE",
        help="more settings, "
        + ", ".join(f"{s}.NAME for {owners.get(s, s)}" for s in sections)
        + (f", e.g. {example}" if example else ""),
    )


class _Settings(argparse.Action):
    def __init__(self, *args: Any, sections: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sections = sections

    def __call__(self, parser: Any, namespace: Any, values: Any, option: str | None = None) -> None:
        try:
            groups = by_section(parse_settings(list(values), "--set"), self.sections)
        except ValueError as exc:
            parser.error(str(exc))
        setattr(namespace, self.dest, groups)


def seed_list(text: str) -> list[int]:
    """``--seeds`` as written: ``0-9`` (a range, both ends included) or ``0,3,7``."""
    if "-" in text:
        low, high = text.split("-", 1)
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",")]


def keeping(record: Callable[..., Any], names: tuple[str, ...], figures: dict[str, float]) -> Any:
    """``logger.record`` that also keeps the last value of each logged key whose last part is
    one of ``names`` (``rollout/state_entropy`` -> ``figures["state_entropy"]``)."""

    def wrapped(key: str, value: Any, exclude: Any = None) -> None:
        if key.split("/")[-1] in names:
            figures[key.split("/")[-1]] = float(value)
        record(key, value, exclude)

    return wrapped


def tables_per_task(
    tasks: Sequence[str],
    table: Callable[[str], dict[str, Any]],
    report: Callable[[dict[str, Any]], str],
    json_path: Path | None,
) -> list[dict[str, Any]]:
    """Each task's ``table``, printed by ``report`` as it comes, then all of them written to
    ``json_path`` (when given)."""
    tables = []
    for task in tasks:
        tables.append(table(task))
        print(report(tables[-1]), flush=True)
    write_json(json_path, tables, indent=1)
    return tables


def write_json(path: Path | None, data: Any, *, indent: int = 2) -> None:
    """``--json FILE``: ``data`` written to ``path`` (its folder made), nothing when not given;
    numpy numbers are written as floats."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent, default=float) + "\n")


def read_jsonl(path: Path) -> list[Any]:
    """The rows of a JSONL file (blank lines skipped); none when it does not exist yet, as
    for a sweep that resumes from its own file."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append_jsonl(path: Path | None, *rows: Any) -> None:
    """``--jsonl FILE``: each row appended as one JSON line (its folder made) the moment it is
    measured, so a run cut short keeps every row written; nothing when not given."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
