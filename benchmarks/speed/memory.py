"""Memory over a long run: resident memory after every PPO update, for 10x the usual updates.

A leak in a long LLM-RL run shows as resident memory (RSS) that keeps climbing update after
update: caches keyed by prompts, histories kept per episode, logged samples. This trains
``--updates`` updates (default 320, ten times the 32 of ``gym-llm train``'s default 2,048 steps
with 8 envs x 8 steps) on a multi-turn env with the conversation in the prompt (prompts grow
within an episode and are cut at ``--max-prompt-tokens`` by the declared truncation policy), and
records RSS and the peak so far after each update. Checkpoints are written every
``--checkpoint-every`` updates as ``gym-llm train`` does, so their cost is in the figure.

    python -m benchmarks.speed.memory --model smollm2-135m --updates 320 --out benchmarks/results/memory

Writes ``memory.json`` (one row per update: RSS, RSS after ``malloc_trim``, malloc's bytes in use,
resident file-backed and anonymous memory, the peak) and ``memory.png``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback


def trim_rss_mb() -> float:
    """RSS after glibc's ``malloc_trim(0)`` hands freed heap pages back to the OS: the memory
    really in use, without what the allocator keeps after variable-sized tensors are freed
    (NaN where there is no glibc)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return float("nan")
    libc.malloc_trim(0)
    return rss_mb()[0]


def rss_mb() -> tuple[float, float]:
    """(resident memory now, its peak so far) of this process in MB, from /proc (Linux)."""
    fields: dict[str, float] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = float(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost",
        )
    ]  # fmt: skip


