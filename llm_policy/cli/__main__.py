"""``python -m gym_llm.cli``: the same as the ``gym-llm`` command."""

from gym_llm.cli.commands import entry

entry()
