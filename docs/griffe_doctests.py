"""griffe extension for the API reference: doctest examples (``>>>`` lines and their output) in a
docstring become fenced ``pycon`` code blocks, so they render as code wherever they stand (the
docstrings keep plain doctests, which ``pytest --doctest-modules`` can run), and Sphinx roles
become code spans."""

from __future__ import annotations

import re
from typing import Any

import griffe

#: Sphinx roles (``:class:`X```) as the code they name: markdown has no roles.
ROLE = re.compile(r":(?:class|mod|func|meth|data|attr|exc|obj):`~?([^`]+)`")


def fence_doctests(text: str) -> str:
    """Wrap each run of doctest lines (a ``>>>`` line, its ``...`` continuations and output up to
    a blank line) in a ``pycon`` fence, keeping its indentation."""
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    in_fence = False
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if stripped.startswith("```"):
            in_fence = not in_fence
        if not in_fence and stripped.startswith(">>>"):
            indent = line[: len(line) - len(stripped)]
            out.append(f"{indent}```pycon")
            while i < len(lines) and lines[i].strip():
                out.append(lines[i])
                i += 1
            out.append(f"{indent}```")
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is None:
            return
        text = ROLE.sub(r"`\1`", obj.docstring.value)
        obj.docstring.value = fence_doctests(text) if ">>>" in text else text
