"""The epoch plans of fit on a TPU's settings: every pass trained, or at least 99% of it.

Keras' fit runs whole host calls of steps_per_execution steps, so an epoch is whole calls, and a
plan that rounds it down to calls of the steps wanted drops a share of every pass. The simulated
TPU runs one step per call (MirroredStrategy with 8 replicas) and never shows it; so the plans
are computed here for Kaggle's v5e-8 (8 replicas) and Colab's v5e-1 (1 replica), a TPUStrategy
each, which takes the steps per call it is asked for: notebook 03_keras_compile_and_fit's from
its own cells and the full version's parameters, the script's `--fit` from its argparse
defaults (test_train_tpu.py runs that plan on one replica). The custom loops train every batch
of a pass: notebook 04_custom_training_loops in one call per pass, the script's loop (which
notebook 08_checkpoints_and_preemption runs) in calls that end at each save and pass, the last
one shorter (test_train_tpu.py's smallest run).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.stacks  # also run on the kaggle and colab stacks (make test)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import train_tpu  # noqa: E402

TPUS = {"Kaggle v5e-8": 8, "Colab v5e-1": 1}
SHARE = 0.99  # of each pass's whole batches, trained every epoch


@pytest.fixture(scope="module")
def train_images():
    """Fashion-MNIST's training images, as Keras loads them (a lesson's x_train)."""
    return len(train_tpu.keras.datasets.fashion_mnist.load_data()[0][1])


@pytest.fixture(scope="module")
def script_train_examples():
    """The images the script trains on: its train split (a tenth of them validate)."""
    return sum(split == "train" for _, split, _ in train_tpu.FashionMNIST().examples())


def _tpu(replicas):
    """A TPUStrategy of `replicas` replicas, its constructor never run: what the script's
    fit_steps_per_execution sees on a TPU."""
    import tensorflow as tf

    cls = type("TPUStrategy", (tf.distribute.TPUStrategy,), {"num_replicas_in_sync": replicas})
    return object.__new__(cls)


def _code_cells(name):
    path = next((ROOT / "notebooks").glob(f"[0-9][0-9]_{name}.ipynb"))
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [c for c in cells if c["cell_type"] == "code"]


def _parameters(cells):
    """The full version's values: the literals of the lesson's parameters cell."""
    (cell,) = [c for c in cells if "parameters" in c["metadata"].get("tags", [])]
    body = ast.parse("".join(cell["source"])).body
    return {node.targets[0].id: ast.literal_eval(node.value) for node in body}


def _cell_assigning(cells, name):
    """The lesson's statement that assigns `name`, with the statements of its cell before it
    (not after: a cell goes on to build and train)."""
    for cell in cells:
        source = "".join(cell["source"])
        statements = ast.parse(source).body
        for i, node in enumerate(statements):
            targets = getattr(node, "targets", [])
            if any(name in {n.id for n in ast.walk(t) if isinstance(n, ast.Name)} for t in targets):
                return ast.unparse(ast.Module(statements[: i + 1], type_ignores=[]))
    raise AssertionError(f"no cell assigns {name}")


def _lesson_on_a_tpu(name, tpu, train_images):
    """(code cells, full-version parameters, a namespace to run the lesson's cells in on `tpu`):
    the script's names, the parameters, `x_train` of the lesson's size and a stand-in strategy."""
    cells = _code_cells(name)
    params = _parameters(cells)
    space = {name: getattr(train_tpu, name) for name in dir(train_tpu) if name[0] != "_"}
    space.update(params, print=lambda *a, **k: None, strategy=_tpu(TPUS[tpu]))
    space.update(
        REPLICAS=TPUS[tpu], x_train=np.zeros((train_images, 0), np.uint8)[: params["MAX_TRAIN"]]
    )
    return cells, params, space


@pytest.mark.parametrize(
    ("batches", "wanted", "plan"),
    [
        (58, 32, (29, 58)),  # rounded down to calls of 32: 32 of 58 trained
        (117, 50, (39, 117)),  # the script's --fit on 8 replicas: 100 of 117 were
        (937, 50, (49, 931)),  # a prime number of batches: 6 of them left out, 0.6%
        (7, 32, (7, 7)),  # fewer batches than wanted: one call
        (101, 1, (1, 101)),
    ],
)
def test_epoch_plan(batches, wanted, plan):
    assert train_tpu.epoch_plan(batches, wanted) == plan


def test_epoch_plan_always_leaves_under_one_percent_out_in_whole_calls():
    for batches in range(1, 1200):
        for wanted in (1, 2, 8, 32, 50, 64):
            per_call, steps = train_tpu.epoch_plan(batches, wanted)
            assert 1 <= per_call <= wanted and steps % per_call == 0
            assert SHARE * batches <= steps <= batches, (batches, wanted)


@pytest.mark.parametrize("tpu", TPUS)
def test_lesson_keras_compile_and_fit_trains_every_pass_on_a_tpu(tpu, train_images):
    from tpucheck import batches, tpu_facts

    cells, params, space = _lesson_on_a_tpu("keras_compile_and_fit", tpu, train_images)
    space.update(batches=batches, tpu_facts=tpu_facts, KIND="TPUStrategy")
    space["examples"] = min(params["MAX_TRAIN"] or train_images, train_images)
    for name in ("batches_per_pass", "steps_per_epoch"):  # the lesson's own cells, in order
        exec(_cell_assigning(cells, name), space)
    share = space["steps_per_epoch"] / space["batches_per_pass"]
    per_call = space["steps_per_execution"]
    assert share >= SHARE, f"{tpu}: {share:.1%} of each pass's {space['batches_per_pass']} batches"
    assert 1 < per_call <= params["STEPS_PER_EXECUTION"]  # many steps per call, as on a TPU


@pytest.mark.parametrize("tpu", TPUS)
def test_script_fit_trains_every_pass_on_a_tpu(tpu, script_train_examples):
    args = train_tpu.parse_args(["--fit"])
    examples = args.train_examples or script_train_examples
    batches = examples // (args.per_replica_batch * TPUS[tpu])
    wanted = train_tpu.fit_steps_per_execution(_tpu(TPUS[tpu]), args.steps_per_call)
    per_call, steps = train_tpu.epoch_plan(batches, wanted)
    assert steps / batches >= SHARE, f"{tpu}: {steps} of {batches} batches per pass"
    assert 1 < per_call <= args.steps_per_call


def test_script_fit_takes_its_plan_from_epoch_plan():
    plan = next(
        node
        for node in ast.parse(Path(train_tpu.__file__).read_text(encoding="utf-8")).body
        if isinstance(node, ast.FunctionDef) and node.name == "plan"
    )
    called = {
        n.func.id for n in ast.walk(plan) if isinstance(n, ast.Call) and hasattr(n.func, "id")
    }
    assert {"epoch_plan", "fit_steps_per_execution"} <= called


@pytest.mark.parametrize("tpu", TPUS)
@pytest.mark.parametrize("fit", [False, True], ids=["custom_loop", "fit"])
def test_the_scripts_plan_on_a_tpu_is_the_one_computed_here(tpu, fit, script_train_examples):
    """plan() (the run's batch and steps, from info.json's counts) on a TPU: --fit takes
    epoch_plan's calls, the custom loop every whole batch in calls of --steps-per-call."""
    args = train_tpu.parse_args(["--fit"] * fit)
    info = {"classes": {"train": [script_train_examples], "test": [10_000]}}
    run = train_tpu.plan(args, _tpu(TPUS[tpu]), info)
    assert run.global_batch == args.per_replica_batch * TPUS[tpu]
    batches = script_train_examples // run.global_batch
    wanted = train_tpu.fit_steps_per_execution(_tpu(TPUS[tpu]), args.steps_per_call)
    plan = train_tpu.epoch_plan(batches, wanted) if fit else (args.steps_per_call, batches)
    assert (run.per_call, run.steps) == plan


@pytest.mark.parametrize("tpu", TPUS)
def test_lesson_tpu_readiness_check_trains_every_pass_on_a_tpu(tpu, train_images):
    cells, params, space = _lesson_on_a_tpu("tpu_readiness_check", tpu, train_images)
    space["global_batch"] = params["PER_REPLICA_BATCH"] * TPUS[tpu]  # the lesson's section 5
    exec(_cell_assigning(cells, "steps_per_epoch"), space)  # the lesson's plan cell, to its plan
    share = space["steps_per_epoch"] / space["batches_per_pass"]
    assert share >= SHARE, f"{tpu}: {share:.1%} of each pass's {space['batches_per_pass']} batches"
    assert 1 < space["steps_per_execution"] <= 32


def _statements(cells, wanted, asserting):
    """The lesson's statements that assign one of ``wanted``, or assert on ``asserting``."""
    found = []
    for cell in cells:
        for node in ast.parse("".join(cell["source"])).body:
            if isinstance(node, ast.Assign):
                named = {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            elif isinstance(node, ast.Assert):
                named = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                named = wanted if asserting in named else set()
            else:
                continue
            if named & wanted:
                found.append(ast.unparse(node))
    return "\n".join(found)


@pytest.mark.parametrize("version", ["full", "smoke"])
def test_lesson_checkpoints_and_preemption_kills_inside_an_epoch_at_the_scripts_batch(version):
    # Its killed runs are the script at its default batch: the lesson's own plan (its
    # statements, run here) needs a save inside an epoch after the first, where the kill lands.
    # A change of the script's default makes other epochs: this says which settings to change.
    sys.path.insert(0, str(ROOT / "tools"))
    import manifest

    name = "checkpoints_and_preemption"
    cells = _code_cells(name)
    params = _parameters(cells)
    (stem,) = [s for s in manifest.load() if s.endswith(name)]
    if version == "smoke":
        params.update(manifest.smoke_parameters(manifest.load()[stem]))
    home = f"[notebooks.{name}.smoke]" if version == "smoke" else f"{stem}'s parameters cell"
    wanted = {"steps_per_epoch", "total_steps", "saves", "kill_at", "resume_at"}
    plan = _statements(cells, wanted, asserting="SAVE_EVERY")
    per_replica = train_tpu.parse_args([]).per_replica_batch
    for replicas in sorted({*TPUS.values(), params["SIMULATED_REPLICAS"]}):
        space = {**params, "GLOBAL_BATCH": per_replica * replicas}
        try:
            exec(plan, space)
        except (AssertionError, StopIteration):
            pytest.fail(
                f"on {replicas} replica(s) of the script's batch ({per_replica}), TRAIN_EXAMPLES ="
                f" {params['TRAIN_EXAMPLES']} and SAVE_EVERY = {params['SAVE_EVERY']} leave no save"
                f" inside an epoch after the first to kill: change them in {home}"
            )
