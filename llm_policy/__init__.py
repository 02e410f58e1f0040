"""gym_llm: fine-tune LLM agents with online RL in any Gymnasium environment.

The code is grouped by what it does, in the order data flows: ``policy`` (act: observation text
-> replies, exact token log-probs, values), ``rl`` (learn: text vec env, rollouts, losses, PPO,
Agent, SFT), ``evaluation`` (score, exactly where possible), ``experiments`` (end-to-end runs)
and ``cli`` (the command line). Imports point one way along that list.

>>> import gym_llm
>>> env = gym_llm.make_text_env("gym_llm/KeywordBandit-v0", n_envs=2)
>>> env.num_envs
2

The main loop, with the embedded model (downloads nothing)::

    model = gym_llm.PPO("LLMPolicy", env, n_steps=8, batch_size=16,
                        policy_kwargs={"model": "smollm2-135m"})
    model.learn(256)
"""

import importlib
from typing import TYPE_CHECKING, Any

import gym_llm.envs  # noqa: F401  (registers gym_llm/* env ids)
from gym_llm.spaces import TextActions, TextObservations

if TYPE_CHECKING:
    from gym_llm.policy.config import PolicyConfig
    from gym_llm.policy.llm_policy import LLMPolicy
    from gym_llm.policy.models import MODEL_REGISTRY, ModelSpec, load_model
    from gym_llm.rl.agent import Agent
    from gym_llm.rl.common.vec_env import TextVecEnv, make_text_env
    from gym_llm.rl.dqn.config import DQNConfig
    from gym_llm.rl.dqn.dqn import DQN
    from gym_llm.rl.ppo import PPO, PPOConfig

#: Where each name lives; loaded on first use, so that ``import gym_llm.wrappers`` or
#: ``import gym_llm.envs`` does not pull in torch, transformers and SB3.
_LAZY = {
    "LLMPolicy": "gym_llm.policy.llm_policy",
    "PolicyConfig": "gym_llm.policy.config",
    "MODEL_REGISTRY": "gym_llm.policy.models",
    "ModelSpec": "gym_llm.policy.models",
    "load_model": "gym_llm.policy.models",
    "Agent": "gym_llm.rl.agent",
    "PPO": "gym_llm.rl.ppo",
    "PPOConfig": "gym_llm.rl.ppo.config",
    "DQN": "gym_llm.rl.dqn.dqn",
    "DQNConfig": "gym_llm.rl.dqn.config",
    "TextVecEnv": "gym_llm.rl.common.vec_env",
    "make_text_env": "gym_llm.rl.common.vec_env",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gym_llm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__version__ = "0.1.0"

__all__ = [  # noqa: RUF022  (grouped by what the names do, as Gymnasium does)
    # Learning
    "PPO",
    "PPOConfig",
    "DQN",
    "DQNConfig",
    "Agent",
    # Acting
    "LLMPolicy",
    "PolicyConfig",
    "MODEL_REGISTRY",
    "ModelSpec",
    "load_model",
    # Text envs
    "TextActions",
    "TextObservations",
    "TextVecEnv",
    "make_text_env",
    "__version__",
]
