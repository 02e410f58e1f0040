"""PPO for language-model policies: the algorithm (:mod:`.ppo`), its rollout and update loops,
the rollout buffer, advantage estimators and losses (pure), and its checkpointing."""

from gym_llm.rl.ppo.ppo import (
    FULL_FINETUNE_LEARNING_RATE,
    LORA_LEARNING_RATE,
    PPO,
    default_learning_rate,
)

__all__ = ["FULL_FINETUNE_LEARNING_RATE", "LORA_LEARNING_RATE", "PPO", "default_learning_rate"]
