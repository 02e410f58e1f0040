"""Text-native environments, registered with Gymnasium as ``gym_llm/<Name>-v0``.

Importing ``gym_llm`` imports this module, so ``gym.make("gym_llm/KeywordBandit-v0")`` works after
``import gym_llm``. Entry points are strings: no env module is imported until an env is made.
"""

import gymnasium

# Guarded so that a second import (importlib.reload, a test re-importing) does not re-register.
if "gym_llm/KeywordBandit-v0" not in gymnasium.registry:
    gymnasium.register(
        id="gym_llm/KeywordBandit-v0",
        entry_point="gym_llm.envs.keyword_bandit:KeywordBanditEnv",
    )
