"""The Python examples of the README and of the documentation site (``docs/``): every import they
make works, and the quick ones run unchanged.

The training examples (thousands of env steps on SmolLM2) are not run here; their imports are, and
the same calls run on a tiny model in tests/rl/ppo/test_ppo.py, tests/rl/test_agent.py and tests/rl/test_sft.py.
"""

from __future__ import annotations

import ast
import re

import pytest

from tests.paths import ROOT

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
BLOCKS = [
    block
    for page in PAGES
    for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL)
]
README_BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)


def test_the_readme_and_the_guides_have_their_examples() -> None:
    assert len(README_BLOCKS) >= 2 and len(BLOCKS) >= 15


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_every_import_in_the_readme_works(index: int) -> None:
    tree = ast.parse(BLOCKS[index])
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    exec(compile(ast.Module(body=imports, type_ignores=[]), "README.md", "exec"), {})


@pytest.mark.parametrize("marker", ["gym_llm/KeywordBandit-v0", "gym_llm/GuessNumber-v0"])
def test_quick_readme_examples_run_unchanged(marker: str) -> None:
    (block,) = [b for b in BLOCKS if marker in b and "learn(" not in b]
    exec(compile(block, "docs", "exec"), {})


def test_the_wrapping_example_runs_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    (block,) = [b for b in README_BLOCKS if "ActionParserWrapper(TextObservationWrapper(" in b]
    printed: list[str] = []
    monkeypatch.setattr("builtins.print", lambda *a, **k: printed.append(" ".join(map(str, a))))
    exec(compile(block, "README.md", "exec"), {})
    assert printed[0] == "Your hand totals 11. Usable ace: no.\nThe dealer shows a 10."
    assert printed[1] == "('stick', 'hit')"
    assert printed[2] == "0 True mention"  # what the README's comment says it prints
