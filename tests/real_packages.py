"""The real ecosystem packages in tests: a skip where they are missing, a failure under
``make test`` (``GYM_LLM_REAL_GAMES=required``), which installs them, so that their tests cannot
quietly stop running."""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType

import pytest


def require(module: str, java: bool = False) -> ModuleType:
    """The module (and Java, for TextWorld-Express), or a skip; a failure when required."""
    required = os.environ.get("GYM_LLM_REAL_GAMES") == "required"
    if java and shutil.which("java") is None:
        if required:
            pytest.fail("TextWorld-Express needs Java (apt install default-jre-headless)")
        pytest.skip("TextWorld-Express needs Java")
    if required:
        return importlib.import_module(module)
    found: ModuleType = pytest.importorskip(module)
    return found
