"""mkdocs hooks: the benchmark plots (``benchmarks/results/**/*.png``) become site files under
``assets/results/``, so the results page shows them without copies in ``docs/``; and the home
page is the README itself, its links pointed into the site (one source, no copy)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
REPO = "https://github.com/gym-llm/gym_llm/blob/main/"


def on_files(files: Files, config: Any) -> Files:
    for png in sorted(RESULTS.rglob("*.png")):
        uri = f"assets/results/{png.relative_to(RESULTS).as_posix()}"
        files.append(File.generated(config, uri, abs_src_path=str(png)))
    return files


def readme_as_home(text: str) -> str:
    """The README with its links made site links: ``docs/x.md`` -> ``x.md``, the plots to
    ``assets/results/``, anything else in the repository to its page on GitHub."""

    def link(match: re.Match[str]) -> str:
        target = match.group(1)
        if target.startswith(("http:", "https:", "#")):
            return match.group(0)
        if target.startswith("benchmarks/results/") and target.endswith(".png"):
            return f"](assets/results/{target.removeprefix('benchmarks/results/')})"
        if target == "CHANGELOG.md":
            return "](changelog.md)"
        inside = target.removeprefix("docs/")
        if target.startswith("docs/") and (ROOT / "docs" / inside.split("#")[0]).is_file():
            return f"]({inside})"
        return f"]({REPO}{target})"

    return re.sub(r"\]\(([^)]+)\)", link, text)


def on_page_markdown(markdown: str, page: Page, config: Any, files: Files) -> str:
    if page.file.src_uri == "index.md":
        return readme_as_home((ROOT / "README.md").read_text())
    return markdown
