"""Build the book from one headless run: ``python tools/book/build.py [--smoke] [--out DIR]``.

It executes nothing: it copies ``book/`` and the run's executed notebooks (``runner.folders``)
into OUT/src, with the generated pages (``book.pages``) in OUT/src/_generated, and runs Sphinx with
``-W --keep-going``, so any warning (a broken link, a missing page, math needing a CDN) fails the
build. Only changed files are rewritten, so an unchanged build takes seconds. The site is OUT/html.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/
sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository, for helpers

import repository  # noqa: E402
from notebook_files import ROOT, notebook_paths, read, settings  # noqa: E402
from runner.folders import run_folder  # noqa: E402

from book.pages import generated_pages  # noqa: E402
from hardware import records as hardware_records  # noqa: E402

ASIDE_END = {"cell_type": "markdown", "metadata": {}, "source": "</details>\n"}  # ends a fold
BADGE = re.compile(r"\[!\[([^\]]+)\]\([^)]*\)\]\(([^)]+)\)")  # [![label](image)](target)


def _write_if_changed(path: Path, data: bytes) -> Path:
    if not path.exists() or path.read_bytes() != data:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return path


def _text(value: str | list[str]) -> str:
    return "".join(value) if isinstance(value, list) else value


def join_streams(outputs: list[dict]) -> list[dict]:
    """Join consecutive outputs of the same stream, in order, as Jupyter shows them (MyST-NB's
    nb_merge_streams would put all of a cell's stdout before all of its stderr)."""
    joined: list[dict] = []
    for out in outputs:
        last = joined[-1] if joined else None
        same = last and last["output_type"] == "stream" and last["name"] == out.get("name")
        if out["output_type"] == "stream" and same:
            last["text"] = _text(last["text"]) + _text(out["text"])
        else:
            joined.append(out)
    return joined


def book_notebook(nb: dict, hardware: str = "") -> dict:
    """The book's copy of an executed notebook: streams joined, the badges made local links with
    ``hardware`` (the "verified on a TPU" words) below, the navigation cell hidden."""
    for cell in nb["cells"]:
        if cell.get("outputs"):
            cell["outputs"] = join_streams(cell["outputs"])
        if cell.get("id") == "badges":
            links = BADGE.findall(_text(cell["source"]))
            buttons = "".join(f'<a href="{url}">{label}</a>' for label, url in links)
            cell["source"] = f'<div class="launch-buttons">{buttons}</div>\n'
            if hardware:
                cell["source"] += f"\nOn TPU hardware: {hardware} ([records](hardware.md)).\n"
        elif cell.get("id") == "navigation":
            tags = cell.setdefault("metadata", {}).setdefault("tags", [])
            if "remove-cell" not in tags:
                tags.append("remove-cell")
    nb["cells"] = fold_asides_and_guards(nb["cells"])
    return nb


def fold_asides_and_guards(cells: list[dict]) -> list[dict]:
    """Fold each aside (CONTRIBUTING.md), from its ``## Aside`` heading to its last cell tagged
    ``aside``, into one ``<details>`` element; its subheadings become bold lines, as a section
    cannot start inside ``<details>``. (A guard's input is hidden by its own tag.)"""
    folded, open_aside = [], False
    for cell in cells:
        tags = cell.get("metadata", {}).get("tags", [])
        text = _text(cell["source"])
        starts = cell["cell_type"] == "markdown" and text.startswith("## Aside")
        if open_aside and ("aside" not in tags or starts):
            folded.append({**ASIDE_END, "id": f"aside-end-{len(folded)}"})
            open_aside = False
        if "aside" in tags and cell["cell_type"] == "markdown":
            heading = ""
            if starts:
                heading, _, text = text.partition("\n")
                heading += '\n\n<details class="aside">\n<summary>Read the aside</summary>\n\n'
                open_aside = True
            body = re.sub(r"^#{3,} (.*)$", r"**\1**", text.strip(), flags=re.MULTILINE)
            cell["source"] = heading + body + "\n"
        folded.append(cell)
    if open_aside:
        folded.append({**ASIDE_END, "id": f"aside-end-{len(folded)}"})
    return folded


def assemble(run: Path, src: Path, records: list[dict]) -> tuple[int, bool]:
    """Fill ``src`` with the book's sources and remove what this build did not write; return the
    number of lessons and whether anything was removed (then the site is rebuilt from scratch)."""
    executed = run / "executed"
    names = [p.name for p in notebook_paths()]
    missing = [n for n in names if not (executed / n).exists()]
    if missing:
        raise SystemExit(
            f"{executed} lacks {', '.join(missing)}: the book shows every lesson. Run "
            "`make run` (or `make smoke` for `make book SMOKE=1`) first."
        )
    written: set[Path] = set()
    for name in names:
        hardware = hardware_records.lesson_status(name, records)
        nb = book_notebook(read(executed / name), hardware)
        text = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
        written.add(_write_if_changed(src / name, text.encode()))
    for path in (ROOT / "book").rglob("*"):
        if path.is_file():
            written.add(_write_if_changed(src / path.relative_to(ROOT / "book"), path.read_bytes()))
    for name, text in generated_pages(run, names, records).items():
        written.add(_write_if_changed(src / "_generated" / name, text.encode()))
    stale = [p for p in src.rglob("*") if p.is_file() and p not in written]
    for path in stale:
        path.unlink()
    return len(names), bool(stale)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="from the smoke run, not the full")
    parser.add_argument("--run", type=Path, help="the run's folder (default: from --smoke)")
    parser.add_argument("--out", type=Path, help="default: build/book, or build/book-smoke")
    parser.add_argument("--records", type=Path, action="append", help="a hardware records folder")
    args = parser.parse_args(argv)
    run = (args.run or run_folder("smoke" if args.smoke else "full")).resolve()
    out = (args.out or ROOT / "build" / ("book-smoke" if args.smoke else "book")).resolve()
    if not (run / "summary.json").exists():
        raise SystemExit(f"{run} holds no run: `make {'smoke' if args.smoke else 'run'}` first")
    src, html = out / "src", out / "html"
    # By default the committed records and this machine's dry runs.
    folders = args.records or [hardware_records.RECORDS, hardware_records.LOCAL_RECORDS]
    count, removed = assemble(run, src, hardware_records.load(*folders))
    if removed:
        shutil.rmtree(html, ignore_errors=True)
        shutil.rmtree(out / "doctrees", ignore_errors=True)
    # The doctrees and the site sit beside src, never inside it (MyST-NB writes next to them).
    sphinx = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q"]
    cfg = settings()  # the repository button: pyproject.toml's repository setting
    sphinx += ["-D", f"html_theme_options.repository_url={repository.repository_url(cfg)}"]
    sphinx += ["-D", f"html_theme_options.repository_branch={cfg['branch']}"]
    if subprocess.run([*sphinx, "-d", str(out / "doctrees"), str(src), str(html)]).returncode:
        return 1
    # Source maps of the theme's scripts (3.5 MB) serve only a browser's developer tools.
    for path in (html / "_static").rglob("*.map"):
        path.unlink()
    print(f"book: {count} lessons from {run} -> {html / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
