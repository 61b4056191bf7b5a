"""tpucheck.selftest: the TPU self-test runs on the simulated TPU and reports what it found.

Two runs of the real self-test, in smoke mode on 8 simulated replicas, each in a fresh process
(TensorFlow fixes its devices when it starts): the command as a user types it, and the checks
again (but the recipes) with a failure of its own kind planted in each check that can fail on a
CPU (the per-replica mean loss of 04_custom_training_loops, a variable made outside the scope,
...). The report's content is checked, not only that it was written, and neither process imports
the lessons' ``helpers``.
The rest are fast tests: every check's judge on planted evidence of each way it can fail (the
summary must say what failed and never read as a success), the connect check with a faked
strategy, the machinery, the environment section and the command without TensorFlow.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import NO_TPU

from tpucheck import host, selftest, tpu_facts
from tpucheck.selftest import base, correctness, environment, report, speed

ROOT = Path(__file__).resolve().parent.parent
KEYS = [c.key for c in selftest.DEFAULT_CHECKS]

# Each run ends by naming the modules of the lessons' package it imported: none may be.
HELPERS_LOADED = """
print("HELPERS_LOADED", sorted(m for m in sys.modules if m.split(".")[0] == "helpers"))
"""
CLEAN = "import sys\nfrom tpucheck import selftest\ncode = selftest.main(sys.argv[1:])\n"
CLEAN += HELPERS_LOADED + "sys.exit(code)\n"
# The check with nothing planted that the planted run leaves out: the recipes check times two fits
# (a quarter of the clean run) and the clean run covers it. The matmul rate, cheap, stays: it
# shows that a check after the failed ones still runs and passes.
NOT_PLANTED_SKIPPED = ("recipes",)
PLANTED = (
    f"NOT_PLANTED_SKIPPED = {NOT_PLANTED_SKIPPED!r}\n"
    """
import contextlib
import dataclasses
import functools
import sys

import tensorflow as tf

import train_tpu
from tpucheck import selftest
from tpucheck.selftest import correctness, speed


def per_replica_mean_step(model, optimizer, global_batch):
    # The bug 04_custom_training_loops shows: each replica averages over its own batch, not the global one.
    loss_fn = train_tpu.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(x, labels):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_fn(labels, model(x, training=True)))  # per replica
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return replica_step


def nan_model(**kw):  # weights that make every loss NaN (03)
    model = train_tpu.build_cnn(**kw)
    bias = model.layers[-1].bias
    bias.assign(tf.fill(bias.shape, float("nan")))
    return model


def float_input(**kw):  # --uint8 fed to a model that takes float32 (06)
    return train_tpu.build_cnn(**{**kw, "uint8": False})


def batches_of_any_size(folder, ctx, batch, data, steps, epochs):  # no drop_remainder (06)
    return train_tpu.train_dataset(folder, ctx, batch, data, steps, epochs).unbatch().batch(100)


def restores_nothing(manager, step, order, require=False):  # no error, no values (08)
    return int(step.numpy())


