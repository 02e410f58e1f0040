"""The agent a :class:`~gym_llm.experiments.train_config.TrainConfig` describes: ``PPO`` or
``DQN`` on the run's env, with the config's settings and TensorBoard in the run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gym_llm.experiments.train_config import TrainConfig
from gym_llm.policy.models import resolve_device
from gym_llm.rl.dqn.dqn import DQN
from gym_llm.rl.ppo import PPO


def build_agent(config: TrainConfig, env: Any, run_dir: Path, verbose: int = 0) -> PPO | DQN:
    """``PPO`` (``config.algo == "ppo"``) or ``DQN``, built as a user would build it."""
    common: dict[str, Any] = {
        "policy_kwargs": config.policy_kwargs(),
        "tensorboard_log": str(run_dir / "tensorboard"),
        "seed": config.seed,
        "device": str(resolve_device(config.device)),
        "verbose": verbose,
        "gamma": config.gamma,
        "batch_size": config.batch_size,
    }
    if config.algo == "dqn":
        return DQN(
            "LLMPolicy",
            env,
            learning_rate=config.learning_rate if config.learning_rate is not None else 1e-4,
            buffer_size=config.buffer_size,
            learning_starts=config.learning_starts,
            train_freq=config.train_freq,
            gradient_steps=config.gradient_steps,
            target_update_interval=config.target_update_interval,
            exploration_fraction=config.exploration_fraction,
            exploration_final_eps=config.exploration_final_eps,
            n_steps=config.dqn_n_steps,
            alpha=config.dqn_alpha,
            beta=config.dqn_beta,
            distill_interval=config.distill_interval,
            distill_steps=config.distill_steps,
            distill_final_steps=config.distill_final_steps,
            **common,
        )
    return PPO(
        "LLMPolicy",
        env,
        learning_rate=config.learning_rate,
        n_steps=config.n_steps,
        n_epochs=config.n_epochs,
        ent_coef=config.ent_coef,
        target_entropy_of=config.target_entropy_of,
        min_action_prob=config.min_action_prob,
        kl_coef=config.kl_coef,
        target_kl=config.target_kl,
        micro_batch_size=config.micro_batch_size,
        advantage_estimator=config.advantage_estimator,
        critic_warmup_steps=config.critic_warmup_steps,
        fsdp=True if config.fsdp else None,  # None: as accelerate launch says
        **common,
    )


def load_agent(path: str | Path, env: Any = None, device: str = "auto") -> PPO | DQN:
    """A saved agent of either kind: ``config.json``'s format says which class reads it."""
    import json

    from gym_llm.rl.common.checkpoint import DQN_FORMAT

    config_file = Path(path) / "config.json"
    try:
        found = json.loads(config_file.read_text()).get("format")
    except (OSError, ValueError, AttributeError):
        found = None  # PPO.load names what is wrong with the file
    algo: type[PPO] | type[DQN] = DQN if found == DQN_FORMAT else PPO
    return algo.load(path, env=env, device=device)
