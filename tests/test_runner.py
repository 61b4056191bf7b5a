"""tools/run_notebooks.py and tools/runner: the headless run, its cache, folders and summary.

Tiny notebooks stand in for the lessons, with manifest entries of their own; each runs in a
real kernel through papermill, as the lessons do.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import manifest  # noqa: E402
import run_notebooks  # noqa: E402
import sync_notebooks  # noqa: E402
from runner import execute, summary  # noqa: E402
from runner.cache import cache_key  # noqa: E402
from runner.folders import run_folder  # noqa: E402


def _tiny_notebook(path: Path, body: str, parameters: str = "") -> Path:
    cells = [
        {
            "cell_type": "code",
            "id": "parameters",
            "metadata": {"tags": ["parameters"]},
            "source": "SMOKE_TEST = False\nSIMULATED_REPLICAS = 8\n" + parameters,
            "outputs": [],
            "execution_count": None,
        },
        {
            "cell_type": "code",
            "id": "body",
            "metadata": {},
            "source": body,
            "outputs": [],
            "execution_count": None,
        },
    ]
    metadata = {
        "kernelspec": sync_notebooks.KERNELSPEC,
        "language_info": sync_notebooks.LANGUAGE_INFO,
    }
    nb = {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    return path


def _entry(headline="{value}", **more) -> dict:
    return {"title": "T", "promise": "P", "need": "N", "headline": headline, **more}


@pytest.fixture
def run(tmp_path, monkeypatch, capsys):
    """``run(notebooks, entries, *args)``: main() on these notebooks; (exit code, rows, printed)."""

    def run_(notebooks: list[Path], entries: dict, *args: str):
        monkeypatch.setattr(run_notebooks, "notebook_paths", lambda: notebooks)
        monkeypatch.setattr(manifest, "load", lambda *a: entries)
        code = run_notebooks.main([*args, "--out", str(tmp_path / "build")])
        record = json.loads((tmp_path / "build" / "summary.json").read_text())
        return code, record["rows"], capsys.readouterr().out

    return run_


def test_numbers_recorded_skips_unchanged_notebooks_and_stderr_flagged(tmp_path, run):
    nb = _tiny_notebook(
        tmp_path / "01_ok.ipynb",
        "import sys\nfrom helpers import results\nresults.record(smoke=SMOKE_TEST, value=0.25)\n"
        "print('not expected', file=sys.stderr)",
    )
    entries = {"01_ok": _entry("value is {value}")}
    code, (row,), printed = run([nb], entries, "--smoke", "--cache")
    assert code == 0 and row["status"] == "stderr"  # ran to the end, but not a clean pass
    assert row["results"] == {"smoke": True, "value": 0.25} and row["headline"] == "value is 0.25"
    assert row["stderr"] == ["cell 2: not expected"]  # papermill added a parameters cell
    assert "| 01 ok | stderr |" in printed and "(1 unexpected stderr outputs)" in printed
    assert "0 of 1 notebooks passed" in printed and "1 ran to the end but wrote" in printed

    # Not cached: it runs again. Without the stderr it passes, and the next run skips it.
    code, (row,), printed = run([nb], entries, "--smoke", "--cache")
    assert "01_ok.ipynb: skipped" not in printed
    nb.write_text(nb.read_text().replace("print('not expected', file=sys.stderr)", "pass"))
    code, (row,), printed = run([nb], entries, "--smoke", "--cache")
    assert row["status"] == "passed"
    code, (row,), printed = run([nb], entries, "--smoke", "--cache")
    assert "01_ok.ipynb: skipped" in printed and "| 01 ok | cached |" in printed
    assert "value is 0.25" in printed


def test_the_cache_key_follows_the_notebook_and_its_parameters(tmp_path):
    nb = _tiny_notebook(tmp_path / "01_ok.ipynb", "x = 0.25")
    key = cache_key(nb, {"SMOKE_TEST": False})
    assert key == cache_key(nb, {"SMOKE_TEST": False})
    assert key != cache_key(nb, {"SMOKE_TEST": True})
    nb.write_text(nb.read_text().replace("0.25", "0.5"))
    assert cache_key(nb, {"SMOKE_TEST": False}) != key


def test_a_smoke_run_passes_the_manifests_smaller_values(tmp_path, run):
    body = "from helpers import results\nresults.record(epochs=EPOCHS, smoke=SMOKE_TEST)"
    nb = _tiny_notebook(tmp_path / "03_sizes.ipynb", body, parameters="EPOCHS = 8\n")
    entries = {"03_sizes": _entry("{epochs} epochs", smoke={"EPOCHS": 2})}
    _, (row,), _ = run([nb], entries, "--smoke")
    assert row["results"] == {"epochs": 2, "smoke": True}
    assert row["parameters"] == {"SMOKE_TEST": True, "EPOCHS": 2}
    _, (row,), _ = run([nb], entries)  # the full run: the notebook's own values
    assert row["results"] == {"epochs": 8, "smoke": False}


def test_the_replica_count_is_passed_and_cached_apart(tmp_path, run):
    nb = _tiny_notebook(
        tmp_path / "01_one.ipynb",
        "from helpers import results\nresults.record(replicas=SIMULATED_REPLICAS)",
    )
    entries = {"01_one": _entry("{replicas} replicas")}
    for replicas, ran in (("1", True), ("1", False), ("2", True)):
        _, (row,), printed = run([nb], entries, "--smoke", "--cache", "--replicas", replicas)
        assert f"SIMULATED_REPLICAS={replicas}" in printed
        assert ("01_one.ipynb: skipped" not in printed) == ran
        assert row["results"] == {"replicas": int(replicas)}
        assert row["headline"] == f"{replicas} replica" + ("" if replicas == "1" else "s")
    with pytest.raises(SystemExit):
        run_notebooks.main(["--replicas", "0", "--out", str(tmp_path / "x")])


def test_a_failing_cell_is_reported_and_the_run_fails(tmp_path, run):
    nb = _tiny_notebook(tmp_path / "02_bad.ipynb", "raise RuntimeError('boom')")
    code, (row,), printed = run([nb], {"02_bad": _entry()}, "--smoke")
    assert code == 1 and row["status"] == "FAILED"
    assert "boom" in row["error"] or "RuntimeError" in row["error"]
    assert "| 02 bad | FAILED |" in printed


def test_a_block_that_never_runs_where_it_says_fails_the_run(tmp_path, run):
    # Declared for the simulated TPU, but its condition can never be true: on the simulated TPU
    # (8 replicas, the default) the run fails; with one replica nothing was promised.
    body = (
        "from helpers.blocks import runs_on\n"
        "KIND = 'MirroredStrategy'\n"
        "if KIND == 'simulated TPU':\n"
        "    runs_on('simulated TPU')\n"
        "    print('the comparison')\n"
        "else:\n"
        "    print('this comparison runs on the simulated TPU only')"
    )
    nb = _tiny_notebook(tmp_path / "02_never.ipynb", body)
    code, (row,), _ = run([nb], {"02_never": _entry()}, "--smoke")
    assert code == 1 and row["status"] == "FAILED"
    assert (
        "a block for simulated TPU did not run on CPU, one host, 8 replicas (cell 2, line 4)"
        in (row["error"])
    )
    code, (row,), _ = run([nb], {"02_never": _entry()}, "--smoke", "--replicas", "1")
    assert code == 0 and row["status"] == "passed", row["error"]


def test_a_block_passes_where_it_runs_and_fails_where_it_says_it_does_not(tmp_path, run):
    body = (
        "from helpers.blocks import runs_on\n"
        "if SIMULATED_REPLICAS > 1:\n"
        "    runs_on('simulated TPU')\n"
        "if SIMULATED_REPLICAS > 0:  # wrongly declared: this runs everywhere\n"
        "    runs_on('one replica')"
    )
    nb = _tiny_notebook(tmp_path / "03_where.ipynb", body)
    _, (row,), _ = run([nb], {"03_where": _entry()}, "--smoke")
    assert row["status"] == "FAILED"
    assert row["error"] == (
        "a block declared for one replica ran on CPU, one host, 8 replicas (cell 2, line 5)"
    )
    _, (row,), _ = run([nb], {"03_where": _entry()}, "--smoke", "--replicas", "1")
    assert row["status"] == "passed", row["error"]


def test_a_lesson_over_its_memory_budget_fails_and_each_row_shows_its_peak(tmp_path, run):
    # 2.25 GiB of NumPy, every page written, so it is resident: over the 2 GiB budget.
    body = "import numpy as np\nheld = np.ones(int(2.25 * 2**30) // 8)\nprint(held.sum())"
    heavy = _tiny_notebook(tmp_path / "02_heavy.ipynb", body)
    light = _tiny_notebook(tmp_path / "03_light.ipynb", "x = 1")
    # A process this one started before the run (another test's, say) is no notebook's.
    import subprocess

    hold = "import numpy as np, sys; a = np.ones(2**27); print(1, flush=True); sys.stdin.read()"
    other = subprocess.Popen(
        [sys.executable, "-c", hold], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        other.stdout.readline()  # holds 1 GiB
        code, (heavy_row, light_row), printed = run(
            [heavy, light], {"02_heavy": _entry(), "03_light": _entry()}, "--smoke"
        )
    finally:
        other.kill()
    assert code == 1 and heavy_row["status"] == "FAILED"
    assert 2.25 < heavy_row["peak_gib"] < 3
    assert f"peak memory {heavy_row['peak_gib']} GiB, over the 2 GiB budget" in heavy_row["error"]
    assert light_row["status"] == "passed" and 0.01 < light_row["peak_gib"] < 0.5
    assert f"largest peak memory {heavy_row['peak_gib']:g} GiB (02)" in printed


def test_kept_files_get_a_folder_of_their_own_replaced_on_each_run(tmp_path):
    # Notebook 11_profiling_a_training_step keeps its profiles for TensorBoard: in a headless run they go under the run's
    # output folder, replaced each time, not into a new temporary folder per run.
    body = (
        "import os, time\n"
        "assert PROFILE_DIR and not os.listdir(PROFILE_DIR), PROFILE_DIR\n"
        "open(os.path.join(PROFILE_DIR, f'trace-{time.time_ns()}'), 'w').close()"
    )
    nb = _tiny_notebook(tmp_path / "11_keeps.ipynb", body, parameters='PROFILE_DIR = ""')
    out, kept = tmp_path / "build", {"PROFILE_DIR": "profiles"}
    folder = out / "files" / "11_keeps" / "profiles"
    row = execute.run_one(nb, out, {"SMOKE_TEST": True}, cell_timeout=120, kept_files=kept)
    assert row["status"] == "passed", row["error"]
    assert len(list(folder.iterdir())) == 1
    # The next run starts from an empty folder (the notebook asserts it; checked here directly).
    assert execute.kept_files_parameters(nb, out, kept) == {"PROFILE_DIR": str(folder)}
    assert not list(folder.iterdir())
    # A notebook without the parameter is given nothing (papermill would warn about it).
    plain = _tiny_notebook(tmp_path / "01_plain.ipynb", "pass")
    assert execute.kept_files_parameters(plain, out, kept) == {}


def test_two_jobs_keep_each_notebooks_results_apart_and_in_file_order(tmp_path, run):
    # Each kernel learns where to write its results from the environment, so with two notebooks
    # running at once each must still record its own numbers.
    code = "from helpers import results\nresults.record(which={n})"
    first = _tiny_notebook(tmp_path / "01_first.ipynb", code.format(n=1))
    second = _tiny_notebook(tmp_path / "02_second.ipynb", code.format(n=2))
    entries = {"01_first": _entry("{which}"), "02_second": _entry("{which}")}
    _, rows, printed = run([first, second], entries, "--jobs", "2")
    assert [(r["notebook"], r["results"]) for r in rows] == [
        ("01_first.ipynb", {"which": 1}),
        ("02_second.ipynb", {"which": 2}),
    ]
    assert "2 at a time" in printed


def test_headline_takes_the_first_template_its_numbers_fill_and_says_1_replica():
    templates = (
        "{devices} devices vs 1: weights differ by {max_weight_diff:.1e}",
        "{devices} devices, validation accuracy {val_accuracy:.1%}",
    )
    one = {"devices": 1, "val_accuracy": 0.9}
    assert summary.headline(templates, one) == "1 device, validation accuracy 90.0%"
    eight = {**one, "devices": 8, "max_weight_diff": 1e-8}
    assert summary.headline(templates, eight) == "8 devices vs 1: weights differ by 1.0e-08"
    assert summary.filled_headline(templates, {"a": 1}) is None
    assert summary.headline(templates, {"a": 1}) == "a 1"  # none fits: the raw numbers


def test_stderr_policy_honours_the_tag_and_counts_harmless_lines_apart():
    def cell(outputs, tags=()):
        return {"cell_type": "code", "metadata": {"tags": list(tags)}, "outputs": outputs}

    def stderr(*lines):
        return {"output_type": "stream", "name": "stderr", "text": [f"{x}\n" for x in lines]}

    absl = "W0000 00:00:1.0 op_level_cost_estimator.cc:699] Error in PredictCost() for the op"
    notice = "I0000 00:00:1.0 port.cc:153] oneDNN custom operations are on."
    error = {"output_type": "error", "ename": "ValueError", "evalue": "bad", "traceback": []}
    nb = {
        "cells": [
            cell([{"output_type": "stream", "name": "stdout", "text": "fine"}]),
            cell([stderr("UserWarning: x")]),
            cell([stderr("UserWarning: taught")], tags=[summary.EXPECTED_STDERR_TAG]),
            cell([error]),
            cell([stderr(notice, absl, "E0000 00:00:1.0 something.cc:1] a real error")]),
        ]
    }
    strict = summary.unexpected_stderr(nb, every_line=True, tolerate=False)
    assert strict == [
        (1, "UserWarning: x"),
        (3, "ValueError: bad"),
        (4, absl),  # on TensorFlow 2.21 an absl warning is a line to silence
        (4, "E0000 00:00:1.0 something.cc:1] a real error"),
    ]
    tolerant = summary.unexpected_stderr(nb, every_line=True, tolerate=True)
    assert tolerant == [strict[0], strict[1], strict[3]]
    assert summary.inspect(nb)["tf_log_lines"] == 2
    # The kernel forwards stderr in chunks, and a chunk may end in the middle of a line.
    split = {"output_type": "stream", "name": "stderr", "text": absl[:40]}
    rest = {"output_type": "stream", "name": "stderr", "text": absl[40:] + "\n"}
    torn = {"cells": [cell([split, rest])]}
    assert summary.unexpected_stderr(torn, every_line=True, tolerate=True) == []
    assert summary.unexpected_stderr(torn, every_line=True, tolerate=False) == [(0, absl)]


def test_each_stack_mode_and_selection_writes_its_own_folder():
    # make smoke on the kaggle stack once overwrote the main stack's executed notebooks.
    folders = [
        run_folder(mode, only, venv)
        for venv in (".venv", ".venv-kaggle", ".venv-colab", ".venv-ci")
        for mode in ("full", "smoke")
        for only in ((), ("03", "04"))
    ]
    names = [f.name for f in folders]
    assert names[:4] == ["full", "full", "smoke", "smoke-03-04"]  # a full run is always whole
    assert "smoke-kaggle" in names and "full-colab" in names
    assert len(set(folders)) == len(folders) - 4  # the full runs' selection adds no folder
    assert all(f.parent == ROOT / "build" for f in folders)


def test_the_nbval_lessons_are_the_ones_the_manifest_marks():
    import manifest

    marked = {"01_a": {"nbval": True}, "02_b": {}, "03_c": {"nbval": False}}
    assert [p.name for p in manifest.nbval_notebooks(marked)] == ["01_a.ipynb"]
    assert all(p.exists() for p in manifest.nbval_notebooks())


def test_the_places_of_a_run_and_which_blocks_they_judge():
    from runner import blocks

    cpu8 = blocks.places_of_run("CPU", 8)
    assert cpu8 == {"CPU", "one host", "simulated TPU", "several replicas", "8 replicas"}
    colab = blocks.places_of_run("CPU", 1, "colab")
    assert colab == {"CPU", "one host", "Colab", "one replica", "1 replicas"}
    tpu = blocks.places_of_run("TPU", None, "kaggle")
    assert tpu == {"TPU", "one host", "Kaggle"} and blocks.describe(tpu) == "Kaggle, TPU, one host"
    assert blocks._meant("CPU and several replicas", cpu8)
    assert not blocks._meant("TPU and several replicas", cpu8)
    # On a TPU the runner cannot count the cores: a block declared by count is not judged there.
    assert blocks._judged("TPU", tpu) and not blocks._judged("TPU and several replicas", tpu)
    with pytest.raises(ValueError, match="places"):
        from helpers.blocks import runs_on

        runs_on("simulated tpu")  # a typo fails at once


def test_processes_that_map_the_same_libraries_count_them_once():
    # Two children that import NumPy share its library pages (as a kernel and the TensorFlow
    # workers it starts share TensorFlow's); each also holds 64 MB of its own.
    import subprocess
    import time

    from runner import memory

    code = "import numpy as np, sys; a = np.ones(8 * 2**20); print(1, flush=True); sys.stdin.read()"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        for _ in range(2)
    ]
    try:
        for child in children:
            child.stdout.readline()  # allocated
        time.sleep(0.2)
        total, high = memory.together(c.pid for c in children)
        rss = [memory._status(c.pid, ("VmRSS",), "status")["VmRSS"] for c in children]
    finally:
        for child in children:
            child.kill()
    assert 2 * 64 * 2**20 < total < sum(rss)  # both private sets, the shared pages once
    assert high >= max(rss) > 64 * 2**20


def test_a_process_that_has_not_started_its_own_program_is_its_parents_memory():
    # Between fork and exec a child maps its parent's memory (with vfork, which subprocess uses,
    # the very same pages): sampled then, the runner itself was once counted as a notebook's
    # 0.9 GiB. Here this process holds 0.5 GiB and forks a child that never execs.
    import os
    import time

    import numpy as np
    from runner import memory

    held = np.ones(2**26)  # 0.5 GiB, every page written
    with memory.PeakMemory(interval=0.05) as peak:
        child = os.fork()
        if child == 0:  # the copy: waits, never runs a program of its own
            time.sleep(0.5)
            os._exit(0)
        time.sleep(0.2)
        assert memory.not_yet_executed(child)
        os.waitpid(child, 0)
    assert held[0] == 1 and peak.peak_bytes == 0
    assert not memory.not_yet_executed(os.getpid())  # pytest was started by exec
