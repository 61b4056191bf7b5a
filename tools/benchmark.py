"""Measure the techniques the guide teaches, each against its baseline, on this machine.

    python tools/benchmark.py            # the full report (35-40 minutes on 2 busy CPU cores)
    python tools/benchmark.py --quick    # the reduced mode CI runs (about 2-3 minutes)

Writes ``build/benchmark.md`` and ``build/benchmark.json`` (or under ``--out``). Every number is
a ratio between a candidate and its baseline measured in the same run on the same hardware: the
median of several repetitions, with their spread (lowest to highest). The timers synchronise
(each result is fetched to the host before the clock stops) and warm up first (tracing and
compiling are not counted); see ``helpers/timing.py``.

TensorFlow fixes its devices when it starts, so the measurements run in two child processes of
this script: one with a single CPU device and one with the 8-replica simulated TPU. The parent
never imports TensorFlow; it starts the children, shows their progress, and writes the report.
Full mode also times the headless notebook run (smoke mode) and the unit test suite.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a clone without installing the helpers
    sys.path.insert(0, str(ROOT))

SIMULATED_REPLICAS = 8
_STARTED = time.perf_counter()  # before TensorFlow is imported: its start-up time is shown


@dataclass(frozen=True)
class Settings:
    """How much work each measurement does; ``--quick`` uses the smaller one."""

    repeats: int  # timed repetitions of each comparison
    global_batch: int  # training batch, split over the replicas
    steps_per_call: int  # steps per tf.function call (custom loop) and per fit execution
    fit_steps: int  # steps in each timed fit() call
    bf16_hidden: int  # hidden width of the mixed-precision model: big enough to compute
    pipeline_batches: int  # batches drawn per timed pipeline repetition
    pipeline_batch: int
    photo_size: int  # the digits are enlarged to this many pixels and PNG-encoded
    crop_size: int  # and cropped back to this size by the augmentation
    notebooks_and_tests: bool


QUICK = Settings(
    repeats=5,
    global_batch=256,
    steps_per_call=20,
    fit_steps=60,
    bf16_hidden=1024,
    pipeline_batches=16,
    pipeline_batch=128,
    photo_size=96,
    crop_size=64,
    notebooks_and_tests=False,
)
FULL = Settings(
    repeats=9,
    global_batch=256,
    steps_per_call=50,
    fit_steps=200,
    bf16_hidden=1024,
    pipeline_batches=48,
    pipeline_batch=128,
    photo_size=96,
    crop_size=64,
    notebooks_and_tests=True,
)


# ---------------------------------------------------------------------------------------------
# Measurements. Each task runs inside a child process whose devices are fixed (run_worker) and
# returns a list of report rows (plain dicts, see _row) or, for the distribution overhead, one
# timing that the parent combines with the other process's timing.
# ---------------------------------------------------------------------------------------------


def _say(text: str) -> None:
    print(f"    {text}", flush=True)


def _progress(label: str, unit: str, per: float):
    """An ``on_repeat`` callback for helpers.timing: prints each repetition in ``unit``."""

    def show(i, *seconds):
        values = " vs ".join(format_value(_convert(s, unit, per), unit) for s in seconds)
        _say(f"{label} repetition {i + 1}: {values}")

    return show


def _convert(seconds: float, unit: str, per: float) -> float:
    """Seconds for ``per`` units of work -> the row's unit (per-step time or a rate)."""
    return per / seconds if unit.endswith("/s") else seconds / per


def _row(key: str, title: str, setting: str, baseline: str, candidate: str, **fields) -> dict:
    row = {
        "key": key,
        "title": title,
        "setting": setting,
        "baseline": baseline,
        "candidate": candidate,
        "status": "measured",
        "note": "",
    }
    row.update(fields)
    return row


def _comparison_fields(cmp, unit: str, per: float) -> dict:
    """Row fields of a helpers.timing.Comparison whose repetitions each did ``per`` units of work.

    Values are shown in ``unit``: seconds per unit ("s/step") or units per second
    ("examples/s"). The ratio is always median baseline time / median candidate time: above 1,
    the candidate is faster; the ratios of the alternating pairs give the spread.
    """
    ratios = cmp.ratios
    return {
        "unit": unit,
        "baseline_value": _convert(cmp.baseline.median, unit, per),
        "candidate_value": _convert(cmp.candidate.median, unit, per),
        "baseline_seconds": list(cmp.baseline.seconds),
        "candidate_seconds": list(cmp.candidate.seconds),
        "ratio": cmp.speedup,
        "ratio_low": min(ratios),
        "ratio_high": max(ratios),
        "better": "faster",
        "runs": len(ratios),
    }


