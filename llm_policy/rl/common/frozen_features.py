"""Each observation's prior and features from the frozen model, computed once per run.

Value learning on the LM's features (``gym_llm.DQN``, and PPO's ``advantage_estimator="q"``)
reads, per observation, the listed actions' log-probs with the adapter off and the last prompt
token's hidden state below the trainable layers (:meth:`LLMPolicy.prior_choice_scores`).
Neither changes while the adapter trains, so they are kept per observation text: every replayed
step after the first costs a dictionary look-up. A learner that reads the features alone (PPO's
action values) takes them from the trunk cache, which the rollout has just filled, instead of
running the model again with the adapter off.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

#: Distinct observations whose features and prior are kept (~2.5 KB each for SmolLM2-135M).
FEATURE_CACHE_LIMIT = 200_000
#: Observations per model call when computing new ones.
_BATCH = 32


class FrozenFeatures:
    """``features(observations)`` -> ``(n, K)`` prior log-probs and ``(n, d)`` features.

    Args:
        policy: an :class:`~gym_llm.policy.llm_policy.LLMPolicy` in choice mode with LoRA.
        limit: distinct observations kept; past it the cache starts over.
        prior: whether the prior log-probs are wanted; ``False``: where the policy keeps a
            trunk cache, the features come from it (the same hidden state, without a pass
            through the layers above) and the prior is zeros, not computed.
    """

    def __init__(self, policy: Any, limit: int = FEATURE_CACHE_LIMIT, prior: bool = True) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1 observation, got {limit}.")
        self.policy, self.limit, self.prior = policy, limit, prior
        self._rows: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def __call__(self, observations: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        keys = [str(o) for o in observations]
        todo = list(dict.fromkeys(k for k in keys if k not in self._rows))
        if len(self._rows) + len(todo) > self.limit:
            self._rows.clear()
            todo = list(dict.fromkeys(keys))
        for start in range(0, len(todo), _BATCH):
            batch = todo[start : start + _BATCH]
            log_prior, features = self._compute(batch)
            for i, key in enumerate(batch):
                self._rows[key] = (log_prior[i], features[i])
        rows = [self._rows[k] for k in keys]
        return torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows])

    def _compute(self, observations: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        if self.prior or self.policy.trunk_cache is None:
            return self.policy.prior_choice_scores(observations)  # type: ignore[no-any-return]
        with torch.inference_mode(False), torch.no_grad():
            states = self.policy.trunk_states(observations)
            features = torch.stack([s.prompt[-1] for s in states]).clone()
        log_prior = torch.zeros(
            (len(observations), len(self.policy.actions_list)), device=features.device
        )
        return log_prior, features

    def state_dict(self, observations: Sequence[str]) -> dict[str, Any]:
        """The kept rows of ``observations`` (those computed so far), for a checkpoint: a
        resumed run then reads the same bits instead of recomputing them in other batches, whose
        float sums differ in the last bits."""
        kept = [o for o in dict.fromkeys(observations) if o in self._rows]
        rows = [self._rows[o] for o in kept]
        if not rows:
            return {"texts": [], "log_prior": torch.zeros(0), "features": torch.zeros(0)}
        return {
            "texts": kept,
            "log_prior": torch.stack([r[0] for r in rows]).cpu(),
            "features": torch.stack([r[1] for r in rows]).cpu(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The rows of :meth:`state_dict` kept again, on the policy's device."""
        device = self.policy.device
        for i, text in enumerate(state["texts"]):
            self._rows[text] = (state["log_prior"][i].to(device), state["features"][i].to(device))
