"""ACT: observation strings -> replies, exact token log-probs and values (:class:`LLMPolicy`),
and what it is built from: model loading, prompts, the KV caches, packed frozen weights."""

from typing import Any


def __getattr__(name: str) -> Any:
    # ``from gym_llm.policy import LLMPolicy`` (the module path before the subpackages), lazily:
    # importing a sibling such as gym_llm.policy.models must not load the whole policy.
    import importlib

    return getattr(importlib.import_module("gym_llm.policy.llm_policy"), name)