def _data():
    from helpers import data

    return data.load_images("digits")  # offline and small: the same data on every machine


def _replicas(n: int) -> str:
    return f"{n} replica" + ("s" if n != 1 else "")


_SHARED: dict = {}  # the training setup shared by the tasks of one process (traced once)


def _training_setup(strategy, settings: Settings, *, hidden: int = 128, shared: bool = True):
    """The custom training loop of notebook 04: ``(model, train_steps, iterator)``.

    Tracing a step for 8 replicas takes many seconds on a small CPU, so tasks of the same
    process share one setup unless ``shared=False`` (the mixed-precision task builds its own).
    """
    key = (hidden, strategy.num_replicas_in_sync)
    if shared and key in _SHARED:
        return _SHARED[key]
    import keras

    from helpers import data, loops, models

    images = _data()
    replicas = strategy.num_replicas_in_sync
    ds = data.make_dataset(images.x_train, images.y_train, settings.global_batch, replicas=replicas)
    with strategy.scope():
        model = models.build_classifier(images.image_shape, hidden=hidden, seed=0)
        optimizer = keras.optimizers.Adam(1e-3)
    loops.build_optimizer(strategy, optimizer, model)
    train_steps = loops.make_train_steps(strategy, model, optimizer, settings.global_batch)
    iterator = iter(strategy.experimental_distribute_dataset(ds))
    setup = (model, train_steps, iterator)
    if shared:
        _SHARED[key] = setup
    return setup


def _steps(n: int):
    """The step count as a tensor: one traced function serves every count (no retracing)."""
    import tensorflow as tf

    return tf.constant(n)


def task_steps_per_call(strategy, settings: Settings) -> list[dict]:
    """Many training steps per tf.function call vs one step per call (notebook 04)."""
    from helpers import timing

    n = settings.steps_per_call
    _, train_steps, iterator = _training_setup(strategy, settings)
    one, many = _steps(1), _steps(n)

    def one_per_call():
        for _ in range(n):
            loss = train_steps(iterator, one)
        return loss

    _say(f"warm-up (tracing), then {settings.repeats} x {n} steps each way")
    cmp = timing.compare(
        one_per_call,
        lambda: train_steps(iterator, many),
        repeats=settings.repeats,
        on_repeat=_progress(f"1 vs {n} steps per call:", "s/step", n),
    )
    replicas = strategy.num_replicas_in_sync
    return [
        _row(
            "steps_per_call",
            "training steps per tf.function call",
            f"custom loop, {replicas} replicas, global batch {settings.global_batch}",
            "1 step per call",
            f"{n} steps per call",
            **_comparison_fields(cmp, "s/step", per=n),
        )
    ]


def _fit_model(strategy, images, steps_per_execution: int):
    import keras

    from helpers import models

    with strategy.scope():
        model = models.build_classifier(images.image_shape, seed=0)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=steps_per_execution,
        )
    return model


def error_reason(err: BaseException, limit: int = 240) -> str:
    """A one-line reason from an error: its type and the most telling line of its message.

    TensorFlow's graph errors start with "Graph execution error:" and say what went wrong
    further down; the first line that names the problem is kept.
    """
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    telling = [
        line
        for line in lines
        if re.search(r"must feed|placeholder|not supported|INVALID_ARGUMENT", line)
    ]
    line = (telling or lines or [""])[0]
    line = re.sub(r"'[^']{30,}'", "'...'", line)  # long graph node names say nothing
    return f"{type(err).__name__}: {line}"[:limit]


def _time_fits(baseline, candidate, ds, steps: int, repeats: int):
    """Seconds per step of two compiled models' ``fit``, as a Comparison of ``repeats`` epochs.

    ``helpers.fitting.time_fit`` (notebook 03) runs one ``fit`` call per model: an untimed
    epoch (tracing, the input pipeline starting), then ``repeats`` timed epochs of ``steps``
    steps. One call per model, not alternating calls: on 8 replicas each new ``fit`` call sets
    up its distributed input again, which took from seconds to over a minute here.
    """
    from helpers import fitting, timing

    timings = []
    for model in (baseline, candidate):
        fit = fitting.time_fit(model, ds, steps, epochs=repeats)
        _say(f"steps_per_execution={model.steps_per_execution}: {fit}")
        timings.append(timing.Timing(fit.per_step))
    return timing.Comparison(*timings)


