"""Check the built book in headless Chromium, served from 127.0.0.1 with no other host reachable.

    python tools/book/check.py [--smoke] [--book build/book]

Every page of BOOK/html must load with no error, failed request or request to another host (the
site must render offline), render its images, resolve its links to the site (#anchors too) and
keep to the weight budget; a lesson page must show the outputs of the notebook it was built from
(BOOK/src). A search must find lesson 03_keras_compile_and_fit. Screenshots of three pages go to
BOOK/screenshots. It exits 1 if any check fails, listing each failure.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urldefrag

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/

from browser import launch, serve  # noqa: E402
from notebook_files import ROOT  # noqa: E402

# Budget per page, uncompressed bytes. The theme's files and the search index are about 2.5 MB
# (1.56 MB of it Font Awesome's script); a page's HTML and plots measured at most 0.24 MB in the
# smoke run. GitHub Pages compresses text, to about a third, and the theme's files load once.
PAGE_OWN_BUDGET = 1_500_000  # the HTML and its images
PAGE_TOTAL_BUDGET = 4_000_000  # everything the page loads
LESSON = re.compile(r"^\d\d_.+\.html$")
SEARCH_WORD, SEARCH_PAGE = "steps_per_execution", "03_keras_compile_and_fit.html"


def expected_outputs(notebook: Path) -> int:
    """Code cells with outputs that the page shows (MyST-NB hides remove-output / remove-cell)."""
    hidden = {"remove-cell", "remove-output"}
    return sum(
        c["cell_type"] == "code"
        and bool(c.get("outputs"))
        and not hidden & set(c.get("metadata", {}).get("tags", []))
        for c in json.loads(notebook.read_text())["cells"]
    )


class Checker:
    def __init__(self, src: Path, base: str):
        self.src, self.base = src, base
        self.failures: list[str] = []
        self.links: dict[str, str] = {}  # internal URL -> first page linking to it
        self.weights: dict[str, tuple[int, int]] = {}  # page -> (own, total) bytes
        self.images = 0

    def fail(self, page: str, what: str) -> None:
        self.failures.append(f"{page}: {what}")

    def new_page(self, context, name: str):
        """A page whose console errors and requests to other hosts (blocked) fail ``name``."""
        page = context.new_page()
        page.on(
            "console",
            lambda m: m.type == "error" and self.fail(name, f"console error: {m.text[:200]}"),
        )

        def route(r):
            if r.request.url.startswith(self.base) or r.request.url.startswith("data:"):
                return r.continue_()
            self.fail(name, f"request to another host: {r.request.url[:160]}")
            return r.abort()

        page.route("**/*", route)  # routing also turns the HTTP cache off
        return page

    def check_page(self, context, name: str):
        page = self.new_page(context, name)
        sizes: dict[str, int] = {}
        page.on("pageerror", lambda e: self.fail(name, f"uncaught exception: {str(e)[:200]}"))
        page.on(
            "requestfailed",
            lambda r: (
                r.url.startswith(self.base)
                and self.fail(name, f"request failed: {r.url} {r.failure}")
            ),
        )

        def on_response(resp):
            if resp.status >= 400:
                self.fail(name, f"HTTP {resp.status}: {resp.url}")
            sizes[resp.url] = int(resp.headers.get("content-length", 0))

        page.on("response", on_response)
        page.goto(self.base + name, wait_until="networkidle")
        imgs = page.evaluate("""async () => {
            const imgs = [...document.images];
            await Promise.all(imgs.map(i => i.complete ? 0 : new Promise(r => { i.onload = i.onerror = r; })));
            return imgs.map(i => [i.getAttribute('src'), i.naturalWidth]);
        }""")
        self.images += len(imgs)
        for src, width in imgs:
            if not width:
                self.fail(name, f"image not rendered: {src[:120]}")
        for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)"):
            if href.startswith(self.base):
                self.links.setdefault(href, name)
        if LESSON.match(name):
            shown = page.locator("div.cell_output").count()
            want = expected_outputs(self.src / name.replace(".html", ".ipynb"))
            if not shown or shown != want:
                self.fail(name, f"{shown} output blocks shown, the executed notebook has {want}")
            raw = page.eval_on_selector_all(  # a Markdown output whose table was not rendered
                "div.cell_output p",
                r"els => els.filter(e => /\|\s*[-—–:]+\s*\|/.test(e.textContent)).length",
            )
            if raw:
                self.fail(name, f"{raw} Markdown output(s) show a table as text")
        own = sum(n for u, n in sizes.items() if u.split("?")[0].endswith(name) or "/_images/" in u)
        total = sum(sizes.values())
        self.weights[name] = (own, total)
        if own > PAGE_OWN_BUDGET or total > PAGE_TOTAL_BUDGET:
            self.fail(name, f"weight {own:,} B own / {total:,} B in all, over the budget")
        return page

    def check_links(self) -> None:
        ids: dict[str, set[str] | None] = {}  # page URL -> its element ids (None: did not load)
        for url, source in sorted(self.links.items()):
            target, fragment = urldefrag(url)
            if target not in ids:
                try:
                    with urllib.request.urlopen(target) as resp:
                        body = resp.read().decode("utf-8", "replace")
                    ids[target] = set(re.findall(r'\bid="([^"]+)"', body))
                except OSError as err:
                    ids[target] = None
                    self.fail(source, f"broken link {url}: {err}")
            found = ids[target]
            if found is not None and fragment and target.endswith(".html"):
                if unquote(fragment) not in found:
                    self.fail(source, f"link to a missing anchor: {url}")

    def check_search(self, context) -> list[str]:
        page = self.new_page(context, "search")
        page.goto(self.base + "index.html", wait_until="networkidle")
        page.keyboard.press("Control+k")  # the theme's search dialog
        box = page.locator("input[name=q]:visible").first
        box.fill(SEARCH_WORD)
        box.press("Enter")
        page.wait_for_function(  # Sphinx writes "Search finished, ..." once every result is listed
            "() => (document.querySelector('#search-results .search-summary') || {}).innerText"
            "?.startsWith('Search finished')",
            timeout=20_000,
        )
        found = page.eval_on_selector_all(
            "#search-results li a", "els => els.map(e => e.getAttribute('href'))"
        )
        if not any(h.split("?")[0].split("#")[0].endswith(SEARCH_PAGE) for h in found):
            self.fail("search", f"{SEARCH_WORD!r} does not find {SEARCH_PAGE}: {found[:5]}")
        page.close()
        return found


def check(book: Path) -> tuple[Checker, dict]:
    """Check every page of the built site; return the checker (its ``failures``) and counts."""
    site, shots = book / "html", book / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    pages = sorted(p.name for p in site.glob("*.html"))
    start = time.monotonic()
    with serve(site) as base, launch() as browser:
        checker = Checker(book / "src", base)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        for name in pages:
            page = checker.check_page(context, name)
            if name in ("index.html", SEARCH_PAGE, "06_input_pipelines.html"):
                page.screenshot(path=str(shots / name.replace(".html", ".png")))
                if name != "index.html":  # and the first plot or table it shows
                    output = page.locator("div.cell_output img, div.cell_output table").first
                    output.scroll_into_view_if_needed()
                    page.screenshot(path=str(shots / name.replace(".html", "-output.png")))
            page.close()
        found = checker.check_search(context)
        checker.check_links()
    heavy = max(checker.weights, key=lambda page: checker.weights[page][1])
    own, total = checker.weights[heavy]
    counts = {
        "pages": len(pages),
        "lessons": sum(bool(LESSON.match(p)) for p in pages),
        "internal_links": len(checker.links),
        "images": checker.images,
        "search_results": len(found),
        "heaviest": {"page": heavy, "own": own, "total": total},
        "seconds": round(time.monotonic() - start, 1),
        "screenshots": str(shots),
    }
    return checker, counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the book of the smoke run")
    parser.add_argument("--book", type=Path, help="default: build/book or build/book-smoke")
    args = parser.parse_args(argv)
    book = args.book or ROOT / "build" / ("book-smoke" if args.smoke else "book")
    checker, counts = check(book)
    heavy = counts["heaviest"]
    print(
        f"book check: {counts['pages']} pages ({counts['lessons']} lessons), "
        f"{counts['internal_links']} internal links, {counts['images']} images, search found "
        f"{counts['search_results']} pages for {SEARCH_WORD!r}, {counts['seconds']} s"
    )
    print(
        f"heaviest page: {heavy['page']}, {heavy['own']:,} B own, {heavy['total']:,} B in all "
        f"(budget {PAGE_OWN_BUDGET:,} / {PAGE_TOTAL_BUDGET:,})"
    )
    for failure in checker.failures:
        print("FAILED", failure)
    print(f"{len(checker.failures)} failures; screenshots in {counts['screenshots']}")
    return 1 if checker.failures else 0


if __name__ == "__main__":
    sys.exit(main())