PLANTED = {
    "variables": functools.partial(correctness.variables, scope=contextlib.nullcontext),  # (02)
    "fit": functools.partial(correctness.fit, make_model=nan_model),
    "replica_equivalence": functools.partial(
        correctness.replica_equivalence, make_step=per_replica_mean_step
    ),
    "bfloat16": functools.partial(correctness.bfloat16_matmul, dtype=tf.float32),  # (05)
    "uint8_input": functools.partial(correctness.uint8_input, make_model=float_input),
    "input_pipeline": functools.partial(speed.input_pipeline, make_dataset=batches_of_any_size),
    "checkpoint": functools.partial(correctness.checkpoint, restore=restores_nothing),
}
plan = [
    dataclasses.replace(c, fn=PLANTED.get(c.key, c.fn))
    for c in selftest.DEFAULT_CHECKS
    if c.key not in NOT_PLANTED_SKIPPED
]
code = selftest.main(sys.argv[1:], plan=plan)
""" + HELPERS_LOADED + "sys.exit(code)\n"
)
# For each planted check: words its failed summary must hold, and the words of its success
# sentence, which must not appear under a failed status.
PLANTED_SAYS = {
    "variables": ("1 copy of the variable for 8 devices", "equal copies"),
    "fit": ("the loss is not finite", "matches one device"),
    "replica_equivalence": ("DIFFERENT weights", "same weights"),
    "bfloat16": ("the output is float32, not bfloat16", "bfloat16 output"),
    "uint8_input": ("the step was fed uint8 pixels into a float32 input", "uint8 pixels trained"),
    "input_pipeline": ("not one static shape", "examples, all"),
    "checkpoint": ("the restore did not bring them back", "weights identical"),
}

# The command runs end to end here, once per CI run, on the main stack (pytest -m slow).
END_TO_END = pytest.mark.slow


def _run(tmp_path_factory, name: str, code: str) -> dict:
    out = tmp_path_factory.mktemp(name)
    env = {k: v for k, v in os.environ.items() if k not in NO_TPU}  # a laptop: no TPU, no CI
    env.update(PYTHONWARNINGS="ignore", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)]
        + ["--smoke", "--simulated-replicas", "8", "--out", str(out)],
        capture_output=True, text=True, timeout=900, cwd=out, env=env,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    json_path, md_path = out / "tpu-self-test.json", out / "tpu-self-test.md"
    if not json_path.exists() or not md_path.exists():
        pytest.fail(f"no report written ({proc.returncode})\n{proc.stdout}\n{proc.stderr[-4000:]}")
    print(f"{name}: {seconds:.1f} s")
    return {
        "proc": proc,
        "json": json.loads(json_path.read_text()),
        "markdown": md_path.read_text(),
        "seconds": seconds,
    }


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """``python -m tpucheck selftest --smoke``, as CI and a user run it."""
    return _run(tmp_path_factory, "clean", CLEAN)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The same command with a failure of its own kind planted in each check PLANTED_SAYS names."""
    return _run(tmp_path_factory, "planted", PLANTED)


def _checks(run) -> dict:
    return {c["key"]: c for c in run["json"]["checks"]}


# --- The real run on the simulated TPU ---------------------------------------------------------


@END_TO_END
def test_the_command_passes_shows_progress_and_prints_the_report(clean):
    proc = clean["proc"]
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    for i in range(1, len(KEYS) + 1):
        assert f"[{i}/{len(KEYS)}]" in proc.stdout
    assert "# TPU self-test report" in proc.stdout and "Report written to" in proc.stdout
    assert "HELPERS_LOADED []" in proc.stdout  # tpucheck stands on its own


@END_TO_END
def test_json_has_every_section_and_every_check_in_order(clean):
    data = clean["json"]
    assert data["schema"] == report.SCHEMA and data["mode"] == "smoke" and data["passed"] is True
    assert set(data) >= {"created", "command", "seconds", "summary", "environment", "checks"}
    assert [c["key"] for c in data["checks"]] == KEYS
    assert sum(data["summary"].values()) == len(KEYS) and data["summary"]["fail"] == 0
    for check in data["checks"]:
        assert check["status"] in ("pass", "info"), check
        assert check["evidence"] and check["summary"] and not check["error"], check
        assert check["notebook"] and check["budget_seconds"] > 0


@END_TO_END
def test_markdown_has_every_section_check_and_environment_row(clean):
    md = clean["markdown"]
    for section in ("Summary", "Environment", "Checks", "Evidence", "About this report"):
        assert f"\n## {section}\n" in md, section
    for check in selftest.DEFAULT_CHECKS:
        assert f"| {check.title} | {check.notebook} |" in md
        assert f"{check.title} (notebook {check.notebook}):" in md
    for label in environment.LABELS.values():
        assert f"| {label} |" in md
    assert "** PASSED there:" in md and "TPU self-test report" in md
    # Without a TPU the speed figures are info, and the report says so and what each means.
    assert "its speed figures (info) say nothing about a TPU" in md
    for meaning in speed.ON_A_TPU.values():
        assert meaning in md


