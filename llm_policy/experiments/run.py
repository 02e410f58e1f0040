"""One training run, end to end: evaluate, train with PPO, evaluate again, save everything.

``make demo``, ``benchmarks/recipes/learn.py`` (and later the CLI) all need the same run: build the text
env, evaluate the untrained model, train with a learning curve measured on a separate evaluation
env, evaluate again, and leave the run directory in a state someone can inspect (TensorBoard logs,
the saved agent, the config, the curve as JSON and PNG). Keeping it in one place means they cannot
drift apart.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import unwrap_wrapper

from gym_llm.evaluation.curve import CurvePoint, CurveRecorder, no_score
from gym_llm.evaluation.exact import exact_evaluation_supported, exact_policy_value
from gym_llm.evaluation.monte_carlo import EvalStats, evaluate
from gym_llm.evaluation.scores import Score
from gym_llm.experiments.agents import build_agent
from gym_llm.experiments.best_agent import BestAgentKeeper
from gym_llm.experiments.checkpoints import (
    CheckpointCallback,
    read_run_state,
    resumable_checkpoint,
)
from gym_llm.experiments.train_config import TrainConfig
from gym_llm.rl.common.distributed import (
    from_main_process,
    init_from_launcher,
    is_main_process,
    rank,
    world_size,
)
from gym_llm.rl.common.sharding import check_can_shard, requested_by_launcher
from gym_llm.rl.common.vec_env import make_text_env
from gym_llm.rl.dqn.dqn import DQN
from gym_llm.rl.ppo import PPO
from gym_llm.wrappers.action_parser import ActionParserWrapper
from gym_llm.wrappers.count_bonus import check_count_key

__all__ = ["TrainConfig", "TrainResult", "device_name", "plot_result", "run", "versions"]


@dataclass
class TrainResult:
    """What a run measured; ``as_dict`` is the JSON written next to the curve."""

    config: TrainConfig
    device: str
    before: CurvePoint
    after: CurvePoint
    curve: list[CurvePoint]
    train_wall_s: float
    timesteps: int
    run_dir: Path
    versions: dict[str, str]
    #: The trained agent, as saved to ``agent_path`` (not part of the JSON).
    model: PPO | DQN
    #: Evaluation right after the SFT warm start (``None`` without ``sft_demos``).
    after_sft: CurvePoint | None = None
    #: The warm start's statistics (gym_llm.rl.sft.warm_start), ``None`` without ``sft_demos``.
    sft: dict[str, float] | None = None
    #: Processes that trained data-parallel (each with ``config.n_envs`` envs).
    processes: int = 1
    #: Which curve point ``run_dir/best/`` holds and its value (``None`` without ``keep_best``).
    best: dict[str, Any] | None = None

    @property
    def agent_path(self) -> Path:
        return self.run_dir / "agent"

    @property
    def best_path(self) -> Path:
        return self.run_dir / "best"

    @property
    def tensorboard_dir(self) -> Path:
        return self.run_dir / "tensorboard"

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.as_dict(),
            "device": self.device,
            "before": self.before.as_dict(),
            "after": self.after.as_dict(),
            "curve": [p.as_dict() for p in self.curve],
            "train_wall_s": self.train_wall_s,
            "env_steps_per_s": self.timesteps / max(self.train_wall_s, 1e-9),
            "timesteps": self.timesteps,
            "run_dir": str(self.run_dir),
            "versions": self.versions,
            "after_sft": self.after_sft.as_dict() if self.after_sft is not None else None,
            "sft": self.sft,
            "processes": self.processes,
            "best": self.best,
        }


def versions() -> dict[str, str]:
    """Library versions that decide a run's numbers, recorded with every result."""
    import gymnasium
    import peft
    import stable_baselines3
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "stable_baselines3": stable_baselines3.__version__,
        "gymnasium": gymnasium.__version__,
    }


