"""The book (tools/book): its copies of the lessons, its generated pages, and the built site
checked in a real browser (marked browser: make test runs that on the main stack, on the book
of the smoke run it has just executed)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from notebook_files import notebook_paths, read  # noqa: E402

from book import build, pages  # noqa: E402
from tpucheck import routes  # noqa: E402


def _stream(name, text):
    return {"output_type": "stream", "name": name, "text": text}


def test_consecutive_outputs_of_one_stream_are_joined_in_their_order():
    png = {"output_type": "display_data", "data": {"image/png": "x"}, "metadata": {}}
    outputs = [_stream("stdout", "a\n"), _stream("stdout", ["b\n"]), _stream("stderr", "w\n")]
    outputs += [_stream("stdout", "c\n"), png, _stream("stdout", "d\n")]
    joined = build.join_streams(outputs)
    assert [(o.get("name"), o.get("text")) for o in joined] == [
        ("stdout", "a\nb\n"),
        ("stderr", "w\n"),
        ("stdout", "c\n"),
        (None, None),
        ("stdout", "d\n"),
    ]


def test_the_books_copy_has_local_launch_buttons_and_no_navigation_cell():
    nb = build.book_notebook(read(notebook_paths()[3]))
    cells = {cell["id"]: cell for cell in nb["cells"]}
    badges = "".join(cells["badges"]["source"])
    assert "<img" not in badges and "![" not in badges  # no badge image from another host
    assert 'href="https://colab.research.google.com/github/' in badges
    assert 'href="https://kaggle.com/kernels/welcome?src=' in badges
    assert "remove-cell" in cells["navigation"]["metadata"]["tags"]


def test_the_lesson_map_lists_every_lesson_with_its_launch_links():
    names = [p.name for p in notebook_paths()]
    rows = pages.lesson_map(names).splitlines()[2:]
    assert len(rows) == len(names)
    for name, row in zip(names, rows, strict=True):
        assert f"]({name})" in row and "[Colab](https://colab" in row and "[Kaggle](" in row


def test_the_stacks_come_from_the_requirements_files():
    stacks = pages.stacks()
    kaggle, colab = routes.PLATFORMS["kaggle"], routes.PLATFORMS["colab"]
    assert stacks["kaggle"]["#python"] == kaggle.python
    assert stacks["colab"]["#replicas"] == str(colab.cores)
    route = routes.choose_route("kaggle", kaggle.python)
    assert stacks["kaggle"]["tensorflow-cpu"] == route.release.tensorflow
    assert "tensorflow" in stacks["main"]
    assert all(stack["#stands in for"] for stack in stacks.values())


def test_the_run_page_is_made_from_the_runs_summary(tmp_path):
    record = {
        "header": "Headless run (smoke mode), 2026-11-25 10:00",
        "stack": {"python": "3.11.7", "tensorflow": "2.21.0"},
        "machine": "a CPU, 2 cores",
        "rows": [
            {
                "notebook": "03_x.ipynb",
                "status": "passed",
                "seconds": 12.5,
                "peak_gib": 1.23,
                "headline": "held-out accuracy 91.0%",
                "results": {"val_accuracy": 0.91, "_readiness_clean": 2, "global_batch": 128},
            }
        ],
    }
    (tmp_path / "summary.json").write_text(json.dumps(record))
    text = pages.run_page(tmp_path)
    assert "| [03](03_x.ipynb) | passed | 12.5 | 1.23 | held-out accuracy 91.0% |" in text
    assert "| 03 | `val_accuracy` | 0.91 |" in text and "| 03 | `global_batch` | 128 |" in text
    assert "_readiness_clean" not in text and "Stack: python 3.11.7, tensorflow 2.21.0." in text


RUN = os.environ.get("FIELD_GUIDE_EXECUTED")


@pytest.mark.browser
@pytest.mark.skipif(not RUN, reason="needs FIELD_GUIDE_EXECUTED, the run to build from")
def test_the_book_of_this_run_builds_and_passes_every_check_in_a_browser(tmp_path_factory):
    from book import check

    out = ROOT / "build" / "book-smoke"
    assert build.main(["--run", RUN, "--out", str(out)]) == 0
    checker, counts = check.check(out)
    print(json.dumps(counts))
    assert checker.failures == []
    assert counts["lessons"] == len(notebook_paths())
    assert counts["images"] >= 5 and counts["search_results"] >= 1


def test_an_aside_is_one_fold_on_the_page_and_a_guard_folds_its_input():
    def cell(kind, text, tags):
        extra = {"outputs": []} if kind == "code" else {}
        return {"cell_type": kind, "metadata": {"tags": tags}, "source": text, **extra}

    cells = [
        cell("code", "assert ok", ["guard", "remove-input"]),  # as make sync tags a guard
        cell(
            "markdown",
            "## Aside: the simulated TPU\nSlow **here**.\n### Why\nShared cores.",
            ["aside"],
        ),
        cell("code", "print(1)", ["aside"]),
        cell("markdown", "More.", ["aside"]),
        cell("code", "plot()", ["aside"]),
        cell("markdown", "## What to remember", []),
    ]
    folded = build.fold_asides_and_guards(cells)
    sources = ["".join(c["source"]) for c in folded]
    assert "remove-input" in folded[0]["metadata"]["tags"]  # the page leaves a guard's input out
    assert sources[1].startswith('## Aside: the simulated TPU\n\n<details class="aside">')
    assert "**Why**" in sources[1] and "</details>" not in sources[1]
    assert sources[5] == "</details>\n" and sources[6] == "## What to remember"
    assert all("hide-cell" not in c["metadata"].get("tags", []) for c in folded)
