"""A real game, held out: SmolLM2 trained with PPO on TextWorld-Express games of the train fold,
scored on games of the test fold it never saw, beside the untrained model and a uniformly random
valid action on the same test games.

Each (game, seed) run appends rows to ``--jsonl`` as it goes (one per evaluation point and
agent), so a run cut short keeps its points and a rerun skips the runs already finished::

    python -m benchmarks.recipes.twx_heldout --games coin --seeds 0 1 2 --timesteps 512 \\
        --jsonl benchmarks/results/twx-heldout/cpu.jsonl
    python -m benchmarks.recipes.twx_heldout --summarize benchmarks/results/twx-heldout/cpu.jsonl

Every game plays with TextWorld-Express's own default parameters, as ``twx:<game>`` does. A
test-fold score is the mean final TextWorld-Express score (0-1) and the share of games won over
``--eval-games`` fixed test games (the same games for every agent and seed).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.cli_args import append_jsonl, read_jsonl

#: A reply for one observation (the observation carries the state's valid actions).
Actor = Callable[[Any], str]


def play_test_games(
    actor: Actor, game: str, eval_games: int, step_limit: int, fold: str = "test"
) -> dict[str, float]:
    """Mean final score and success over the fold's first ``eval_games`` games (seeds 0, 1, ...,
    which the adapter maps to the fold's own game seeds)."""
    from gym_llm.rl.common.vec_env import make_env

    env = make_env(f"twx:{game}", fold=fold, step_limit=step_limit)
    scores, wins, steps = [], [], 0
    try:
        for seed in range(eval_games):
            obs, info = env.reset(seed=seed)
            done = False
            while not done:
                obs, _, terminated, truncated, info = env.step(actor(obs))
                done, steps = terminated or truncated, steps + 1
            scores.append(float(info.get("score") or 0.0))
            wins.append(float(bool(info.get("success"))))
    finally:
        env.close()
    return {"score": float(np.mean(scores)), "success": float(np.mean(wins)), "steps": steps}


def random_actor(seed: int) -> Actor:
    rng = random.Random(seed)
    return lambda obs: rng.choice(list(obs.actions))


def llm_actor(model: Any) -> Actor:
    def act(obs: Any) -> str:
        with torch.inference_mode():
            return str(model.policy.act([obs], deterministic=True).replies[0])

    return act


def _done(path: Path) -> set[tuple[str, int]]:
    return {(r["game"], r["seed"]) for r in read_jsonl(path) if r.get("final")}


def run_one(
    args: argparse.Namespace, game: str, seed: int, write: Callable[[dict[str, Any]], None]
) -> None:
    """Train one seed on the train fold, scoring on the test fold every ``--eval-every`` steps."""
    from gym_llm import PPO, LLMPolicy, make_text_env

    env = make_text_env(
        f"twx:{game}",
        args.n_envs,
        seed=seed,
        env_kwargs={
            "fold": "train",
            "step_limit": args.step_limit,
        },
    )
    model = PPO(
        LLMPolicy,
        env,
        n_steps=args.n_steps,
        batch_size=args.batch_size,
        seed=seed,
        device=args.device,
        policy_kwargs={"model": args.model},
    )
    base = {"game": game, "seed": seed, "model": args.model, "eval_games": args.eval_games}
    start = time.perf_counter()

    def point(final: bool = False) -> None:
        figures = play_test_games(llm_actor(model), game, args.eval_games, args.step_limit)
        write({**base, "agent": "llm", "env_steps": model.num_timesteps, "final": final,
               "wall_s": round(time.perf_counter() - start, 1), **figures})  # fmt: skip

    write({**base, "agent": "random", "env_steps": 0, **play_test_games(
        random_actor(seed), game, args.eval_games, args.step_limit)})  # fmt: skip
    point()  # the untrained model
    while model.num_timesteps < args.timesteps:
        model.learn(args.eval_every, reset_num_timesteps=False, progress_bar=False)
        point(final=model.num_timesteps >= args.timesteps)
    env.close()


