"""griffe extension for the API reference: fields documented by ``#:`` comments get them as
their docstrings; doctest examples (``>>>`` lines and their output) in a
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


def comment_docstring(lines: list[str], lineno: int) -> str | None:
    """The ``#:`` comment lines right above line ``lineno`` (1-based), joined: how the configs
    document their fields (the CLI reads the same comments for its ``--help``).

    >>> comment_docstring(["#: Passes over", "#: each rollout.", "n_epochs: int = 4"], 3)
    'Passes over each rollout.'
    """
    found: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith("#:"):
        found.insert(0, lines[i].strip()[2:].strip())
        i -= 1
    return " ".join(found) or None


class DoctestFences(griffe.Extension):
    def on_attribute_instance(
        self, *, node: Any, attr: griffe.Attribute, agent: Any, **kwargs: Any
    ) -> None:
        """A field documented by ``#:`` comments gets them as its docstring."""
        if attr.docstring is not None or attr.lineno is None:
            return
        try:
            lines = attr.module.lines
        except (AttributeError, ValueError):
            return
        text = comment_docstring(lines, attr.lineno)
        if text:
            attr.docstring = griffe.Docstring(text, parent=attr)

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is None:
            return
        text = ROLE.sub(r"`\1`", obj.docstring.value)
        obj.docstring.value = fence_doctests(text) if ">>>" in text else text
