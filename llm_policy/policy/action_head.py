"""A linear action head on centred features: the part of the state that tells states apart.

Measured on the task family (``benchmarks/studies/diagnose_learning.py``, SmolLM2-135M): the last prompt
token's final hidden state is 99.9 % cosine-similar across a task's states (norm ~56, the
state-dependent part 0.5-1.8), and so the LoRA weights' gradient of an action's logit is 99.2-99.9 %
the same vector in every state. States that need different actions then pull the weights in
opposite directions and cancel: one ideal gradient step raises the right action's margin by only
1-6 % of what the same step would do for one state alone ("the policy explores and does not
move"). A linear head reading the *centred* features sees only what differs between states (the
same ideal step: 13-59 % efficiency), and a ridge probe on them finds the right action of every
state of the relational tasks.

The head adds ``W (h - centre) / scale`` to the choice logits. ``W`` starts at zero, so the
policy starts as the LM's prior; ``centre`` and ``scale`` are set once from the distinct
observations of the first rollout, before the first optimizer step (while ``W`` is zero, so no
logit changes), and then stay fixed: moving them later would shift every state's logits without
a gradient step. They are saved with the agent.
"""

from __future__ import annotations

import torch
from torch import nn


def standardiser(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(centre, scale)`` of ``(n, d)`` features: the mean over rows, and a per-dimension
    spread floored by the mean spread (``sqrt(var + mean(var))``), so that a dimension that
    barely varies among the few observations of one rollout is not blown up to unit size.

    >>> centre, scale = standardiser(torch.tensor([[1.0, 5.0], [3.0, 5.0]]))
    >>> centre.tolist(), [round(s, 3) for s in scale.tolist()]
    ([2.0, 5.0], [1.225, 0.707])
    """
    if features.ndim != 2 or features.shape[0] < 1:
        raise ValueError(f"features must be (n >= 1, d), got shape {tuple(features.shape)}.")
    x = features.double()
    centre = x.mean(0)
    var = x.var(0, unbiased=False)
    floor = var.mean()
    if floor <= 0:  # one distinct observation: nothing varies yet, keep the raw scale
        floor = x.pow(2).mean()
    scale = (var + floor).sqrt()
    return centre.to(features.dtype), scale.to(features.dtype)


def choice_extras(
    action_mode: str,
    action_head: bool | None,
    choice_calibration: bool | None,
    centred_critic: bool | None,
    frozen_below: bool = True,
    per_state: bool = False,
    listed: bool = True,
    constrained: bool = False,
    own_words: bool = True,
) -> tuple[bool, bool, bool]:
    """``(action_head, choice_calibration, centred_critic)`` as the policy uses them.

    ``None`` means the default: the calibration is on in choice mode, and so is the head when
    frozen layers lie below the trainable ones (``frozen_below``: the head reads their output,
    which training leaves in place); both are off in generate mode, where replies are free text
    with no fixed actions to score. There the head can be asked for when the env lists its
    actions (``listed``): it then adds to the logits of each action's word tokens
    (:mod:`gym_llm.policy.action_words`); the calibration stays choice mode's. They became the
    default because together they reached the target on the task family's tuning split where
    the plain policy reached it on no task, and the calibration alone takes the policy out of a
    near-certain prior (``benchmarks/RESULTS.md``). When every layer trains, the head would
    read features that move under it: on a tiny fully fine-tuned model that made 5 of 20 seeds
    fall back after learning, so it stays off there unless asked for. In generate mode with
    constrained replies (``constrained``) the replies choose among the listed actions too, and
    the calibration is on by default there (a fixed list). Asking for the calibration in
    unconstrained generate mode is an error, as is the head there without listed actions, or a
    centred critic without the head whose features it reads.

    >>> choice_extras("choice", None, None, None)
    (True, True, True)
    >>> choice_extras("choice", None, None, None, frozen_below=False)
    (False, True, False)
    >>> choice_extras("generate", None, None, None)
    (False, False, False)
    >>> choice_extras("choice", None, None, None, per_state=True)  # lists change per state
    (False, False, False)
    >>> choice_extras("generate", True, None, None)  # the head on the actions' word tokens
    (True, False, True)
    >>> choice_extras("generate", True, None, None, constrained=True)  # replies are actions
    (True, True, True)
    >>> choice_extras("generate", None, None, None, constrained=True)
    (True, True, True)
    >>> choice_extras("generate", None, None, None, constrained=True, own_words=False)
    (False, True, False)
    """
    choice = action_mode == "choice"
    fixed = choice and not per_state  # per action index: meaningless when lists change
    # Constrained replies choose among the listed actions too: headed and calibrated the same way.
    among_fixed = fixed or (constrained and listed and not per_state)
    # In generate mode the head raises each action's own word tokens: on by default only where
    # every action has some (``own_words``; numbers such as 1 and 12 may share all of theirs).
    by_default = among_fixed and frozen_below and (choice or own_words)
    head = by_default if action_head is None else bool(action_head)
    calibration = among_fixed if choice_calibration is None else bool(choice_calibration)
    for name, on in (("action_head", head), ("choice_calibration", calibration)):
        if on and per_state:
            raise ValueError(
                f"{name} scores a fixed list of actions by index; this env brings its own list "
                "in every state (TextActions(per_state=True)). Leave it off."
            )
    if calibration and not choice and not constrained:
        raise ValueError(
            "choice_calibration needs choice mode (the env must list its actions), or generate "
            "mode with reply_constraint='action'; otherwise replies are free text, with no fixed "
            "set of actions to score."
        )
    if head and not choice and not listed:
        raise ValueError(
            "action_head in generate mode raises the listed actions' word tokens, and this env "
            "lists none (its action space is free text). List them (TextActions(actions=[...])) "
            "or leave action_head off."
        )
    critic = head if centred_critic is None else bool(centred_critic)
    if critic and not head:
        raise ValueError(
            "centred_critic reads the action head's centred features: pass action_head=True."
        )
    return head, calibration, critic


def check_prior_scale(scale: float, generating_with_head: bool) -> None:
    """``action_prior_scale`` is a share in ``[0, 1]``, and only the generate-mode head has
    action words whose odds it scales.

    >>> check_prior_scale(0.0, generating_with_head=False)
    Traceback (most recent call last):
    ...
    ValueError: action_prior_scale scales the LM's odds among the listed actions at the tokens the generate-mode action head raises: it needs action_mode='generate' and action_head=True (got 0.0 without them). Leave it at 1.0 otherwise.
    """
    if not 0.0 <= float(scale) <= 1.0:
        raise ValueError(f"action_prior_scale must be in [0, 1], got {scale}.")
    if float(scale) != 1.0 and not generating_with_head:
        raise ValueError(
            "action_prior_scale scales the LM's odds among the listed actions at the tokens the "
            "generate-mode action head raises: it needs action_mode='generate' and "
            f"action_head=True (got {scale} without them). Leave it at 1.0 otherwise."
        )


class ActionHead(nn.Module):
    """``(n, d)`` final features -> ``(n, K)`` additions to the choice logits (zero at start).

    Args:
        hidden: the features' size (the LM's hidden size).
        n_actions: the number of listed actions.
        device: where the weights live.
    """

    def __init__(self, hidden: int, n_actions: int, device: torch.device | str | None = None):
        super().__init__()
        self.linear = nn.Linear(hidden, n_actions, device=device, dtype=torch.float32)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)
        self.register_buffer("centre", torch.zeros(hidden, device=device))
        self.register_buffer("scale", torch.ones(hidden, device=device))
        self.register_buffer("calibrated", torch.zeros((), dtype=torch.bool, device=device))

    def standardise(self, features: torch.Tensor) -> torch.Tensor:
        """``(features - centre) / scale``: what tells the states apart, at unit size."""
        centre, scale = self.centre, self.scale
        assert isinstance(centre, torch.Tensor) and isinstance(scale, torch.Tensor)
        return (features.float() - centre) / scale

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear(self.standardise(features))
        return out

    @property
    def is_calibrated(self) -> bool:
        return bool(self.calibrated)

    @torch.no_grad()
    def calibrate(self, features: torch.Tensor) -> None:
        """Set ``centre`` and ``scale`` from ``(n, d)`` features of distinct observations.

        Raises:
            RuntimeError: the head has already left zero (then its logits would change).
        """
        if bool(self.linear.weight.any()) or bool(self.linear.bias.any()):
            raise RuntimeError(
                "The action head has trained already: its centre and scale are fixed (moving "
                "them would shift every state's logits without a gradient step)."
            )
        centre, scale = standardiser(features.float())
        self.centre.copy_(centre)  # type: ignore[operator]
        self.scale.copy_(scale)  # type: ignore[operator]
        self.calibrated.fill_(True)  # type: ignore[operator]
