"""The LM learns too: the values' posterior distilled into the LoRA policy's choice distribution.

``DQN`` acts with an MLP on the frozen model's features; the artefact users want is a language
model that acts well by itself. A distillation step samples distinct observations from the replay
buffer, takes the posterior ``softmax(beta · log p_LM + Q / alpha)`` there as the target, and
lowers the cross-entropy ``-sum_a target(a) log pi_LM(a | s)`` of the LM's own choice distribution
(adapter on) by one step of the policy's optimizer, the update starting from the cached frozen
layers as PPO's does. ``model.policy`` then plays without the values: ``model.policy.predict``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gym_llm.rl.dqn.targets import posterior_logits


def posterior_cross_entropy(log_pi: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over rows of ``-sum_a target(a) log pi(a)``; ``(n, K)`` each. Zero-probability actions
    of the target contribute nothing, even where ``log pi`` is ``-inf``."""
    terms = torch.where(target > 0, target * log_pi, torch.zeros_like(log_pi))
    return -terms.sum(-1).mean()


def distill_steps(model: Any, steps: int, batch_size: int, rng: np.random.Generator) -> float:
    """``steps`` optimizer steps of the LM towards the posterior on replayed observations; the
    last step's loss (NaN if every step was skipped for a non-finite loss)."""
    policy = model.policy
    distinct = np.array(model.replay_buffer.distinct_observations(), dtype=object)
    if len(distinct) == 0:
        return float("nan")
    policy.calibrate_action_head(list(distinct))  # once, before its first step (if it has one)
    trainable = [p for p in policy.parameters() if p.requires_grad]
    last = float("nan")
    policy.set_training_mode(True)
    try:
        for _ in range(steps):
            chosen = list(distinct[rng.permutation(len(distinct))[:batch_size]])
            log_prior, features = model.prior_and_features(chosen)
            with torch.no_grad():
                target = torch.softmax(
                    posterior_logits(model.q_net(features), log_prior, model.alpha, model.beta), -1
                )
            states = policy.trunk_states(chosen) if policy.uses_rollout_states else None
            actions = [np.zeros(1, dtype=np.int64)] * len(chosen)  # unused: every action is scored
            evaluation = policy.evaluate_actions(chosen, actions, states)
            assert evaluation.choice_log_probs is not None
            loss = posterior_cross_entropy(evaluation.choice_log_probs, target.to(policy.device))
            if not torch.isfinite(loss):
                model.skipped_steps += 1
                continue
            policy.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, model.max_grad_norm)
            policy.optimizer.step()
            last = loss.item()
    finally:
        policy.set_training_mode(False)
    return last
