"""The TPU self-test: one command that checks what the lessons teach and writes a shareable
report (notebook 00_tpu_self_test).

    python -m helpers.selftest [--out DIR] [--smoke] [--simulated-replicas N]

or, in a notebook::

    from helpers import selftest

    report = selftest.run(smoke=False)
    report              # rendered Markdown
    report.write(".")   # tpu-self-test.md and tpu-self-test.json

Each check is a short, real run of one lesson with its evidence, isolated from the others (an
exception fails that check only) and given a time budget. The modules: ``base`` (checks and how
they run), ``environment`` (the report's first section), ``correctness`` (the correctness checks, notebooks 01_tpu_detection_and_connection
to 08_checkpoints_and_preemption), ``speed`` (throughput and rates, 03, 05, 06), ``report`` (Markdown and JSON) and ``cli``
(the command, which can install TensorFlow's TPU build and start itself again).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence

from helpers.selftest import correctness, environment, speed
from helpers.selftest.base import Check, CheckResult, Context, Outcome, run_check
from helpers.selftest.report import SelfTestReport, standard_notes
from helpers.strategy import SIMULATED_REPLICAS

# (smoke, full) budgets in seconds: full mode is sized to about 3 minutes on one v5e core. The
# fit, uint8 and checkpoint checks build the reference script's CNN (its compilation dominates).
DEFAULT_CHECKS: tuple[Check, ...] = (
    Check(
        "connect",
        "Connect to the accelerator",
        "01_tpu_detection_and_connection",
        (30, 120),
        correctness.connect,
        'no TPU strategy although the hardware is there: the TensorFlow build, or `TPUClusterResolver(tpu="local")`',
    ),
    Check(
        "variables",
        "Variables on every replica",
        "02_building_in_strategy_scope",
        (5, 10),
        correctness.variables,
        "a variable made in `strategy.scope()` is not copied to every core",
    ),
    Check(
        "fit",
        "A few fit steps",
        "03_keras_compile_and_fit",
        (30, 60),
        correctness.fit,
        "the loss is not finite, does not fall, or differs from a one-device evaluation; or `evaluate` ran more batches than it was asked for (Keras runs whole calls of `steps_per_execution`)",
    ),
    Check(
        "replica_equivalence",
        "Custom loop: N replicas match one",
        "04_custom_training_loops",
        (15, 30),
        correctness.replica_equivalence,
        "the step does not average the loss over the global batch",
    ),
    Check(
        "bfloat16",
        "bfloat16 matmul",
        "05_bfloat16_mixed_precision",
        (5, 10),
        correctness.bfloat16_matmul,
        "bfloat16 is not what the device computes in, or loses more than its precision",
    ),
    Check(
        "input_pipeline",
        "Input pipeline throughput",
        "06_input_pipelines",
        (10, 20),
        speed.input_pipeline,
        "batches of changing shape, or caching and vectorising bought nothing",
    ),
    Check(
        "uint8_input",
        "uint8 pixels into a training step",
        "00_tpu_self_test, 06_input_pipelines",
        (30, 60),
        correctness.uint8_input,
        "the step does not take uint8 input, or trains nothing with it: cast on the host instead",
    ),
    Check(
        "checkpoint",
        "Checkpoint restored onto one device",
        "08_checkpoints_and_preemption",
        (15, 30),
        correctness.checkpoint,
        "weights saved from the replicas do not come back on one device",
    ),
    Check(
        "matmul_rate",
        "Matmul rate against the published peak",
        "05_bfloat16_mixed_precision",
        (10, 15),
        speed.matmul_rate,
        "a large bfloat16 matmul reaches less than a quarter of the chip's published peak",
    ),
    Check(
        "recipes",
        "Classic Keras recipe vs the collection's",
        "03_keras_compile_and_fit, 06_input_pipelines",
        (20, 60),
        speed.keras_recipes,
        "on a TPU, less than 2x from uint8 input, caching, static batches and `steps_per_execution`",
    ),
)


def check_table(plan: Sequence[Check] = DEFAULT_CHECKS) -> str:
    """A Markdown table of the checks: what a failure of each means, the lessons that teach it
    (notebook 00_tpu_self_test shows it: made from the checks, so it lists every one).
    Taught in notebook 00.
    """
    rows = ["| check | a failure means | lesson |", "|---|---|---|"]
    for check in plan:
        numbers = ", ".join(name.strip()[:2] for name in check.notebook.split(","))
        rows.append(f"| {check.title} | {check.means} | {numbers} |")
    return "\n".join(rows)


def run(
    *,
    smoke: bool = False,
    simulated_replicas: int = SIMULATED_REPLICAS,
    plan: Sequence[Check] | None = None,
    progress: Callable[[str], None] | None = print,
    command: str = "",
) -> SelfTestReport:
    """Run every check of ``plan`` (default :data:`DEFAULT_CHECKS`) in order; return the report.

    The first check connects (``helpers.connect(simulated_replicas)``); the environment section
    is collected after it, so it names the strategy. ``progress`` receives one line per check
    as it starts and ends (None: silent). Nothing raises: a failing check is in the report.
    Taught in notebook 00.
    """
    plan = list(plan if plan is not None else DEFAULT_CHECKS)
    say = progress or (lambda line: None)
    context = Context(smoke=smoke, simulated_replicas=simulated_replicas)
    started, cpu_started = time.perf_counter(), time.process_time()
    results: list[CheckResult] = []
    try:
        for i, check in enumerate(plan, 1):
            say(f"[{i}/{len(plan)}] {check.title} (notebook {check.notebook}) ...")
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
        created=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        command=command,
        notes=standard_notes(context.on_tpu),
    )


__all__ = [
    "DEFAULT_CHECKS",
    "Check",
    "CheckResult",
    "Context",
    "Outcome",
    "SelfTestReport",
    "check_table",
    "run",
]
