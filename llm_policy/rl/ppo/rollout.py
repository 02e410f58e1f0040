"""What a rollout shows besides its turns: invalid replies, non-finite rewards, the novelty bonus
paid, cut observations and prompts, logged samples, and the per-state diagnostics that tell a
policy which ignores its input (``rollout/*`` in TensorBoard).

:class:`RolloutMonitor` is a part of :class:`gym_llm.PPO`: ``collect_rollouts`` calls
:meth:`~RolloutMonitor.start`, :meth:`~RolloutMonitor.observe` once per vector step and
:meth:`~RolloutMonitor.finish` at the end; what lasts across rollouts (each observation's first
greedy action, the one warning) stays in it.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from stable_baselines3.common.logger import Logger

from gym_llm.policy.outputs import PolicyStep
from gym_llm.rl.common.diagnostics import choice_diagnostics, input_ignored, sampled_diagnostics
from gym_llm.rl.common.distributed import global_sums


class RolloutMonitor:
    """Counts and diagnostics over one rollout at a time, for a policy that may list actions."""

    def __init__(self, n_logged_samples: int) -> None:
        #: (observation, reply, reward) examples written to TensorBoard per rollout.
        self.n_logged_samples = n_logged_samples
        #: Each observation's greedy action when a rollout first saw it (rollout/greedy_changed).
        self.first_greedy: dict[str, int] = {}
        #: Choice mode: each observation's action probabilities in the last rollout (the policy
        #: the update starts from; ``policy_update="target"`` tilts it).
        self.action_probs: dict[str, np.ndarray] = {}
        #: Share of replies the env could not parse in the last rollout.
        self.invalid_action_rate = float("nan")
        #: rollout/input_ignored has warned once in this process (it then only logs).
        self.warned_input_ignored = False
        self.start(None, 0)

    def start(self, listed: tuple[str, ...] | None, truncated_prompts: int) -> None:
        """A new rollout. ``listed``: the actions a generating policy's valid replies are
        parsed into (their diagnostics are estimated from samples), ``None`` otherwise;
        ``truncated_prompts``: the policy's count so far."""
        self.listed = listed
        self.invalid = self.nonfinite = self.cut_observations = 0
        self.bonus: float | None = None  # the novelty bonus paid, when the env pays one
        self.prompts_before = truncated_prompts
        self.samples: list[str] = []
        self.seen: list[str] = []
        self.probs: list[np.ndarray] = []
        self.parsed: list[tuple[str, int]] = []
        #: Constrained replies: the unmasked policy's mass on valid first tokens, per turn.
        self.valid_mass: list[float] = []

    def before_step(self, observations: np.ndarray, step: PolicyStep) -> None:
        """The policy's action distributions, where it scored listed actions."""
        if step.action_probs is not None:
            self.seen.extend(str(o) for o in observations)
            self.probs.append(step.action_probs)
        if step.valid_mass is not None:
            self.valid_mass.extend(float(m) for m in step.valid_mass)

    def observe(
        self,
        observations: np.ndarray,
        step: PolicyStep,
        rewards: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """One vector step's outcome (``rewards`` as the env paid them, before scaling)."""
        self.invalid += sum(not info.get("action_valid", True) for info in infos)
        if self.listed:
            self.parsed.extend(
                (str(obs), int(info["action"]))
                for obs, info in zip(observations, infos, strict=True)
                if info.get("action_valid", True)
                and isinstance(info.get("action"), int | np.integer)
                and not isinstance(info.get("action"), bool)
            )
        paid = [float(info["intrinsic_reward"]) for info in infos if "intrinsic_reward" in info]
        if paid:
            self.bonus = (self.bonus or 0.0) + sum(paid)
        self.cut_observations += sum(bool(info.get("observation_truncated")) for info in infos)
        bad = ~np.isfinite(rewards)
        if bad.any() and not self.nonfinite:  # once per rollout; the count is logged
            first = int(np.flatnonzero(bad)[0])
            warnings.warn(
                f"Env {first} returned a non-finite reward ({rewards[bad][0]}) after the reply "
                f"{step.replies[first]!r}: the turns of that episode are left out of the update "
                "(train/nonfinite_turns). Fix the env's reward.",
                RuntimeWarning,
                stacklevel=3,
            )
        self.nonfinite += int(bad.sum())
        if len(self.samples) < self.n_logged_samples:
            self.samples.append(
                f"**observation**\n\n    {observations[0]!s}\n\n**reply:** {step.replies[0]}"
                f"\n\n**reward:** {float(rewards[0]):g}"
            )

    def finish(
        self,
        logger: Logger,
        *,
        turns: int,
        processes: int,
        truncated_prompts: int,
        per_state: bool,
        num_timesteps: int,
        remedies: str,
    ) -> None:
        """Sum the counts over every process and log the rollout's figures; ``turns``: this
        process's replies in the rollout."""
        invalid, nonfinite, cut_observations, cut_prompts = (
            int(n)
            for n in global_sums(
                [
                    self.invalid,
                    self.nonfinite,
                    self.cut_observations,
                    truncated_prompts - self.prompts_before,
                ]
            )
        )
        self.invalid_action_rate = invalid / (turns * processes)
        if self.probs:
            width = max(p.shape[1] for p in self.probs)  # per-state lists differ in length
            all_probs = np.concatenate(
                [np.pad(p, ((0, 0), (0, width - p.shape[1]))) for p in self.probs]
            )
            self.action_probs = dict(zip(self.seen, all_probs, strict=True))
            # Across per-state action lists an index means different actions: no such alarm.
            figures = choice_diagnostics(self.seen, all_probs, self.first_greedy)
            figures["input_ignored"] = float(
                not per_state and input_ignored(figures, all_probs.shape[1])
            )
            self._report(logger, figures, num_timesteps, remedies)
        elif self.listed and self.parsed and not per_state:
            texts, actions = zip(*self.parsed, strict=True)
            n_actions = max(len(self.listed), max(actions) + 1)
            figures = sampled_diagnostics(texts, actions, n_actions)
            self._report(logger, figures, num_timesteps, remedies)
        logger.record("rollout/invalid_action_rate", self.invalid_action_rate)
        if self.valid_mass:  # how ready the unconstrained model is to write a valid action
            logger.record("rollout/valid_mass", float(np.mean(self.valid_mass)))
        logger.record("rollout/nonfinite_rewards", nonfinite)
        if self.bonus is not None:  # per env step, in reward units (CountBonusWrapper)
            logger.record("rollout/intrinsic_reward", self.bonus / turns)
        logger.record("rollout/observations_truncated", cut_observations)
        logger.record("rollout/prompts_truncated", cut_prompts)
        if self.samples:
            logger.record(
                "rollout/samples",
                "\n\n---\n\n".join(self.samples),
                exclude=("stdout", "log", "json", "csv"),
            )

    def _report(
        self, logger: Logger, figures: dict[str, float], num_timesteps: int, remedies: str
    ) -> None:
        """Log a rollout's figures and warn (once per process) when they say ``input_ignored``."""
        for name, value in figures.items():
            logger.record(f"rollout/{name}", value)
        if figures["input_ignored"] and not self.warned_input_ignored:
            self.warned_input_ignored = True
            warnings.warn(
                f"At {num_timesteps} env steps the policy plays the same near-certain "
                f"action distribution in all {int(figures['distinct_observations'])} "
                "observations of the rollout (mutual information "
                f"{figures['mutual_information']:.4f} nats, per-state entropy "
                f"{figures['state_entropy']:.3f}): it ignores its input. Unless the task's "
                f"best action is the same everywhere, it has collapsed: try {remedies}."
                " Logged as rollout/input_ignored.",
                stacklevel=4,
            )


def collapse_remedies(policy: Any) -> str:
    """What to try against an input-independent policy, leaving out what is already on."""
    off = [
        f"policy_kwargs={{'{name}': True}}"
        for name, on in (
            ("action_head", policy.action_head is not None or not policy.actions_list),
            ("choice_calibration", policy.calibrated or not policy.scores_listed_actions),
        )
        if not on
    ]
    return ", ".join([*off, "an entropy bonus (ent_coef, or ent_coef='auto')"])
