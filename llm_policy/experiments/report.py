"""What ``gym-llm bench`` writes: ``results.csv`` (merged across invocations), ``summary.md``
(mean ± std over seeds against random and the optimum, time to target) and a PNG per env."""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gym_llm.experiments.comparison import AGENT_LABELS, AGENTS, CSV_FIELDS, References, Row
from gym_llm.experiments.curves import gap_target, time_to_target
from gym_llm.experiments.specs import EnvSpec


def read_rows(path: Path) -> list[Row]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return [Row.from_csv(r) for r in csv.DictReader(f)]


def write_rows(path: Path, rows: Sequence[Row]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".csv.{os.getpid()}.tmp")  # invocations may write side by side
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(CSV_FIELDS))
        writer.writeheader()
        writer.writerows(r.to_csv() for r in rows)
    tmp.replace(path)


@dataclass
class Group:
    """The seeds of one agent at one budget on one env, summarised."""

    agent: str
    budget: int
    rows: list[Row]

    @property
    def values(self) -> list[float]:
        return [r.value for r in self.rows]

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    @property
    def std(self) -> float:
        n = len(self.values)
        if n < 2:
            return 0.0
        return math.sqrt(sum((v - self.mean) ** 2 for v in self.values) / (n - 1))

    @property
    def success(self) -> float | None:
        known = [r.success for r in self.rows if r.success is not None]
        return sum(known) / len(known) if known else None

    def gap_closed(self, refs: Mapping[str, float]) -> float | None:
        if "optimum" not in refs or "random" not in refs or refs["optimum"] == refs["random"]:
            return None
        return 100.0 * (self.mean - refs["random"]) / (refs["optimum"] - refs["random"])


def _groups(rows: Sequence[Row]) -> list[Group]:
    order = {a: i for i, a in enumerate(AGENTS)}
    groups: dict[tuple[str, int], Group] = {}
    for row in rows:
        groups.setdefault((row.agent, row.budget), Group(row.agent, row.budget, [])).rows.append(
            row
        )
    return sorted(groups.values(), key=lambda g: (order.get(g.agent, 99), g.budget))


def _references(rows: Sequence[Row], refs: References | None) -> dict[str, float]:
    out: dict[str, float] = {}
    randoms = [r.value for r in rows if r.agent == "random"]
    if refs is not None:
        out["random"] = refs.random.value
    elif randoms:
        out["random"] = sum(randoms) / len(randoms)
    if refs is not None and refs.optimum is not None:
        out["optimum"] = refs.optimum
    return out


def _fmt(value: float) -> str:
    return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"


def _to_target(group: Group, target: float | None) -> str:
    """Mean env steps and training seconds until the curve first reached ``target``, over the
    seeds that did, and how many did."""
    if target is None or group.agent in ("random", "llm-zero-shot"):
        return "—"
    reached = [r for r in (time_to_target(row.curve, target) for row in group.rows) if r]
    if not reached:
        return f"not reached (0/{len(group.rows)})"
    steps = sum(r.env_steps for r in reached) / len(reached)
    walls = [r.wall_s for r in reached if not math.isnan(r.wall_s)]
    wall = f", {sum(walls) / len(walls):.0f} s" if walls else ""
    return f"{steps:.0f} steps{wall} ({len(reached)}/{len(group.rows)})"


