"""Rollout storage for text turns, reusing SB3's GAE.

SB3's ``RolloutBuffer`` allocates numeric observation arrays from the space and fails on text, but
its ``compute_returns_and_advantage`` only needs the reward/value/episode-start arrays. This buffer
keeps those exactly as SB3 does (so GAE, truncation handling and episode starts match SB3 line for
line) and stores the strings and token sequences of each turn in object arrays next to them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from stable_baselines3.common.buffers import RolloutBuffer

from gym_llm.policy.top_layers import TurnStates


@dataclass
class TextBatch:
    """One minibatch of turns."""

    observations: list[str]
    actions: list[np.ndarray]
    old_token_log_probs: list[np.ndarray]
    old_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    #: The rollout's states for each turn (``None`` if any turn has none): the update then
    #: starts at the first trainable layer (gym_llm.policy.top_layers).
    states: list[TurnStates] | None = None

    def take(self, order: Sequence[int]) -> TextBatch:
        """The same turns in ``order`` (a permutation or a subset)."""
        index = torch.as_tensor(list(order), dtype=torch.long, device=self.advantages.device)
        return TextBatch(
            observations=[self.observations[i] for i in order],
            actions=[self.actions[i] for i in order],
            old_token_log_probs=[self.old_token_log_probs[i] for i in order],
            old_values=self.old_values[index],
            advantages=self.advantages[index],
            returns=self.returns[index],
            states=[self.states[i] for i in order] if self.states is not None else None,
        )


def least_padding_cuts(lengths: Sequence[int], fit: int) -> list[int]:
    """Sizes of consecutive passes over rows of ascending ``lengths``, as few passes as ``fit``
    rows each allow, cut where the padded area (each pass's rows times its longest row) is
    least.

    >>> least_padding_cuts([43] * 30 + [45] * 12 + [54] * 12, fit=42)
    [42, 12]
    """
    n, fit = len(lengths), max(fit, 1)
    passes = -(-n // fit)
    if passes <= 1:
        return [n] if n else []
    longest = np.asarray(lengths, dtype=np.float64)
    # area[j]: the least padded area of the first j rows in the passes so far; back[p][j]: the
    # start of pass p's rows. After p passes only j in [n - (passes - p) * fit, p * fit] can
    # still end in ``passes`` passes, which keeps the search small.
    area = np.full(n + 1, np.inf)
    area[0] = 0.0
    back = np.zeros((passes + 1, n + 1), dtype=np.int64)
    for p in range(1, passes + 1):
        nxt = np.full(n + 1, np.inf)
        for j in range(max(1, n - (passes - p) * fit), min(n, p * fit) + 1):
            starts = np.arange(max(0, j - fit), j)
            costs = area[starts] + longest[j - 1] * (j - starts)
            best = int(np.argmin(costs))
            nxt[j], back[p, j] = costs[best], starts[best]
        area = nxt
    sizes, j = [], n
    for p in range(passes, 0, -1):
        i = int(back[p, j])
        sizes.append(j - i)
        j = i
    return sizes[::-1]


def grouped_passes(
    keys: Sequence[str], fit: int, lengths: Sequence[int] | None = None
) -> tuple[list[int], list[slice]]:
    """An order of the turns with equal ``keys`` side by side, and the passes over that order
    that each hold at most ``fit`` distinct keys (a key's turns always in one pass), so that
    each distinct observation is one row of one pass.

    With ``lengths`` (each turn's row length) and more than one pass, the keys go shortest
    first, cut where the passes pad least (:func:`least_padding_cuts`); in one pass the order
    is the keys' first appearance either way (the padding is the same).

    >>> grouped_passes(["a", "b", "a", "c", "b"], fit=2)
    ([0, 2, 1, 4, 3], [slice(0, 4, None), slice(4, 5, None)])
    >>> grouped_passes(["a", "b", "a", "c", "b"], fit=2, lengths=[1, 3, 1, 2, 3])
    ([0, 2, 3, 1, 4], [slice(0, 2, None), slice(2, 5, None)])
    """
    groups: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    members_in_order = list(groups.values())
    fit = max(fit, 1)
    sizes = [fit] * (len(members_in_order) // fit)
    if len(members_in_order) % fit or not sizes:  # no keys: one empty pass, as ever
        sizes.append(len(members_in_order) % fit)
    if lengths is not None and len(members_in_order) > fit:
        members_in_order.sort(key=lambda members: lengths[members[0]])  # stable: ties keep order
        sizes = least_padding_cuts([lengths[m[0]] for m in members_in_order], fit)
    order: list[int] = []
    cuts: list[slice] = []
    for size in sizes:
        start = len(order)
        for members in members_in_order[:size]:
            order.extend(members)
        members_in_order = members_in_order[size:]
        cuts.append(slice(start, len(order)))
    return order, cuts


class TextRolloutBuffer(RolloutBuffer):
    """``(n_steps, n_envs)`` turns: prompts, replies' tokens and log-probs, rewards, values."""

    def __init__(
        self,
        buffer_size: int,
        n_envs: int,
        device: torch.device | str = "cpu",
        gae_lambda: float = 1.0,
        gamma: float = 0.99,
    ) -> None:
        # Deliberately not calling RolloutBuffer.__init__: it would build numeric obs arrays.
        self.buffer_size, self.n_envs = buffer_size, n_envs
        self.device = torch.device(device)
        self.gae_lambda, self.gamma = gae_lambda, gamma
        self.reset()

    def reset(self) -> None:
        shape = (self.buffer_size, self.n_envs)
        self.observations_text = np.empty(shape, dtype=object)
        self.replies = np.empty(shape, dtype=object)
        self.action_tokens = np.empty(shape, dtype=object)
        self.token_log_probs = np.empty(shape, dtype=object)
        self.states = np.empty(shape, dtype=object)
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.returns = np.zeros(shape, dtype=np.float32)
        self.episode_starts = np.zeros(shape, dtype=np.float32)
        self.values = np.zeros(shape, dtype=np.float32)
        self.log_probs = np.zeros(shape, dtype=np.float32)
        self.advantages = np.zeros(shape, dtype=np.float32)
        self.pos, self.full, self.generator_ready = 0, False, False

    def add_turns(
        self,
        observations: np.ndarray,
        replies: list[str],
        actions: list[np.ndarray],
        token_log_probs: list[np.ndarray],
        rewards: np.ndarray,
        episode_starts: np.ndarray,
        values: torch.Tensor,
        states: Sequence[TurnStates] | None = None,
    ) -> None:
        if self.full:
            raise RuntimeError("TextRolloutBuffer is full: call reset() before adding turns.")
        for env in range(self.n_envs):
            text = observations[env]  # a TextWithActions keeps its actions
            self.observations_text[self.pos, env] = text if isinstance(text, str) else str(text)
            self.replies[self.pos, env] = replies[env]
            self.action_tokens[self.pos, env] = actions[env]
            self.token_log_probs[self.pos, env] = token_log_probs[env]
            self.log_probs[self.pos, env] = float(np.sum(token_log_probs[env]))
            self.states[self.pos, env] = states[env] if states is not None else None
        self.rewards[self.pos] = np.asarray(rewards, dtype=np.float32)
        self.episode_starts[self.pos] = np.asarray(episode_starts, dtype=np.float32)
        self.values[self.pos] = values.detach().float().cpu().numpy().reshape(-1)
        self.pos += 1
        self.full = self.pos == self.buffer_size

    def compute_returns_and_advantage(self, last_values: torch.Tensor, dones: np.ndarray) -> None:
        """SB3's GAE, except that a non-finite reward or value stays inside its episode: SB3
        multiplies the next episode's terms by ``next_non_terminal = 0``, and ``0 * nan`` is
        ``nan``, so one NaN reward would poison every earlier turn of its env in the rollout."""
        last = last_values.clone().cpu().numpy().flatten()
        last_gae_lam = np.zeros(self.n_envs, dtype=np.float32)
        for step in reversed(range(self.buffer_size)):
            if step == self.buffer_size - 1:
                next_non_terminal = 1.0 - dones.astype(np.float32)
                next_values = last
            else:
                next_non_terminal = 1.0 - self.episode_starts[step + 1]
                next_values = self.values[step + 1]
            cont = next_non_terminal > 0
            bootstrap = np.where(cont, self.gamma * next_values * next_non_terminal, 0.0)
            delta = self.rewards[step] + bootstrap - self.values[step]
            carried = np.where(
                cont, self.gamma * self.gae_lambda * next_non_terminal * last_gae_lam, 0.0
            )
            last_gae_lam = (delta + carried).astype(np.float32)
            self.advantages[step] = last_gae_lam
        self.returns = self.advantages + self.values

    def finite_turns(self) -> np.ndarray:
        """Per turn (flattened), whether its advantage, return and value are finite numbers:
        the turns an update may learn from (a NaN reward from an env makes its episode's turns
        non-finite, and those are left out, counted, rather than poisoning the weights)."""
        finite: np.ndarray = (
            np.isfinite(self.advantages) & np.isfinite(self.returns) & np.isfinite(self.values)
        )
        return finite.reshape(-1)

    def minibatches(
        self, batch_size: int, generator: np.random.Generator | None = None
    ) -> Iterator[TextBatch]:
        """Shuffled minibatches over all ``n_steps * n_envs`` turns."""
        if not self.full:
            raise RuntimeError("TextRolloutBuffer is not full yet: collect a whole rollout first.")
        total = self.buffer_size * self.n_envs
        order = (generator or np.random.default_rng()).permutation(total)
        order = order[self.finite_turns()[order]]
        total = len(order)
        flat = {
            "obs": self.observations_text.reshape(-1),
            "act": self.action_tokens.reshape(-1),
            "lp": self.token_log_probs.reshape(-1),
            "states": self.states.reshape(-1),
        }
        values, advantages, returns = (
            torch.as_tensor(a.reshape(-1), device=self.device)
            for a in (self.values, self.advantages, self.returns)
        )
        for start in range(0, total, batch_size):
            idx = order[start : start + batch_size]
            index = torch.as_tensor(idx, device=self.device)
            states = list(flat["states"][idx])
            yield TextBatch(
                observations=[o if isinstance(o, str) else str(o) for o in flat["obs"][idx]],
                actions=list(flat["act"][idx]),
                old_token_log_probs=list(flat["lp"][idx]),
                old_values=values[index],
                advantages=advantages[index],
                returns=returns[index],
                states=states if all(t is not None for t in states) else None,
            )
