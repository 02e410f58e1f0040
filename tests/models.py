"""A test module's tiny model in one line: ``model_dir = tiny_model_fixture("model_dir", WORDS)``.

The models are built in memory and saved once per session for each module and set of arguments
(``tests/conftest.py``'s ``tiny_model``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest


def tiny_model_fixture(name: str, words: Sequence[str] = (), **kwargs: Any) -> Any:
    """A module-scoped fixture called ``name``: the path of a tiny model whose tokenizer knows
    ``words`` (``kwargs`` go to :func:`gym_llm.testing.save_tiny_model`)."""

    @pytest.fixture(scope="module", name=name)
    def model(tiny_model: Callable[..., Path], request: pytest.FixtureRequest) -> Path:
        return tiny_model(words, owner=f"{request.module.__name__}.{name}", **kwargs)

    return model
