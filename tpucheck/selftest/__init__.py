"""The TPU self-test: one command that checks a TPU runtime and writes a shareable report.

    python -m tpucheck selftest [--out DIR] [--smoke] [--simulated-replicas N]

or, in a notebook, ``report = selftest.run()``, then ``report.write(".")`` (Markdown and JSON).
Each check is a short, real run, isolated from the others and given a time budget; the training
checks run the reference script, ``train_tpu``, as a user runs it. The command exits 0 when no
check failed, 1 when one did, 2 when there is no TensorFlow (it installs nothing).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Sequence

from tpucheck import _tf, host
from tpucheck.selftest import correctness, environment, speed
from tpucheck.selftest.base import Check, CheckResult, Context, Outcome, run_check
from tpucheck.selftest.report import SelfTestReport, standard_notes

__all__ = ["DEFAULT_CHECKS", "Check", "Outcome", "SelfTestReport", "check_table", "main", "run"]

# (smoke, full) budgets in seconds: full mode is sized to about 3 minutes on one v5e core.
DEFAULT_CHECKS: tuple[Check, ...] = (
    Check("connect", "Connect to the accelerator", "01_tpu_detection_and_connection", (30, 120),
          correctness.connect, "no TPU strategy although the hardware is there: the TensorFlow "
          'build, or `TPUClusterResolver(tpu="local")`'),
    Check("variables", "Variables on every replica", "02_building_in_strategy_scope", (5, 10),
          correctness.variables, "a variable made in `strategy.scope()` is not copied to every core"),
    Check("fit", "The script's --fit run", "03_keras_compile_and_fit", (60, 120), correctness.fit,
          "Keras' fit did not learn, or the test loss on the replicas differs from one device's; "
          + correctness.KERAS_FIT_ON_TPU),
    Check("replica_equivalence", "Custom loop: N replicas match one", "04_custom_training_loops",
          (15, 30), correctness.replica_equivalence,
          "the step does not average the loss over the global batch"),
    Check("bfloat16", "bfloat16 matmul", "05_bfloat16_mixed_precision", (5, 10),
          correctness.bfloat16_matmul,
          "bfloat16 is not what the device computes in, or loses more than its precision"),
    Check("input_pipeline", "The script's input pipeline", "06_input_pipelines", (10, 20),
          speed.input_pipeline, "the script's pipeline yields batches of changing size (a "
          "recompile each)"),
    Check("uint8_input", "The script's --uint8 run", "00_tpu_self_test, 06_input_pipelines",
          (60, 120), correctness.uint8_input, "uint8 pixels do not train on the device: keep "
          "the script's default, scaling on the host"),
    Check("checkpoint", "The script's checkpoint restores on one device",
          "08_checkpoints_and_preemption", (60, 120), correctness.checkpoint,
          "the custom loop did not learn, or its save does not bring the weights back on one "
          "device"),
    Check("matmul_rate", "Matmul rate against the published peak", "05_bfloat16_mixed_precision",
          (10, 15), speed.matmul_rate,
          "a large bfloat16 matmul reaches less than a quarter of the chip's published peak"),
    Check("recipes", "Classic Keras recipe vs the script's",
          "03_keras_compile_and_fit, 06_input_pipelines", (45, 90), speed.keras_recipes,
          "on a TPU, less than 2x from the script's input pipeline and `steps_per_execution`"),
)  # fmt: skip


def check_table(plan: Sequence[Check] = DEFAULT_CHECKS) -> str:
    """A Markdown table of the checks: what a failure of each means, the lessons that teach it."""
    rows = ["| check | a failure means | lesson |", "|---|---|---|"]
    for check in plan:
        numbers = ", ".join(name.strip()[:2] for name in check.notebook.split(","))
        rows.append(f"| {check.title} | {check.means} | {numbers} |")
    return "\n".join(rows)


def run(
    *,
    smoke: bool = False,
    simulated_replicas: int = 8,
    plan: Sequence[Check] | None = None,
    progress: Callable[[str], None] | None = print,
    command: str = "",
) -> SelfTestReport:
    """Run every check of ``plan`` (default :data:`DEFAULT_CHECKS`) in order and return the
    report; a failing check is in it, never raised. ``progress`` receives a line as each check
    starts and ends (None: silent)."""
    plan = list(plan if plan is not None else DEFAULT_CHECKS)
    say = progress or (lambda line: None)
    context = Context(smoke=smoke, simulated_replicas=simulated_replicas)
    started, cpu_started = time.perf_counter(), time.process_time()
    results: list[CheckResult] = []
    try:
        for i, check in enumerate(plan, 1):
            say(f"[{i}/{len(plan)}] {check.title} (notebook {check.notebook}) ...")
            with _tf.forgetting_custom_gradients():  # a finished check's models, freed
                result = run_check(check, context)
            results.append(result)
            say(f"      {result.status} in {result.seconds:.1f} s: {result.summary}")
    finally:
        shutil.rmtree(context.workdir, ignore_errors=True)
    return SelfTestReport(
        environment=environment.collect(
            context.strategy, context.kind, [r.error or r.summary for r in results]
        ),
        checks=results,
        mode="smoke" if smoke else "full",
        seconds=time.perf_counter() - started,
        cpu_seconds=time.process_time() - cpu_started,
        command=command,
        notes=standard_notes(context.on_tpu),
    )


def _without_tensorflow(smoke: bool, command: str) -> SelfTestReport:
    """The report of a self-test without TensorFlow: the first check fails with what to do."""
    hints = host.tpu_hints()
    beside = f" beside TPU hardware ({', '.join(hints)})" if hints else ""
    problem = (
        f"TensorFlow is not installed{beside}. On a TPU, install TensorFlow's TPU build for this "
        "platform and Python (the route table of the project's README names the tensorflow-tpu "
        "and libtpu), restart, and run the self-test again; elsewhere, pip install tensorflow."
    )
    first = DEFAULT_CHECKS[0]
    budget, summary = first.budget[0 if smoke else 1], problem.split(". ")[0]
    result = CheckResult(first.key, first.title, first.notebook, "fail", summary, {}, 0.0, budget)
    result.error = problem
    notes = [
        "The self-test stopped before its checks: see the error of the first check.",
        standard_notes(on_tpu=False)[2],  # how to share the report
    ]
    mode = "smoke" if smoke else "full"
    return SelfTestReport(environment.collect(), [result], mode, 0.0, command=command, notes=notes)


def main(argv: list[str] | None = None, plan=None) -> int:
    """``python -m tpucheck selftest``; ``plan`` replaces its checks (tests plant failures)."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python -m tpucheck selftest", description="TPU self-test with a shareable report."
    )
    parser.add_argument("--out", default=".", help="folder for the report files (default: .)")
    parser.add_argument("--smoke", action="store_true", help="the quick mode CI runs")
    parser.add_argument(
        "--simulated-replicas",
        type=int,
        default=8,
        help="replicas of the simulated TPU when only a CPU is present (default: 8)",
    )
    args = parser.parse_args(argv)
    command = " ".join(["python -m tpucheck selftest", *argv])
    tensorflow = importlib.util.find_spec("tensorflow") is not None
    if tensorflow:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ notes: errors only
        # Keras warns on every fit with a tf.data input that its shuffle argument is ignored.
        warnings.filterwarnings("ignore", ".*shuffle=True.* was passed", UserWarning)
        import tensorflow as tf

        tf.get_logger().setLevel("ERROR")
        report = run(
            smoke=args.smoke,
            simulated_replicas=args.simulated_replicas,
            plan=plan,
            progress=lambda line: print(line, flush=True),
            command=command,
        )
    else:
        report = _without_tensorflow(args.smoke, command)
    md, js = report.write(args.out)
    print("\n" + report.markdown())
    print(f"Report written to {md} and {js}")
    print(report.headline().replace("**", ""))  # last: what was tested, then the verdict
    return 0 if report.passed else 1 if tensorflow else 2
