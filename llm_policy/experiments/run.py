"""One training run, end to end: evaluate, train with PPO, evaluate again, save everything.

``make demo``, ``benchmarks/learn.py`` (and later the CLI) all need the same run: build the text
env, evaluate the untrained model, train with a learning curve measured on a separate evaluation
env, evaluate again, and leave the run directory in a state someone can inspect (TensorBoard logs,
the saved agent, the config, the curve as JSON and PNG). Keeping it in one place means they cannot
drift apart.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from stable_baselines3.common.callbacks import BaseCallback

from gym_llm.evaluation.curve import CurvePoint, CurveRecorder, no_score
from gym_llm.evaluation.exact import exact_evaluation_supported, exact_policy_value
from gym_llm.evaluation.monte_carlo import EvalStats, evaluate
from gym_llm.evaluation.scores import Score
from gym_llm.experiments.checkpoints import (
    CheckpointCallback,
    read_run_state,
    resumable_checkpoint,
)
from gym_llm.policy.models import DEFAULT_MODEL, resolve_device
from gym_llm.policy.top_layers import parse_trainable_layers
from gym_llm.rl.advantages import check_estimator
from gym_llm.rl.ppo import PPO
from gym_llm.rl.vec_env import make_text_env


@dataclass
class TrainConfig:
    """Everything that defines a run; saved as ``config.json`` so the run can be repeated."""

    #: Gymnasium env id (any registered id; gym_llm/<Name>-v0 after ``import gym_llm``).
    env: str = "Blackjack-v1"
    #: Keyword arguments for ``gym.make`` (e.g. ``{"sab": False}``).
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: Registry name (see ``gym-llm models``), local directory or hub id.
    model: str = DEFAULT_MODEL
    #: ``"choice"`` scores the listed actions; ``"generate"`` samples free text.
    mode: str = "choice"
    #: Env steps to train for (summed over the parallel envs).
    timesteps: int = 2048
    #: Parallel envs per rollout.
    n_envs: int = 8
    #: Steps per env per rollout (a rollout is n_steps * n_envs turns).
    n_steps: int = 32
    #: PPO minibatch size, in turns.
    batch_size: int = 64
    #: Passes over each rollout.
    n_epochs: int = 2
    #: Adam learning rate (default: PPO's, 5e-4 with LoRA and 1e-5 without; measured).
    learning_rate: float | None = None
    #: LoRA rank; 0 fine-tunes all weights.
    lora_r: int = 16
    #: Advantages: gae (with the critic), or critic-free rebn, grpo, rloo, gigpo.
    advantage_estimator: str = "gae"
    #: The value head's learning rate as a multiple of the policy's.
    value_lr_scale: float = 1.0
    #: Env steps at the start during which only the value head trains.
    critic_warmup_steps: int = 0
    #: Choice mode: subtract each action's score under a content-free prompt.
    choice_calibration: bool = False
    #: Decoder layers that train, from the top: "auto" (a quarter with LoRA, all without),
    #: "all", a count ("8") or a share ("0.25"). The update starts from the hidden states the
    #: rollout computed below them, so fewer layers make it cheaper.
    trainable_layers: str = "auto"
    #: Entropy bonus coefficient.
    ent_coef: float = 0.0
    #: Coefficient of the KL penalty to the base model (adapter disabled).
    kl_coef: float = 0.0
    #: Stop an update's epochs early when the approximate KL exceeds this (None: never).
    target_kl: float | None = None
    #: Discount factor.
    gamma: float = 0.99
    #: Turns per forward/backward pass (gradient accumulation up to batch_size); none: as many
    #: as fit the update's memory budget.
    micro_batch_size: int | None = None
    #: Reply length in generate mode (None: the model's registry default).
    max_new_tokens: int | None = None
    #: Sampling temperature of the policy.
    temperature: float = 1.0
    #: Monte-Carlo episodes per evaluation (before, after, each curve point); 0 skips them where
    #: the env has an exact evaluation (gym_llm.evaluation.exact), which every point then uses.
    eval_episodes: int = 100
    #: Evaluations during training (evenly spaced), besides before and after.
    eval_points: int = 4
    #: Seed of the envs, the policy's sampling and the weights' initialisation.
    seed: int = 0
    #: "auto" (cuda, then mps, then cpu), "cpu", "cuda", "cuda:1", ...
    device: str = "auto"
    #: Save a checkpoint to run_dir/checkpoints/<steps>/ at the first rollout boundary after
    #: every N env steps (None: after every rollout; 0: none, only the final agent). ``--resume``
    #: continues from the newest one.
    checkpoint_every: int | None = None
    #: Checkpoints kept (the newest; older ones are removed once a newer one is complete).
    keep_checkpoints: int = 2
    #: Chat-messages JSONL of demonstrations (``gym-llm demos``, gym_llm.experiments.demos.make_demos) to
    #: fine-tune on with SFT after the "before" evaluation and before PPO (None: no warm start).
    sft_demos: str | None = None
    #: Passes over the demonstrations in that SFT warm start.
    sft_epochs: float = 1.0
    #: AdamW learning rate of the SFT warm start (decayed linearly to 0 over its steps).
    sft_learning_rate: float = 1e-4

    def __post_init__(self) -> None:
        if self.mode not in ("choice", "generate"):
            raise ValueError(f"mode must be 'choice' or 'generate', got {self.mode!r}.")
        for name in ("timesteps", "n_envs", "n_steps", "batch_size", "n_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if self.eval_points < 0 or self.lora_r < 0 or self.eval_episodes < 0:
            raise ValueError("eval_points, eval_episodes and lora_r must be >= 0.")
        if self.sft_demos is not None and self.sft_epochs <= 0:
            raise ValueError(f"sft_epochs must be > 0, got {self.sft_epochs}.")
        parse_trainable_layers(self.trainable_layers)  # a bad value fails here, not mid-run
        check_estimator(self.advantage_estimator)
        if self.choice_calibration and self.mode != "choice":
            raise ValueError("choice_calibration needs mode='choice'.")
        if self.checkpoint_every is not None and self.checkpoint_every < 0:
            raise ValueError(f"checkpoint_every must be >= 0, got {self.checkpoint_every}.")
        if self.keep_checkpoints < 1:
            raise ValueError(f"keep_checkpoints must be >= 1, got {self.keep_checkpoints}.")
        if self.eval_episodes == 0 and not exact_evaluation_supported(self.env, self.env_kwargs):
            raise ValueError(
                f"eval_episodes=0 needs an exact evaluation, which {self.env} does not have; "
                "give a number of Monte-Carlo episodes."
            )

    def policy_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "lora": {"r": self.lora_r, "lora_alpha": 2 * self.lora_r} if self.lora_r else None,
            "action_mode": self.mode,
            "temperature": self.temperature,
            "trainable_layers": parse_trainable_layers(self.trainable_layers),
            "value_lr_scale": self.value_lr_scale,
        }
        if self.choice_calibration:
            kwargs["choice_calibration"] = True
        if self.max_new_tokens is not None:
            kwargs["max_new_tokens"] = self.max_new_tokens
        return kwargs


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
    model: PPO
    #: Evaluation right after the SFT warm start (``None`` without ``sft_demos``).
    after_sft: CurvePoint | None = None
    #: The warm start's statistics (gym_llm.sft.warm_start), ``None`` without ``sft_demos``.
    sft: dict[str, float] | None = None

    @property
    def agent_path(self) -> Path:
        return self.run_dir / "agent"

    @property
    def tensorboard_dir(self) -> Path:
        return self.run_dir / "tensorboard"

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": asdict(self.config),
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
    """A human-readable device for result tables (GPU model, or CPU with its core count)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import os

    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


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
    """
    run_dir = Path(run_dir)
    checkpoint = resumable_checkpoint(run_dir) if resume else None
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(asdict(config), indent=2))
    env = make_text_env(config.env, config.n_envs, env_kwargs=config.env_kwargs, seed=config.seed)
    eval_env = make_text_env(
        config.env, config.n_envs, env_kwargs=config.env_kwargs, seed=config.seed + 10_000
    )
    model = PPO(
        "LLMPolicy",
        env,
        learning_rate=config.learning_rate,
        n_steps=config.n_steps,
        batch_size=config.batch_size,
        n_epochs=config.n_epochs,
        gamma=config.gamma,
        ent_coef=config.ent_coef,
        kl_coef=config.kl_coef,
        target_kl=config.target_kl,
        micro_batch_size=config.micro_batch_size,
        advantage_estimator=config.advantage_estimator,
        critic_warmup_steps=config.critic_warmup_steps,
        policy_kwargs=config.policy_kwargs(),
        tensorboard_log=str(run_dir / "tensorboard"),
        seed=config.seed,
        device=str(resolve_device(config.device)),
        verbose=verbose,
    )
    rollout = config.n_steps * config.n_envs
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

    curve = CurveRecorder(every, measure, on_point=on_point)
    curve.init_callback(model)
    after_sft, sft_stats = None, None
    if checkpoint is not None:
        model.load_policy_state(checkpoint)
        saved = read_run_state(checkpoint)
        curve.restore(saved["curve"])
        before = curve.points[0]
        if saved.get("sft") is not None:
            after_sft, sft_stats = curve.points[1], saved["sft"]
    else:
        before = curve.record()
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
    if config.checkpoint_every != 0:
        callbacks.append(
            CheckpointCallback(
                run_dir / "checkpoints",
                config.checkpoint_every or rollout,
                config.keep_checkpoints,
                curve,
                {"sft": sft_stats},
            )
        )
    remaining = config.timesteps - model.num_timesteps
    if remaining > 0:
        model.learn(
            remaining,
            callback=callbacks,
            progress_bar=progress_bar,
            tb_log_name="ppo",
            reset_num_timesteps=checkpoint is None,
        )
    last = curve.points[-1]
    after = last if last.timesteps == model.num_timesteps else curve.record()
    train_wall_s = curve.train_seconds()
    model.save(run_dir / "agent")
    env.close()
    eval_env.close()
    result = TrainResult(
        config=config,
        device=device_name(model.device),
        before=before,
        after=after,
        curve=curve.points,
        train_wall_s=train_wall_s,
        timesteps=int(model.num_timesteps),
        run_dir=run_dir,
        versions=versions(),
        model=model,
        after_sft=after_sft,
        sft=sft_stats,
    )
    (run_dir / "result.json").write_text(json.dumps(result.as_dict(), indent=2))
    plot_result(result, run_dir / "curve.png")
    return result


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
        f"gym_llm PPO ({config.mode}, {config.model})" + (" - exact" if exact else ""),
        [p.timesteps for p in result.curve],
        [p.value for p in result.curve],
        None if exact else [p.eval.sem if p.eval is not None else 0.0 for p in result.curve],
    )
    return plot_curves(
        [series], path, title=f"{config.env} - {result.device}", references=references
    )