def env_table(
    label: str, rows: Sequence[Row], refs: Mapping[str, float], target_gap: float = 0.9
) -> list[str]:
    """The markdown section of one env, warnings included. The time to target is measured to
    ``target_gap`` of the random-to-optimum gap (where both are known)."""
    exact = all(r.eval_kind == "exact" for r in rows)
    lines = [f"### {label}", ""]
    ref_text = ", ".join(f"{k} {_fmt(v)}" for k, v in refs.items())
    target = (
        gap_target(refs["random"], refs["optimum"], target_gap)
        if "random" in refs and "optimum" in refs and refs["optimum"] != refs["random"]
        else None
    )
    target_text = (
        f" Target: {_fmt(target)} ({100 * target_gap:.0f}% of the gap)."
        if target is not None
        else ""
    )
    lines.append(
        f"References ({'exact' if exact else 'random by Monte-Carlo'}): {ref_text or 'none'}."
        + target_text
    )
    lines += [
        "",
        "| agent | budget | env steps | seeds | return (mean ± std) | % gap closed | reaches goal | to target | eval | train wall s | device |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    warnings: list[str] = []
    for group in _groups(rows):
        gap = group.gap_closed(refs)
        success = group.success
        success_text = "—" if success is None else f"{100 * success:.1f}%"
        if success is not None and success < 0.01 and group.agent != "random":
            success_text += " ⚠"
            if gap is not None and gap > 10:
                warnings.append(
                    f"**{AGENT_LABELS.get(group.agent, group.agent)}"
                    f"{f' @ {group.budget}' if group.budget else ''}** closes {gap:.0f}% of the "
                    f"gap but reaches the goal in {100 * success:.1f}% of episodes: it only avoids "
                    "random play's penalties (a return this high without the goal is an artifact "
                    "of the gap metric, not a solution)."
                )
        kinds = sorted({r.eval_kind for r in group.rows})
        episodes = max(r.eval_episodes for r in group.rows)
        kind = "/".join("exact" if k == "exact" else f"MC {episodes} ep" for k in kinds)
        sem = max(r.sem for r in group.rows)
        spread = f" ± {_fmt(group.std)}" if len(group.rows) > 1 else ""
        ci = f" (95% CI ± {_fmt(1.96 * sem)})" if sem > 0 else ""
        steps = sorted({r.env_steps for r in group.rows})
        lines.append(
            f"| {AGENT_LABELS.get(group.agent, group.agent)} | {group.budget or '—'} | "
            f"{'/'.join(map(str, steps))} | {len(group.rows)} | {_fmt(group.mean)}{spread}{ci} | "
            f"{'—' if gap is None else f'{gap:.0f}%'} | {success_text} | "
            f"{_to_target(group, target)} | {kind} | "
            f"{sum(r.wall_s for r in group.rows) / len(group.rows):.1f} | "
            f"{', '.join(sorted({r.device for r in group.rows}))} |"
        )
    if warnings:
        lines += [""] + [f"- ⚠ {w}" for w in warnings]
    lines.append("")
    return lines


def write_summary(
    path: Path,
    rows: Sequence[Row],
    refs: Mapping[tuple[str, str], References],
    command: str,
    target_gap: float = 0.9,
) -> None:
    """``summary.md``: one table per env, in the order the envs first appear in ``rows``."""
    envs: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        envs.setdefault((row.env, row.env_kwargs), []).append(row)
    lines = [
        "# gym-llm bench: LLM agents vs classic RL",
        "",
        f"Command (last invocation): `{command}`",
        "",
        "Return = expected episode return of the greedy policy: exact (dynamic programming over "
        "the env's dynamics, one query per state) or Monte-Carlo (95% CI from the worst seed's "
        "standard error). ± is the std over seeds. % gap closed = (return − random) / "
        "(optimum − random). Reaches goal = probability of ending the episode on the env's best "
        "terminal reward (exact envs only). To target = env steps and training seconds until "
        "the learning curve first reached the target (mean over the seeds that did; how many "
        "did). Wall time is training only (no evaluation); random "
        "and the zero-shot LLM are exact and deterministic, so they run once.",
        "",
    ]
    for (env_id, kwargs), env_rows in envs.items():
        spec = EnvSpec(env_id, json.loads(kwargs))
        env_refs = _references(env_rows, refs.get((env_id, kwargs)))
        lines += env_table(spec.label, env_rows, env_refs, target_gap)
    path.write_text("\n".join(lines))


def plot_env(path: Path, label: str, rows: Sequence[Row], refs: Mapping[str, float]) -> Path:
    """Return against env steps (symlog axis: 128 and 10,000 steps on one plot), mean over
    seeds with a ±std band; random, optimum and the zero-shot LLM as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    for group in _groups(rows):
        name = AGENT_LABELS.get(group.agent, group.agent)
        if group.agent in ("random", "llm-zero-shot"):
            if group.agent == "llm-zero-shot":
                ax.axhline(
                    group.mean,
                    color="tab:purple",
                    linestyle="-.",
                    label=f"{name} ({group.mean:.3g})",
                )
            continue
        by_step: dict[int, list[float]] = {}
        for row in group.rows:
            for step, value, _ in row.curve:
                by_step.setdefault(step, []).append(value)
        steps = sorted(by_step)
        means = [sum(by_step[s]) / len(by_step[s]) for s in steps]
        stds = [
            math.sqrt(sum((v - m) ** 2 for v in by_step[s]) / max(1, len(by_step[s]) - 1))
            for s, m in zip(steps, means, strict=True)
        ]
        (line,) = ax.plot(steps, means, marker="o", markersize=3, label=f"{name} @ {group.budget}")
        ax.fill_between(
            steps,
            [m - s for m, s in zip(means, stds, strict=True)],
            [m + s for m, s in zip(means, stds, strict=True)],
            alpha=0.15,
            color=line.get_color(),
        )
    for (name, value), style in zip(refs.items(), ("--", ":"), strict=False):
        ax.axhline(value, color="gray", linestyle=style, label=f"{name} ({value:.3g})")
    ax.set_xscale("symlog", linthresh=100)
    ax.set_xlim(left=0)
    ax.set_xlabel("env steps (symlog)")
    ax.set_ylabel("expected return of the greedy policy")
    ax.set_title(label)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="x-small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_outputs(
    out: Path,
    rows: Sequence[Row],
    refs: Mapping[tuple[str, str], References],
    command: str,
    target_gap: float = 0.9,
) -> None:
    write_rows(out / "results.csv", rows)
    write_summary(out / "summary.md", rows, refs, command, target_gap)
    envs: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        envs.setdefault((row.env, row.env_kwargs), []).append(row)
    for (env_id, kwargs), env_rows in envs.items():
        spec = EnvSpec(env_id, json.loads(kwargs))
        plot_env(
            out / f"{spec.slug}.png",
            spec.label,
            env_rows,
            _references(env_rows, refs.get((env_id, kwargs))),
        )
