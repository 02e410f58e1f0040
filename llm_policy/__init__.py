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

from gym_llm import _aliases

_aliases.install()  # old module paths (gym_llm.exact, gym_llm.sft, ...) still import

import gym_llm.envs  # noqa: E402, F401  (registers gym_llm/* env ids)
from gym_llm.policy.llm_policy import LLMPolicy  # noqa: E402
from gym_llm.policy.models import MODEL_REGISTRY, ModelSpec, load_model  # noqa: E402
from gym_llm.rl.agent import Agent  # noqa: E402
from gym_llm.rl.ppo import PPO  # noqa: E402
from gym_llm.rl.vec_env import TextVecEnv, make_text_env  # noqa: E402
from gym_llm.spaces import TextActions, TextObservations  # noqa: E402

__version__ = "0.1.0"

__all__ = [  # noqa: RUF022  (grouped by what the names do, as Gymnasium does)
    # Learning
    "PPO",
    "Agent",
    # Acting
    "LLMPolicy",
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