def task_fit_steps_per_execution(strategy, settings: Settings) -> list[dict]:
    """``compile(steps_per_execution=N)`` vs 1 in ``fit`` (notebook 03), where it works.

    ``helpers.fitting.steps_per_execution_for`` says what the strategy supports. Where it says
    1 (a MirroredStrategy of 2+ replicas with collective all-reduce, the simulated TPU's
    default), the task checks that the failure is real (2 steps per execution) and reports it;
    should a Keras release fix it, the row is measured instead. With 2+ replicas it then
    measures the same fit on the same devices with ``ReductionToOneDevice``, the cross-device
    ops with which ``fitting`` says several steps per execution do run.
    """
    import tensorflow as tf

    from helpers import data, fitting

    images = _data()
    replicas = strategy.num_replicas_in_sync
    n = settings.steps_per_call
    steps = settings.fit_steps // n * n  # whole executions only
    ds = data.make_dataset(images.x_train, images.y_train, settings.global_batch, replicas=replicas)
    title = "steps_per_execution in fit"
    base, cand = "steps_per_execution=1", f"steps_per_execution={n}"

    def measure(strat, key, setting):
        baseline, candidate = _fit_model(strat, images, 1), _fit_model(strat, images, n)
        _say(f"fit each: 1 warm-up + {settings.repeats} timed epochs of {steps} steps")
        cmp = _time_fits(baseline, candidate, ds, steps, settings.repeats)
        row = _row(key, title, setting, base, cand, **_comparison_fields(cmp, "s/step", per=1))
        return row

    setting = f"Keras fit, {_replicas(replicas)}, global batch {settings.global_batch}"
    choice = fitting.steps_per_execution_for(strategy, n)
    _say(f"helpers.fitting chooses steps_per_execution={choice.value}: {choice.reason}")
    if choice.value > 1:
        return [measure(strategy, f"fit_spe_{replicas}", setting)]

    ops = fitting.cross_device_ops_name(strategy)
    setting += f", {ops or 'default cross-device ops'}"
    _say(f"does fit run with steps_per_execution=2 on {_replicas(replicas)} anyway?")
    try:
        _fit_model(strategy, images, 2).fit(ds, epochs=1, steps_per_epoch=4, verbose=0)
    except Exception as err:  # the Keras 3 bug: report it, do not hide it
        reason = error_reason(err)
        _say(f"not supported: {reason}")
        tried = "steps_per_execution=2 (the smallest > 1)"
        rows = [
            _row(
                f"fit_spe_{replicas}",
                title,
                setting,
                base,
                tried,
                status="not supported",
                reason=reason,
                choice=choice.reason,
            )
        ]
    else:
        _say("it runs: this Keras no longer has the bug; measuring it")
        rows = [measure(strategy, f"fit_spe_{replicas}", setting)]
        rows[0]["note"] = f"helpers.fitting still chooses 1 here ({choice.reason}): outdated."

    devices = list(strategy.extended.worker_devices)
    safe = tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    safe_choice = fitting.steps_per_execution_for(safe, n)
    _say(f"same devices with ReductionToOneDevice: {safe_choice.reason}")
    safe_setting = (
        f"Keras fit, {_replicas(replicas)}, global batch {settings.global_batch}, "
        "ReductionToOneDevice"
    )
    if safe_choice.value > 1:
        rows.append(measure(safe, f"fit_spe_{replicas}_reduce_to_one", safe_setting))
    else:
        rows.append(
            _row(
                f"fit_spe_{replicas}_reduce_to_one",
                title,
                safe_setting,
                base,
                cand,
                status="not supported",
                reason=safe_choice.reason,
            )
        )
    return rows