def device_name(device: torch.device) -> str:
    """A human-readable device for result tables: the GPU model, or the CPU's model, the vector
    instructions torch dispatches to and the core count. The same seed gives other floats on
    another CPU model or instruction set, so a run repeats bit for bit only where these match."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import os

    model = cpu_model() or platform.processor() or platform.machine()
    return f"CPU ({model}, {torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores)"


def cpu_model(cpuinfo: str | None = None) -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), or None where it cannot be read."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return None


def judges_replies(env: gym.Env[Any, Any]) -> bool:
    """Whether some reply to ``env`` can be invalid, so that an ``invalid_penalty`` can reach it:
    its replies go through an ActionParserWrapper over a non-text space, or it is a text game
    (:class:`gym_llm.envs.TextGameEnv`: GEM, TextWorld-Express, TextArena, yours) that reports
    its own verdict on a move."""
    from gym_llm.envs.text_game import TextGameEnv

    parser = unwrap_wrapper(env, ActionParserWrapper)
    parses = parser is not None and not isinstance(parser.env.action_space, gym.spaces.Text)
    return parses or isinstance(env.unwrapped, TextGameEnv)


def check_invalid_penalty(penalty: float, env_id: str, env: gym.Env[Any, Any]) -> None:
    """Refuse an ``invalid_penalty`` that no reply to ``env`` could ever receive."""
    if penalty and not judges_replies(env):
        raise ValueError(
            f"invalid_penalty needs an env where a reply can be invalid: one whose replies "
            f"gym_llm parses (Discrete, Box, ...) or a text game that reports its verdict on a "
            f"move (gym_llm.envs.TextGameEnv); {env_id} takes any text and judges none."
        )


def run(
    config: TrainConfig,
    run_dir: str | Path,
    *,
    progress_bar: bool = True,
    verbose: int = 0,
    on_point: Callable[[CurvePoint], None] | None = None,
    resume: bool = False,
) -> TrainResult:
    """Evaluate, train, evaluate; write ``config.json``, ``result.json``, ``curve.png``, the agent.

    ``on_point`` is called with each curve point (the "before" point included) as soon as it is
    measured, so a caller can print progress. ``resume``: continue the run in ``run_dir`` from
    its newest checkpoint (same config; ``timesteps`` may be larger), with the same random state,
    learning curve and TensorBoard steps.

    Started by ``torchrun``/``accelerate launch`` with several processes, each steps
    ``n_envs`` envs of its own (``timesteps`` counts all of them); only the main process
    evaluates and writes, and every process returns the main process's figures.
    """
    run_dir = Path(run_dir)
    main = check_processes(config, resume)
    checkpoint = resumable_checkpoint(run_dir) if resume else None
    env = make_text_env(
        config.env,
        config.n_envs,
        env_kwargs=config.env_kwargs,
        seed=config.seed + rank() * config.n_envs,
        count_bonus=config.count_bonus,
        # the counts are this process's: its share of the budget
        count_bonus_decay_steps=max(
            1, int(config.count_bonus_until * config.timesteps / world_size())
        ),
        count_bonus_key=check_count_key(config.count_bonus_key, "count_bonus_key"),
        # only the training env: every evaluation scores the task's own reward
        action_kwargs=(
            {"invalid_penalty": config.invalid_penalty} if config.invalid_penalty else None
        ),
    )
    check_invalid_penalty(config.invalid_penalty, config.env, env.envs[0])
    if main:  # written once the env is known to run, so a refused run leaves nothing behind
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.json").write_text(json.dumps(config.as_dict(), indent=2))
    eval_env = make_text_env(
        config.env, config.n_envs, env_kwargs=config.env_kwargs, seed=config.seed + 10_000
    )
    model = build_agent(config, env, run_dir, verbose)
    # env steps between the points where the policy can change, every process's
    rollout = config.rollout_steps * config.n_envs * world_size()
    iterations = max(1, -(-config.timesteps // rollout))
    every = rollout * max(1, iterations // (config.eval_points + 1)) if config.eval_points else 0
    exact = None
    if exact_evaluation_supported(config.env, config.env_kwargs):

        def exact(agent: Any) -> float:
            return exact_policy_value(agent, config.env, config.env_kwargs)

    def measure(agent: Any) -> tuple[Score, EvalStats | None]:
        # The same episodes at every point: comparable points, and none depends on the last.
        eval_env.seed(config.seed + 10_000)
        stats = evaluate(agent, eval_env, config.eval_episodes) if config.eval_episodes else None
        if exact is not None:
            return Score(exact(agent), 0.0, "exact"), stats
        return (stats.score() if stats is not None else no_score()), stats

    # Only the main process measures the curve (the weights are the same in every process).
    curve = CurveRecorder(every if main else 0, measure, on_point=on_point if main else None)
    curve.init_callback(model)
    keeper = BestAgentKeeper(run_dir / "best", curve) if config.keep_best else None
    if keeper is not None:
        keeper.init_callback(model)
    after_sft, sft_stats = None, None
    if checkpoint is not None:
        model.load_policy_state(checkpoint)
        saved = read_run_state(checkpoint)
        curve.restore(saved["curve"])
        before = curve.points[0]
        if saved.get("sft") is not None:
            after_sft, sft_stats = curve.points[1], saved["sft"]
    else:
        before = curve.record() if main else no_point()
        if config.sft_demos is not None:
            from gym_llm.rl.sft import warm_start

            sft_stats = warm_start(
                model.policy,
                config.sft_demos,
                epochs=config.sft_epochs,
                learning_rate=config.sft_learning_rate,
                seed=config.seed,
            )
            after_sft = curve.record()  # a second point at 0 env steps: the jump SFT made
    callbacks: list[BaseCallback] = [curve]
    if config.checkpoint_every != 0:  # writes in the main process only
        callbacks.append(
            CheckpointCallback(
                run_dir / "checkpoints",
                config.checkpoint_every or rollout,
                config.keep_checkpoints,
                curve,
                {"sft": sft_stats},
            )
        )
    if keeper is not None:  # after the curve (and the checkpoint): it reads the newest point
        callbacks.append(keeper)
    remaining = config.timesteps - model.num_timesteps
    if remaining > 0:
        model.learn(
            remaining,
            callback=callbacks,
            progress_bar=progress_bar,
            tb_log_name=config.algo,
            reset_num_timesteps=checkpoint is None,
        )
    after = no_point()
    if main:
        last = curve.points[-1]
        after = last if last.timesteps == model.num_timesteps else curve.record()
    if keeper is not None:
        keeper.update()  # the final point (every process: the save may be collective)
    model.save(run_dir / "agent")  # written by the main process (the others join FSDP's gather)
    env.close()
    eval_env.close()
    before, after, points, train_wall_s, after_sft = from_main_process(
        (before, after, curve.points, curve.train_seconds(), after_sft)
    )
    result = TrainResult(
        config=config,
        device=device_name(model.device),
        before=before,
        after=after,
        curve=points,
        train_wall_s=train_wall_s,
        timesteps=int(model.num_timesteps),
        run_dir=run_dir,
        versions=versions(),
        model=model,
        after_sft=after_sft,
        sft=sft_stats,
        processes=world_size(),
        best=from_main_process(keeper.best if keeper is not None else None),
    )
    if main:
        (run_dir / "result.json").write_text(json.dumps(result.as_dict(), indent=2))
        plot_result(result, run_dir / "curve.png")
    return result


def check_processes(config: TrainConfig, resume: bool) -> bool:
    """Join a launcher's process group; whether this is the main process. What one process of
    several cannot do is refused here (``ValueError``), before anything is written; the command
    line calls it first to report the same refusals as its own errors."""
    init_from_launcher()
    if config.ppo.fsdp or requested_by_launcher():
        check_can_shard(uses_lora=config.policy.lora is not None)
    processes = world_size()
    if processes > 1 and config.algo == "dqn":
        raise ValueError(
            f"algo='dqn' trains in one process (its replay buffer is one process's), and this "
            f"is one of {processes} processes: start it without the launcher."
        )
    if processes > 1:
        refused = "--resume" if resume else "--sft-demos" if config.sft_demos else None
        if refused is not None:
            raise ValueError(
                f"{refused} runs in one process only (a checkpoint holds one process's random "
                f"state; the SFT warm start runs Hugging Face's Trainer), and this is one of "
                f"{processes} processes: start it without the launcher."
            )
    return is_main_process()


def no_point() -> CurvePoint:
    """A placeholder the main process's point replaces (processes other than the main one)."""
    return CurvePoint(0, 0.0, no_score(), None)


def plot_result(
    result: TrainResult, path: Path, references: dict[str, float] | None = None
) -> Path:
    """The run's learning curve as a PNG, with random play and the optimum as lines where known
    (``references`` overrides them)."""
    from gym_llm.evaluation.monte_carlo import reference_returns
    from gym_llm.experiments.plots import Series, plot_curves

    config = result.config
    if references is None:
        references = reference_returns(config.env, config.env_kwargs, measure_random=False)
    exact = result.curve[0].exact is not None
    series = Series(
        f"gym_llm {config.algo.upper()} ({config.mode}, {config.policy.model})"
        + (" - exact" if exact else ""),
        [p.timesteps for p in result.curve],
        [p.value for p in result.curve],
        None if exact else [p.eval.sem if p.eval is not None else 0.0 for p in result.curve],
    )
    return plot_curves(
        [series], path, title=f"{config.env} - {result.device}", references=references
    )
