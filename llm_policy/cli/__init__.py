"""COMMAND LINE: ``gym-llm`` (train / eval / demos / models / bench) and ``make demo``."""

from gym_llm.cli.commands import main

__all__ = ["main"]
