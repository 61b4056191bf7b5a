"""What CI and the repository's habits rest on: one list of stacks, which the Makefile, .ci/run and
the tests workflow follow; and the commit-message hook, which refuses a long subject."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import stacks  # noqa: E402
from notebook_files import settings  # noqa: E402

NAMES = stacks.names()


def test_the_workflow_runs_make_test_on_each_stack_in_order():
    text = (ROOT / stacks.WORKFLOW).read_text(encoding="utf-8")
    job = yaml.safe_load(text)["jobs"]["stack"]
    assert [row["stack"] for row in job["strategy"]["matrix"]["include"]] == NAMES
    assert job["steps"][-1]["run"] == "make test STACK=${{ matrix.stack }}"
    assert any(step.get("run", "").strip().endswith(".ci/packages") for step in job["steps"])
    main_python = ".".join(settings()["python"].split(".")[:2])
    assert stacks.workflow_synced(text, main_python) == text  # make lint holds it so


def test_a_stack_missing_from_the_workflow_is_written_back_by_make_sync():
    text = (ROOT / stacks.WORKFLOW).read_text(encoding="utf-8")
    drifted = re.sub(rf"^ *- {{stack: {NAMES[-1]},.*\n", "", text, flags=re.MULTILINE)
    assert drifted != text
    assert stacks.workflow_synced(drifted, "3.11").count("{stack: ") == len(NAMES)


def _code(path: Path) -> str:
    """A shell script or Makefile without its comments."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return "\n".join(line.split("#", 1)[0] for line in lines)


def test_ci_run_and_the_makefile_name_no_stack_of_their_own():
    for file in (".ci/run", "Makefile"):
        code = _code(ROOT / file)
        assert "tools/stacks.py --names" in code, file
        # A stack's own behaviour (kaggle's quick versions) is the Makefile's; no list of them.
        listed = [name for name in NAMES if re.search(rf"STACK[ =]+{name}\b|{name} .venv", code)]
        assert not listed, f"{file} names the stacks {listed}: ask tools/stacks.py"
        files = [file for file, _ in list(stacks.STACK_FILES.values())[1:] if file in code]
        assert not files, f"{file} names {files}: ask tools/stacks.py --requirements"


def test_the_makefile_takes_each_stack_and_refuses_another():
    for name in NAMES:
        done = subprocess.run(
            ["make", "-n", "env", f"STACK={name}", "VENV=build/no-such-venv"],
            cwd=ROOT, capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 0 and stacks.STACK_FILES[name][0] in done.stdout, done.stderr
    done = subprocess.run(
        ["make", "-n", "env", "STACK=nope"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode != 0 and f"use one of: {' '.join(NAMES)}" in done.stderr


def _hook(hook_id: str) -> dict:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    return next(h for repo in config["repos"] for h in repo["hooks"] if h["id"] == hook_id)


def test_the_commit_hook_refuses_a_subject_over_72_characters_or_no_blank_line():
    hook = _hook("commit-subject")
    assert hook["language"] == "pygrep" and hook["stages"] == ["commit-msg"]
    assert "--multiline" in hook["args"]  # the pattern sees the whole message, \A its start
    refused = re.compile(hook["entry"])
    fine = ["x" * 72, "x" * 72 + "\n", "A subject\n\nWhy, at length." + " why" * 40]
    fine += ["A subject\n# Please enter the commit message (git's own comment)\n"]
    wrong = ["x" * 73, "x" * 73 + "\n\nWhy.", "A subject\nWhy, with no blank line before it."]
    assert not [message for message in fine if refused.search(message)]
    assert all(refused.search(message) for message in wrong)
