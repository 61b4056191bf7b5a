"""One edit follows a platform: a fact changed in its one home reaches every text after make sync.

On a copy of the repository each test edits one line (Kaggle's Python in tpucheck/routes.py, the
simulated replica count in helpers/strategy.py, the repository setting or the oldest Python in
pyproject.toml), runs the Makefile's own `sync` and `lint` recipes, and reads what a reader would:
README.md, the book's pages, notebook 01_tpu_detection_and_connection, the manifest, the stacks' requirements headers and every
parameters cell, and no text still states the old value.

The reference script's tests make the edits it invites (a layer in its model, a new parser
default, another place for it) and run the fast tests that read it: each edit passes, or a
fast test or lint says what else to change (for a change of the script's numbers, the command
that records them), and the tests assert which.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "tools"))

import notebook_files  # noqa: E402


def _recipe(target: str) -> list[str]:
    """The commands of one Makefile target, with $(BIN) pointing at this environment."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    block = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert block, f"no {target} target in the Makefile"
    return [line.strip().replace("$(BIN)", str(BIN)) for line in block.group(1).splitlines()]


def _tracked(root: Path) -> list[str]:
    return subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    for name in _tracked(ROOT):
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True)  # the reference check lists files
    subprocess.run(["git", "add", "-A"], cwd=copy, check=True)
    return copy


def _edit_sync_lint(copy: Path, file: str, old: str, new: str) -> None:
    path = copy / file
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} is not one line of {file}"
    path.write_text(text.replace(old, new), encoding="utf-8")
    for command in _recipe("sync") + _recipe("lint"):
        done = subprocess.run(command, shell=True, cwd=copy, capture_output=True, text=True)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"


def _python(copy: Path, code: str) -> str:
    """What ``code`` prints, run with the copy's helpers."""
    return subprocess.run(
        [sys.executable, "-c", code], cwd=copy, capture_output=True, text=True, check=True
    ).stdout


def _routes_page(copy: Path) -> str:
    return _python(copy, "from tpucheck import routes; print(routes.markdown_table())")


def _markdown(notebook: Path) -> str:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


@pytest.mark.slow
def test_moving_kaggle_to_python_3_13_is_one_edit(tmp_path):
    copy = _copy(tmp_path)
    _edit_sync_lint(
        copy,
        "tpucheck/routes.py",
        'python="3.12",\n        cores=8',
        'python="3.13",\n        cores=8',
    )
    kaggle_row = next(
        line
        for line in (copy / "README.md").read_text().splitlines()
        if line.startswith("| Kaggle")
    )
    assert "| 3.13 |" in kaggle_row and "tensorflow-tpu==2.20.0" in kaggle_row
    assert "| Kaggle, TPU VM v5e-8 |" in _routes_page(copy) and "2.20.0" in _routes_page(copy)
    lesson = _markdown(copy / "notebooks" / "01_tpu_detection_and_connection.ipynb")
    assert "runs Python <!-- fact kaggle.python -->3.13<!-- end -->" in lesson
    assert "<!-- fact kaggle.route -->`tensorflow-tpu==2.20.0` `libtpu==0.0.14`" in lesson
    assert "3.12" not in (copy / "notebooks" / "manifest.toml").read_text()
    header = (copy / "requirements-kaggle.txt").read_text()
    assert header.startswith("# python: 3.13\n") and "\ntensorflow-cpu==2.20.0\n" in header
    assert "(tensorflow-tpu==2.20.0)" in header