@END_TO_END
def test_environment_names_the_simulated_tpu_and_the_versions(clean):
    env = clean["json"]["environment"]
    assert list(env) == list(environment.LABELS)
    assert env["strategy"] == "simulated TPU" and env["replicas"] == 8 and len(env["devices"]) == 8
    assert env["tpu_hints"] == [] and env["tpu_generation"] == "none"
    assert "simulated TPU of 8 logical CPU devices" in env["accelerator_type"]
    name, version = host.tensorflow_distribution()
    assert env["tensorflow"] == f"{name} {version}"
    assert env["python"].startswith(".".join(map(str, sys.version_info[:3])))
    assert env["keras"] not in ("", "not installed") and env["libtpu"] == "not installed"


@END_TO_END
def test_each_check_carries_its_evidence(clean):
    c = _checks(clean)
    assert c["connect"]["evidence"]["replicas"] == 8
    variables = c["variables"]["evidence"]
    assert variables["copies"] == variables["distinct_devices"] == 8
    assert variables["replica_ids_seen"] == list(range(8))
    fit = c["fit"]["evidence"]  # the script's own --fit run, with what it returned
    assert fit["loss_gap"] <= fit["loss_gap_tolerance"] and fit["not_learned"] is None
    assert fit["test_accuracy"] > 2 * fit["commonest_class_share"]
    assert any(line.startswith("done: ") for line in fit["script_printed"])
    same = c["replica_equivalence"]["evidence"]
    assert same["replicas"] == 8 and same["max_weight_difference"] <= same["tolerance"]
    bf16 = c["bfloat16"]["evidence"]
    assert bf16["output_dtype"] == "bfloat16"
    assert 0 < bf16["bfloat16_relative_error"] <= bf16["bfloat16_epsilon"]
    uint8 = c["uint8_input"]["evidence"]
    assert uint8["model_input_dtype"] == "uint8" and math.isfinite(uint8["test_loss"])
    pipe = c["input_pipeline"]["evidence"]
    assert pipe["batch_sizes_seen"] == [128] and pipe["examples_per_second"] > 0
    ckpt = c["checkpoint"]["evidence"]
    assert ckpt["weights_after_restore_max_difference"] == 0
    assert ckpt["weights_before_restore_max_difference"] > 0
    assert ckpt["restored_step"] == ckpt["steps"] > 0
    # On a CPU the speed checks measure and say so, without a verdict.
    assert c["matmul_rate"]["status"] == "info" and c["matmul_rate"]["evidence"]["tflops_total"] > 0
    recipes = c["recipes"]
    assert recipes["status"] == "info" and "say nothing about a TPU" in recipes["summary"]
    rates = recipes["evidence"]["examples_per_second"]
    assert set(rates) == {"classic", "collection"} and min(rates.values()) > 0
    assert math.isclose(
        recipes["evidence"]["speedup"], rates["collection"] / rates["classic"], rel_tol=0.01
    )


# --- Planted failures, one of its own kind in each check -----------------------------------


@END_TO_END
def test_each_planted_failure_fails_its_check_and_says_what_failed(planted):
    assert planted["proc"].returncode == 1, planted["proc"].stderr[-4000:]
    assert "HELPERS_LOADED []" in planted["proc"].stdout
    found = _checks(planted)
    for key, (failure, success) in PLANTED_SAYS.items():
        check = found[key]
        assert check["status"] == "fail", check
        assert failure in check["summary"], (key, check["summary"])
        assert success not in check["summary"], (key, check["summary"])
        assert check["evidence"] and not check["error"], check  # judged, not crashed
    same = found["replica_equivalence"]["evidence"]
    assert same["max_weight_difference"] > same["tolerance"] > 0
    restored = found["checkpoint"]["evidence"]
    assert restored["weights_after_restore_max_difference"] > 0
    assert planted["json"]["passed"] is False
    assert planted["json"]["summary"]["fail"] == len(PLANTED_SAYS)