def task_mixed_bfloat16(strategy, settings: Settings) -> list[dict]:
    """``mixed_bfloat16`` vs ``float32``: step time and memory (notebook 05)."""
    from helpers import precision, timing

    images = _data()
    n = settings.steps_per_call
    batch = images.x_train[: settings.global_batch]
    runs = {}
    for policy in ("float32", "mixed_bfloat16"):
        with precision.global_policy(policy):  # restored afterwards, even on an error
            model, train_steps, iterator = _training_setup(
                strategy, settings, hidden=settings.bf16_hidden, shared=False
            )
            runs[policy] = {
                "step": functools.partial(train_steps, iterator, _steps(n)),
                "weights": precision.weight_bytes(model),
                "activations": sum(precision.activation_bytes(model, batch).values()),
            }
    f32, bf16 = runs["float32"], runs["mixed_bfloat16"]
    _say(f"warm-up, then {settings.repeats} x {n} steps each way")
    cmp = timing.compare(
        f32["step"],
        bf16["step"],
        repeats=settings.repeats,
        on_repeat=_progress("float32 vs mixed_bfloat16:", "s/step", n),
    )
    features = math.prod(images.image_shape)
    setting = (
        f"custom loop, {_replicas(strategy.num_replicas_in_sync)}, "
        f"MLP {features}-{settings.bf16_hidden}-10, batch {settings.global_batch}"
    )
    rows = [
        _row(
            "bf16_step",
            "mixed_bfloat16: step time",
            setting,
            "float32",
            "mixed_bfloat16",
            **_comparison_fields(cmp, "s/step", per=n),
        )
    ]
    for what, text in (("activations", "activation memory"), ("weights", "weight memory")):
        base, cand = f32[what], bf16[what]
        rows.append(
            _row(
                f"bf16_{what}",
                f"mixed_bfloat16: {text}",
                setting + (", one batch" if what == "activations" else ""),
                "float32",
                "mixed_bfloat16",
                unit="bytes",
                baseline_value=base,
                candidate_value=cand,
                ratio=base / cand,
                ratio_low=base / cand,
                ratio_high=base / cand,
                better="smaller",
                runs=1,
                exact=True,
            )
        )
    return rows


def task_pipeline(strategy, settings: Settings) -> list[dict]:
    """Optimised vs naive input pipeline, examples per second (notebook 06)."""
    from helpers import pipelines, timing

    images = _data()
    stages = list(pipelines.STAGES)
    naive, best = stages[0], stages[-1]
    batches, size = settings.pipeline_batches, settings.pipeline_batch
    with tempfile.TemporaryDirectory() as folder:
        _say(f"writing {len(images.x_train)} PNG-encoded {settings.photo_size}px photos")
        photos = pipelines.to_photos(images.x_train, settings.photo_size)
        files = pipelines.write_tfrecords(photos, images.y_train, folder, num_shards=8)
        iterators = {
            stage: iter(pipelines.build_pipeline(files, size, stage, out_size=settings.crop_size))
            for stage in (naive, best)
        }

        def draw(stage):
            def fn():
                for _ in range(batches):
                    batch = next(iterators[stage])
                return batch

            return fn

        # The warm-up draws at least one full pass, so the cache is full before timing. Many
        # batches per repetition keep small the head start a prefetching pipeline gets by
        # filling its buffer while the other one is being timed.
        passes = batches * size / len(images.x_train)
        _say(f"warm-up, then {settings.repeats} x {batches} batches of {size} each way")
        cmp = timing.compare(
            draw(naive),
            draw(best),
            repeats=settings.repeats,
            warmup=max(1, math.ceil(1 / passes)),
            on_repeat=_progress("naive vs optimised:", "examples/s", batches * size),
        )
    examples = batches * size
    fields = _comparison_fields(cmp, "examples/s", per=examples)
    return [
        _row(
            "pipeline",
            "input pipeline throughput",
            f"TFRecords, PNG {settings.photo_size}px, crop {settings.crop_size}px, batch {size}",
            f'"{naive}" stage',
            f'"{best}" stage',
            **fields,
        )
    ]


def task_distribution(strategy, settings: Settings) -> dict:
    """Time per step of the custom loop with the global batch fixed (one half of a ratio)."""
    from helpers import timing

    n = settings.steps_per_call
    _, train_steps, iterator = _training_setup(strategy, settings)
    many = _steps(n)
    replicas = strategy.num_replicas_in_sync
    _say(f"warm-up, then {settings.repeats} x {n} steps on {_replicas(replicas)}")
    t = timing.time_call(
        lambda: train_steps(iterator, many),
        repeats=settings.repeats,
        on_repeat=_progress(f"{_replicas(replicas)}:", "s/step", n),
    )
    return {"replicas": replicas, "seconds": list(t.seconds), "steps": n}


TASKS = {
    "pipeline": task_pipeline,
    "steps_per_call": task_steps_per_call,
    "fit_steps_per_execution": task_fit_steps_per_execution,
    "mixed_bfloat16": task_mixed_bfloat16,
    "distribution": task_distribution,
}
# Which tasks run in which process: (replicas, tasks). The order is the report's order.
PLAN = (
    (1, ("pipeline", "fit_steps_per_execution", "mixed_bfloat16", "distribution")),
    (SIMULATED_REPLICAS, ("steps_per_call", "fit_steps_per_execution", "distribution")),
)


def _versions() -> dict:
    import keras
    import numpy
    import tensorflow as tf

    return {"TensorFlow": tf.__version__, "Keras": keras.__version__, "numpy": numpy.__version__}


