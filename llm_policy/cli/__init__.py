"""COMMAND LINE: ``gym-llm`` (train / eval / demos / models / bench) and ``make demo``."""

from typing import Any

from gym_llm.cli.commands import main

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    # The rest of the module ``gym_llm.cli`` had before the subpackages.
    import importlib

    return getattr(importlib.import_module("gym_llm.cli.commands"), name)
