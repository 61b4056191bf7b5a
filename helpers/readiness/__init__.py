"""The TPU readiness check: find on a CPU what would fail or be slow on a TPU (notebook 10_tpu_readiness_check).

One call looks at a ``tf.data`` pipeline, a Keras model and, optionally, your own training step,
and returns a :class:`Report`::

    from helpers import readiness

    report = readiness.check(dataset, model, strategy=strategy)
    report                   # a table in a notebook; print(report) anywhere else
    report.assert_clean()    # raises NotReady, listing the problems, unless there are none

A pipeline built by a ``dataset_fn`` for ``strategy.distribute_datasets_from_function`` yields
per-replica batches: pass the ``tf.distribute.InputContext`` it was built with as
``input_context=`` and the batch is checked as one replica's.

Each :class:`Finding` says what is wrong, where, why it matters on a TPU, and the fix. Severities:
``error`` (will not run on a TPU as written, with a source that says so), ``warning`` (runs, but
slowly, wastefully or not as written; or fails only on the strategy you are checking with, which
its words say) and ``note`` (worth knowing, nothing to change now; also what only the simulated
TPU rejects, such as several steps per call). What could not be checked
without a TPU says "unverified on hardware". Only errors and warnings make a report unclean; a
clean report prints as one line.

What it checks (the finding codes)
----------------------------------
dataset (from ``dataset.element_spec``, without reading any data)
    ``dynamic-batch``    batch dimension None (``batch()`` without ``drop_remainder``): the batch
                         size is then read from the pipeline's graph (its batch op, each ``zip``
                         component, the datasets a ``flat_map``/``interleave`` builds, such as the
                         one Keras' ``fit`` builds from NumPy arrays), and the sentence says
                         what the pipeline does (a note when it repeats before batching or the
                         data divides; a warning when a pass ends with a partial batch). Where it
                         cannot be read, ``skipped`` says so: pass ``global_batch=``
    ``dynamic-shape``    another dimension None, or unknown rank (every new shape recompiles)
    ``ragged-input`` / ``sparse-input`` / ``composite-input``  non-dense elements
    ``host-dtype``       strings, variants, complex128: types a TPU cannot hold
    ``float64``          float64 inputs, weights or step operations
    ``uneven-split``     global batch not divisible by the replica count (as tf.distribute
                         splits it; helpers.batches.BatchPlan describes every batch)
    ``batch-tiles``      per-replica batch not a multiple of 8 (padding cost estimated)
    ``small-batch``      note: per-replica batch below 128
    ``no-prefetch``      note: the pipeline does not end with ``prefetch``
pipeline functions (the traced ``map``, ``filter``, ``flat_map``, ... functions, never run)
    ``python-in-pipeline``  ``tf.py_function``, ``tf.numpy_function`` or a Python generator
                         (``Dataset.from_generator``) on the host: GIL-bound, the TPU waits
    ``constant-seed``    a stateless random op seeded by a constant: the same "random" values
                         for every element and epoch
model (a model of models that is not built itself, e.g. a GAN: its built parts, named in
``checked``; the parts not built are named in ``skipped``)
    ``model-outside-scope``  weights or other model state not created under ``strategy.scope()``
    ``random-state-outside-scope``  note: only random layers' seed-generator state was made
                         outside it (not weights: training runs on every replica)
    ``float16-policy``   ``mixed_float16`` instead of the TPU's ``mixed_bfloat16``
    ``layer-tiles``      a hidden width that wastes the 128-wide matrix units (cost estimated):
                         a warning only above one tile, when its padding is 10% or more of the
                         model's estimated matrix work; below one tile, a note (free capacity)
    ``tile-padding``     note: the model's overall padding estimate, when it is large
step (yours; else the model's own ``train_step`` when its class writes one, as fit() runs it;
else the model's forward and backward pass), traced once, never run, under a variable creator
scope that records each variable the step would create and goes on past optimizer slots and
variables made in the step with stand-ins it discards (what held them gets its attributes back:
nothing of yours is created or built); a layer or metric building itself stops the trace
    ``replica-equivalence``  note, for your own step: how to prove its loss scaling with
                         ``helpers.loops.check_replica_equivalence``
    ``step-not-traceable``  tracing fails, e.g. ``.numpy()`` on a tensor inside the step (the step
                         is called as ``strategy.run`` calls it: the element unpacked, or whole
                         as one argument, as the official examples write it)
    ``python-side-effect``  ``print``, a mutated list/dict/set, a rebound global: once per trace
    ``frozen-random``    Python or NumPy random numbers or clocks: frozen into the graph
    ``constant-seed``    a stateless random op seeded by a constant: the same noise every step
    ``python-in-step``   ``tf.py_function`` / ``tf.numpy_function``: no XLA kernel
    ``print-in-step``    ``tf.print``: runs on the host, every step, or does not print
    ``xla-unsupported-op``  an op with no XLA kernel (checked op by op against XLA's registry).
                         An error while soft device placement is off when a step is traced (the
                         default: TPUStrategy then cannot move the op to the host), a warning
                         when it is on (the op runs on the host CPU, slowly)
    ``xla-compile-failed``  XLA cannot compile the step, e.g. a shape computed from values
    ``dynamic-shape-op``    an op with a data-dependent output size (``tf.unique``, ``tf.where``)
    ``optimizer-not-built`` an optimizer the step uses, however it reaches it (a closure, a
                         trainer's attribute, an argument), would create slot variables on its
                         first call (fails on MirroredStrategy with 2+ replicas); also when the
                         trace fails while building it ("Need to be inside strategy.scope()")
    ``variable-in-step``    error: the step makes a variable, metric or layer each time it runs
    ``builds-in-step``      note: a layer or metric builds its variables on the step's first call
strategy
    ``spe-unsupported``  ``steps_per_execution > 1`` that the strategy you check with cannot run:
                         a note on the simulated TPU (a MirroredStrategy over CPU devices: keep
                         the TPU's value), a warning on a MirroredStrategy over GPUs, where you
                         run it; never a TPU finding
    ``spe-one-on-tpu``   note: ``steps_per_execution=1`` on a TPU (host overhead each step)

What it cannot see
------------------
- Speed: whether the input pipeline keeps the TPU busy (the most common TPU problem), and how
  long XLA compiles take. Measure on the TPU with the profiler.
- Memory: whether the model, optimizer state and batch fit in the TPU's HBM.
- The TPU's own compiler. Ops are checked against XLA's *CPU* registry and compiled by XLA for
  the CPU; the TPU's op set is close to that, not identical. The tile padding is a
  back-of-the-envelope estimate over Dense and Conv layers (not attention, embeddings or
  depthwise convolutions); XLA's real layouts and fusions differ.
- Constant seeds hidden behind function calls or control flow it does not fold (a seed computed
  inside a ``tf.cond`` branch from a constant is taken as not constant).
- Python side effects it cannot observe: in functions the step calls, in layer attributes or
  callbacks, or ones that change neither a list/dict/set nor a number/global it can see
  (``print`` is seen anywhere; random numbers and clocks only in the step's own code).
  Tracing runs the step's Python code once, so such side effects also happen during the check.
- With a multi-replica strategy, a step that updates variables cannot be compiled whole by XLA
  on the CPU (the variables live on several devices): it is checked op by op, and shapes
  computed from values are then flagged only for the known ops (``xla.VALUE_SHAPE_OPS``).
- Anything only a real TPU shows: ``TPUStrategy``'s handling of ``steps_per_execution``,
  ``tf.print``, ops without an XLA kernel and partial batches is *unverified on hardware* by this
  project; the check follows TensorFlow's source and documentation there.
- Bugs of your own step that trace and compile, such as a loss averaged over the per-replica
  batch: the ``replica-equivalence`` note says how to prove the step on real numbers.
- A training loop's outer function (the one calling ``strategy.run``): pass the per-replica step.
- Past a layer or metric that builds itself in the step: the trace stops there (going on would
  build your model). Past optimizer slots and variables made in the step it goes on and names
  each, but the rest of the step (side effects, XLA) is checked once they are built.
- Multi-host (pod) input sharding: whether the hosts' pipelines read disjoint data.

The modules: ``report`` (what a check returns: public); private, called only through
:func:`check`: ``_inputs`` (dataset), ``_batching`` (its batch size, from the pipeline's graph),
``_pipeline`` (its functions), ``_model``, ``_step`` (tracing), ``_creation`` (what the step
would create), ``_side_effects``, ``_seeds`` and ``_xla`` (what the traced step does);
``helpers.tpu_facts`` holds the numbers behind them. ``tests/test_readiness_corpus.py`` measures
recall and false alarms on a corpus of planted problems and clean models (figures in the README),
and on training setups reproduced from public TPU examples (TensorFlow's TPU guide and tutorials,
keras-io), against expectations written from their code and Google's documentation, each with
its source (``tests/data/readiness_public_expected.toml``).
"""