def run_worker(replicas: int, tasks: list[str], settings: Settings, result_path: Path) -> None:
    """The child process: connect with ``replicas`` devices, run ``tasks``, save after each."""
    import helpers

    strategy = helpers.connect(replicas)  # before any other TensorFlow op
    out = {"versions": _versions(), "replicas": strategy.num_replicas_in_sync, "tasks": {}}
    print(f"  TensorFlow ready in {time.perf_counter() - _STARTED:.0f} s", flush=True)
    for i, name in enumerate(tasks, 1):
        print(f"  [{i}/{len(tasks)}] {name} ({_replicas(replicas)})", flush=True)
        start = time.perf_counter()
        try:
            result = TASKS[name](strategy, settings)
            status = {"ok": True, "result": result}
        except Exception as err:  # report it in the table and go on with the next task
            import traceback

            traceback.print_exc(file=sys.stdout)
            status = {"ok": False, "error": error_reason(err, limit=400)}
        status["seconds"] = round(time.perf_counter() - start, 1)
        out["tasks"][name] = status
        result_path.write_text(json.dumps(out))
        _say(f"done in {status['seconds']} s")


# ---------------------------------------------------------------------------------------------
# The parent: hardware, child processes, whole-suite timings, the report.
# ---------------------------------------------------------------------------------------------


def hardware() -> dict:
    """CPU model, cores and memory of this machine (Linux; best effort elsewhere)."""
    model = platform.processor() or platform.machine()
    try:
        text = Path("/proc/cpuinfo").read_text()
        found = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
        if found:
            model = found.group(1).strip()
    except OSError:
        pass
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory = float("nan")
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_gib": round(memory, 1),
        "system": f"{platform.system()} {platform.release()}",
        "accelerator": "none (CPU only)",
    }


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def _child_env() -> dict:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_process(replicas: int, tasks: tuple[str, ...], quick: bool, timeout: float) -> dict:
    """Run one worker process; its progress goes straight to this terminal."""
    with tempfile.TemporaryDirectory() as folder:
        result = Path(folder) / "result.json"
        errors = Path(folder) / "stderr.txt"
        command = [sys.executable, __file__, "--worker", str(replicas), "--tasks", ",".join(tasks)]
        if quick:
            command.append("--quick")
        command += ["--result", str(result)]
        began = time.perf_counter()
        with open(errors, "w") as stderr:
            try:
                code = subprocess.run(
                    command, stderr=stderr, env=_child_env(), timeout=timeout, cwd=ROOT
                ).returncode
            except subprocess.TimeoutExpired:
                code = f"timeout after {timeout:.0f} s"
        print(f"  the process ended after {time.perf_counter() - began:.0f} s", flush=True)
        out = json.loads(result.read_text()) if result.exists() else {"tasks": {}}
        tail = errors.read_text(errors="replace").strip().splitlines()[-15:]
    if code != 0:
        print(f"  the process exited with {code}; last lines of its stderr:", flush=True)
        print("\n".join("    " + line for line in tail), flush=True)
    for name in tasks:  # a task the process never finished gets its error in the table
        if name not in out["tasks"]:
            last = tail[-1] if tail else f"exit code {code}"
            out["tasks"][name] = {"ok": False, "error": f"process ended: {last}"[:400]}
    return out


def distribution_row(one: dict | None, many: dict | None, settings: Settings) -> dict:
    """Combine the two processes' step times: the same global batch on 1 vs 8 replicas.

    The two sides ran in different processes, one after the other, so repetitions cannot be
    paired; the spread is the widest it can be: slowest over fastest and fastest over slowest.
    """
    row = _row(
        "distribution",
        "distribution overhead",
        f"custom loop, global batch {settings.global_batch} "
        f"({settings.global_batch // SIMULATED_REPLICAS} per replica on {SIMULATED_REPLICAS})",
        "1 device",
        f"{SIMULATED_REPLICAS} simulated replicas",
    )
    if not one or not many:
        row.update(status="failed", reason="one of the two processes did not measure it")
        return row
    from helpers.timing import Timing

    a = Timing(tuple(one["seconds"])).per(one["steps"])
    b = Timing(tuple(many["seconds"])).per(many["steps"])
    row.update(
        unit="s/step",
        baseline_value=a.median,
        candidate_value=b.median,
        baseline_seconds=list(a.seconds),
        candidate_seconds=list(b.seconds),
        ratio=a.median / b.median,
        ratio_low=a.low / b.high,
        ratio_high=a.high / b.low,
        better="faster",
        runs=min(len(a.seconds), len(b.seconds)),
    )
    return row


