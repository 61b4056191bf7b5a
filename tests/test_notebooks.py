"""Structure of every notebook, the generated parts, and the tools that run them.

The notebooks themselves are executed once by tools/run_notebooks.py in `make test`;
tests/test_executed_notebooks.py checks the executed copies.
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import notebook_files  # noqa: E402
import run_notebooks  # noqa: E402
import sync_notebooks  # noqa: E402

PATHS = notebook_files.notebook_paths()
IDS = [p.stem for p in PATHS]


def test_there_are_notebooks():
    # 00 is the TPU self-test, run before the lessons; the lessons start at 01.
    assert [p.name[:2] for p in PATHS[:2]] == ["00", "01"]


def test_numbers_are_unique_and_names_snake_case():
    numbers = [p.name[:2] for p in PATHS]
    assert len(numbers) == len(set(numbers))
    for path in PATHS:
        assert re.fullmatch(r"\d\d_[a-z0-9]+(_[a-z0-9]+)*\.ipynb", path.name), path.name


@pytest.fixture(params=PATHS, ids=IDS)
def notebook(request):
    path = request.param
    return path, json.loads(path.read_text(encoding="utf-8"))


def _source(cell):
    return notebook_files.source(cell)


def test_metadata_for_papermill_and_nbval(notebook):
    _, nb = notebook
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    assert nb["metadata"]["language_info"]["name"] == "python"


def test_outputs_are_stripped(notebook):
    path, nb = notebook
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [], f"{path.name}: stored outputs"
            assert cell["execution_count"] is None, f"{path.name}: execution count"


def test_title_promise_and_closing_section(notebook):
    path, nb = notebook
    first = _source(nb["cells"][0])
    assert first.startswith(f"# {path.name[:2]} · "), first[:60]
    assert len(first.splitlines()) >= 2, "the title needs a one-paragraph promise under it"
    assert any("## What to remember" in _source(c) for c in nb["cells"][-3:])


def test_parameters_cell_holds_only_literals(notebook):
    path, nb = notebook
    tagged = [c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: exactly one cell tagged 'parameters'"
    for line in _source(tagged[0]).splitlines():  # papermill's parser counts every "="
        assert line.count("=") <= 1, f"{path.name}: papermill cannot parse {line!r}"
    tree = ast.parse(_source(tagged[0]))
    names = {}
    for node in tree.body:
        assert isinstance(node, ast.Assign), f"{path.name}: only assignments in parameters"
        names[node.targets[0].id] = ast.literal_eval(node.value)  # raises if derived
    assert isinstance(names.get("SMOKE_TEST"), bool) and names["SMOKE_TEST"] is False
    assert isinstance(names.get("SIMULATED_REPLICAS"), int) and names["SIMULATED_REPLICAS"] >= 1


def test_badges_match_the_file_path(notebook):
    path, nb = notebook
    badge = _source(nb["cells"][1])
    assert badge.startswith(sync_notebooks.BADGE_MARKER)
    links = re.findall(r"\]\((https://[^)]+)\)", badge)
    targets = [link for link in links if "badge" not in link and "svg" not in link]
    assert len(targets) == 3
    for link in targets:
        assert link.endswith(f"/notebooks/{path.name}"), link
    cfg = notebook_files.settings()
    assert all(cfg["github"] in link for link in targets)


def test_setup_cell_follows_parameters(notebook):
    path, nb = notebook
    cells = nb["cells"]
    index = next(i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", []))
    setup = _source(cells[index + 1])
    assert setup.startswith(sync_notebooks.SETUP_MARKER)
    variant = sync_notebooks.load_manifest()[path.stem].get("setup", "tensorflow")
    if variant == "jax":  # Keras on JAX: no TensorFlow at all
        assert "jax_port.configure(" in setup and "quiet_tensorflow" not in setup
    elif variant == "tensorflow":
        assert "runtime.ensure_tensorflow()" in setup
    assert notebook_files.settings()["release"] in setup


def test_everything_derived_is_up_to_date(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["sync_notebooks.py", "--check"])
    assert sync_notebooks.main() == 0, "run `make sync`"


def test_readme_table_lists_every_notebook():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for path in PATHS:
        assert f"(notebooks/{path.name})" in readme


def test_sync_is_idempotent_and_repairs_a_tampered_badge():
    cfg = notebook_files.settings()
    path = PATHS[0]
    nb = json.loads(path.read_text(encoding="utf-8"))
    nb["cells"][1]["source"] = [sync_notebooks.BADGE_MARKER + "\n[old](https://example.com)"]
    repaired = sync_notebooks.sync_notebook(nb, path.name, cfg)
    assert notebook_files.dumps(repaired) == path.read_text(encoding="utf-8")


def _tiny_notebook(path: Path, body: str, parameters: str = "") -> Path:
    cells = [
        {
            "cell_type": "code",
            "metadata": {"tags": ["parameters"]},
            "source": "SMOKE_TEST = False\n" + parameters,
            "outputs": [],
            "execution_count": None,
        },
        {
            "cell_type": "code",
            "metadata": {},
            "source": body,
            "outputs": [],
            "execution_count": None,
        },
    ]
    nb = {
        "cells": cells,
        "metadata": {
            "kernelspec": sync_notebooks.KERNELSPEC,
            "language_info": sync_notebooks.LANGUAGE_INFO,
        },
        "nbformat": 4,
        "nbformat_minor": 4,
    }
    path.write_text(json.dumps(nb))
    return path


def test_runner_records_numbers_skips_unchanged_notebooks_and_flags_stderr(
    tmp_path, monkeypatch, capsys
):
    nb = _tiny_notebook(
        tmp_path / "01_ok.ipynb",
        "import sys\nfrom helpers import results\nresults.record(smoke=SMOKE_TEST, value=0.25)\n"
        "print('not expected', file=sys.stderr)",
    )
    out = tmp_path / "build"
    monkeypatch.setattr(run_notebooks, "notebook_paths", lambda: [nb])
    monkeypatch.setattr(sys, "argv", ["run_notebooks.py", "--smoke", "--cache", "--out", str(out)])
    assert run_notebooks.main() == 0
    (row,) = json.loads((out / "summary.json").read_text())
    assert row["status"] == "passed" and row["results"] == {"smoke": True, "value": 0.25}
    assert row["stderr"] == ["cell 2: not expected"]  # papermill added a parameters cell
    assert "| 01 ok | passed |" in capsys.readouterr().out

    # Nothing changed: skipped, and the table still shows its result.
    assert run_notebooks.main() == 0
    printed = capsys.readouterr().out
    assert "01_ok.ipynb: skipped" in printed and "| 01 ok | cached |" in printed
    assert "value 0.25" in printed

    # A changed parameter (full mode) is a different cache entry: it runs.
    monkeypatch.setattr(sys, "argv", ["run_notebooks.py", "--cache", "--out", str(out)])
    key = run_notebooks.cache_key(nb, {"SMOKE_TEST": False})
    assert key != run_notebooks.cache_key(nb, {"SMOKE_TEST": True})
    nb.write_text(nb.read_text().replace("0.25", "0.5"))  # and so does a changed notebook
    assert run_notebooks.cache_key(nb, {"SMOKE_TEST": False}) != key


def test_runner_passes_the_replica_count_and_caches_it_apart(tmp_path, monkeypatch, capsys):
    nb = _tiny_notebook(
        tmp_path / "01_one.ipynb",
        "from helpers import results\nresults.record(replicas=SIMULATED_REPLICAS)",
    )
    out = tmp_path / "build"
    monkeypatch.setattr(run_notebooks, "notebook_paths", lambda: [nb])
    for replicas, ran in (("1", True), ("1", False), ("2", True)):
        argv = ["run_notebooks.py", "--smoke", "--cache", "--replicas", replicas, "--out", str(out)]
        monkeypatch.setattr(sys, "argv", argv)
        assert run_notebooks.main() == 0
        printed = capsys.readouterr().out
        assert f"SIMULATED_REPLICAS={replicas}" in printed
        assert ("01_one.ipynb: skipped" not in printed) == ran
        (row,) = json.loads((out / "summary.json").read_text())
        assert row["results"] == {"replicas": int(replicas)}
    monkeypatch.setattr(sys, "argv", ["run_notebooks.py", "--replicas", "0", "--out", str(out)])
    with pytest.raises(SystemExit):
        run_notebooks.main()


def test_stderr_check_honours_the_expected_stderr_tag():
    def cell(outputs, tags=()):
        return {"cell_type": "code", "metadata": {"tags": list(tags)}, "outputs": outputs}

    warning = {"output_type": "stream", "name": "stderr", "text": ["\n", "UserWarning: x\n"]}
    printed = {"output_type": "stream", "name": "stdout", "text": "fine"}
    error = {"output_type": "error", "ename": "ValueError", "evalue": "bad", "traceback": []}
    nb = {
        "cells": [
            cell([printed]),
            cell([warning]),
            cell([warning], tags=[run_notebooks.EXPECTED_STDERR_TAG]),
            cell([error]),
        ]
    }
    assert run_notebooks.unexpected_stderr(nb) == [(1, "UserWarning: x"), (3, "ValueError: bad")]


def test_runner_reports_a_failing_cell(tmp_path):
    nb = _tiny_notebook(tmp_path / "02_bad.ipynb", "raise RuntimeError('boom')")
    row = run_notebooks.run_one(nb, tmp_path / "build", {"SMOKE_TEST": True}, cell_timeout=120)
    assert row["status"] == "FAILED"
    assert "boom" in row["error"] or "RuntimeError" in row["error"]


def test_runner_gives_kept_files_a_folder_of_its_own_replaced_on_each_run(tmp_path):
    # Notebook 11 keeps its profiles for TensorBoard: in a headless run they go under the run's
    # output folder, replaced each time, not into a new temporary folder per run.
    body = (
        "import os, time\n"
        "assert PROFILE_DIR and not os.listdir(PROFILE_DIR), PROFILE_DIR\n"
        "open(os.path.join(PROFILE_DIR, f'trace-{time.time_ns()}'), 'w').close()"
    )
    nb = _tiny_notebook(tmp_path / "11_keeps.ipynb", body, parameters='PROFILE_DIR = ""')
    out = tmp_path / "build"
    kept = out / "files" / "11_keeps" / "profiles"
    row = run_notebooks.run_one(nb, out, {"SMOKE_TEST": True}, cell_timeout=120)
    assert row["status"] == "passed", row["error"]
    assert len(list(kept.iterdir())) == 1
    # The next run starts from an empty folder (the notebook asserts it; checked here directly).
    assert run_notebooks.kept_files_parameters(nb, out) == {"PROFILE_DIR": str(kept)}
    assert not list(kept.iterdir())
    # A notebook without the parameter is given nothing (papermill would warn about it).
    plain = _tiny_notebook(tmp_path / "01_plain.ipynb", "pass")
    assert run_notebooks.kept_files_parameters(plain, out) == {}


def test_runner_with_two_jobs_keeps_each_notebooks_results_apart(tmp_path, monkeypatch, capsys):
    # Each kernel learns where to write its results from the environment, so with two notebooks
    # running at once each must still record its own numbers, and the table keeps file order.
    code = "from helpers import results\nresults.record(which={n})"
    first = _tiny_notebook(tmp_path / "01_first.ipynb", code.format(n=1))
    second = _tiny_notebook(tmp_path / "02_second.ipynb", code.format(n=2))
    out = tmp_path / "build"
    monkeypatch.setattr(run_notebooks, "notebook_paths", lambda: [first, second])
    monkeypatch.setattr(sys, "argv", ["run_notebooks.py", "--jobs", "2", "--out", str(out)])
    assert run_notebooks.main() == 0
    rows = json.loads((out / "summary.json").read_text())
    assert [(r["notebook"], r["results"]) for r in rows] == [
        ("01_first.ipynb", {"which": 1}),
        ("02_second.ipynb", {"which": 2}),
    ]
    assert "2 at a time" in capsys.readouterr().out


def test_every_headline_names_numbers_its_notebook_records(notebook):
    # The summary of `make run` says each notebook's result in words; a renamed result would
    # silently fall back to raw numbers.
    path, nb = notebook
    template = run_notebooks.HEADLINES.get(path.name[:2])
    assert template, f"add a headline for {path.name} to tools/run_notebooks.py HEADLINES"
    recorded = {
        keyword.arg
        for cell in nb["cells"]
        if cell["cell_type"] == "code" and not _source(cell).lstrip().startswith(("%", "!"))
        for node in ast.walk(ast.parse(_source(cell)))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "results.record"
        for keyword in node.keywords
    }
    for one in (template,) if isinstance(template, str) else template:
        named = {field.split(":")[0] for field in re.findall(r"{(\w+(?::[^}]*)?)}", one)}
        assert named <= recorded, f"{path.name}: {sorted(named - recorded)} not recorded"


def test_headline_takes_the_first_template_its_numbers_fill_and_says_1_replica():
    one_device = {"devices": 1, "val_accuracy": 0.9, "restore_max_diff": 0.0}
    assert run_notebooks.headline("12_x", one_device).startswith("1 device, validation accuracy 90")
    eight = {**one_device, "devices": 8, "max_weight_diff": 1e-8, "sharded_max_weight_diff": 2e-8}
    assert run_notebooks.headline("12_x", eight).startswith("8 devices vs 1: weights differ")
    assert run_notebooks.headline("99_x", {"a": 1}) == "a 1"  # no template: the raw numbers


def test_stderr_check_leaves_out_only_the_absl_lines_older_tensorflow_cannot_silence():
    text = [
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
        "W0000 00:00:1.0 op_level_cost_estimator.cc:699] Error in PredictCost() for the op\n",
        "I0000 00:00:1.0 service.cc:152] XLA service initialized\n",
        "E0000 00:00:1.0 something.cc:1] a real error\n",
    ]
    logs = {"output_type": "stream", "name": "stderr", "text": text}
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [logs]}]}
    assert run_notebooks.unexpected_stderr(nb, every_line=True, tolerate=True) == [
        (0, "E0000 00:00:1.0 something.cc:1] a real error")
    ]
    assert len(run_notebooks.unexpected_stderr(nb, every_line=True, tolerate=False)) == 4
    assert run_notebooks.unsilenceable_lines(nb) == 3


def _make_out_folders(*args: str) -> list[str]:
    """The ``--out`` folders of the runs ``make -n ARGS`` would start (nothing is executed)."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # As a user types it, with none of the variables of a make that runs this test: make exports
    # its command-line variables (CI's VENV=.venv-ci) to the environment as well as to MAKEFLAGS.
    env = {name: os.environ[name] for name in ("PATH", "HOME") if name in os.environ}
    dry = subprocess.run(
        ["make", "-n", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    return re.findall(r"run_notebooks\.py .*?--out (\S+)", dry)


def test_each_stack_and_mode_writes_its_own_folder():
    # make smoke on the kaggle stack once overwrote the main stack's executed notebooks.
    folders = {
        stack: _make_out_folders("run", "smoke", "test", f"STACK={stack}")
        for stack in ("main", "kaggle", "colab")
    }
    assert folders["main"] == ["build/full", "build/smoke", "build/smoke"]
    assert folders["kaggle"] == ["build/full-kaggle", "build/smoke-kaggle", "build/smoke-kaggle"]
    run_and_smoke = [f for stack in folders.values() for f in stack[:2]]
    assert len(set(run_and_smoke)) == 6  # make test shares make smoke's folder (and its cache)
    assert _make_out_folders("smoke", "NB=03 04") == ["build/smoke-03-04"]