from __future__ import annotations

from collections.abc import Callable

from helpers._arguments import positive_int as _positive_int
from helpers.fitting import steps_per_execution_for
from helpers.fitting import strategy_kind as _strategy_kind
from helpers.readiness._inputs import check_dataset
from helpers.readiness._model import check_model
from helpers.readiness._pipeline import check_pipeline
from helpers.readiness._step import STEP_ARGS, check_step
from helpers.readiness.report import SEVERITIES, Finding, NotReady, Report

__all__ = ["SEVERITIES", "STEP_ARGS", "Finding", "NotReady", "Report", "check"]

# TensorFlow and Keras are imported inside the functions: ``import helpers.readiness`` must not
# import TensorFlow before the setup cell's ``quiet.quiet_tensorflow()`` has set its logging.


def check(
    dataset,
    model=None,
    *,
    step: Callable | None = None,
    strategy=None,
    replicas: int | None = None,
    steps_per_execution: int | None = None,
    compile_step: bool = True,
    input_context=None,
    step_args: str | None = None,
    global_batch: int | None = None,
) -> Report:
    """Check a pipeline (and model, and step) for what would fail or be slow on a TPU.

    Args:
        dataset: the ``tf.data.Dataset`` you give ``fit`` or ``experimental_distribute_dataset``
            (global batches). Only its ``element_spec`` is read; no data is pulled.
        model: a built Keras model. Without ``step``, its forward and backward pass is what
            gets traced and compiled.
        step: your per-replica training step, the function you give ``strategy.run``, called
            with the per-replica batch as ``strategy.run`` would call it: a tuple element
            unpacked into arguments (``strategy.run(step, args=batch)``) when the step takes
            that many, else the element as one argument (``args=(batch,)``, the official
            examples' way). It is traced once, never executed: no weights change.
        strategy: the ``tf.distribute`` strategy (default: the current one). Its replica count
            and kind drive the batch and ``steps_per_execution`` checks.
        replicas: the replica count to plan for without a strategy (e.g. 8 for a v5e-8).
        steps_per_execution: default: the value the model was compiled with.
        compile_step: False skips tracing and compiling (fast, dataset and model checks only).
        input_context: the ``tf.distribute.InputContext`` a ``dataset_fn`` built ``dataset``
            with (``distribute_datasets_from_function``): its batches are then per replica, and
            the global batch is that times ``input_context.num_replicas_in_sync``.
        step_args: ``"unpack"`` or ``"element"`` (:data:`STEP_ARGS`) to say how your
            ``strategy.run`` passes the batch, when the step's signature cannot tell.
        global_batch: the global batch size, for a pipeline whose batch size the check cannot
            read (``report.skipped`` says so): e.g. ``batch_size`` of ``fit(x, y, batch_size=)``
            when you check a dataset built some other way. It must agree with what it can read.

    Returns a :class:`Report`.
    Taught in notebooks 00, 01, 02, 03, 04, 05, 06, 08, 09, 10, 11, 13.
    """
    import tensorflow as tf

    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(
            "check() needs the tf.data.Dataset you feed to fit() (before "
            f"experimental_distribute_dataset), got {type(dataset).__name__}"
        )
    if model is not None and not _is_keras_layer(model):
        raise TypeError(f"model must be a Keras model, got {type(model).__name__}")
    if step is not None and not callable(step):
        raise TypeError(f"step must be a function, got {type(step).__name__}")
    if step_args is not None and step_args not in STEP_ARGS:
        raise ValueError(f"step_args must be one of {STEP_ARGS}, got {step_args!r}")
    if input_context is not None and not isinstance(input_context, tf.distribute.InputContext):
        raise TypeError(
            f"input_context must be a tf.distribute.InputContext, got {type(input_context).__name__}"
        )
    strategy_given = strategy is not None
    strategy = strategy if strategy_given else tf.distribute.get_strategy()
    replicas = _replica_count(strategy, strategy_given, replicas, input_context)
    per_replica = input_context is not None
    spe = _steps_per_execution(model, steps_per_execution)

    report = Report(
        stats={
            "replicas": replicas,
            "strategy": type(strategy).__name__,
            "steps_per_execution": spe,
        }
    )
    spec = dataset.element_spec
    given = _dataset_batch(global_batch, replicas, per_replica)
    check_dataset(dataset, spec, replicas, report, per_replica, given)
    check_pipeline(dataset, report)
    if model is not None:
        check_model(model, strategy if strategy_given else None, report)
    if compile_step and (model is not None or step is not None):
        kind = _strategy_kind(strategy)
        check_step(spec, model, step, replicas, report, per_replica, kind, step_args)
    elif model is not None or step is not None:
        report.skipped.append("step tracing and XLA compile (compile_step=False)")
    if spe is not None:
        _check_steps_per_execution(spe, strategy, replicas, report)
    return report