# Start-up chatter of TensorFlow and Jupyter kernels that says nothing about the run.
NOISE = re.compile(r"^[IWE]\d{4} |^WARNING: All log messages|\[IPKernelApp\] WARNING")


def time_command(command: list[str], label: str, timeout: float) -> tuple[float, int, str]:
    """Run ``command`` showing its output; return (seconds, exit code, last output line)."""
    print(f"  $ {' '.join(command)}", flush=True)
    start = time.perf_counter()
    last = ""
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_child_env(),
        cwd=ROOT,
    )
    try:
        for line in proc.stdout:
            if not NOISE.search(line):
                print(f"    {label}| {line.rstrip()}", flush=True)
            if line.strip():
                last = line.strip()
            if time.perf_counter() - start > timeout:
                proc.kill()
                last = f"killed after {timeout:.0f} s"
                break
    finally:
        code = proc.wait()
    return time.perf_counter() - start, code, last


def notebooks_row(settings: Settings, out: Path) -> dict:
    row = _row(
        "notebooks",
        "headless run of every notebook",
        "smoke mode (tools/run_notebooks.py --smoke)",
        "",
        "",
        unit="s",
    )
    if not settings.notebooks_and_tests:
        row.update(status="skipped", reason="skipped in --quick mode")
        return row
    folder = out / "benchmark-notebooks"  # not build/summary.json: keep the user's own run
    seconds, code, last = time_command(
        [sys.executable, "tools/run_notebooks.py", "--smoke", "--out", str(folder)],
        "notebooks",
        timeout=3 * 3600,
    )
    summary = folder / "summary.json"
    rows = json.loads(summary.read_text()) if summary.exists() else []
    passed = sum(r["status"] == "passed" for r in rows)
    detail = f"{passed} of {len(rows)} notebooks passed" if rows else last
    row.update(
        status="measured" if code == 0 else "failed",
        value=seconds,
        detail=detail,
        per_item={r["notebook"]: r["seconds"] for r in rows},
    )
    return row


def tests_row(settings: Settings) -> dict:
    row = _row("tests", "unit test suite", "python -m pytest tests", "", "", unit="s")
    if not settings.notebooks_and_tests:
        row.update(status="skipped", reason="skipped in --quick mode")
        return row
    seconds, code, last = time_command(
        [sys.executable, "-m", "pytest", "tests", "-p", "no:cacheprovider"],
        "pytest",
        timeout=3 * 3600,
    )
    detail = last.strip("= ")  # pytest's summary line, e.g. "120 passed in 300.0s"
    row.update(status="measured" if code == 0 else "failed", value=seconds, detail=detail)
    return row


# --- the report ---------------------------------------------------------------------------------


def format_value(value: float, unit: str) -> str:
    if unit == "s/step":
        return f"{value * 1e3:.3g} ms/step"
    if unit == "examples/s":
        return f"{value:,.0f} examples/s"
    if unit == "bytes":
        for size, name in ((2**20, "MiB"), (2**10, "KiB")):
            if value >= size:
                return f"{value / size:.3g} {name}"
        return f"{value:.0f} B"
    if unit == "s":
        return f"{value:.0f} s"
    return f"{value:.4g} {unit}"


def format_ratio(ratio: float, better: str, bold: bool = True) -> str:
    """'3.20x faster' or '2.50x slower' (the inverse), so a reader never divides in their head."""
    worse = {"faster": "slower", "smaller": "larger"}[better]
    if round(ratio, 2) == 1.0:
        return "1.00x (same)"
    if ratio > 1:
        return f"**{ratio:.2f}x {better}**" if bold else f"{ratio:.2f}x {better}"
    return f"{1 / ratio:.2f}x {worse}"


def format_spread(row: dict) -> str:
    """The lowest to the highest ratio, in the same words as the median."""
    if row.get("exact"):
        return "exact (counted)"
    low, high = row["ratio_low"], row["ratio_high"]
    if low < 1 < high:  # some pairs one way, some the other: say so rather than pick a word
        return f"{low:.2f}x to {high:.2f}x (crosses 1)"
    if row["ratio"] < 1:  # shown as "slower": the inverse, so the lower bound comes first
        low, high = 1 / high, 1 / low
        word = {"faster": "slower", "smaller": "larger"}[row["better"]]
    else:
        word = row["better"]
    return f"{low:.2f}x to {high:.2f}x {word}"


