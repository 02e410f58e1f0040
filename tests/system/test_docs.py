"""The documentation site: it builds strictly (every link, page and API name resolves), the API
reference's names are documented (what each argument is), and the doctest fences of the reference
render as code."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT

API_NAMES = [
    name
    for page in sorted((ROOT / "docs" / "api").glob("*.md"))
    for name in re.findall(r"^::: ([\w.]+)", page.read_text(), re.MULTILINE)
]


def _package_tree(where: Path) -> Path:
    """The symlink tree mkdocstrings reads (``make docs`` builds the same one)."""
    tree = where / "gym_llm"
    tree.mkdir(parents=True)
    for item in (ROOT / "llm_policy").iterdir():
        (tree / item.name).symlink_to(item)
    (tree / "wrappers").symlink_to(ROOT / "wrappers")
    (tree / "envs").symlink_to(ROOT / "envs")
    return where


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    work = tmp_path / "checkout"
    work.mkdir()
    for name in ("mkdocs.yml", "docs", "README.md", "CHANGELOG.md", "benchmarks"):
        (work / name).symlink_to(ROOT / name)
    _package_tree(work / ".pkgtree")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=work, capture_output=True, text=True, timeout=600,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    home = (tmp_path / "site" / "index.html").read_text()
    assert "Two commands" in home and 'href="guides/text-games/"' in home  # the README, linked in
    api = (tmp_path / "site" / "api" / "gym_llm" / "index.html").read_text()
    assert "gym_llm.PPO" in api and ":class:" not in api
    assert (tmp_path / "site" / "assets" / "results" / "headline.png").is_file()


def _resolve(name: str) -> object:
    module, _, attribute = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError):
        return importlib.import_module(name)


@pytest.mark.parametrize("name", API_NAMES)
def test_every_name_in_the_reference_documents_its_arguments(name: str) -> None:
    obj = _resolve(name)
    if inspect.ismodule(obj):
        assert (inspect.getdoc(obj) or "").strip()
        return
    doc = inspect.getdoc(obj) or ""
    assert len(doc) >= 40, f"{name} needs a docstring that says what it is for"
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return
    source = inspect.getsource(obj) if inspect.isclass(obj) else ""
    missing = [
        p.name
        for p in parameters
        if p.name not in ("self", "cls")
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and not re.search(rf"\b{re.escape(p.name)}\b", doc)
        and not re.search(rf"#:.*\n\s*{re.escape(p.name)}\s*:", source)  # a documented field
    ]
    assert not missing, f"{name}'s docstring does not say what {missing} are"


def test_doctests_become_code_fences() -> None:
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        from griffe_doctests import ROLE, fence_doctests
    finally:
        sys.path.remove(str(ROOT / "docs"))
    text = "Say hi.\n\n    >>> f(1)\n    2\n\nMore."
    assert fence_doctests(text) == "Say hi.\n\n    ```pycon\n    >>> f(1)\n    2\n    ```\n\nMore."
    assert ROLE.sub(r"`\1`", "see :class:`~gym_llm.PPO`") == "see `gym_llm.PPO`"
