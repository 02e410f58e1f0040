"""COMMAND LINE: ``gym-llm`` (train / eval / demos / models / bench) and ``make demo``."""

from typing import Any

from gym_llm.cli.commands import main

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    # The rest of the module ``gym_llm.cli`` had before the subpackages.
    import importlib

    for module in ("gym_llm.cli.commands", "gym_llm.cli.arguments"):
        found = importlib.import_module(module)
        if hasattr(found, name):
            return getattr(found, name)
    raise AttributeError(f"module 'gym_llm.cli' has no attribute {name!r}")
