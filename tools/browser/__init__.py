"""The headless browser that checks what readers see: the book (``tools/book``) and JupyterLab.

Playwright drives the distribution's Chromium (``apt-get install chromium``, no ``playwright
install``). Pages are served from 127.0.0.1 and Chromium's background traffic is off: a check
needs no network, and a request to any other host is a finding.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",  # root in containers and CI
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


def chromium() -> str:
    """The Chromium executable (or ``CHROMIUM``), or RuntimeError saying how to install it."""
    named = os.environ.get("CHROMIUM")
    names = [named] if named else ["chromium", "chromium-browser"]
    found = next(filter(None, map(shutil.which, names)), None)
    if not found:
        raise RuntimeError(
            "Chromium is not installed: `sudo apt-get install chromium` (Debian, Ubuntu), or set "
            "CHROMIUM to a Chromium or Chrome executable."
        )
    return found


@contextlib.contextmanager
def launch() -> Iterator[object]:
    """A Playwright ``Browser`` on the distribution's Chromium, closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # one line per request is noise in a test log
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve ``folder`` on 127.0.0.1 for the ``with`` block; yields its base URL."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