@END_TO_END
def test_the_checks_without_a_planted_failure_still_ran_and_passed(planted):
    checks_run = _checks(planted)
    assert list(checks_run) == [key for key in KEYS if key not in NOT_PLANTED_SKIPPED]
    assert "matmul_rate" in checks_run  # after the planted failures
    for key, check in checks_run.items():
        if key not in PLANTED_SAYS:
            assert check["status"] in ("pass", "info") and check["evidence"], check
    md = planted["markdown"]
    row = "| Custom loop: N replicas match one | 04_custom_training_loops | **FAIL** |"
    assert "** FAILED there:" in md and row in md


ONE_REPLICA = """
from tpucheck.selftest import base, correctness
context = base.Context(smoke=True, simulated_replicas=1)
print(correctness.connect(context).summary)
fit = correctness.fit(context)
print("FIT", fit.status, fit.evidence["steps_per_call"], fit.summary)
"""


@pytest.mark.stacks
def test_the_fit_check_runs_many_steps_per_call_on_one_replica(run_python):
    """A v5e-1's branch: on one replica the script's --fit runs many steps per call."""
    out = run_python(ONE_REPLICA).stdout
    assert "simulated TPU with 1 replica(s)" in out
    status, per_call = out.split("FIT ", 1)[1].split()[:2]
    assert status == "pass" and int(per_call) > 1, out


# --- Every judge on planted evidence, without TensorFlow ---------------------------------------

# A passing piece of evidence per judge, the words of its success sentence, and planted changes
# of it, each a way the check can fail, with words its summary must then hold.
RUN = {"steps": 8, "steps_per_call": 1, "test_accuracy": 0.66, "commonest_class_share": 0.11}
RUN.update(test_loss=1.5, not_learned=None)
JUDGES = {
    "connect": (
        correctness.judge_connect,
        {"strategy": "simulated TPU", "replicas": 8, "replicas_asked": 8, "tpu_hints": []},
        "simulated TPU with 8 replica(s)",
        [
            ({"tpu_hints": ["ISTPUVM=1"]}, "TPU hardware present (ISTPUVM=1)"),
            ({"replicas": 4}, "asked for 8 simulated replicas, got 4"),
        ],
    ),
    "variables": (
        correctness.judge_variables,
        {
            "copies": 8,
            "distinct_devices": 8,
            "local_devices": 8,
            "copies_equal": True,
            "replica_ids_seen": list(range(8)),
            "variable_type": "MirroredVariable",
        },
        "8 equal copies on 8 devices",
        [
            ({"copies": 1, "distinct_devices": 1}, "1 copy of the variable for 8 devices"),
            ({"copies_equal": False}, "the copies hold different values"),
            ({"replica_ids_seen": [0, 1, 2, 3]}, "reached replicas [0, 1, 2, 3], not 0 to 7"),
        ],
    ),
    "fit": (
        correctness.judge_fit,
        {
            **RUN,
            "keras": "Keras 3.15.1",
            "one_device_loss": 1.5,
            "loss_gap": 1e-6,
            "loss_gap_tolerance": 1e-4,
        },
        "matches one device",
        [
            ({"not_learned": "the loss is not finite: epochs [nan]"}, "the loss is not finite"),
            ({"loss_gap": 0.5, "test_loss": 3.0}, "differs from one device's (1.5) by 0.5"),
            ({"loss_gap": float("nan")}, "by nan"),
        ],
    ),
    "replica_equivalence": (
        correctness.judge_replica_equivalence,
        {
            "replicas": 8,
            "steps": 3,
            "max_weight_difference": 1e-8,
            "tolerance": 1e-5,
            "worst_variable": "hidden/kernel",
        },
        "same weights",
        [
            ({"max_weight_difference": 0.08}, "DIFFERENT weights on 8 replicas and one device"),
            ({"max_weight_difference": float("nan")}, "DIFFERENT weights"),
        ],
    ),
    "bfloat16": (
        correctness.judge_bfloat16,
        {
            "output_dtype": "bfloat16",
            "bfloat16_relative_error": 2e-3,
            "float32_relative_error": 1e-7,
            "bfloat16_epsilon": 2**-7,
        },
        "bfloat16 output",
        [
            ({"output_dtype": "float32"}, "the output is float32, not bfloat16"),
            ({"bfloat16_relative_error": 0.5}, "above bfloat16's epsilon"),
            ({"bfloat16_relative_error": 1e-7}, "did not round to bfloat16"),
        ],
    ),
    "uint8_input": (
        correctness.judge_uint8_input,
        {**RUN, "model_input_dtype": "uint8"},
        "uint8 pixels trained 8 steps",
        [
            ({"model_input_dtype": "float32"}, "fed uint8 pixels into a float32 input"),
            ({"not_learned": "the loss is not finite: epochs [nan]"}, "the loss is not finite"),
        ],
    ),
    "input_pipeline": (
        speed.judge_input_pipeline,
        {
            "examples_per_second": 5000,
            "batch_size": 128,
            "batch_sizes_seen": [128],
            "batch_shape_in_spec": [128, 28, 28, 1],
        },
        "batches of 128 examples, all",
        [({"batch_sizes_seen": [48, 100]}, "batches of 48, 100 examples, not one static shape")],
    ),
    "checkpoint": (
        correctness.judge_checkpoint,
        {
            **RUN,
            "restored_step": 8,
            "weights_before_restore_max_difference": 0.64,
            "weights_after_restore_max_difference": 0.0,
        },
        "weights identical",
        [
            ({"weights_after_restore_max_difference": 0.64}, "0.64 apart from the saved ones"),
            ({"restored_step": 0}, "at step 0 (saved: 8)"),
            ({"weights_before_restore_max_difference": 0.0}, "the restore proves nothing"),
            ({"not_learned": "test accuracy 0.100 is not twice"}, "test accuracy 0.100"),
        ],
    ),
    "matmul_rate": (
        speed.judge_matmul_rate,
        {
            "tpu_generation": "v5e",
            "tflops_per_chip": 120.0,
            "published_peak_tflops_per_chip": 197,
            "fraction_of_peak": 120 / 197,
        },
        ", at least 25% needed",
        [
            (
                {"tflops_per_chip": 20.0, "fraction_of_peak": 20 / 197},
                "10% of the v5e's published 197, below the 25% this check needs",
            )
        ],
    ),
    "recipes": (
        speed.judge_recipes,
        {"examples_per_second": {"classic": 10_000, "collection": 30_000}, "speedup": 3.0},
        "meets the 2x target",
        [
            (
                {"examples_per_second": {"classic": 10_000, "collection": 12_000}, "speedup": 1.2},
                "1.20x, below the 2x target",
            )
        ],
    ),
}


