"""BabyAI through gym_llm's text wrappers next to classic RL, at equal env steps.

For each env (BabyAI-GoToObj-v0, BabyAI-GoToLocal-v0): uniform random; SB3 PPO with MlpPolicy
on minigrid's image observation (``ImgObsWrapper``; the mission is not given to it); SmolLM2
zero-shot (choice mode over the 7 named actions); SmolLM2 + gym_llm PPO (choice mode) after
``--budget`` env steps. Success rate (reward > 0) and mean return over ``--episodes`` episodes
with 95% intervals (normal approximation), written as JSON lines and a Markdown table.

    python -m benchmarks.recipes.babyai --budget 2048 --episodes 50 --out benchmarks/results/babyai
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

ENVS = ("BabyAI-GoToObj-v0", "BabyAI-GoToLocal-v0")


def _interval(values: list[float]) -> tuple[float, float]:
    array = np.asarray(values, dtype=np.float64)
    half = 1.96 * array.std(ddof=1) / math.sqrt(len(array)) if len(array) > 1 else math.nan
    return float(array.mean()), float(half)


def play(
    act: Callable[[Any], Any], make: Callable[[], gym.Env[Any, Any]], episodes: int, seed: int
) -> dict[str, float]:
    """Episodes of ``act(observation) -> action`` on fresh seeds ``seed, seed + 1, ...``."""
    returns = []
    env = make()
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    success, success_ci = _interval([float(r > 0) for r in returns])
    mean, mean_ci = _interval(returns)
    return {"success": success, "success_ci95": success_ci, "return": mean, "return_ci95": mean_ci}


def run_env(env_id: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    from minigrid.wrappers import ImgObsWrapper
    from stable_baselines3 import PPO as SB3PPO

    from gym_llm import PPO
    from gym_llm.rl.common.vec_env import make_text_env
    from gym_llm.wrappers import ActionParserWrapper, TextObservationWrapper

    rows: list[dict[str, Any]] = []
    seed = 10_000

    def row(agent: str, steps: int, wall: float, stats: dict[str, float]) -> None:
        rows.append(
            {
                "env": env_id,
                "agent": agent,
                "env_steps": steps,
                "train_wall_s": round(wall, 1),
                **stats,
            }
        )
        print(json.dumps(rows[-1]), flush=True)

    space = gym.make(env_id).action_space
    row(
        "random",
        0,
        0.0,
        play(lambda _: space.sample(), lambda: gym.make(env_id), args.episodes, seed),
    )

    image_env = ImgObsWrapper(gym.make(env_id))
    start = time.perf_counter()
    classic = SB3PPO("MlpPolicy", image_env, n_steps=256, batch_size=64, seed=0, device="cpu")
    classic.learn(args.budget)
    wall = time.perf_counter() - start
    row(
        "SB3 PPO (image)",
        args.budget,
        wall,
        play(
            lambda o: int(classic.predict(o, deterministic=True)[0]),
            lambda: ImgObsWrapper(gym.make(env_id)),
            args.episodes,
            seed,
        ),
    )

    def text_env() -> gym.Env[Any, Any]:
        return ActionParserWrapper(TextObservationWrapper(gym.make(env_id)))

    env = make_text_env(env_id, args.n_envs, seed=0)
    model = PPO(
        "LLMPolicy",
        env,
        n_steps=args.n_steps,
        batch_size=args.batch_size,
        n_epochs=2,
        ent_coef=0.01,
        policy_kwargs={"model": args.model},
        seed=0,
        device=args.device,
    )

    def llm_act(obs: Any) -> Any:
        return str(model.predict(obs, deterministic=True)[0])

    row("SmolLM2 zero-shot", 0, 0.0, play(llm_act, text_env, args.episodes, seed))
    start = time.perf_counter()
    model.learn(args.budget, progress_bar=False)
    wall = time.perf_counter() - start
    row(
        "SmolLM2 + gym_llm PPO",
        int(model.num_timesteps),
        wall,
        play(llm_act, text_env, args.episodes, seed),
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", nargs="+", default=list(ENVS))
    parser.add_argument("--budget", type=int, default=2048, help="training env steps per agent")
    parser.add_argument("--episodes", type=int, default=50, help="evaluation episodes per agent")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--n-steps", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/babyai"))
    args = parser.parse_args(argv)
    import minigrid  # noqa: F401  (registers BabyAI-*)

    torch.manual_seed(0)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [r for env_id in args.envs for r in run_env(env_id, args)]
    (args.out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = [
        "| env | agent | env steps | success (95% CI) | mean return (95% CI) | train wall s |",
        "|---|---|---:|---|---|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['env']} | {r['agent']} | {r['env_steps']} | {r['success']:.2f} ± {r['success_ci95']:.2f} "
            f"| {r['return']:.3f} ± {r['return_ci95']:.3f} | {r['train_wall_s']} |"
        )
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
