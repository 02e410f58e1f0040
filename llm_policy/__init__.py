"""gym_llm: fine-tune LLM agents with online RL in any Gymnasium environment."""

import gym_llm.envs  # noqa: F401  (registers gym_llm/* env ids)
from gym_llm.agent import Agent
from gym_llm.models import MODEL_REGISTRY, ModelSpec, load_model
from gym_llm.policy import LLMPolicy
from gym_llm.ppo import PPO
from gym_llm.spaces import TextActions, TextObservations
from gym_llm.vec_env import TextVecEnv, make_text_env

__version__ = "0.1.0"

__all__ = [
    "MODEL_REGISTRY",
    "PPO",
    "Agent",
    "LLMPolicy",
    "ModelSpec",
    "TextActions",
    "TextObservations",
    "TextVecEnv",
    "__version__",
    "load_model",
    "make_text_env",
]
