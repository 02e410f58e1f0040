"""Shared fixtures: tiny models built in memory, never downloaded."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from gym_llm.testing import save_tiny_model

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs one xdist worker per core; torch's own intra-op threads on top of that
    # oversubscribe the cores (measured here: tiny models many times slower with 2 threads each).
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama + byte-level tokenizer saved where ``load_model(path)`` finds it."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny"), words=["stick", "hit"])


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Tiny models and small MLPs run many times faster on one thread when other processes share
    the cores (two OpenMP threads spin-wait on each other); restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
