"""Pure tensor math of the policy's distributions: sampling, log-probs and entropies.

No model here: each function takes logits or log-probs and is tested on its own. Log-softmax is
taken in float32 whatever the model's dtype, so the rollout and the update compute the same
numbers (invariant 1).
"""

from __future__ import annotations

import torch


def sample(log_probs: torch.Tensor) -> torch.Tensor:
    """One token per row from ``exp(log_probs)`` by inverting the CDF with one uniform per row.

    Exact sampling from the categorical (the cumulative sum is float64, so even tokens of mass
    1e-12 get their share), and cheaper than ``torch.multinomial``, which draws one exponential
    per vocabulary entry: for 8 rows x 49k tokens on the 2-core CPU it was measured on, 4.2-4.9 ms
    (0.7 ms when the allocator reuses its buffers instead of page-faulting new ones) against
    9.6-9.9 ms.
    """
    cdf = log_probs.exp().cumsum(-1, dtype=torch.float64)
    u = torch.rand((cdf.shape[0], 1), dtype=cdf.dtype, device=cdf.device) * cdf[:, -1:]
    # The first index whose cumulative mass exceeds u; a zero-mass token is never the first.
    token = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    return token.clamp(max=cdf.shape[-1] - 1)


def categorical_evaluation(
    logits: torch.Tensor, index: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Choice mode: ``(n, 1)`` log-prob of action ``index[i]`` under ``softmax(logits[i])``, the
    ``(n,)`` entropy of each row's distribution and the ``(n, K)`` log-probs of every action."""
    log_dist = torch.log_softmax(logits, dim=-1)
    log_prob = log_dist.gather(-1, index.unsqueeze(-1))
    entropy = -(log_dist.exp() * log_dist).sum(-1)
    return log_prob, entropy, log_dist


def token_evaluation(
    logits: torch.Tensor, reply: torch.Tensor, reply_mask: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Generate mode: per-token log-probs of ``reply`` ``(n, T)`` under
    ``softmax(logits / temperature)`` (zero at padding), which entries are real tokens, and
    each reply's mean per-token entropy ``(n,)``.

    ``logits[:, t]`` predicts ``reply[:, t]`` (the logits at the last prompt position, then at
    every fed reply token); columns past ``T`` are ignored.
    """
    log_dist = torch.log_softmax(logits[:, : reply.shape[1]].float() / temperature, dim=-1)
    log_prob = log_dist.gather(-1, reply.unsqueeze(-1)).squeeze(-1)
    token_entropy = -(log_dist.exp() * log_dist).sum(-1)
    valid = reply_mask.bool()
    entropy = (token_entropy * valid).sum(-1) / valid.sum(-1).clamp(min=1)
    return log_prob * valid, valid, entropy
