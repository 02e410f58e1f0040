"""SCORE: how good a policy is: Monte-Carlo episodes, exact dynamic programming over an env's
dynamics where they are known, reference returns, and SB3 baselines on the raw env."""

from typing import Any


def __getattr__(name: str) -> Any:
    # ``from gym_llm.evaluation import evaluate`` (the module before the subpackages), lazily.
    import importlib

    return getattr(importlib.import_module("gym_llm.evaluation.monte_carlo"), name)