# --------------------------------------------------------------------------------- arguments


def _is_keras_layer(obj) -> bool:
    import keras

    return isinstance(obj, keras.layers.Layer)


def _replica_count(strategy, strategy_given: bool, replicas, input_context) -> int:
    """The replica count, from whichever of strategy, input context and ``replicas`` was given."""
    said = []
    if strategy_given:
        said.append(("the strategy", strategy.num_replicas_in_sync))
    if input_context is not None:
        count = input_context.num_replicas_in_sync
        said.append((f"input_context (num_replicas_in_sync={count})", count))
    if replicas is not None:
        said.append((f"replicas={replicas}", _positive_int("replicas", replicas)))
    if not said:
        return strategy.num_replicas_in_sync  # the current (default or entered) strategy
    (first, count), *others = said
    for who, other in others:
        if other != count:
            raise ValueError(f"{who} disagrees with {first}, which has {count}; pass one of them")
    return count


def _dataset_batch(global_batch, replicas: int, per_replica: bool) -> int | None:
    """``global_batch`` in the dataset's own units: per replica for a ``dataset_fn``'s dataset."""
    if global_batch is None:
        return None
    global_batch = _positive_int("global_batch", global_batch)
    if not per_replica:
        return global_batch
    if global_batch % replicas:
        raise ValueError(
            f"global_batch={global_batch} does not split over input_context's {replicas} replicas"
        )
    return global_batch // replicas


