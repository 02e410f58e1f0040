"""Make any Gymnasium env text-in/text-out: observations as text, replies parsed into actions."""

from gym_llm.wrappers.action_parser import ActionParserWrapper
from gym_llm.wrappers.builtin_envs import BUILTIN_ENVS, EnvText
from gym_llm.wrappers.conversation import ConversationWrapper
from gym_llm.wrappers.count_bonus import CountBonusWrapper
from gym_llm.wrappers.formatters import format_observation
from gym_llm.wrappers.parsing import DiscreteParser, NumericParser, ParseResult
from gym_llm.wrappers.resolver import ActionResolver
from gym_llm.wrappers.text_observation import TextObservationWrapper
from gym_llm.wrappers.valid_actions import ValidActionsWrapper

__all__ = [
    "BUILTIN_ENVS",
    "ActionParserWrapper",
    "ActionResolver",
    "ConversationWrapper",
    "CountBonusWrapper",
    "DiscreteParser",
    "EnvText",
    "NumericParser",
    "ParseResult",
    "TextObservationWrapper",
    "ValidActionsWrapper",
    "format_observation",
]