def malloc_in_use_mb() -> float:
    """Bytes glibc's malloc has handed out and not got back (``mallinfo2``: ``uordblks`` +
    ``hblkhd``, every arena), in MB: live native allocations, whatever made them. NaN without
    glibc >= 2.33."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
    except (OSError, AttributeError):
        return float("nan")
    info = libc.mallinfo2()
    return float(info.uordblks + info.hblkhd) / 2**20


def mapped_mb() -> dict[str, float]:
    """Resident memory by kind of mapping (/proc/self/smaps, MB): ``file`` (pages of mapped files:
    the code and data of libraries, which grow as new kernels are first run and which the OS can
    drop and re-read) and ``anonymous`` (heap, malloc's large blocks, everything else)."""
    sizes = {"file": 0.0, "anonymous": 0.0}
    kind = "anonymous"
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return {k: float("nan") for k in sizes}
    for line in lines:
        first = line.split(maxsplit=6)
        if first and "-" in first[0] and len(first) >= 5 and ":" not in first[0]:
            path = first[5] if len(first) > 5 else ""
            kind = "file" if path.startswith("/") else "anonymous"
        elif line.startswith("Rss:"):
            sizes[kind] += float(line.split()[1]) / 1024
    return sizes


class MemoryLog(BaseCallback):
    """RSS after every update (measured at the next rollout's start, and at the end)."""

    def __init__(self, checkpoint_dir: Path | None, checkpoint_every: int) -> None:
        super().__init__()
        self.rows: list[dict[str, float]] = []
        self.start = time.perf_counter()
        self.checkpoint_dir, self.checkpoint_every = checkpoint_dir, checkpoint_every

    def _on_step(self) -> bool:
        return True

    def _record(self) -> None:
        rss, peak = rss_mb()
        trimmed = trim_rss_mb()
        update = len(self.rows) + 1
        self.rows.append(
            {
                "update": update,
                "timesteps": int(self.num_timesteps),
                "rss_mb": rss,
                "rss_trimmed_mb": trimmed,
                "peak_mb": peak,
                "wall_s": time.perf_counter() - self.start,
                "prompts_truncated": int(getattr(self.model.policy, "truncated_prompts", 0)),
                "malloc_in_use_mb": malloc_in_use_mb(),
                **{f"{kind}_mb": size for kind, size in mapped_mb().items()},
            }
        )
        row = self.rows[-1]
        print(
            f"update {update}: {row['timesteps']} steps, RSS {rss:.0f} MB (trimmed "
            f"{trimmed:.0f}; files {row['file_mb']:.0f}, anonymous {row['anonymous_mb']:.0f}, "
            f"malloc in use {row['malloc_in_use_mb']:.0f}), peak {peak:.0f} MB, "
            f"{row['wall_s']:.0f} s",
            flush=True,
        )
        if self.checkpoint_dir is not None and update % self.checkpoint_every == 0:
            self.model.save(self.checkpoint_dir / "latest")

    def _on_rollout_start(self) -> None:
        if self.num_timesteps > 0:
            self._record()

    def _on_training_end(self) -> None:
        self._record()


def summary(rows: list[dict[str, float]], warmup: int = 5) -> dict[str, float]:
    """Growth after the first ``warmup`` updates: total, and the slope of a straight line fitted
    to RSS over the updates after them (MB per update)."""
    after = [r for r in rows if r["update"] > warmup]
    x = np.array([r["update"] for r in after], dtype=np.float64)

    def slope(key: str) -> float:
        y = np.array([r[key] for r in after], dtype=np.float64)
        return float(np.polyfit(x, y, 1)[0]) if len(after) > 1 else float("nan")

    half = [r for r in after if r["update"] > rows[-1]["update"] / 2]
    x_half = np.array([r["update"] for r in half], dtype=np.float64)
    y_half = np.array([r["rss_trimmed_mb"] for r in half], dtype=np.float64)
    return {
        "rss_after_warmup_mb": float(after[0]["rss_mb"]) if after else float("nan"),
        "rss_last_mb": float(rows[-1]["rss_mb"]),
        "peak_mb": float(rows[-1]["peak_mb"]),
        "growth_after_warmup_mb": float(rows[-1]["rss_mb"] - after[0]["rss_mb"]) if after else 0,
        "slope_mb_per_update": slope("rss_mb"),
        "trimmed_slope_mb_per_update": slope("rss_trimmed_mb"),
        "trimmed_slope_second_half_mb_per_update": (
            float(np.polyfit(x_half, y_half, 1)[0]) if len(half) > 1 else float("nan")
        ),
        "rss_trimmed_last_mb": float(rows[-1]["rss_trimmed_mb"]),
    }


def plot(
    rows: list[dict[str, float]],
    path: Path,
    title: str,
    before: list[dict[str, float]] | None = None,
) -> None:
    """RSS, RSS after ``malloc_trim``, malloc's bytes in use and the peak over updates;
    ``before``: an earlier run's rows, whose trimmed RSS is drawn for comparison."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    updates = [r["update"] for r in rows]
    ax.plot(updates, [r["rss_mb"] for r in rows], label="resident memory (RSS)")
    ax.plot(updates, [r["rss_trimmed_mb"] for r in rows], label="RSS after malloc_trim")
    if "malloc_in_use_mb" in rows[0]:
        ax.plot(updates, [r["malloc_in_use_mb"] for r in rows], label="malloc in use")
    ax.plot(updates, [r["peak_mb"] for r in rows], "--", label="peak so far")
    if before:
        ax.plot(
            [r["update"] for r in before],
            [r["rss_trimmed_mb"] for r in before],
            ":",
            color="grey",
            label="before: RSS after malloc_trim",
        )
    ax.set_xlabel("PPO update")
    ax.set_ylabel("MB")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="registry name or directory")
    parser.add_argument("--env", default="gym_llm/GuessNumber-v0")
    parser.add_argument("--updates", type=int, default=320)
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--n-steps", type=int, default=8)
    parser.add_argument("--max-prompt-tokens", type=int, default=384)
    parser.add_argument("--checkpoint-every", type=int, default=10, help="in updates")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/memory")
    parser.add_argument(
        "--before", type=Path, default=None, help="an earlier memory.json to draw for comparison"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from gym_llm import PPO, make_text_env

    env = make_text_env(args.env, args.n_envs, seed=0, conversation=True)
    model = PPO(
        "LLMPolicy",
        env,
        n_steps=args.n_steps,
        batch_size=args.n_envs * args.n_steps,
        n_epochs=1,
        seed=0,
        device="cpu",
        policy_kwargs={"model": args.model, "max_prompt_tokens": args.max_prompt_tokens},
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        log = MemoryLog(Path(tmp), args.checkpoint_every)
        model.learn(args.updates * args.n_envs * args.n_steps, callback=log)
    rows = log.rows
    device = f"CPU ({platform.machine()}, {args.threads} threads)"
    result = {
        "settings": {**vars(args), "before": str(args.before) if args.before else None},
        "device": device,
        "torch": torch.__version__,
        "summary": summary(rows),
        "rows": rows,
    }
    (out / "memory.json").write_text(json.dumps(result, indent=2))
    plot(
        rows,
        out / "memory.png",
        f"{args.model} on {args.env} (conversation, max_prompt_tokens={args.max_prompt_tokens}), "
        f"{device}",
        before=json.loads(args.before.read_text())["rows"] if args.before else None,
    )
    print(json.dumps(result["summary"], indent=2))
    return result


if __name__ == "__main__":
    main()
