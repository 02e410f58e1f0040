"""PPO for language-model policies: the algorithm (:mod:`.ppo`) and its settings
(:mod:`.config`), the rollout buffer, advantage estimators and the loss (pure functions)."""

from gym_llm.rl.common.rates import FULL_FINETUNE_LEARNING_RATE, LORA_LEARNING_RATE
from gym_llm.rl.ppo.config import DEFAULT_N_EPOCHS, PPOConfig, default_learning_rate
from gym_llm.rl.ppo.ppo import PPO

__all__ = [
    "DEFAULT_N_EPOCHS",
    "FULL_FINETUNE_LEARNING_RATE",
    "LORA_LEARNING_RATE",
    "PPO",
    "PPOConfig",
    "default_learning_rate",
]
