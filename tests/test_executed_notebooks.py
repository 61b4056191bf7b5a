"""The notebooks as `make test` executed them (tools/run_notebooks.py --smoke, once per stack).

Nothing is executed here: the checks read the executed copies and the run's summary, named by
FIELD_GUIDE_EXECUTED (the run's output folder). Without it, as in `make test-unit`, they skip.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import manifest  # noqa: E402
import notebook_files  # noqa: E402
from lessons import lesson_name  # noqa: E402
from runner import summary as run_summary  # noqa: E402

RUN = os.environ.get("FIELD_GUIDE_EXECUTED")
PATHS = notebook_files.notebook_paths()
pytestmark = [
    pytest.mark.skipif(not RUN, reason="needs FIELD_GUIDE_EXECUTED (make test sets it)"),
    pytest.mark.stacks,  # every stack checks its own executed lessons
]


@pytest.fixture(scope="module")
def summary():
    path = Path(RUN) / "summary.json"
    assert path.exists(), f"{path}: the notebooks did not run"
    return {row["notebook"]: row for row in json.loads(path.read_text())["rows"]}


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_passed(path, summary):
    if path.name not in summary:
        pytest.skip("not selected in this run (NB=...)")
    row = summary[path.name]
    # A notebook that wrote unexpected stderr ran to its end: the stderr test below names it.
    assert row["status"] in run_summary.RAN, row.get("error")


# Known to fail, by lesson name, with the reason; strict, so a fix shows up as a failure until
# removed here.
KNOWN_STDERR: dict[str, str] = {}
STDERR_CASES = [
    pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=KNOWN_STDERR[lesson_name(p)]))
    if lesson_name(p) in KNOWN_STDERR
    else p
    for p in PATHS
]


@pytest.mark.parametrize("path", STDERR_CASES, ids=[p.stem for p in PATHS])
def test_no_stderr_outside_cells_that_teach_it(path, summary):
    if path.name not in summary:
        pytest.skip("not selected in this run (NB=...)")
    executed = json.loads((Path(RUN) / "executed" / path.name).read_text(encoding="utf-8"))
    # On TensorFlow 2.19/2.20 this leaves out the absl lines no setting silences, nothing else.
    found = run_summary.unexpected_stderr(executed, every_line=True)
    assert not found, (
        f"stderr in cells not tagged {run_summary.EXPECTED_STDERR_TAG!r}: silence it at the "
        f"source (helpers.quiet) or tag a cell that teaches it: {found}"
    )


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_headline_is_filled_from_the_numbers_the_run_recorded(path, summary):
    # A headline naming a number the notebook no longer records would fall back to raw numbers.
    if path.name not in summary:
        pytest.skip("not selected in this run (NB=...)")
    templates = manifest.headlines(manifest.entry_for(manifest.load(), path.name))
    results = summary[path.name]["results"]
    assert run_summary.filled_headline(templates, results), (
        f"{path.name}: no headline in notebooks/manifest.toml fits what it recorded: {sorted(results)}"
    )


# Lessons with no input pipeline or model of their own, so nothing for the readiness check.
NO_READINESS_CHECK = {
    "tpu_self_test": "the self-test runs the script's pipeline; its input_pipeline check sees the batches",
    "model_parallelism": "topologies, and two layers split over devices by hand: no input pipeline",
    "keras3_on_jax": "Keras on JAX: the check traces TensorFlow, which this notebook never imports",
    "checkpoints_and_preemption": "trains the script's pipeline, which 03's guards check clean",
    "scaling_out_to_pods": "the script's pipeline again, in worker processes; 03 checks it",
}


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_passed_the_readiness_check_on_its_own_pipeline(path, summary):
    """Every ``readiness.check(...).assert_clean()`` that passes counts itself in the run's
    results (helpers.results.count), so this reads what ran, not what the source says."""
    if path.name not in summary:
        pytest.skip("not selected in this run (NB=...)")
    clean = summary[path.name]["results"].get("_readiness_clean", 0)
    if lesson_name(path) in NO_READINESS_CHECK:
        assert clean == 0, (
            f"{path.name}: it checks a pipeline now; remove it from NO_READINESS_CHECK"
        )
    else:
        assert clean >= 1, (
            f"{path.name}: no readiness check passed; check its pipeline (notebook 10_tpu_readiness_check)"
        )


# Past about 100 columns an output area wraps: a printed table (columns aligned by runs of
# spaces, or Markdown pipes) loses its columns, and a word of 70 characters or more (a device
# path, an object's repr) is cut in the middle. Prose wraps between words and may be longer.
TABLE_LINE = re.compile(r"\S(?: {2,}\S.*){2,}|^\s*\|")
UNBREAKABLE = re.compile(r"\S{70,}")
COLUMNS = 100


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_printed_tables_fit_an_output_area(path, summary):
    if path.name not in summary:
        pytest.skip("not selected in this run (NB=...)")
    executed = json.loads((Path(RUN) / "executed" / path.name).read_text(encoding="utf-8"))
    wide = [
        line
        for cell in executed["cells"]
        for output in cell.get("outputs", [])
        if output.get("name") == "stdout"
        for line in notebook_files.source({"source": output.get("text", "")}).splitlines()
        if len(line) > COLUMNS and (TABLE_LINE.search(line) or UNBREAKABLE.search(line))
    ]
    assert not wide, f"{path.name}: lines that wrap badly in an output area: {wide[:3]}"
