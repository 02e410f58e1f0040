"""Action values on the language model's frozen features: an MLP on standardised features.

Value learning off-policy (``gym_llm.DQN``) regresses ``Q(s, a)`` for every listed action from
the hidden state of the prompt's last token, taken below the LoRA layers (frozen: the same
numbers for a prompt all run long, so each distinct observation costs one pass). Those features
are ~99.9 % the same vector in every state (``gym_llm.policy.action_head``), so the head reads
them standardised, with a centre and a scale set once from the observations seen before
learning starts and fixed after (a moving input scale would change every Q-value without a
gradient step). Saved with the agent.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from gym_llm.policy.action_head import standardiser


class QHead(nn.Module):
    """``(n, d)`` features -> ``(n, K)`` action values.

    Args:
        hidden: the features' size (the LM's hidden size).
        n_actions: the number of listed actions.
        width: the MLP's hidden units (two hidden layers, ReLU; SB3's DQN ``net_arch`` is
            ``[64, 64]`` on small observations, the LM's features are ``hidden``-wide).
        device: where the weights live.
        zero_start: the values are the MLP's output less that of a frozen copy of its initial
            weights, so every value starts at exactly 0 and stays there until a reward is seen
            (with every reward 0 the TD target is 0 and no gradient reaches the weights), while
            the MLP learns from its random start as usual.
    """

    def __init__(
        self,
        hidden: int,
        n_actions: int,
        width: int = 256,
        device: torch.device | str | None = None,
        zero_start: bool = False,
    ) -> None:
        super().__init__()
        if width < 1 or n_actions < 1:
            raise ValueError(f"width and n_actions must be >= 1, got {width} and {n_actions}.")
        self.net = nn.Sequential(
            nn.Linear(hidden, width, device=device),
            nn.ReLU(),
            nn.Linear(width, width, device=device),
            nn.ReLU(),
            nn.Linear(width, n_actions, device=device),
        )
        #: ``zero_start``: the initial MLP, frozen, whose output is subtracted.
        self.start: nn.Sequential | None = None
        if zero_start:
            self.start = copy.deepcopy(self.net).requires_grad_(False)
        self.register_buffer("centre", torch.zeros(hidden, device=device))
        self.register_buffer("scale", torch.ones(hidden, device=device))
        self.register_buffer("calibrated", torch.zeros((), dtype=torch.bool, device=device))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        centre, scale = self.centre, self.scale
        assert isinstance(centre, torch.Tensor) and isinstance(scale, torch.Tensor)
        x = (features.float() - centre) / scale
        out: torch.Tensor = self.net(x)
        if self.start is not None:
            out = out - self.start(x)
        return out

    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any) -> None:
        if self.start is not None and not any(k.startswith(f"{prefix}start.") for k in state_dict):
            # saved without the zero start: its values were the MLP's own output
            for name, tensor in self.start.state_dict().items():
                state_dict[f"{prefix}start.{name}"] = torch.zeros_like(tensor)
        super()._load_from_state_dict(state_dict, prefix, *args)

    @property
    def is_calibrated(self) -> bool:
        return bool(self.calibrated)

    @torch.no_grad()
    def calibrate(self, features: torch.Tensor) -> None:
        """Set the input's centre and scale from ``(n, d)`` features of distinct observations.

        Raises:
            RuntimeError: already calibrated (moving the input scale would change every value).
        """
        if self.is_calibrated:
            raise RuntimeError("The Q head is calibrated already: its input scale stays fixed.")
        centre, scale = standardiser(features.float())
        self.centre.copy_(centre)  # type: ignore[operator]
        self.scale.copy_(scale)  # type: ignore[operator]
        self.calibrated.fill_(True)  # type: ignore[operator]
