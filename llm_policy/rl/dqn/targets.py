"""The TD target and the acting distribution of value learning with an LM prior (pure torch).

The agent acts with the posterior ``pi(a | s) ∝ p_LM(a | s)^beta · exp(Q(s, a) / alpha)`` over the
listed actions (Yan et al., ICLR 2025, "Efficient Reinforcement Learning with Large Language Model
Priors"): ``beta = 0`` is plain Q-learning on the LM's features, ``beta = 1`` keeps the prior as a
KL reference. Its greedy action, ``argmax_a beta · log p_LM(a | s) + Q(s, a) / alpha``, is the
action both acting and bootstrapping use, so the values learned are those of the policy played.
"""

from __future__ import annotations

import torch


def posterior_logits(
    q: torch.Tensor, log_prior: torch.Tensor, alpha: float, beta: float
) -> torch.Tensor:
    """``(n, K)`` logits of ``p_LM^beta · exp(Q / alpha)``: ``beta · log p_LM + Q / alpha``.

    Equivalent to ``log(softmax(log_prior)**beta * exp(q / alpha))`` up to a constant per row.
    """
    if alpha <= 0:
        raise ValueError(f"alpha (the posterior's temperature) must be > 0, got {alpha}.")
    if beta == 0:  # no prior: -inf log-probs (a prior that rules an action out) must not leak in
        return q / alpha
    return beta * log_prior + q / alpha


def n_step_returns(
    rewards: torch.Tensor, terminated: torch.Tensor, ended: torch.Tensor, gamma: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Discounted sums of up to ``n`` rewards, cut at the first episode end.

    ``rewards``, ``terminated`` and ``ended`` are ``(B, n)``: the rewards of ``n`` consecutive
    steps of one env from each sampled step, whether the episode terminated at each step, and
    whether it ended there at all (terminated or truncated). Returns ``(B,)`` each: the return
    ``sum_k gamma^k r_k`` over the steps up to and including the first end, the discount of the
    bootstrap ``gamma^m`` (``m`` steps summed; 0 where the episode terminated, so nothing follows
    a true end; a truncated episode still bootstraps from its last observation), and the index
    ``m - 1`` of the step whose next observation is bootstrapped from.

    Naively, per row: ``G = 0; for k in range(n): G += gamma**k * r[k]; if ended[k]: break``.
    """
    if rewards.shape != terminated.shape or rewards.shape != ended.shape or rewards.dim() != 2:
        raise ValueError(
            f"rewards, terminated and ended must share one (B, n) shape, got "
            f"{tuple(rewards.shape)}, {tuple(terminated.shape)}, {tuple(ended.shape)}."
        )
    n = rewards.shape[1]
    ended_b = ended.bool() | terminated.bool()
    # steps after the first end of each row do not count
    before_end = torch.cumsum(ended_b.long(), dim=1) - ended_b.long() == 0
    powers = gamma ** torch.arange(n, dtype=rewards.dtype, device=rewards.device)
    returns = (rewards * powers * before_end).sum(1)
    steps = before_end.sum(1)  # m: how many steps were summed (1..n)
    last = steps - 1
    terminal = terminated.bool().gather(1, last.unsqueeze(1)).squeeze(1)
    discount = torch.where(terminal, torch.zeros_like(returns), gamma ** steps.to(rewards.dtype))
    return returns, discount, last


def double_q_target(
    returns: torch.Tensor,
    discount: torch.Tensor,
    next_q_online: torch.Tensor,
    next_q_target: torch.Tensor,
    next_log_prior: torch.Tensor,
    alpha: float,
    beta: float,
) -> torch.Tensor:
    """``G + gamma^m · Q_target(s', a*)`` with ``a*`` the online posterior's greedy action in
    ``s'`` (double Q-learning, van Hasselt et al. 2016: the online network picks, the target
    network scores, which removes max's upward bias). ``beta = 0``: ``a* = argmax Q_online``.

    A row with ``discount == 0`` (the episode terminated) is its return alone, whatever the
    next-state values hold, so a non-finite value after a true end cannot reach the target.
    """
    best = posterior_logits(next_q_online, next_log_prior, alpha, beta).argmax(-1, keepdim=True)
    bootstrap = next_q_target.gather(-1, best).squeeze(-1)
    follows = discount != 0
    return returns + torch.where(follows, discount * bootstrap, torch.zeros_like(returns))


def advantage_learning(
    target: torch.Tensor, q_now: torch.Tensor, actions: torch.Tensor, gap_increase: float
) -> torch.Tensor:
    """The TD ``target`` of each ``(state, action)`` lowered by ``gap_increase`` times how far the
    action's value is below its state's best, both read from ``q_now`` (``(n, K)``, the target
    copy's values of the states): the advantage-learning operator of Bellemare et al. (AAAI
    2016, "Increasing the Action Gap"). Its greedy moves are Q-learning's, and a move's gap to
    the best grows ``1 / (1 - gap_increase)``-fold, so values whose error is larger than the
    task's own gaps (a wasted step that costs one step of discount) still rank the moves right.

    >>> q_now = torch.tensor([[1.0, 0.5]])
    >>> advantage_learning(torch.tensor([0.5, 0.5]), q_now.repeat(2, 1), torch.tensor([0, 1]), 0.5)
    tensor([0.5000, 0.2500])
    """
    if not 0 <= gap_increase < 1:
        raise ValueError(f"gap_increase must be in [0, 1), got {gap_increase}.")
    taken = q_now.gather(-1, actions[:, None])[:, 0]
    return target - gap_increase * (q_now.max(-1).values - taken)