def test_every_check_has_a_judge_and_planted_failures_of_its_own():
    assert set(JUDGES) == set(KEYS)
    assert all(len(failures) >= 1 for *_, failures in JUDGES.values())


@pytest.mark.parametrize("key", list(JUDGES))
def test_each_judge_passes_its_evidence_with_its_success_sentence(key):
    judge, good, success, _ = JUDGES[key]
    outcome = judge(dict(good))
    assert outcome.status == "pass" and success in outcome.summary, outcome


@pytest.mark.parametrize(
    "key, change, says",
    [(key, change, says) for key, (*_, failures) in JUDGES.items() for change, says in failures],
)
def test_each_planted_failure_is_said_and_never_reads_as_a_success(key, change, says):
    judge, good, success, _ = JUDGES[key]
    outcome = judge({**good, **change})
    assert outcome.status == "fail"
    assert says in outcome.summary, outcome.summary
    assert success not in outcome.summary, outcome.summary


def test_every_failed_condition_is_listed_not_only_the_first():
    judge, good, _, _ = JUDGES["checkpoint"]
    outcome = judge({**good, "weights_after_restore_max_difference": 0.64, "not_learned": "lost"})
    assert "did not bring them back" in outcome.summary and "lost" in outcome.summary


def test_the_fit_check_says_only_what_is_known_of_keras_3_fit_on_a_tpu():
    """No source says Keras 3's fit fails on a TPU (TPUStrategy hands fit's first-batch average
    back unchanged): the check says it is unverified, and names tf-keras as the fallback for
    the open reports; nothing in tpucheck says it is expected to fail."""
    judge, good, _, _ = JUDGES["fit"]
    (note,) = [n for n in judge(dict(good)).notes if "Keras 3's fit" in n]
    assert "unverified" in note and "TF_USE_LEGACY_KERAS=1" in note
    assert "Kaggle/docker-python#1370" in note
    fit = next(c for c in selftest.DEFAULT_CHECKS if c.key == "fit")
    assert correctness.KERAS_FIT_ON_TPU in fit.means
    for path in (ROOT / "tpucheck").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "expected to fail" not in text and "fit_start_error" not in text, path