@pytest.mark.slow
def test_changing_the_simulated_replica_count_is_one_edit(tmp_path):
    copy = _copy(tmp_path)
    _edit_sync_lint(
        copy, "helpers/strategy.py", "SIMULATED_REPLICAS = 8\n", "SIMULATED_REPLICAS = 4\n"
    )
    for notebook in sorted((copy / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        parameters = next(c for c in cells if "parameters" in c["metadata"].get("tags", []))
        assert "SIMULATED_REPLICAS = 4 " in "".join(parameters["source"]), notebook.name
    assert (copy / "requirements.txt").read_text().splitlines()[1] == "# replicas: 4"
    for page in ("README.md", "book/index.md"):
        text = (copy / page).read_text()
        assert "simulates <!-- fact simulated.tpu -->a 4-core TPU<!-- end -->" in text, page
        assert "over <!-- fact simulated.replicas -->4<!-- end --> logical CPU" in text, page
    # A platform's stack keeps its TPU's cores: 8 means a v5e-8 there, not the default.
    assert (copy / "requirements-kaggle.txt").read_text().splitlines()[1] == "# replicas: 8"


def _tracked_text(copy: Path) -> dict[str, str]:
    found = {}
    for name in _tracked(copy):
        if not name.startswith("tests/data/") and (copy / name).is_file():
            found[name] = (copy / name).read_text(encoding="utf-8", errors="replace")
    return found


@pytest.mark.slow
def test_moving_the_repository_is_one_edit(tmp_path):
    copy = _copy(tmp_path)
    old = notebook_files.settings()["github"]  # read, so that this file names no old address
    _edit_sync_lint(copy, "pyproject.toml", f'github = "{old}"', 'github = "Another-Org/tpu-guide"')
    texts = _tracked_text(copy)
    owner = old.split("/")[0].lower()
    stale = [name for name, text in texts.items() if old in text or f"{owner}.github.io" in text]
    assert stale == []
    readme = texts["README.md"]
    assert "[book]: https://another-org.github.io/tpu-guide/\n" in readme
    assert "[book-tested]: https://another-org.github.io/tpu-guide/tested.html\n" in readme
    assert "`pip install git+https://github.com/Another-Org/tpu-guide@v0.1.0 && " in readme
    assert "colab.research.google.com/github/Another-Org/tpu-guide/blob/main/notebooks/" in readme
    assert 'REPOSITORY = "https://github.com/Another-Org/tpu-guide"' in texts["helpers/lesson.py"]
    lesson_00 = _markdown(copy / "notebooks" / "00_tpu_self_test.ipynb")
    assert "pip install -q git+https://github.com/Another-Org/tpu-guide@v0.1.0" in lesson_00


@pytest.mark.slow
def test_dropping_the_oldest_python_is_one_edit(tmp_path):
    copy = _copy(tmp_path)
    _edit_sync_lint(
        copy, "pyproject.toml", 'requires-python = ">=3.10"', 'requires-python = ">=3.11"'
    )
    texts = _tracked_text(copy)
    # What stated the range, or kept code for 3.10; "3.10" stays where it means something else
    # (Keras 3.10, the Pythons a tensorflow-tpu wheel exists for).
    stale = re.compile(r"Python 3\.10\b|3\.10 to|\bpy310\b|\(3, 11\)|\| 3\.10 \|")
    assert [name for name, text in texts.items() if stale.search(text)] == []
    assert (
        "Quick start (Python <!-- fact project.pythons -->3.11 to 3.13<!-- end -->"
        in texts["README.md"]
    )
    assert (
        "(Python <!-- fact project.pythons -->3.11 to 3.13<!-- end -->," in texts["book/index.md"]
    )
    assert texts["requirements.txt"].startswith("# python: the machine's python3 (3.11 to 3.13)\n")
    code = "from tpucheck import routes; print(routes.PYTHONS_CHECKED, routes.OTHER.other_python)"
    assert _python(copy, code).startswith(
        "('3.11', '3.12', '3.13', '3.14') Use Python 3.11 to 3.13 "
    )
    assert "import tomllib\n" in texts["tools/notebook_files.py"]  # ruff removed the fallback
    tests = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*tests, "tests/test_routes.py"], cwd=copy, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:]