def markdown(report: dict) -> str:
    hw, v = report["hardware"], report["versions"]
    mode = "quick mode, `--quick`" if report["quick"] else "full mode"
    load = report.get("load_average") or {}
    lines = [
        f"# Benchmark: the guide's techniques measured against their baselines ({mode})",
        "",
        f"**Hardware:** {hw['cpu']}, {hw['cores']} cores ({hw['usable_cores']} usable), "
        f"{hw['memory_gib']} GiB memory, {hw['accelerator']}; {hw['system']}.  ",
        f"**Versions:** Python {v.get('Python', '?')}, TensorFlow {v.get('TensorFlow', '?')}, "
        f"Keras {v.get('Keras', '?')}, numpy {v.get('numpy', '?')}.  ",
        f"**Run:** {report['started']}, {report['seconds']:.0f} s in all; load average "
        f"{load.get('start')} at the start, {load.get('end')} at the end (other programs "
        "share this machine).",
        "",
        "Each ratio compares a candidate with its baseline measured in the same run on the same "
        "machine, after a warm-up: the median baseline time over the median candidate time of "
        "repetitions that alternate baseline and candidate. The spread runs from the lowest to "
        "the highest ratio of one pair of repetitions. Times are synchronised (results "
        "fetched to the host).",
        "",
        "| measurement | setting | baseline | candidate | baseline | candidate "
        "| ratio of medians | spread | runs |",
        "|---|---|---|---|---:|---:|---|---|---:|",
    ]
    notes = []
    for row in report["rows"]:
        head = f"| {row['title']} | {row['setting']} | {row['baseline']} | {row['candidate']} |"
        if row["status"] == "measured" and "ratio" in row:
            lines.append(
                f"{head} {format_value(row['baseline_value'], row['unit'])} "
                f"| {format_value(row['candidate_value'], row['unit'])} "
                f"| {format_ratio(row['ratio'], row['better'])} | {format_spread(row)} "
                f"| {row['runs']} |"
            )
        elif "value" in row:  # a whole-suite time: no baseline, no ratio
            failed = "" if row["status"] == "measured" else "**failed**: "
            lines.append(
                f"| {row['title']} | {row['setting']} | | | | "
                f"{format_value(row['value'], row['unit'])} | {failed}{row.get('detail', '')} "
                "| | 1 |"
            )
        else:
            lines.append(f"{head} | | **{row['status']}** | {row.get('reason', '')} | |")
        if row.get("note"):
            notes.append(f"- *{row['title']}*: {row['note']}")
    if notes:
        lines += ["", "Notes:", ""] + notes
    return "\n".join(lines) + "\n"


NOTES = {
    "pipeline": (
        "both pipelines come from `helpers/pipelines.py` (notebook 06): the naive one reads "
        "files in turn and decodes and augments one example at a time, as most tutorials do; "
        "the optimised one reads in parallel, caches decoded images, augments whole batches "
        "and prefetches."
    ),
    "steps_per_call": (
        "`helpers.loops.make_train_steps` (notebook 04); the same traced function runs either "
        "1 step per call (called N times) or N steps per call. On a TPU each call is a round "
        "trip from the host, which is what the many-steps loop saves."
    ),
    "fit_spe_1": (
        "`helpers.fitting.steps_per_execution_for` (notebook 03) picks the value; "
        "`helpers.fitting.time_fit` runs one `fit` per model: an untimed epoch, then timed "
        "epochs; the pairs are epoch 1 with epoch 1 and so on (not alternated: on 8 replicas "
        "every new `fit` call sets up its distributed input again, slowly and erratically)."
    ),
    f"fit_spe_{SIMULATED_REPLICAS}": (
        "the simulated TPU's MirroredStrategy sums gradients with collective all-reduce ops, "
        "which Keras 3 cannot run inside its multi-step loop (field notes, section 3), so "
        "`helpers.fitting` chooses 1; the benchmark still tries 2 on every run and would "
        "measure it once a Keras release fixes this. Under TPUStrategy this path is compiled "
        "differently (unverified on hardware)."
    ),
    f"fit_spe_{SIMULATED_REPLICAS}_reduce_to_one": (
        "the same devices and fit with `MirroredStrategy(cross_device_ops="
        "tf.distribute.ReductionToOneDevice())`: no collective ops in the loop, so several "
        "steps per execution run on 8 replicas too."
    ),
    "bf16_step": (
        "a CPU without bfloat16 units emulates it, so mixed precision can be slower here; on a "
        "TPU the matrix units multiply in bfloat16 anyway, and the saving is mostly memory and "
        "bandwidth (not measured on TPU hardware)."
    ),
    "bf16_weights": (
        "under `mixed_bfloat16` the variables stay float32 (only computations are bfloat16), "
        "so weight memory does not shrink; the activations do, except the float32 logits. "
        "Both are counted by `helpers.precision` (notebook 05) from the model's tensors."
    ),
    "distribution": (
        "8 simulated replicas share this machine's CPU cores, so this is the cost of the "
        "simulation (splitting the batch, all-reducing gradients), not of a TPU, where each "
        "replica has its own core. The two sides run in separate processes (the device split "
        "is per process), one after the other, so the spread is the widest possible: "
        "slowest over fastest and fastest over slowest."
    ),
    "notebooks": "an absolute time, not a ratio: how long CI's notebook run takes here.",
    "tests": (
        "an absolute time, not a ratio; the suite includes this benchmark's own quick-mode test."
    ),
}