def test_the_speed_checks_say_on_a_cpu_that_they_say_nothing_about_a_tpu():
    outcome = speed.judge_input_pipeline(dict(JUDGES["input_pipeline"][1]))
    assert "(info: on a CPU)" in outcome.summary and speed.ON_A_CPU in outcome.notes
    spec_open = {**JUDGES["input_pipeline"][1], "batch_shape_in_spec": [None, 28, 28, 1]}
    notes = speed.judge_input_pipeline(spec_open, on_tpu=True).notes
    assert notes and "dynamic padder" in notes[0]


def test_the_connect_check_fails_with_what_it_found(monkeypatch):
    """The connect check itself, with the strategy faked: TPU hints beside a simulated TPU, and
    fewer simulated replicas than asked for."""
    import train_tpu

    devices = [f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(4)]
    extended = type("Extended", (), {"worker_devices": devices})()
    fake = type("Strategy", (), {"num_replicas_in_sync": 4, "extended": extended})()
    monkeypatch.setattr(train_tpu, "connect", lambda replicas: fake)
    monkeypatch.setattr(correctness._tf, "untuned_distributed_input", lambda tf: True)
    monkeypatch.setattr(host, "tpu_hints", lambda env=None: ["ISTPUVM=1"])
    context = base.Context(simulated_replicas=8)
    outcome = correctness.connect(context)
    assert outcome.status == "fail" and context.strategy is fake
    assert "TPU hardware present (ISTPUVM=1) but the strategy is simulated TPU" in outcome.summary
    assert "asked for 8 simulated replicas, got 4" in outcome.summary
    assert "with 4 replica(s)" not in outcome.summary
    monkeypatch.setattr(host, "tpu_hints", lambda env=None: [])
    context = base.Context(simulated_replicas=4)
    assert correctness.connect(context).summary == "simulated TPU with 4 replica(s)"


# --- The machinery, without TensorFlow ---------------------------------------------------------


def _plan(*fns, budget=(5, 5)):
    return [
        base.Check(f"c{i}", f"check {i}", "00_tpu_self_test", budget, fn)
        for i, fn in enumerate(fns)
    ]


def _boom(context):
    raise ValueError("boom")


def test_an_exception_fails_only_its_own_check(monkeypatch):
    monkeypatch.delenv("TPU_ACCELERATOR_TYPE", raising=False)
    lines = []
    result = selftest.run(
        plan=_plan(
            lambda c: base.Outcome("info", "measured", {"x": 1}),
            _boom,
            lambda c: base.Outcome("pass", "fine", {"y": 2}),
        ),
        progress=lines.append,
    )
    assert [c.status for c in result.checks] == ["info", "fail", "pass"]
    failed = result.checks[1]
    assert failed.summary == "ValueError: boom" and failed.error.startswith("ValueError: boom")
    assert "test_tpucheck_selftest.py" in failed.error  # where it was raised
    assert not result.passed and result.failed == [failed]
    assert lines[0] == "[1/3] check 0 (notebook 00_tpu_self_test) ..." and "fail in" in lines[3]


def test_a_check_past_its_hard_limit_fails_and_the_next_one_runs(monkeypatch):
    monkeypatch.setattr(base, "HARD_LIMIT_FACTOR", 1.0)
    monkeypatch.setattr(base, "HARD_LIMIT_GRACE", 0.0)
    slow = base.Check("slow", "slow", "00", (0.2, 0.2), lambda c: time.sleep(2))
    fast = base.Check("fast", "fast", "00", (0.2, 0.2), lambda c: base.Outcome("pass", "ok"))
    start = time.perf_counter()
    result = selftest.run(plan=[slow, fast], progress=None)
    assert time.perf_counter() - start < 1.5
    assert result.checks[0].status == "fail" and "did not finish" in result.checks[0].summary
    assert "left running" in result.checks[0].error
    assert result.checks[1].status == "pass"


