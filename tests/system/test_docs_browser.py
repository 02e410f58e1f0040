"""The built documentation site in a real browser (slow; ``make docs-check``): Debian's headless
Chromium loads the home page, a guide and an API page from a local server, takes a screenshot of
each into ``site-shots/`` and dumps the DOM it rendered, which must hold the page's title, the
navigation and its code blocks."""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import ROOT

pytestmark = pytest.mark.slow

SITE, SHOTS = ROOT / "site", ROOT / "site-shots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--window-size=1280,1600",
]  # fmt: skip
PAGES = {
    "home": ("", "gym_llm", "Two commands"),
    "guide": ("guides/text-games/", "Text games", "ValidActionsWrapper"),
    "api": ("api/gym_llm/", "gym_llm", "gym_llm.PPO"),
}


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    if CHROMIUM is None:
        pytest.skip("no chromium: apt-get install chromium")
    if not (SITE / "index.html").is_file():
        pytest.skip("no built site: make docs")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(SITE))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


def _chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    command = [CHROMIUM or "chromium", *FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", list(PAGES))
def test_the_page_renders_with_title_navigation_and_code(
    server: str, name: str, tmp_path: Path
) -> None:
    path, title, text = PAGES[name]
    SHOTS.mkdir(exist_ok=True)
    shot = SHOTS / f"{name}.png"
    shot.unlink(missing_ok=True)
    _chromium(f"--screenshot={shot}", server + path, profile=tmp_path / "shot")
    assert shot.is_file() and shot.stat().st_size > 20_000  # a rendered page, not a blank one
    dom = _chromium("--dump-dom", server + path, profile=tmp_path / "dom").stdout
    assert "<title>" in dom and title in dom.split("<title>", 1)[1].split("</title>", 1)[0]
    assert 'class="md-nav' in dom and "Getting started" in dom  # the site's navigation
    assert "<code" in dom and text in dom  # its own content, code included