def collect_rows(processes: list[dict], settings: Settings) -> list[dict]:
    rows, dist = [], {}
    for proc in processes:
        for name, status in proc["tasks"].items():
            if name == "distribution":
                dist[proc.get("replicas")] = status.get("result") if status["ok"] else None
                continue
            if status["ok"]:
                rows.extend(status["result"])
            else:
                rows.append(
                    _row(
                        name,
                        name.replace("_", " "),
                        "",
                        "",
                        "",
                        status="failed",
                        reason=status["error"],
                    )
                )
    rows.append(distribution_row(dist.get(1), dist.get(SIMULATED_REPLICAS), settings))
    order = [
        "pipeline",
        "steps_per_call",
        "fit_spe_1",
        f"fit_spe_{SIMULATED_REPLICAS}",
        f"fit_spe_{SIMULATED_REPLICAS}_reduce_to_one",
    ]
    rank = {key: i for i, key in enumerate(order)}
    rows.sort(key=lambda r: rank.get(r["key"], len(order)))
    return rows


def run(settings: Settings, quick: bool, out: Path, timeout: float) -> dict:
    start, started = time.perf_counter(), time.strftime("%Y-%m-%d %H:%M")
    load_start = load_average()
    hw = hardware()
    print(
        f"Benchmark ({'quick' if quick else 'full'} mode) on {hw['cpu']}, {hw['cores']} cores, "
        f"{hw['memory_gib']} GiB; load average {load_start}",
        flush=True,
    )
    processes = []
    for i, (replicas, tasks) in enumerate(PLAN, 1):
        print(
            f"[{i}/{len(PLAN) + 1}] at {time.perf_counter() - start:.0f} s: a process with "
            f"{_replicas(replicas)}: {', '.join(tasks)}",
            flush=True,
        )
        processes.append(run_process(replicas, tasks, quick, timeout))
    rows = collect_rows(processes, settings)
    print(
        f"[{len(PLAN) + 1}/{len(PLAN) + 1}] at {time.perf_counter() - start:.0f} s: "
        "notebooks (smoke mode) and unit tests",
        flush=True,
    )
    if not settings.notebooks_and_tests:
        print("  skipped in --quick mode", flush=True)
    rows.append(notebooks_row(settings, out))
    rows.append(tests_row(settings))
    for row in rows:
        row.setdefault("note", "")
        row["note"] = row["note"] or NOTES.get(row["key"], "")
    versions = {"Python": platform.python_version()}
    versions.update(next((p["versions"] for p in processes if "versions" in p), {}))
    return {
        "quick": quick,
        "started": started,
        "seconds": time.perf_counter() - start,
        "hardware": hw,
        "versions": versions,
        "load_average": {"start": load_start, "end": load_average()},
        "settings": asdict(settings),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the reduced mode CI runs")
    parser.add_argument("--out", type=Path, default=ROOT / "build", help="where to write")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per process")
    # Internal: how the parent starts a measuring process.
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--tasks", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL

    if args.worker is not None:
        run_worker(args.worker, args.tasks.split(","), settings, args.result)
        # Everything is saved. Skip TensorFlow's shutdown: after the failed multi-replica fit
        # it can wait minutes for collective ops that will never finish.
        sys.stdout.flush()
        os._exit(0)

    args.out.mkdir(parents=True, exist_ok=True)
    report = run(settings, args.quick, args.out, args.timeout)
    text = markdown(report)
    (args.out / "benchmark.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "benchmark.md").write_text(text)
    print("\n" + text)
    print(f"Written: {args.out / 'benchmark.md'} and {args.out / 'benchmark.json'}")
    failed = [r["title"] for r in report["rows"] if r["status"] == "failed"]
    if failed:
        print("Failed: " + "; ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