def test_a_check_over_its_budget_keeps_its_status_with_a_note():
    def slow(context):
        time.sleep(0.3)
        return base.Outcome("pass", "ok")

    result = selftest.run(plan=_plan(slow, budget=(0.1, 0.1)), progress=None)
    assert result.checks[0].status == "pass"
    assert any("over its budget" in note for note in result.checks[0].notes)


def test_a_check_that_returns_no_outcome_fails_with_what_it_returned():
    result = selftest.run(plan=_plan(lambda c: None), progress=None)
    assert result.checks[0].status == "fail" and "returned None" in result.checks[0].error


def test_checks_that_need_the_strategy_fail_with_the_reason_when_connect_did_not_run():
    result = selftest.run(plan=_plan(lambda c: c.need_strategy()), progress=None)
    assert result.checks[0].status == "fail" and "connect check failed" in result.checks[0].error


def test_outcome_and_plan_reject_what_does_not_exist():
    with pytest.raises(ValueError, match="status"):
        base.Outcome("ok", "")
    assert len({c.key for c in selftest.DEFAULT_CHECKS}) == len(selftest.DEFAULT_CHECKS)


def test_report_json_is_plain_and_markdown_escapes_table_cells(tmp_path):
    result = base.CheckResult(
        key="k",
        title="a | b",
        notebook="00",
        status="info",
        summary="x | y",
        evidence={"rate": np.float32(1.5), "nan": float("nan"), "shape": np.array([2, 3])},
        seconds=0.5,
        budget_seconds=1,
    )
    rep = report.SelfTestReport({"platform": "local"}, [result], "smoke", 1.0, "now", notes=["n"])
    md, js = rep.write(tmp_path / "out")
    data = json.loads(js.read_text())
    assert data["checks"][0]["evidence"] == {"rate": 1.5, "nan": "nan", "shape": [2, 3]}
    assert "x \\| y" in rep.markdown() and rep._repr_markdown_() == rep.markdown()
    assert md.read_text() == rep.markdown() and data == rep.to_dict()
    assert rep.check("k") is result
    with pytest.raises(KeyError):
        rep.check("missing")


def test_a_report_of_info_alone_has_not_passed():
    def result(status):
        return base.CheckResult("k", "t", "00", status, "s", {}, 0.1, 1)

    info_only = report.SelfTestReport({}, [result("info")], "smoke", 1.0, "now")
    assert not info_only.passed and "NO VERDICT there: 0 passed, 0 failed" in info_only.headline()
    both = report.SelfTestReport({}, [result("info"), result("pass")], "smoke", 1.0, "now")
    assert both.passed and "PASSED there:" in both.headline()
    failed = report.SelfTestReport({}, [result("pass"), result("fail")], "smoke", 1.0, "now")
    assert not failed.passed and "FAILED there:" in failed.headline()


def test_the_headline_says_first_what_was_tested_a_tpu_or_none():
    passed = [base.CheckResult("k", "t", "00", "pass", "s", {}, 0.1, 1)]
    simulated = {"strategy": "simulated TPU", "replicas": 8, "accelerator_type": "none: ..."}
    on_cpu = report.SelfTestReport(simulated, passed, "smoke", 1.0, "now")
    head = on_cpu.headline()
    # Before any verdict or count: no TPU was tested, the simulated TPU was.
    assert head.startswith("**No TPU was tested: the checks ran on the simulated TPU (8 "), head
    assert head.index("No TPU was tested") < head.index("PASSED") < head.index("1 passed")
    assert not on_cpu.tpu_tested and on_cpu.to_dict()["tpu_tested"] is False
    tpu = {"strategy": "TPU", "replicas": 8, "accelerator_type": "v5litepod-8"}
    on_tpu = report.SelfTestReport(tpu, passed, "full", 1.0, "now")
    assert on_tpu.headline().startswith("**Tested a TPU: v5litepod-8, 8 replica(s).** PASSED: 1")
    assert on_tpu.to_dict()["tpu_tested"] is True
    stopped = report.SelfTestReport(
        {"strategy": "none (not connected)"}, passed, "full", 1.0, "now"
    )
    assert stopped.headline().startswith("**No TPU was tested: the self-test stopped before")


