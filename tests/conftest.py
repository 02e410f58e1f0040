"""Shared fixtures: tiny models built in memory, never downloaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_llm.testing import save_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama + byte-level tokenizer saved where ``load_model(path)`` finds it."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny"), words=["stick", "hit"])
