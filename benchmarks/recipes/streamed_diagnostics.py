"""``python -m benchmarks.recipes.streamed_runs diagnostics``: the TensorBoard figures of suite runs as one CSV,
for reading why a run learned or not beside its curve (RESULTS.md quotes them)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

#: The TensorBoard figures that say why a run learned or not (see gym_llm.rl.common.diagnostics).
DIAGNOSTICS = (
    "rollout/ep_rew_mean",
    "rollout/state_entropy",
    "rollout/mutual_information",
    "rollout/greedy_changed",
    "train/explained_variance",
    "train/value_offset",
    "train/grad_norm",
    "train/value_grad_norm",
    "train/approx_kl",
    "train/clip_fraction",
    "train/first_ratio_error",
)


def diagnostics(run_dirs: Sequence[Path], every: int, csv: Path) -> int:
    """``run,env_steps,<figure>...`` rows, every ``every``-th update of each run; the row count."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rows = 0
    csv.parent.mkdir(parents=True, exist_ok=True)
    with csv.open("w") as out:
        out.write("run,env_steps," + ",".join(t.split("/")[1] for t in DIAGNOSTICS) + "\n")
        for run_dir in run_dirs:
            for events in sorted(run_dir.glob("tensorboard/*/")):
                accumulator = EventAccumulator(str(events))
                accumulator.Reload()
                tags = set(accumulator.Tags()["scalars"])
                table: dict[int, dict[str, float]] = defaultdict(dict)
                for tag in DIAGNOSTICS:
                    for event in accumulator.Scalars(tag) if tag in tags else []:
                        table[event.step][tag] = event.value
                for step in sorted(table)[::every]:
                    cells = (
                        f"{table[step][t]:.4g}" if t in table[step] else "" for t in DIAGNOSTICS
                    )
                    out.write(f"{run_dir.name},{step}," + ",".join(cells) + "\n")
                    rows += 1
    return rows