# --- Environment facts -------------------------------------------------------------------------


def test_published_peaks_are_one_table_labelled_unverified():
    peaks = {
        g.name: (g.peak_bf16_tflops, g.devices_per_chip) for g in tpu_facts.GENERATIONS.values()
    }
    assert peaks == {
        "v2": (45, 2),
        "v3": (123, 2),
        "v4": (275, 1),
        "v5e": (197, 1),
        "v5p": (459, 1),
        "v6e": (918, 1),
    }
    for generation in tpu_facts.GENERATIONS.values():
        assert not generation.verified_on_hardware and generation.source
        assert "unverified on hardware" in generation.label()


@pytest.mark.parametrize(
    "text, name",
    [
        ("v5litepod-8", "v5e"),
        ("v5e-1", "v5e"),
        ("v3-8", "v3"),
        ("v4-16", "v4"),
        ("v5p-8", "v5p"),
        ("v6e-4", "v6e"),
        ("TPU v5 lite", "v5e"),
        ("TPU v6 lite", "v6e"),
        ("none: a simulated TPU", None),
        (None, None),
    ],
)
def test_generation_from_accelerator_type_or_device_kind(text, name):
    found = tpu_facts.generation_of(text)
    assert (found.name if found else None) == name


def test_accelerator_type_comes_from_the_environment_or_says_it_is_unknown(no_tpu_env):
    no_tpu_env.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-8")
    assert environment.accelerator("TPU", 8)[0] == "v5litepod-8"
    assert tpu_facts.generation_of(environment.accelerator("TPU")[0]).name == "v5e"
    no_tpu_env.delenv("TPU_ACCELERATOR_TYPE")
    no_tpu_env.setenv("ISTPUVM", "1")
    kind, source = environment.accelerator("", None)
    assert kind == "TPU (type unknown)" and "TPU_ACCELERATOR_TYPE is not set" in source
    no_tpu_env.delenv("ISTPUVM")
    assert environment.accelerator("simulated TPU", 8)[0].endswith("8 logical CPU devices")
    assert tpu_facts.generation_of(environment.accelerator("simulated TPU")[0]) is None


def test_without_tensorflow_the_command_stops_with_the_reason_and_a_report(
    no_tpu_env, monkeypatch, tmp_path, capsys
):
    """Where TensorFlow is missing (a fresh Colab TPU runtime) the command installs nothing: it
    says what to install, writes the report around it and exits 2."""
    no_tpu_env.setenv("ISTPUVM", "1")
    monkeypatch.setattr(selftest.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(host, "tensorflow_distribution", lambda: None)
    assert selftest.main(["--out", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "TensorFlow is not installed beside TPU hardware (ISTPUVM=1)" in out
    data = json.loads((tmp_path / "tpu-self-test.json").read_text())
    assert [c["key"] for c in data["checks"]] == ["connect"] and data["passed"] is False
    assert data["environment"]["tpu_hints"] == ["ISTPUVM=1"]
    assert "tensorflow-without-tpu" in data["environment"]["known_failures_seen"]
    assert "## Environment" in (tmp_path / "tpu-self-test.md").read_text()


def test_help_needs_no_tensorflow():
    proc = subprocess.run(
        [sys.executable, "-m", "tpucheck", "selftest", "--help"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and "--simulated-replicas" in proc.stdout


def test_the_table_of_checks_is_made_from_the_checks():
    table = selftest.check_table().splitlines()
    assert len(table) == 2 + len(selftest.DEFAULT_CHECKS)  # a row per check, under its header
    for check, row in zip(selftest.DEFAULT_CHECKS, table[2:], strict=True):
        assert check.means and row.startswith(f"| {check.title} | {check.means} | ")
    # The recipes check: taught in 03_keras_compile_and_fit and 06_input_pipelines.
    assert table[-1].endswith("| 03, 06 |")
