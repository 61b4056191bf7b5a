"""The code a learner copies has one home, the reference script, and the lessons' paths use it.

On a lesson's path (every code cell outside its aside and the generated setup), the connection,
the model, the data, the pipeline, the training and evaluation step, prediction and checkpoints
come from ``train_tpu.py`` (imported, or shown in a ``script-part:*`` cell), never from a helper
that does the same work: the helpers keep plots, results, expected errors, the readiness check,
the self-test and fault injection. Asides may still call the helpers that time the dense model
of earlier measurements.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

# helpers' names for work the script does: connecting, building the model or its optimizer,
# loading the data, feeding it, stepping, evaluating, predicting, checkpointing.
TWIN_CALL = re.compile(
    r"\bhelpers\.connect\(|\bstrategy\.connect\(|from helpers(?:\.strategy)? import [^\n]*\bconnect\b"
    r"|\bmodels\.build_classifier\(|\bdata\.(?:digits|make_dataset)\("
    r"|\bloops\.(?:make_train_steps|make_eval_steps|predict|build_optimizer)\("
    r"|\bcheckpoints\.(?:make_checkpoint|restore)\("
    r"|\bpreemption\.(?:build|resumable_dataset)\("
)


def _path_cells(path: Path):
    """(index, source) of each code cell on the reader's path: not in the aside, not the setup."""
    for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        tags = cell.get("metadata", {}).get("tags", [])
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and "aside" not in tags and "Setup: generated" not in source:
            yield index, source


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_no_cell_on_the_path_calls_a_helper_for_the_scripts_work(path):
    found = [
        f"cell {index}: {line.strip()}"
        for index, source in _path_cells(path)
        for line in source.splitlines()
        if TWIN_CALL.search(line)
    ]
    assert not found, "use the reference script's part instead:\n" + "\n".join(found)


def test_the_pattern_finds_each_kind_of_twin_call():
    # The check above can fail: each way of reaching a twin is recognised, the script's are not.
    for line in (
        "strategy = helpers.connect(SIMULATED_REPLICAS)",
        "from helpers import connect, results",
        "model = models.build_classifier((28, 28))",
        "images = data.digits()",
        "steps = loops.make_train_steps(strategy, model, optimizer, 64)",
    ):
        assert TWIN_CALL.search(line), line
    for line in (
        "from train_tpu import connect, build, make_train_step",
        "strategy = connect(SIMULATED_REPLICAS)",
        "model, optimizer = build(strategy, 1e-3)",
    ):
        assert not TWIN_CALL.search(line), line
