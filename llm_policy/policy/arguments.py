"""Checks of ``LLMPolicy``'s arguments, with messages that say how to fix them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from gymnasium import spaces

from gym_llm.policy.action_head import check_prior_scale
from gym_llm.spaces import NOT_TEXT_HELP

ActionMode = Literal["choice", "generate"]
Normalization = Literal["sum", "mean"]
#: Generate mode's replies: any text, one of the listed actions (:mod:`gym_llm.policy.constraints`),
#: or a match of a pattern (:mod:`gym_llm.grammar`); ``"auto"``: the list where the env
#: lists its actions, else the pattern where there is one.
ReplyConstraintMode = Literal["auto", "off", "action", "pattern"]


def check_arguments(
    observation_space: spaces.Space[Any],
    action_space: spaces.Space[Any],
    model: Any,
    tokenizer: Any,
    temperature: float,
) -> None:
    if not isinstance(observation_space, spaces.Text) or not isinstance(action_space, spaces.Text):
        raise TypeError(
            f"LLMPolicy got observation space {observation_space} and action space "
            f"{action_space}. " + NOT_TEXT_HELP
        )
    if not isinstance(model, str):
        if not hasattr(model, "config") or not callable(model):
            raise TypeError(
                "policy_kwargs['model'] must be a registry name, a path or a Hugging Face "
                f"causal LM object; got {type(model).__name__}, which is not a model object "
                "(it has no .config or is not callable)."
            )
        if tokenizer is None:
            raise ValueError(
                "LLMPolicy(model=<model object>) needs its tokenizer too: pass tokenizer=..."
            )
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}.")


def resolve_mode(
    action_mode: ActionMode | None, listed: bool, choice_normalization: Normalization
) -> ActionMode:
    """The action mode asked for (``None``: choice when the env lists actions), checked."""
    if action_mode is None:
        action_mode = "choice" if listed else "generate"
    if action_mode not in ("choice", "generate"):
        raise ValueError(f"action_mode must be 'choice' or 'generate', got {action_mode!r}.")
    if action_mode == "choice" and not listed:
        raise ValueError(
            "action_mode='choice' needs an action space that lists the valid actions "
            "(gym_llm.spaces.TextActions with actions=...); use action_mode='generate'."
        )
    if choice_normalization not in ("sum", "mean"):
        raise ValueError(
            f"choice_normalization must be 'sum' or 'mean', got {choice_normalization!r}."
        )
    return action_mode


def check_reply_constraint(constraint: str, action_mode: str | None) -> None:
    """``reply_constraint`` is generate mode's: choice mode's replies are the actions already."""
    if constraint not in ("auto", "off", "action", "pattern"):
        raise ValueError(
            f"reply_constraint must be 'auto', 'off', 'action' or 'pattern', got {constraint!r}."
        )
    if constraint in ("action", "pattern") and scores_listed_actions(action_mode or "choice"):
        raise ValueError(
            f"reply_constraint={constraint!r} shapes generate mode's replies; choice mode scores "
            "the listed actions already: set action_mode='generate' or leave it 'off'."
        )


def resolve_reply_constraint(
    constraint: str,
    action_mode: str,
    lists_actions: bool,
    pattern: str | None = None,
    user_pattern: bool = False,
) -> Literal["off", "action", "pattern"]:
    """The constraint in effect: ``"auto"`` decodes generate mode's replies as matches of the
    pattern a user gave (``user_pattern``), else among the listed actions wherever the env lists
    them (a fixed or a per-state list), else as matches of the env's pattern, and lets free text
    be.

    >>> resolve_reply_constraint("auto", "generate", lists_actions=True)
    'action'
    >>> resolve_reply_constraint("auto", "generate", lists_actions=False)
    'off'
    >>> resolve_reply_constraint("auto", "generate", lists_actions=False, pattern="[a-z]{5}")
    'pattern'
    >>> resolve_reply_constraint("auto", "generate", True, "[a-z ]{0,40}. Answer: (hit|stick)", True)
    'pattern'
    >>> resolve_reply_constraint("auto", "choice", lists_actions=True)  # replies are actions
    'off'
    >>> resolve_reply_constraint("off", "generate", lists_actions=True)
    'off'
    """
    check_reply_constraint(constraint, action_mode)
    if constraint == "pattern" and pattern is None:
        raise ValueError(
            "reply_constraint='pattern' needs a pattern: pass reply_pattern=r'...' (a regular "
            "expression every reply must match in full) or use an env whose TextActions "
            "declares one (TextActions(pattern=...))."
        )
    if constraint == "auto":
        if action_mode != "generate":
            return "off"
        if pattern is not None and (user_pattern or not lists_actions):
            return "pattern"
        return "action" if lists_actions else "off"
    return "action" if constraint == "action" else "pattern" if constraint == "pattern" else "off"


def check_mode(action_mode: str) -> None:
    if action_mode not in ("choice", "generate"):
        raise ValueError(f"mode must be 'choice' or 'generate', got {action_mode!r}.")


def scores_listed_actions(action_mode: str) -> bool:
    """Whether a policy in ``action_mode`` scores the env's listed actions (choice mode): what
    a Q head, a target update and the choice calibration need, and an env without a list lacks."""
    return action_mode == "choice"


def check_mode_settings(
    action_mode: str,
    choice_calibration: bool,
    action_head: bool,
    action_prior_scale: float,
    constrained: bool = False,
) -> None:
    """The settings that belong to one action mode, refused in the other."""
    if choice_calibration and not scores_listed_actions(action_mode) and not constrained:
        raise ValueError(
            "choice_calibration needs mode='choice' (or generate mode with "
            "reply_constraint='action')."
        )
    check_prior_scale(action_prior_scale, not scores_listed_actions(action_mode) and action_head)


def lists_a_choice(action_mode: str, action_head: bool) -> bool:
    """Whether a policy in ``action_mode`` decides among listed actions, so that an entropy
    target or a probability floor has a distribution to act on: choice mode, or generate mode
    with the action head (whose action words name each action's tokens)."""
    return scores_listed_actions(action_mode) or action_head


@dataclass
class Sampling:
    """How the policy turns scores into actions, shared by the policy (which records and may
    change them: ``policy.temperature = 0.5``) and its action mode's strategy (which reads them
    at every call)."""

    #: Over tokens in generate mode, over action scores in choice mode.
    temperature: float
    #: Generate mode: the reply budget.
    max_new_tokens: int
    #: Generate mode: decode into a KV cache allocated once with room for the reply.
    reserve_kv_cache: bool
    #: Choice mode: score each distinct observation once per weights version in rollouts.
    memoize_choice_scores: bool
    #: Choice mode: ``"sum"`` of candidate token log-probs, or per-token ``"mean"``.
    choice_normalization: str
