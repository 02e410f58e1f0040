"""Text-native environments, registered with Gymnasium as ``gym_llm/<Name>-v0``.

Importing ``gym_llm`` imports this module, so ``gym.make("gym_llm/KeywordBandit-v0")`` works after
``import gym_llm``. Entry points are strings: no env module is imported until an env is made.

``KeywordBandit`` speaks text itself. ``GuessNumber`` and ``TextMaze`` keep numeric (Discrete)
spaces so classic agents can play them too, and describe themselves
(:class:`~gym_llm.spaces.DescribesItself`) so the text wrappers need no arguments:
``gym_llm.make_text_env("gym_llm/GuessNumber-v0")``.
"""

import gymnasium

from gym_llm.envs.ecosystems import gem_env, textarena_env, textworld_express_env
from gym_llm.envs.text_game import TextGameEnv
from gym_llm.spaces import DescribesItself, self_description

__all__ = [
    "DescribesItself",
    "TextGameEnv",
    "gem_env",
    "self_description",
    "textarena_env",
    "textworld_express_env",
]

_ENVS: dict[str, tuple[str, int | None]] = {
    "gym_llm/KeywordBandit-v0": ("gym_llm.envs.keyword_bandit:KeywordBanditEnv", None),
    # Episodes end by themselves after max_guesses: no step limit needed.
    "gym_llm/GuessNumber-v0": ("gym_llm.envs.guess_number:GuessNumberEnv", None),
    "gym_llm/TextMaze-v0": ("gym_llm.envs.text_maze:TextMazeEnv", 50),
    "gym_llm/HighLow-v0": ("gym_llm.envs.high_low:HighLowEnv", None),
    # Its tasks cut their own episodes (``horizon``): gym.make(..., task="walk-p0-s0").
    "gym_llm/Family-v0": ("gym_llm.envs.family:FamilyEnv", None),
}

# Guarded so that a second import (importlib.reload, a test re-importing) does not re-register.
for _id, (_entry_point, _max_steps) in _ENVS.items():
    if _id not in gymnasium.registry:
        gymnasium.register(id=_id, entry_point=_entry_point, max_episode_steps=_max_steps)
