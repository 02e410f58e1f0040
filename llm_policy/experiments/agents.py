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
    """``PPO`` (``config.algo == "ppo"``) or ``DQN`` with the config's section, built as a user
    would build it."""
    algo: type[PPO] | type[DQN] = DQN if config.algo == "dqn" else PPO
    return algo(
        "LLMPolicy",
        env,
        config.dqn if config.algo == "dqn" else config.ppo,  # type: ignore[arg-type]
        policy_kwargs=config.policy_kwargs(),
        tensorboard_log=str(run_dir / "tensorboard"),
        seed=config.seed,
        device=str(resolve_device(config.device)),
        verbose=verbose,
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