def _parameters(copy: Path) -> dict[str, str]:
    """Each lesson's parameters cell, by file name."""
    found = {}
    for notebook in sorted((copy / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        cell = next(c for c in cells if "parameters" in c["metadata"].get("tags", []))
        found[notebook.name] = "".join(cell["source"])
    return found


def _values(text: str, name: str) -> list[str]:
    return re.findall(rf"^{name} = (\S+)", text, re.MULTILINE)


@pytest.mark.slow
def test_giving_one_lesson_its_own_replica_count_is_one_manifest_edit(tmp_path):
    copy = _copy(tmp_path)
    before = _parameters(copy)
    heading = "[notebooks.model_parallelism.smoke]\n"
    own = "[notebooks.model_parallelism.settings]\nSIMULATED_REPLICAS = 4\n\n"
    _edit_sync_lint(copy, "notebooks/manifest.toml", heading, own + heading)
    after = _parameters(copy)
    assert _values(after["07_model_parallelism.ipynb"], "SIMULATED_REPLICAS") == ["4"]
    changed = [name for name in after if after[name] != before[name]]
    assert changed == ["07_model_parallelism.ipynb"]  # the others keep the default
    # A hand edit of a shared setting: lint names the manifest key to set, not "out of date".
    path = copy / "notebooks" / "03_keras_compile_and_fit.ipynb"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('"PER_REPLICA_BATCH = 128 ', '"PER_REPLICA_BATCH = 96 ', 1))
    check = [sys.executable, "tools/sync_notebooks.py", "--check"]
    done = subprocess.run(check, cwd=copy, capture_output=True, text=True)
    assert done.returncode == 1
    assert "[notebooks.keras_compile_and_fit.settings]" in done.stdout
    assert "[settings] PER_REPLICA_BATCH" in done.stdout and "Out of date" not in done.stdout


@pytest.mark.slow
def test_changing_the_training_lessons_per_replica_batch_is_one_manifest_edit(tmp_path):
    copy = _copy(tmp_path)
    before = _parameters(copy)
    default = re.search(
        r"^PER_REPLICA_BATCH = (\d+)", (copy / "notebooks/manifest.toml").read_text(), re.M
    )
    old = int(default.group(1))
    new = old * 2
    _edit_sync_lint(
        copy,
        "notebooks/manifest.toml",
        f"PER_REPLICA_BATCH = {old}  #",
        f"PER_REPLICA_BATCH = {new}  #",
    )
    after = _parameters(copy)
    took_default = [n for n in before if _values(before[n], "PER_REPLICA_BATCH") == [str(old)]]
    assert took_default, "no lesson uses the default per-replica batch"
    for name, text in after.items():
        expected = (
            [str(new)] if name in took_default else _values(before[name], "PER_REPLICA_BATCH")
        )
        assert _values(text, "PER_REPLICA_BATCH") == expected, name
    stale = [
        name
        for name, text in _tracked_text(copy).items()
        if name.startswith(("helpers/", "tools/")) and re.search(rf"PER_REPLICA\w* = {old}\b", text)
    ]
    assert stale == []


@pytest.mark.slow
def test_recording_a_new_platform_snapshot_is_one_folder_and_one_name(tmp_path):
    # A new snapshot in which Kaggle's TPU image moved to Python 3.13: the folder, then the one
    # name in tools/platforms.py; the tests' and `make platforms RECORDED=today`'s reading follows.
    copy = _copy(tmp_path)
    recorded = copy / "tests" / "data" / "platforms"
    shutil.copytree(recorded / "kaggle-python-3.13", recorded / "2026-12")
    _edit_sync_lint(copy, "tools/platforms.py", 'TODAY = "2026-11"', 'TODAY = "2026-12"')
    done = subprocess.run(
        [sys.executable, "tools/platforms.py", "--recorded", "today"],
        cwd=copy, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 1 and 'PLATFORMS["kaggle"] python="3.13"' in done.stdout
    # The platform tests read the new snapshot too: today's "no drift" now sees Kaggle's move.
    test = "tests/test_platforms.py::test_todays_recorded_platforms_show_no_drift"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", test],
        cwd=copy, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 1 and "1 failed" in done.stdout


# The reference script, as pyproject.toml places it.
SCRIPT = notebook_files.settings()["script"]
FAST = ["-m", "not slow and not browser"]


def _pytest(copy: Path, *args: str, workers: int = 2) -> subprocess.CompletedProcess:
    """pytest in the copy, on its own helpers and script (not this checkout's). One test needs
    no workers: starting two took 6 s of CPU more than the test itself."""
    env = {**os.environ, "PYTHONPATH": str(copy)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(workers)]
    command += args
    return subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True)


def _failed(done: subprocess.CompletedProcess) -> list[str]:
    return re.findall(r"^FAILED (\S+)", done.stdout, re.MULTILINE)


@pytest.mark.slow
def test_a_dropout_in_the_scripts_model_is_one_edit_and_one_record(tmp_path):
    # A Dropout draws random numbers in training. The lessons' model cells follow the script
    # through make sync; the custom loop's checkpoint keeps the layer's seed state, so the
    # script's own tests pass; only the fast behaviour check fails, since the script's numbers
    # changed, and it says what differs and which command records the new numbers.
    copy = _copy(tmp_path)
    dense = 'x = keras.layers.Dense(128, activation="relu", kernel_initializer=init[2], dtype=policy)(x)\n'
    dropout = "    x = keras.layers.Dropout(0.25, seed=seed, dtype=policy)(x)\n"
    _edit_sync_lint(copy, SCRIPT, dense, dense + dropout)
    shown = [
        p.name for p in (copy / "notebooks").glob("*.ipynb") if "Dropout(0.25" in p.read_text()
    ]
    assert shown, "no lesson shows the model part"
    # The fast tests of the script's model: its own, its photos example's, the record's. Left
    # out, as no edit of the script's model reaches them: the fortunes example (a model of its
    # own) and the simulated TPU's tests (test_simulation.py: a strategy, no model).
    modules = ["train_tpu", "examples", "script_behaviour"]
    done = _pytest(
        copy, *FAST, "-k", "not fortunes", *[str(Path("tests") / f"test_{m}.py") for m in modules]
    )
    check = "tests/test_script_behaviour.py::test_the_script_behaves_as_recorded"
    assert _failed(done) == [check], done.stdout[-3000:]
    assert "run loss: [" in done.stdout
    assert "commit the file: python tests/test_script_behaviour.py --record" in done.stdout


@pytest.mark.slow
def test_changing_the_scripts_default_per_replica_batch_is_one_edit(tmp_path):
    copy = _copy(tmp_path)
    (old,) = re.findall(
        r'"--per-replica-batch", type=positive, default=(\d+)', (copy / SCRIPT).read_text()
    )
    new = int(old) * 2
    _edit_sync_lint(
        copy,
        SCRIPT,
        f'"--per-replica-batch", type=positive, default={old},',
        f'"--per-replica-batch", type=positive, default={new},',
    )
    # What reads the default: the script's tests, the epoch plans, the lessons' settings held to
    # it, the pod commands. Left out: the script's runs that set their own --per-replica-batch
    # (the very small run, fit on one replica), which no default reaches.
    modules = ["train_tpu", "epoch_plans", "lesson_code_keras3_on_jax", "pods", "script_behaviour"]
    own_batch = "not very_small_run and not fit_on_one_replica"
    done = _pytest(
        copy, *FAST, "-k", own_batch, *[str(Path("tests") / f"test_{m}.py") for m in modules]
    )
    # Twice the batch halves the epochs of lesson checkpoints_and_preemption's killed runs, which
    # then have no save inside an epoch to kill: its settings are named, in both versions. The
    # behaviour check names the default and the numbers that follow from it, and the record.
    plan = "test_lesson_checkpoints_and_preemption_kills_inside_an_epoch_at_the_scripts_batch"
    expected = [f"tests/test_epoch_plans.py::{plan}[{v}]" for v in ("full", "smoke")]
    expected.append("tests/test_script_behaviour.py::test_the_script_behaves_as_recorded")
    assert sorted(_failed(done)) == expected, done.stdout[-3000:]
    assert f"defaults per_replica_batch: {new}, recorded {old}" in done.stdout
    assert "change them in 08_checkpoints_and_preemption's parameters cell" in done.stdout
    assert "change them in [notebooks.checkpoints_and_preemption.smoke]" in done.stdout


@pytest.mark.slow
def test_moving_the_script_into_a_folder_says_what_else_to_do(tmp_path):
    copy = _copy(tmp_path)
    moved = f"scripts/{Path(SCRIPT).name}"
    (copy / "scripts").mkdir()
    shutil.move(copy / SCRIPT, copy / moved)
    subprocess.run(["git", "add", "-A"], cwd=copy, check=True)
    path = copy / "pyproject.toml"
    text = path.read_text(encoding="utf-8")
    assert text.count(f'script = "{SCRIPT}"') == 1
    path.write_text(text.replace(f'script = "{SCRIPT}"', f'script = "{moved}"'))
    commands = _recipe("sync") + _recipe("lint")
    results = [
        subprocess.run(c, shell=True, cwd=copy, capture_output=True, text=True) for c in commands
    ]
    failed = {c: r.stdout for c, r in zip(commands, results, strict=True) if r.returncode}
    # Everything derived follows (the part cells, the import blocks); the README's link to the
    # script is prose, and the reference check names it.
    assert [c.split()[1] for c in failed] == ["tools/check_references.py"], failed
    (out,) = failed.values()
    assert f"README.md: the link {SCRIPT}: no such file" in out
    # Packaging installs the script from the root: a fast test says what to add.
    done = _pytest(copy, "tests/test_repository.py", "-k", "script_setting", workers=0)
    assert "py-modules takes modules at the root: add a package-dir" in done.stdout
