"""Check the built book in headless Chromium, served from 127.0.0.1 with no other host reachable.

    python tools/book/check.py [--smoke] [--book build/book]

For every page of BOOK/html it checks that:
- the page loads with no console error, no uncaught exception and no failed request;
- it requests nothing from a host other than 127.0.0.1 (such requests are blocked and reported:
  the site must render with no network, fonts and scripts included);
- every <img> has loaded (natural width > 0);
- every link to the site itself resolves, #anchors included;
- a lesson page shows one output block for each code cell of the executed notebook that has
  outputs (BOOK/src holds the notebooks the pages were built from), and no Markdown output
  whose table stayed as text;
- its weight (every file it loads, uncompressed) stays within the budget below.
Then it types `steps_per_execution` into the search box and expects lesson 03_keras_compile_and_fit among the
results, and saves screenshots of the landing page and two lessons to BOOK/screenshots.
It exits 1 if any check fails, listing each failure.
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
# on every page (1.56 MB of it Font Awesome's script); the page itself (HTML and plots) measured
# at most 0.24 MB in the smoke run. GitHub Pages compresses text, so a reader downloads about a
# third of this, and the theme's files once.
PAGE_OWN_BUDGET = 1_500_000  # the HTML and its images
PAGE_TOTAL_BUDGET = 4_000_000  # everything the page loads
LESSON = re.compile(r"^\d\d_.+\.html$")
SEARCH_WORD, SEARCH_PAGE = "steps_per_execution", "03_keras_compile_and_fit.html"


def expected_outputs(notebook: Path) -> int:
    """Code cells with outputs that the page shows (MyST-NB hides remove-output / remove-cell)."""
    cells = json.loads(notebook.read_text())["cells"]
    hidden = {"remove-cell", "remove-output"}
    return sum(
        1
        for c in cells
        if c["cell_type"] == "code"
        and c.get("outputs")
        and not hidden & set(c.get("metadata", {}).get("tags", []))
    )


class Checker:
    def __init__(self, site: Path, src: Path, base: str):
        self.site, self.src, self.base = site, src, base
        self.failures: list[str] = []
        self.links: dict[str, str] = {}  # internal URL -> first page linking to it
        self.weights: dict[str, tuple[int, int, int]] = {}  # page -> (own, total, requests)
        self.images = 0

    def fail(self, page: str, what: str) -> None:
        self.failures.append(f"{page}: {what}")

    def local(self, url: str) -> bool:
        return url.startswith(self.base)

    def check_page(self, context, name: str):
        page = context.new_page()
        sizes: dict[str, int] = {}
        page.on(
            "console",
            lambda m: m.type == "error" and self.fail(name, f"console error: {m.text[:200]}"),
        )
        page.on("pageerror", lambda e: self.fail(name, f"uncaught exception: {str(e)[:200]}"))
        page.on(
            "requestfailed",
            lambda r: self.local(r.url) and self.fail(name, f"request failed: {r.url} {r.failure}"),
        )

        def on_response(resp):
            if resp.status >= 400:
                self.fail(name, f"HTTP {resp.status}: {resp.url}")
            sizes[resp.url] = int(resp.headers.get("content-length", 0))

        page.on("response", on_response)

        def route(r):
            if self.local(r.request.url) or r.request.url.startswith("data:"):
                return r.continue_()
            self.fail(name, f"request to another host: {r.request.url[:160]}")
            return r.abort()

        page.route("**/*", route)  # routing also turns the HTTP cache off: each page loads in full
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
            if self.local(href):
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
        self.weights[name] = (own, total, len(sizes))
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
            if ids[target] is None:
                continue
            if fragment and target.endswith(".html"):
                if unquote(fragment) not in ids[target]:
                    self.fail(source, f"link to a missing anchor: {url}")

    def check_search(self, context) -> list[str]:
        page = context.new_page()
        page.on(
            "console",
            lambda m: m.type == "error" and self.fail("search", f"console error: {m.text[:200]}"),
        )
        page.route("**/*", lambda r: r.continue_() if self.local(r.request.url) else r.abort())
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
    """Check every page of the built site (``html``); return the checker (its ``failures``) and the counts."""
    site, shots = book / "html", book / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    pages = sorted(p.name for p in site.glob("*.html"))
    start = time.monotonic()
    with serve(site) as base, launch() as browser:
        checker = Checker(site, book / "src", base)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        for name in pages:
            page = checker.check_page(context, name)
            if name in ("index.html", SEARCH_PAGE, "06_input_pipelines.html"):
                page.screenshot(path=str(shots / name.replace(".html", ".png")))
                if name != "index.html":  # and the first plot or table it shows
                    page.locator(
                        "div.cell_output img, div.cell_output table"
                    ).first.scroll_into_view_if_needed()
                    page.screenshot(path=str(shots / name.replace(".html", "-output.png")))
            page.close()
        found = checker.check_search(context)
        checker.check_links()
    heavy = max(checker.weights.items(), key=lambda kv: kv[1][1])
    counts = {
        "pages": len(pages),
        "lessons": sum(bool(LESSON.match(p)) for p in pages),
        "internal_links": len(checker.links),
        "images": checker.images,
        "search_results": len(found),
        "heaviest": {"page": heavy[0], "own": heavy[1][0], "total": heavy[1][1]},
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
