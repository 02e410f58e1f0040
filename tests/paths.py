"""Where the tests find the repository and their fixtures, wherever in ``tests/`` they live."""

from pathlib import Path

#: The repository's root (``README.md``, ``pyproject.toml``, ``docs/``, ``examples/``).
ROOT = Path(__file__).resolve().parents[1]
#: Recorded inputs and outputs the tests compare against.
FIXTURES = ROOT / "tests" / "fixtures"
