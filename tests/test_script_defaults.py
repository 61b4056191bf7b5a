"""tools/script_defaults.py: no number restates a default of the reference script's parser."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import lessons  # noqa: E402
import script_defaults  # noqa: E402
from script_parts import SCRIPT  # noqa: E402

TEXT = SCRIPT.read_text(encoding="utf-8")
NAME = str(SCRIPT.relative_to(ROOT))
FOUND = script_defaults.defaults(TEXT)
# The planted numbers are the script's own defaults, so that these tests follow a change of them.
BATCH = FOUND["per_replica_batch"][1]
RATE = FOUND["learning_rate"][1]


def _found(files: dict[str, str]) -> list[str]:
    return script_defaults.stale_literals(files, TEXT, NAME)


def test_the_repository_restates_no_default():
    assert _found(lessons.texts(ROOT, ("tests/data/",))) == []


def test_the_defaults_are_read_from_the_parser_without_running_it():
    toy = """
def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--per-replica-batch", type=int, default=64)
    p.add_argument("--rate", dest="learning_rate", type=float, default=-2e-3)
    p.add_argument("--data-dir", default="records")
    p.add_argument("--epochs", type=int)
    return p.parse_args(argv)
"""
    assert script_defaults.defaults(toy) == {
        "per_replica_batch": ("--per-replica-batch", 64),
        "learning_rate": ("--rate", -2e-3),
    }
    assert {"per_replica_batch", "learning_rate", "replicas"} <= set(FOUND)


@pytest.mark.parametrize(
    "code, line",
    [
        (f"GLOBAL = {BATCH} * REPLICAS  # the script's default\n", 1),
        (f"rate = {RATE!r}  # Adam's, the script's --learning-rate\n", 1),
        (f"from train_tpu import build\n\nmodel, opt = build(strategy, {RATE!r})\n", 3),
        (f"import train_tpu as t\nt.build(strategy, learning_rate={RATE!r}, **EXACT)\n", 2),
    ],
)
def test_a_restated_default_is_named_with_its_file_line_and_parser_attribute(code, line):
    (problem,) = _found({"planted.py": code})
    assert problem.startswith(f"planted.py, line {line}: ")
    dest = "per_replica_batch" if "GLOBAL" in code else "learning_rate"
    assert problem.endswith(f"read it from the parser, parse_args([]).{dest}")


@pytest.mark.parametrize(
    "code",
    [
        "GLOBAL = parse_args([]).per_replica_batch * REPLICAS  # the script's default\n",
        f"GLOBAL = {BATCH} * REPLICAS  # examples per replica, the lesson's own\n",
        f"rate = {RATE * 2!r}  # twice the script's --learning-rate\n",
        # build_model's seed has a default of its own: 0 there is no claim on the parser's.
        "import train_tpu\nmodel = train_tpu.build_model(seed=0)\n",
        # Only the script's functions: 8 replicas of a helper are the helper's.
        "from helpers import readiness\nreadiness.check(ds, replicas=8, learning_rate=2e-3)\n",
        f"from train_tpu import build\nbuild(strategy, {RATE * 2!r})\n",
        f'run = ["--per-replica-batch", "{BATCH}"]  # the script given it explicitly\n',
    ],
)
def test_a_number_that_does_not_claim_to_be_the_scripts_passes(code):
    assert _found({"planted.py": code}) == []


def test_toml_and_notebooks_are_read_and_the_script_itself_is_not():
    toml = f"[settings]\nPER_REPLICA_BATCH = {BATCH}  # the script's default: its memory\n"
    cells = [
        {"cell_type": "markdown", "source": [f"{BATCH} per replica, the script's default"]},
        {"cell_type": "code", "source": ["from train_tpu import build, connect\n"]},
        {"cell_type": "code", "source": ["!pip list\n", f"build(connect(), {RATE!r})\n"]},
    ]
    notebook = json.dumps({"cells": cells})
    found = _found({"planted.toml": toml, "planted.ipynb": notebook})
    assert found == [
        "planted.ipynb, cell 2, line 2: "
        f"{RATE:g} restates the script's --learning-rate default; "
        "read it from the parser, parse_args([]).learning_rate",
        "planted.toml, line 2: "
        f"{BATCH:g} restates the script's --per-replica-batch default; "
        "read it from the parser, parse_args([]).per_replica_batch",
    ]
    assert _found({NAME: TEXT}) == []  # the parser's own lines are the defaults' home
