"""Shared fixtures: tiny models built in memory, never downloaded."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from gym_llm.testing import save_tiny_model

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs one xdist worker per core; torch's own intra-op threads on top of that
    # oversubscribe the cores (measured here: tiny models many times slower with 2 threads each).
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``tiny_model(words, owner=..., **kwargs)``: the path of a tiny Llama whose byte-level
    tokenizer knows ``words`` as whole tokens, saved once per session for each owner (a test
    module: its caches keyed by the model's path stay its own) and set of arguments."""
    made: dict[tuple[Any, ...], Path] = {}

    def make(words: Sequence[str] = (), owner: str = "", **kwargs: Any) -> Path:
        key = (owner, tuple(words), tuple(sorted(kwargs.items())))
        if key not in made:
            made[key] = save_tiny_model(
                tmp_path_factory.mktemp("tiny"), words=list(words), **kwargs
            )
        return made[key]

    return make


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


@pytest.fixture
def tiny_default_model(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """The default model (``smollm2-135m``, what ``PPO(LLMPolicy, env)`` loads when nothing names
    a model) made a tiny one: a converted-model cache holding the tiny model under that name, so
    the code path a user's first call takes runs in seconds. Shared trunk caches are cleared
    after, so no later test reads the tiny model's states under the real model's name."""
    from gym_llm.policy.models import DEFAULT_MODEL
    from gym_llm.policy.trunk_cache import clear_shared_trunk_caches

    cache = tmp_path / "model-cache"
    cache.mkdir()
    (cache / DEFAULT_MODEL).symlink_to(tiny_model_dir, target_is_directory=True)
    monkeypatch.setenv("GYM_LLM_CACHE", str(cache))
    clear_shared_trunk_caches()
    yield cache
    clear_shared_trunk_caches()