def _steps_per_execution(model, value) -> int | None:
    if value is not None:
        return _positive_int("steps_per_execution", value)
    if model is not None and getattr(model, "compiled", False):
        return int(getattr(model, "steps_per_execution", 1) or 1)
    return None


# --------------------------------------------------------------------------------- strategy


def _on_cpu_devices(strategy) -> bool:
    """True for a strategy whose replicas are all CPU devices: the simulated TPU, not GPUs."""
    devices = list(getattr(strategy.extended, "worker_devices", ()))
    return bool(devices) and all("CPU" in d.rpartition("/device:")[2].upper() for d in devices)


def _check_steps_per_execution(spe: int, strategy, replicas: int, report: Report) -> None:
    import keras

    report.checked.append("steps_per_execution")
    kind = _strategy_kind(strategy)
    if spe > 1 and kind == "mirrored" and replicas > 1 and keras.__version__.startswith("3."):
        if steps_per_execution_for(strategy, spe).value == spe:  # e.g. ReductionToOneDevice
            return
        simulated = _on_cpu_devices(strategy)
        if simulated:  # the simulated TPU: judge for the target, note what only it rejects
            severity = "note"
            what = (
                f"steps_per_execution={spe} is for the TPU; only the simulated TPU you are "
                f"checking with (MirroredStrategy over {replicas} CPU devices) rejects it"
            )
            fix = (
                "Keep it in your TPU code. To run fit() on the simulated TPU as well, choose the "
                "value from the strategy: helpers.fitting.steps_per_execution_for(strategy, "
                f"{spe}).value is {spe} on TPUStrategy and 1 here."
            )
        else:
            severity = "warning"
            what = (
                f"steps_per_execution={spe} fails on the strategy you are checking with "
                f"(MirroredStrategy, {replicas} replicas), not on a TPU"
            )
            fix = (
                "Keep it for the TPU; where you run fit() on this strategy, choose the value "
                "from the strategy (helpers.fitting.steps_per_execution_for): 1 here, e.g. 32 "
                "on TPUStrategy; or MirroredStrategy(cross_device_ops=ReductionToOneDevice())."
            )
        report.findings.append(
            Finding(
                "spe-unsupported",
                severity,
                what,
                "model.compile(steps_per_execution=...)",
                "With Keras 3, fit() on a multi-replica MirroredStrategy fails with "
                "INVALID_ARGUMENT 'You must feed a value for placeholder tensor' (reproduced "
                "with Keras 3.8 to 3.15 when the gradients are summed by collective all-reduce "
                "ops, MirroredStrategy's default, as on this collection's simulated TPU; closest "
                "upstream report keras-team/keras#19246). On TPUStrategy a value above 1 is what "
                "TensorFlow's TPU guide recommends (unverified on hardware).",
                fix,
            )
        )
    elif spe == 1 and kind == "tpu":
        report.findings.append(
            Finding(
                "spe-one-on-tpu",
                "note",
                "steps_per_execution=1 on a TPU",
                "model.compile(steps_per_execution=...)",
                "Each step returns to the Python host; on a TPU that overhead can exceed the "
                "step itself for small models.",
                "Try steps_per_execution=32 or more and compare the time per epoch.",
            )
        )