def summarize(path: Path) -> list[str]:
    """One line per game: random, untrained and trained test-fold figures, seeds that beat both."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    lines = []
    for game in sorted({r["game"] for r in rows}):
        runs = [r for r in rows if r["game"] == game]
        seeds = sorted({r["seed"] for r in runs if r.get("final")})
        if not seeds:
            last = max((r["env_steps"] for r in runs if r["agent"] == "llm"), default=0)
            lines.append(f"{game}: no run finished yet (cut short at {last} env steps)")
            continue
        rand = {r["seed"]: r for r in runs if r["agent"] == "random"}
        llm = [r for r in runs if r["agent"] == "llm"]
        untrained = {r["seed"]: r for r in llm if r["env_steps"] == 0}
        final = {r["seed"]: r for r in llm if r.get("final")}
        beat = [
            s for s in seeds if final[s]["score"] > max(untrained[s]["score"], rand[s]["score"])
        ]

        def mean(by_seed: dict[int, dict[str, Any]], key: str, seeds: list[int] = seeds) -> float:
            return float(np.mean([by_seed[s][key] for s in seeds])) if seeds else float("nan")

        lines.append(
            f"{game}: {len(beat)} of {len(seeds)} seeds beat the untrained model and random; "
            f"test-fold score random {mean(rand, 'score'):.2f}, untrained {mean(untrained, 'score'):.2f}, "
            f"trained {mean(final, 'score'):.2f} (success {mean(final, 'success'):.2f}) at "
            f"{max((final[s]['env_steps'] for s in seeds), default=0)} env steps"
        )
    return lines


def plot(path: Path, out_dir: Path) -> list[Path]:
    """One PNG per game: each seed's test-fold success against training env steps (the
    untrained model at 0), with the random valid action's success as a dashed line."""
    from gym_llm.experiments.plots import _pyplot

    plt: Any = _pyplot()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for game in sorted({r["game"] for r in rows}):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        runs = [r for r in rows if r["game"] == game]
        for seed in sorted({r["seed"] for r in runs}):
            curve = sorted(
                (r["env_steps"], r["success"])
                for r in runs
                if r["seed"] == seed and r["agent"] == "llm"
            )
            ax.plot(*zip(*curve, strict=True), marker="o", label=f"PPO, seed {seed}")
        randoms = [r["success"] for r in runs if r["agent"] == "random"]
        if randoms:
            ax.axhline(float(np.mean(randoms)), color="grey", ls="--", label="random valid action")
        ax.set(
            xlabel="training env steps (train fold)",
            ylabel="success on the test fold",
            title=f"TextWorld-Express {game}: held-out games ({runs[0]['eval_games']} per point)",
            ylim=(-0.02, 1.02),
        )
        ax.legend(fontsize=8)
        target = out_dir / f"{game}.png"
        fig.tight_layout()
        fig.savefig(target, dpi=110)
        plt.close(fig)
        written.append(target)
    return written


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.recipes.twx_heldout", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--games", nargs="+", default=["coin"], help="TextWorld-Express games")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--timesteps", type=int, default=1024, help="training env steps")
    parser.add_argument("--eval-every", type=int, default=256, help="env steps between scores")
    parser.add_argument("--eval-games", type=int, default=50, help="test-fold games per score")
    parser.add_argument("--step-limit", type=int, default=50, help="moves per episode")
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--n-steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--jsonl", type=Path, default=Path("benchmarks/results/twx-heldout/runs.jsonl")
    )
    parser.add_argument("--summarize", type=Path, metavar="JSONL", help="print the summary only")
    parser.add_argument(
        "--plot", type=Path, metavar="DIR", help="with --summarize: write one PNG per game there"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> list[str]:
    args = build_parser().parse_args(argv)
    if args.summarize is not None:
        if args.plot is not None:
            plot(args.summarize, args.plot)
        lines = summarize(args.summarize)
        print("\n".join(lines))
        return lines
    args.jsonl.parent.mkdir(parents=True, exist_ok=True)
    done = _done(args.jsonl)

    def write(row: dict[str, Any]) -> None:
        print(json.dumps(row), flush=True)
        append_jsonl(args.jsonl, row)

    for seed in args.seeds:  # every game's first seed first: a run cut short covers them all
        for game in args.games:
            if (game, seed) not in done:
                run_one(args, game, seed, write)
    lines = summarize(args.jsonl)
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
