"""The NaN guard: an optimizer step whose loss, gradient or value is not finite never reaches the
weights; it is counted, named in the logs, and too many in a row stop the run with a message that
says where the last checkpoint is and what usually causes it."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

from stable_baselines3.common.logger import Logger


class NonFiniteTrainingError(FloatingPointError):
    """Too many optimizer steps in a row had a non-finite loss, gradient or value."""


class NanGuard:
    """Counts skipped optimizer steps over a run and in a row (a part of :class:`gym_llm.PPO`)."""

    def __init__(self, max_consecutive_skips: int) -> None:
        if max_consecutive_skips < 1:
            raise ValueError(f"max_consecutive_skips must be >= 1, got {max_consecutive_skips}.")
        #: The guard stops training after this many skipped steps in a row.
        self.max_consecutive_skips = max_consecutive_skips
        #: Optimizer steps skipped over the run (``train/skipped_steps``).
        self.skipped_steps = 0
        self.consecutive = 0

    def passed(self) -> None:
        """A step reached the weights: the count in a row starts again."""
        self.consecutive = 0

    def skip(
        self,
        cause: str,
        observations: Sequence[str],
        logger: Logger,
        last_checkpoint: Path | None,
    ) -> None:
        """Count a skipped step, say which batch caused it, and stop the run after
        ``max_consecutive_skips`` in a row."""
        self.skipped_steps += 1
        self.consecutive += 1
        where = last_checkpoint if last_checkpoint is not None else "none saved yet"
        first = observations[0] if observations else ""
        message = (
            f"Skipped an optimizer step: non-finite {cause} in a batch of {len(observations)} "
            f"turns (first observation: {first[:160]!r}). Skipped {self.skipped_steps} so far, "
            f"{self.consecutive} in a row."
        )
        logger.record("train/skipped_cause", message, exclude=("stdout", "csv", "json"))
        if self.consecutive >= self.max_consecutive_skips:
            raise NonFiniteTrainingError(
                f"Training stopped: {self.consecutive} optimizer steps in a row had a "
                f"non-finite {cause}; no step with a non-finite value reached the weights. "
                f"Last checkpoint: {where}. Usual causes: a learning rate too high "
                "(train/learning_rate), an env returning huge rewards (scale them with "
                "reward_scale), fp16 overflow (use bf16 or fp32). Resume from the checkpoint "
                "with a lower learning rate."
            )
        warnings.warn(message, RuntimeWarning, stacklevel=4)
