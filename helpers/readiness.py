"""The TPU readiness check: find on a CPU what would fail or be slow on a TPU (notebook 10).

One call looks at a ``tf.data`` pipeline, a Keras model and, optionally, your own training step,
and returns a :class:`Report`::

    from helpers import readiness

    report = readiness.check(dataset, model, strategy=strategy)
    report                   # a table in a notebook; print(report) anywhere else
    report.assert_clean()    # raises NotReady, listing the problems, unless there are none

Each :class:`Finding` says what is wrong, where, why it matters on a TPU, and the fix. Severities:
``error`` (will not run on a TPU as written), ``warning`` (runs, but slowly, wastefully or not as
written) and ``note`` (worth knowing, nothing to change now). Only errors and warnings make a
report unclean; a clean report prints as one line.

What it checks (the finding codes)
----------------------------------
dataset (from ``dataset.element_spec``, without reading any data)
    ``dynamic-batch``    batch dimension None (``batch()`` without ``drop_remainder``)
    ``dynamic-shape``    another dimension None, or unknown rank (every new shape recompiles)
    ``ragged-input`` / ``sparse-input`` / ``composite-input``  non-dense elements
    ``host-dtype``       strings, variants, complex128: types a TPU cannot hold
    ``float64``          float64 inputs, weights or step operations
    ``uneven-split``     global batch not divisible by the replica count
    ``batch-tiles``      per-replica batch not a multiple of 8 (padding cost estimated)
    ``small-batch``      note: per-replica batch below 128
    ``no-prefetch``      note: the pipeline does not end with ``prefetch``
model
    ``model-outside-scope``  variables not created under ``strategy.scope()``
    ``float16-policy``   ``mixed_float16`` instead of the TPU's ``mixed_bfloat16``
    ``layer-tiles``      a hidden width that wastes the 128-wide matrix units (cost estimated)
    ``tile-padding``     note: the model's overall padding estimate, when it is large
step (yours, or the model's forward and backward pass), traced once, never run
    ``step-not-traceable``  tracing fails, e.g. ``.numpy()`` on a tensor inside the step
    ``python-side-effect``  ``print``, a mutated list/dict/set, a rebound global: once per trace
    ``frozen-random``    Python or NumPy random numbers or clocks: frozen into the graph
    ``python-in-step``   ``tf.py_function`` / ``tf.numpy_function``: a host round trip, no XLA
    ``print-in-step``    ``tf.print``: runs on the host, every step
    ``xla-unsupported-op``  an op with no XLA kernel (checked op by op against XLA's registry)
    ``xla-compile-failed``  XLA cannot compile the step, e.g. a shape computed from values
    ``dynamic-shape-op``    an op with a data-dependent output size (``tf.unique``, ``tf.where``)
    ``optimizer-not-built`` an optimizer the step uses has no slot variables yet
strategy
    ``spe-unsupported``  ``steps_per_execution > 1`` that this strategy cannot run
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
- Python side effects it cannot observe: in functions the step calls, in layer attributes or
  callbacks, or ones that change neither a list/dict/set nor a number/global it can see
  (``print`` is seen anywhere; random numbers and clocks only in the step's own code).
  Tracing runs the step's Python code once, so such side effects also happen during the check.
- With a multi-replica strategy, a step that updates variables cannot be compiled whole by XLA
  on the CPU (the variables live on several devices): it is checked op by op, and shapes
  computed from values are then flagged only for the known ops (``VALUE_SHAPE_OPS``).
- Anything only a real TPU shows: ``TPUStrategy``'s handling of ``steps_per_execution``,
  ``tf.print`` and partial batches is *unverified on hardware* by this project.
- A training loop's outer function (the one calling ``strategy.run``): pass the per-replica step.
- Multi-host (pod) input sharding.
"""

from __future__ import annotations

import builtins
import contextlib
import dis
import html
import inspect
import math
import re
import sys
import textwrap
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

TILE_ROWS = 8  # the TPU pads the second-to-last dimension of a tile to 8 ...
TILE_COLS = 128  # ... and the last one to 128: the width of the matrix units (MXU)
WASTE_WARNING = 0.10  # a chosen size that pads away 10% or more of its work is worth a warning
BATCH_FOR_MXU = 128  # per-replica batch the Cloud TPU performance guide recommends
SEVERITIES = ("error", "warning", "note")

# Types TensorFlow can feed to a TPU (tensorflow/core/tpu/tpu_defs.h lists them); these cannot.
HOST_ONLY_DTYPES = ("string", "variant", "resource", "complex128")
FLOAT64_WHY = (
    "TPUs are built for bfloat16 and float32; float64 is not a native TPU type (TensorFlow's TPU "
    "type list accepts it, so XLA emulates or rejects it depending on the op; unverified on "
    "hardware)."
)
# Ops that exist only in the traced graph's plumbing and have no XLA kernel by design.
STRUCTURAL_OPS = frozenset({"Placeholder", "_Arg", "_Retval", "NoOp"})
PYTHON_OPS = {
    "EagerPyFunc": "tf.py_function",
    "PyFunc": "tf.numpy_function",
    "PyFuncStateless": "tf.numpy_function",
}
PRINT_OPS = frozenset({"PrintV2", "StringFormat", "Print"})
# Ops whose output size depends on tensor values: XLA pads them to a bound or cannot compile them.
VALUE_SHAPE_OPS = {
    "Where": "tf.where with one argument (or tf.boolean_mask)",
    "Unique": "tf.unique",
    "UniqueV2": "tf.unique",
    "UniqueWithCounts": "tf.unique_with_counts",
    "UniqueWithCountsV2": "tf.unique_with_counts",
    "ListDiff": "tf.sets.difference / setdiff1d",
    "DenseBincount": "tf.math.bincount",
    "Bincount": "tf.math.bincount",
    "DynamicPartition": "tf.dynamic_partition",
    "NonMaxSuppressionV3": "tf.image.non_max_suppression",
    "NonMaxSuppressionV4": "tf.image.non_max_suppression",
    "NonMaxSuppressionV5": "tf.image.non_max_suppression",
}
OP_WORDS = {
    "ImageProjectiveTransformV2": "image rotation, zoom or shear (Keras RandomRotation, RandomZoom, "
    "RandomTranslation)",
    "ImageProjectiveTransformV3": "image rotation, zoom or shear (Keras RandomRotation, RandomZoom, "
    "RandomTranslation)",
    "HistogramFixedWidth": "tf.histogram_fixed_width",
    "AsString": "tf.strings.as_string (a string operation)",
}


@dataclass(frozen=True)
class Finding:
    """One problem: what, where, why it matters on a TPU, and the fix."""

    code: str
    severity: str
    what: str
    where: str
    why: str
    fix: str

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")


class NotReady(AssertionError):
    """Raised by :meth:`Report.assert_clean`; the message lists the problems."""


@dataclass
class Report:
    """The findings of :func:`check`, printable as text and shown as a table in notebooks."""

    findings: list[Finding] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    @property
    def problems(self) -> list[Finding]:
        """Errors and warnings: what makes the report unclean."""
        return [f for f in self.findings if f.severity != "note"]

    @property
    def notes(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "note"]

    @property
    def codes(self) -> set[str]:
        """The codes of every finding, notes included."""
        return {f.code for f in self.findings}

    @property
    def clean(self) -> bool:
        return not self.problems

    def find(self, code: str) -> list[Finding]:
        return [f for f in self.findings if f.code == code]

    def assert_clean(self, allow: Iterable[str] = ()) -> Report:
        """Raise :class:`NotReady` unless every error and warning has a code in ``allow``."""
        allow = set(allow)
        left = [f for f in self.problems if f.code not in allow]
        if left:
            shown = Report(left, self.checked, self.skipped, self.stats)
            raise NotReady(shown.text(notes=False))
        return self

    def summary(self) -> str:
        """The one-line verdict."""
        context = self._context()
        if self.clean:
            extra = f"; {len(self.notes)} note(s) in report.notes" if self.notes else ""
            return f"TPU readiness: clean, no problems found ({context}{extra})"
        counts = [
            f"{n} {sev}{'s' if n > 1 else ''}"
            for sev in SEVERITIES
            if (n := sum(f.severity == sev for f in self.findings))
        ]
        return f"TPU readiness: {', '.join(counts)} ({context})"

    def _context(self) -> str:
        parts = [f"checked {', '.join(self.checked)}" if self.checked else "nothing checked"]
        if "replicas" in self.stats:
            parts.append(f"{self.stats['replicas']} replica(s)")
        if self.stats.get("global_batch") is not None:
            parts.append(f"global batch {self.stats['global_batch']}")
        return "; ".join(parts)

    def text(self, notes: bool = True, width: int = 100) -> str:
        """The report as plain text: the summary line, then one block per finding."""
        if self.clean and not notes:
            return self.summary()
        lines = [self.summary()]
        shown = self.findings if notes else self.problems
        for i, f in enumerate(shown, 1):
            lines.append(f"{i}. [{f.severity}] {f.what}  ({f.code})")
            for label, value in (("where", f.where), ("why", f.why), ("fix", f.fix)):
                lines += textwrap.wrap(
                    value, width, initial_indent=f"   {label + ':':<7}", subsequent_indent=" " * 10
                )
        lines += [f"   (skipped: {reason})" for reason in self.skipped]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text(notes=not self.clean)

    def __repr__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        colour = {"error": "#c5221f", "warning": "#e37400", "note": "#5f6368"}
        head = html.escape(self.summary())
        if self.clean:
            return f'<div style="color:#188038;font-weight:bold">{head}</div>'
        rows = "".join(
            f"<tr><td>{i}</td>"
            f'<td style="color:{colour[f.severity]};font-weight:bold">{f.severity}</td>'
            + "".join(
                f'<td style="text-align:left">{html.escape(v)}</td>'
                for v in (f.what, f.where, f.why, f.fix)
            )
            + f"<td><code>{f.code}</code></td></tr>"
            for i, f in enumerate(self.findings, 1)
        )
        skipped = "".join(f"<li>{html.escape(s)}</li>" for s in self.skipped)
        return (
            f"<div><b>{head}</b><table>"
            "<tr><th>#</th><th>severity</th><th>what</th><th>where</th>"
            "<th>why it matters on a TPU</th><th>fix</th><th>code</th></tr>"
            f"{rows}</table>" + (f"<small>skipped:<ul>{skipped}</ul></small>" if skipped else "")
        ) + "</div>"


def check(
    dataset,
    model=None,
    *,
    step: Callable | None = None,
    strategy=None,
    replicas: int | None = None,
    steps_per_execution: int | None = None,
    compile_step: bool = True,
) -> Report:
    """Check a pipeline (and model, and step) for what would fail or be slow on a TPU.

    Args:
        dataset: the ``tf.data.Dataset`` you give ``fit`` or ``experimental_distribute_dataset``
            (global batches). Only its ``element_spec`` is read; no data is pulled.
        model: a built Keras model. Without ``step``, its forward and backward pass is what
            gets traced and compiled.
        step: your per-replica training step, the function you give ``strategy.run``. It is
            called like ``strategy.run`` calls it: a tuple element is unpacked into arguments,
            anything else is passed as one argument, each with the per-replica batch size.
            It is traced once, never executed: no weights change.
        strategy: the ``tf.distribute`` strategy (default: the current one). Its replica count
            and kind drive the batch and ``steps_per_execution`` checks.
        replicas: the replica count to plan for without a strategy (e.g. 8 for a v5e-8).
        steps_per_execution: default: the value the model was compiled with.
        compile_step: False skips tracing and compiling (fast, dataset and model checks only).

    Returns a :class:`Report`. Taught in notebook 10; every notebook checks its own pipeline.
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
    strategy_given = strategy is not None
    strategy = strategy if strategy_given else tf.distribute.get_strategy()
    replicas = _replica_count(strategy, strategy_given, replicas)
    spe = _steps_per_execution(model, steps_per_execution)

    report = Report(
        stats={
            "replicas": replicas,
            "strategy": type(strategy).__name__,
            "steps_per_execution": spe,
        }
    )
    spec = dataset.element_spec
    _check_dataset(dataset, spec, replicas, report)
    if model is not None:
        _check_model(model, strategy if strategy_given else None, report)
    if compile_step and (model is not None or step is not None):
        _check_step(spec, model, step, replicas, report)
    elif model is not None or step is not None:
        report.skipped.append("step tracing and XLA compile (compile_step=False)")
    if spe is not None:
        _check_steps_per_execution(spe, strategy, replicas, report)
    return report


# --------------------------------------------------------------------------------- arguments


def _is_keras_layer(obj) -> bool:
    import keras

    return isinstance(obj, keras.layers.Layer)


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _replica_count(strategy, strategy_given: bool, replicas) -> int:
    actual = strategy.num_replicas_in_sync
    if replicas is None:
        return actual
    replicas = _positive_int("replicas", replicas)
    if strategy_given and replicas != actual:
        raise ValueError(
            f"replicas={replicas} disagrees with the strategy, which has {actual}; pass one of them"
        )
    return replicas


def _steps_per_execution(model, value) -> int | None:
    if value is not None:
        return _positive_int("steps_per_execution", value)
    if model is not None and getattr(model, "compiled", False):
        return int(getattr(model, "steps_per_execution", 1) or 1)
    return None


def _ceil(n: int, m: int) -> int:
    return -(-n // m) * m


# --------------------------------------------------------------------------------- dataset


def _components(spec, path: str = "element"):
    """Yield ``(path, spec)`` for every leaf of a (nested) element spec."""
    if isinstance(spec, dict):
        for key, value in spec.items():
            yield from _components(value, f"{path}[{key!r}]")
    elif isinstance(spec, (tuple, list)):
        for i, value in enumerate(spec):
            yield from _components(value, f"{path}[{i}]")
    else:
        yield path, spec


def _kind(spec) -> str:
    import tensorflow as tf

    if isinstance(spec, tf.TensorSpec):
        return "dense"
    if isinstance(spec, tf.RaggedTensorSpec):
        return "ragged"
    if isinstance(spec, tf.SparseTensorSpec):
        return "sparse"
    return "other"


def _check_dataset(dataset, spec, replicas: int, report: Report) -> None:
    report.checked.append("dataset")
    dynamic_batch, batch_sizes = [], set()
    float64, host = [], []
    for path, leaf in _components(spec):
        kind = _kind(leaf)
        if kind in ("ragged", "sparse"):
            _add_nondense(report, kind, path, leaf)
        elif kind == "other":
            report.findings.append(
                Finding(
                    "composite-input",
                    "warning",
                    f"{type(leaf).__name__} in the dataset element",
                    f"dataset, {path}",
                    "A TPU step receives dense tensors of fixed shape; other structures have to "
                    "be taken apart on the host first.",
                    "Convert it to dense tensors in the tf.data pipeline (dataset.map).",
                )
            )
            continue
        dtype = getattr(leaf, "dtype", None)
        if dtype is not None and dtype.name in HOST_ONLY_DTYPES:
            host.append(f"{path} ({dtype.name})")
        elif dtype is not None and dtype.name == "float64":
            float64.append(path)
        if kind != "dense":
            continue
        if leaf.shape.rank is None:
            _add_dynamic(report, path, "its rank (number of dimensions) is unknown")
            continue
        if leaf.shape.rank == 0:
            continue
        if leaf.shape[0] is None:
            dynamic_batch.append(path)
        else:
            batch_sizes.add(leaf.shape[0])
        other = [i for i, d in enumerate(leaf.shape[1:], 1) if d is None]
        if other:
            _add_dynamic(report, path, f"dimension(s) {other} of shape {leaf.shape} are None")
    if host:
        report.findings.append(
            Finding(
                "host-dtype",
                "error",
                "the dataset yields types a TPU cannot hold",
                f"dataset, {', '.join(host)}",
                "A TPU has no string (or variant, complex128) type: every tensor that reaches the "
                "step must be numeric. The step fails to compile for the TPU.",
                "Turn it into numbers in the pipeline (e.g. a keras.layers.StringLookup in "
                "dataset.map), or drop it from the element before it reaches the step.",
            )
        )
    if float64:
        report.findings.append(
            Finding(
                "float64",
                "warning",
                "float64 data reaches the step",
                f"dataset, {', '.join(float64)}",
                f"{FLOAT64_WHY} It also doubles the bytes every batch sends from host to TPU, "
                "and a float32 model casts it down anyway.",
                "Convert once, before the pipeline: x.astype('float32') for NumPy arrays, or "
                "dataset.map(lambda x, y: (tf.cast(x, tf.float32), y)).",
            )
        )
    global_batch = None
    if dynamic_batch:
        report.findings.append(
            Finding(
                "dynamic-batch",
                "warning",
                "the batch size is unknown (None) in the element spec",
                f"dataset, dimension 0 of {', '.join(dynamic_batch)}",
                "XLA compiles the TPU step for fixed shapes. batch() without drop_remainder "
                "leaves a smaller last batch, so the batch dimension is None: that batch needs a "
                "second compile or padding (which one depends on the strategy; unverified on "
                "hardware), and the replica split cannot be checked in advance.",
                "dataset.batch(global_batch, drop_remainder=True); for training, repeat() before "
                "batch() and pass steps_per_epoch to fit().",
            )
        )
    elif len(batch_sizes) == 1:
        global_batch = batch_sizes.pop()
        _check_batch(global_batch, replicas, report)
    report.stats["global_batch"] = global_batch
    if not _ends_with_prefetch(dataset):
        report.findings.append(
            Finding(
                "no-prefetch",
                "note",
                "the pipeline does not end with prefetch()",
                "dataset, last transformation",
                "A TPU finishes a step faster than most hosts prepare a batch; prefetch lets the "
                "host prepare the next batch while the TPU computes.",
                "End the pipeline with .prefetch(tf.data.AUTOTUNE).",
            )
        )


def _ends_with_prefetch(dataset) -> bool:
    # with_options() wraps the dataset; look through those wrappers (private but long-stable).
    for _ in range(10):
        name = type(dataset).__name__
        if "Prefetch" in name:
            return True
        if "Options" not in name or not hasattr(dataset, "_input_dataset"):
            return False
        dataset = dataset._input_dataset
    return False


def _add_nondense(report: Report, kind: str, path: str, leaf) -> None:
    to_dense = "t.to_tensor(shape=[None, MAX_LEN])" if kind == "ragged" else "tf.sparse.to_dense(t)"
    report.findings.append(
        Finding(
            f"{kind}-input",
            "error",
            f"a {kind} tensor in the dataset element",
            f"dataset, {path} ({leaf})",
            f"TPUStrategy.experimental_distribute_dataset raises ValueError for {kind} tensors "
            "unless they stay on the host (InputOptions(experimental_fetch_to_device=False)), "
            "and the step itself needs dense tensors of fixed shape to compile.",
            f"Make it dense with a fixed size in the pipeline: dataset.map with {to_dense}, or "
            "padded_batch(..., padded_shapes=fixed sizes, drop_remainder=True). Only if the step "
            "must see it, distribute with tf.distribute.InputOptions("
            "experimental_fetch_to_device=False) and densify it there.",
        )
    )


def _add_dynamic(report: Report, path: str, detail: str) -> None:
    report.findings.append(
        Finding(
            "dynamic-shape",
            "warning",
            "a dataset tensor has no fixed shape",
            f"dataset, {path}: {detail}",
            "XLA compiles one TPU program per input shape: variable sizes (sequence lengths, "
            "decoded image sizes) mean a recompile for every new shape, each taking seconds "
            "to minutes.",
            "Give every tensor a fixed shape in the pipeline: pad or crop to a maximum length "
            "(padded_batch with padded_shapes, tf.image.resize), then tf.ensure_shape.",
        )
    )


def _check_batch(global_batch: int, replicas: int, report: Report) -> None:
    report.checked.append("batch split")
    if global_batch % replicas:
        # How tf.distribute splits it (checked against a real split in the tests): full shares
        # of ceil(global / replicas), the rest to the last replica(s).
        per = -(-global_batch // replicas)
        sizes = [min(per, max(0, global_batch - i * per)) for i in range(replicas)]
        split = " and ".join(
            f"{size} ({sizes.count(size)} replica{'s' if sizes.count(size) > 1 else ''})"
            for size in sorted(set(sizes), reverse=True)
        )
        lower = global_batch // replicas * replicas
        suggestion = " or ".join(str(s) for s in (lower, lower + replicas) if s)
        report.findings.append(
            Finding(
                "uneven-split",
                "error",
                f"global batch {global_batch} does not split evenly over {replicas} replicas",
                "dataset, batch dimension",
                "Every replica needs the same static batch. tf.distribute splits "
                f"{global_batch} into per-replica batches of {split}, so the per-replica "
                "shape becomes unknown to the compiler and the replicas do unequal work.",
                f"Use a multiple of {replicas}, e.g. {suggestion}: global batch = per-replica "
                "batch x replicas (helpers.data.per_replica_batch checks it).",
            )
        )
        return
    per = global_batch // replicas
    report.stats["per_replica_batch"] = per
    if per % TILE_ROWS:
        padded = _ceil(per, TILE_ROWS)
        report.findings.append(
            Finding(
                "batch-tiles",
                "warning",
                f"per-replica batch {per} is not a multiple of {TILE_ROWS}",
                f"dataset, global batch {global_batch} / {replicas} replicas",
                f"The TPU lays out the batch in tiles of {TILE_ROWS} rows: {per} is padded to "
                f"{padded}, so about {1 - per / padded:.0%} of every step's work is padding.",
                f"Per-replica batch {padded} (global {padded * replicas}) costs about the same "
                "step time; per-replica batches of 128 or more feed the matrix units best.",
            )
        )
    elif per < BATCH_FOR_MXU:
        report.findings.append(
            Finding(
                "small-batch",
                "note",
                f"per-replica batch {per} is below {BATCH_FOR_MXU}",
                f"dataset, global batch {global_batch} / {replicas} replicas",
                "The 128 x 128 matrix units are used best with 128 or more rows per replica; "
                "small batches leave the TPU waiting on the host (fine for a quick test).",
                f"When memory allows, per-replica batch {BATCH_FOR_MXU} or more "
                "(global = per-replica x replicas).",
            )
        )


# --------------------------------------------------------------------------------- model


def _check_model(model, strategy, report: Report) -> None:
    report.checked.append("model")
    if not getattr(model, "built", True) or not model.weights:
        report.skipped.append("model checks: the model is not built (call it once or use Input)")
        return
    if strategy is not None and strategy.num_replicas_in_sync > 1:
        outside = _variables_outside_scope(model, strategy)
        if outside:
            report.findings.append(
                Finding(
                    "model-outside-scope",
                    "error",
                    f"{len(outside)} of {len(model.variables)} model variables were created "
                    "outside strategy.scope()",
                    f"model '{model.name}', e.g. {outside[0]}",
                    "Variables made outside the scope are not replicated: the strategy cannot "
                    "spread training over the replicas, and fit() may quietly train on one "
                    "device instead of the TPU's cores.",
                    "Build (and compile) the model inside `with strategy.scope():`.",
                )
            )
    doubles = [v.path for v in model.weights if _dtype_name(v) == "float64"]
    if doubles:
        report.findings.append(
            Finding(
                "float64",
                "warning",
                f"{len(doubles)} model weights are float64",
                f"model '{model.name}', e.g. {doubles[0]}",
                f"{FLOAT64_WHY} float64 weights also take twice the memory.",
                "Leave Keras' float type at float32 (keras.config.set_floatx('float32')) or use "
                "the 'mixed_bfloat16' policy.",
            )
        )
    half = [
        layer.name
        for layer in [model, *_all_layers(model)]
        if getattr(getattr(layer, "dtype_policy", None), "name", "") == "mixed_float16"
    ]
    if half:
        report.findings.append(
            Finding(
                "float16-policy",
                "warning",
                "the model uses the 'mixed_float16' policy",
                f"model '{model.name}', dtype policy of {', '.join(half[:3])}",
                "TPUs compute in bfloat16, which keeps float32's range: float16 brings loss "
                "scaling a TPU does not need and is not the type its matrix units are built for.",
                "keras.mixed_precision.set_global_policy('mixed_bfloat16') before building.",
            )
        )
    _check_tiles(model, report)


def _dtype_name(variable) -> str:
    dtype = getattr(variable, "dtype", "")
    return getattr(dtype, "name", str(dtype))


def _variables_outside_scope(model, strategy) -> list[str]:
    import keras

    names = []
    for v in model.variables:
        tf_var = v.value if isinstance(v, keras.Variable) else v  # Keras wraps the tf.Variable
        try:
            inside = strategy.extended.variable_created_in_scope(tf_var)
        except (AttributeError, TypeError, ValueError):
            continue
        if not inside:
            names.append(getattr(v, "path", getattr(v, "name", "?")))
    return names


def _all_layers(model) -> list:
    """Every layer in the model, nested models included, in order."""
    flatten = getattr(model, "_flatten_layers", None)  # private, but it sees nested models
    return list(flatten(include_self=False)) if flatten else list(getattr(model, "layers", []))


def _matmul_layers(model) -> list[tuple]:
    """``(layer, unit word, K, N, rows per example)`` for Dense and plain Conv layers, in order."""
    import keras

    layers = _all_layers(model)
    convs = (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D)
    found = []
    for layer in layers:
        kernel = getattr(layer, "kernel", None)
        if kernel is None or not getattr(layer, "built", False):
            continue
        shape = tuple(int(d) for d in kernel.shape)
        if isinstance(layer, keras.layers.Dense) and len(shape) == 2:
            found.append((layer, "units", shape[0], shape[1], _rows(layer, "input")))
        elif isinstance(layer, convs):
            found.append((layer, "filters", shape[-2], shape[-1], _rows(layer, "output")))
    return found


def _rows(layer, which: str) -> int:
    """Rows per example a layer multiplies: the dimensions between batch and features."""
    try:
        shape = getattr(layer, which).shape
        return max(1, math.prod(int(d) for d in shape[1:-1]))
    except (AttributeError, TypeError, ValueError):
        return 1


def _check_tiles(model, report: Report) -> None:
    layers = _matmul_layers(model)
    if not layers:
        return
    report.checked.append("tile padding")
    useful = padded = 0
    for i, (layer, word, k, n, rows) in enumerate(layers):
        useful += rows * k * n
        padded += rows * _ceil(k, TILE_COLS) * _ceil(n, TILE_COLS)
        waste = 1 - n / _ceil(n, TILE_COLS)
        if i == len(layers) - 1 or waste < WASTE_WARNING:
            continue  # the last layer's width is the number of outputs: set by the task
        up, down = _ceil(n, TILE_COLS), n // TILE_COLS * TILE_COLS
        report.findings.append(
            Finding(
                "layer-tiles",
                "warning",
                f"layer '{layer.name}' has {n} {word}, not a multiple of {TILE_COLS}",
                f"model '{model.name}', layer '{layer.name}' ({type(layer).__name__})",
                f"The matrix units are {TILE_COLS} wide: {n} {word} are padded to {up}, so about "
                f"{waste:.0%} of this layer's multiply work (and of the next layer's input) is "
                "padding (an estimate).",
                f"Use {up} {word}: the same step time on a TPU"
                + (f" (or {down} if {n} was chosen to save time)." if down else "."),
            )
        )
    overall = 1 - useful / padded
    report.stats["tile_padding"] = round(overall, 4)
    if overall >= WASTE_WARNING:
        first, last = layers[0], layers[-1]
        report.findings.append(
            Finding(
                "tile-padding",
                "note",
                f"about {overall:.0%} of the model's matrix work would be tile padding (estimate)",
                f"model '{model.name}': {first[2]} input features into '{first[0].name}', "
                f"{last[3]} outputs from '{last[0].name}'",
                f"Sizes set by the data and the task (input features, number of classes) rarely "
                f"fill {TILE_COLS}-wide tiles; in a small model that padding dominates, in a "
                "large one it fades.",
                f"Nothing to change for sizes the data sets; keep the sizes you choose at "
                f"multiples of {TILE_COLS}.",
            )
        )


# --------------------------------------------------------------------------------- step


def _per_replica(spec, replicas: int, stand_in: bool):
    """The element spec as one replica sees it; with ``stand_in``, fully static or None."""
    import tensorflow as tf

    def one(leaf):
        if not isinstance(leaf, tf.TensorSpec) or leaf.shape.rank in (None, 0):
            return leaf
        dims = list(leaf.shape)
        if dims[0] is not None and dims[0] % replicas == 0:
            dims[0] //= replicas
        elif dims[0] is None and stand_in:
            dims[0] = TILE_ROWS  # a stand-in batch: XLA needs a number, any one will do
        return tf.TensorSpec(dims, leaf.dtype, leaf.name)

    converted = tf.nest.map_structure(one, spec)
    if stand_in:
        for _, leaf in _components(converted):
            if _kind(leaf) != "dense" or not leaf.shape.is_fully_defined():
                return None
    return converted


def _feedable(spec) -> bool:
    """True when every leaf is a dense tensor of a type a TPU can hold."""
    return all(
        _kind(leaf) == "dense" and leaf.dtype.name not in HOST_ONLY_DTYPES
        for _, leaf in _components(spec)
    )


def _step_inputs(spec, model, step):
    """``(function, args spec, description)`` for the step to trace, or a reason it can't be."""
    if step is not None:
        args = tuple(spec) if isinstance(spec, tuple) else (spec,)
        return _python_function(step), args, _describe_function(step)
    x = spec[0] if isinstance(spec, tuple) else spec
    if isinstance(x, dict):  # Keras ignores extra keys; leave out what only the host can hold
        x = {k: v for k, v in x.items() if _feedable(v)}
    return _forward_backward(model), (x,), f"the forward and backward pass of model '{model.name}'"


def _forward_backward(model):
    import tensorflow as tf

    def forward_backward(x):
        with tf.GradientTape() as tape:
            outputs = model(x, training=True)
            loss = tf.add_n(
                [tf.reduce_mean(tf.cast(o, tf.float32)) for o in tf.nest.flatten(outputs)]
            )
        grads = tape.gradient(loss, model.trainable_variables)
        return loss, [g for g in grads if g is not None]

    return forward_backward


def _python_function(fn):
    """The plain Python function under a ``tf.function`` (tracing it afresh shows its effects)."""
    return getattr(fn, "python_function", fn)


def _describe_function(fn) -> str:
    fn = inspect.unwrap(_python_function(fn))
    name = getattr(fn, "__qualname__", repr(fn))
    try:
        return f"step {name}() at {inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        return f"step {name}()"


def _check_step(spec, model, step, replicas: int, report: Report) -> None:
    import tensorflow as tf

    fn, args, where = _step_inputs(spec, model, step)
    if not _feedable(args):
        report.skipped.append(
            f"tracing {where}: its inputs include non-dense or host-only tensors (see above)"
        )
        return
    unbuilt = _unbuilt_optimizers(fn)
    if unbuilt:
        severity = "error" if replicas > 1 else "note"
        report.findings.append(
            Finding(
                "optimizer-not-built",
                severity,
                "the step uses an optimizer whose slot variables do not exist yet",
                f"{where}, optimizer {', '.join(unbuilt)}",
                "Keras 3 optimizers create their slots on the first apply_gradients; inside "
                "strategy.run with 2 or more replicas that fails (seen with MirroredStrategy, "
                "Keras 3.15). The check does not trace the step, so that it does not build the "
                "optimizer for you.",
                "with strategy.scope(): optimizer.build(model.trainable_variables) before "
                "training (helpers.loops.build_optimizer).",
            )
        )
        report.skipped.append(f"tracing {where}: build the optimizer first")
        return
    compile_args = _per_replica(args, replicas, stand_in=True)
    trace_args = compile_args or _per_replica(args, replicas, stand_in=False)
    # Traced with flat arguments: experimental_get_compiler_ir only takes a flat list of specs.
    flat_specs = tf.nest.flatten(trace_args)

    def flat_step(*flat):
        return fn(*tf.nest.pack_sequence_as(trace_args, list(flat)))

    jit = tf.function(flat_step, jit_compile=True)
    watch = _Watch(fn)
    with _capture_print() as printed:
        try:
            concrete = jit.get_concrete_function(*flat_specs)
        except Exception as err:  # any failure here is the user's step failing to trace
            _add_trace_error(report, where, err)
            return
    report.checked.append("step trace")
    _add_side_effects(report, where, printed, watch.changed(), _frozen_random(fn))
    reported, value_shape = _check_graph_ops(concrete, where, report)
    if compile_args is None:
        report.skipped.append(
            "full XLA compile: the step's inputs have dimensions of unknown size (see above)"
        )
        explained = set()
    else:  # the same specs as the trace: no second trace
        explained = _compile(jit, flat_specs, where, reported, report)
    if explained is not None:
        _add_value_shape_ops(report, where, value_shape, explained)


def _unbuilt_optimizers(fn) -> list[str]:
    import keras

    found = []
    for name, value in _Watch(fn).values().items():
        if isinstance(value, keras.optimizers.Optimizer) and not value.built:
            found.append(name)
    return found


# What a traced step may change in Python without anyone noticing: closure variables, globals and
# attributes of ``self`` that the function's code names.
class _Watch:
    def __init__(self, fn):
        self.fn = inspect.unwrap(fn)
        self.before = {name: _fingerprint(v) for name, v in self.values().items()}

    def values(self) -> dict:
        fn = self.fn
        code = getattr(fn, "__code__", None)
        if code is None:
            return {}
        names = _code_names(code)
        found = {}
        glob = getattr(fn, "__globals__", {})
        for name in names:
            if name in glob and not isinstance(glob[name], types.ModuleType):
                found[name] = glob[name]
        for name, cell in zip(
            code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False
        ):
            with contextlib.suppress(ValueError):  # an empty cell
                found[name] = cell.cell_contents
        owner = getattr(fn, "__self__", None)
        if owner is not None:
            for name in names:
                if not name.startswith("_") and name in getattr(owner, "__dict__", {}):
                    found[f"self.{name}"] = owner.__dict__[name]
        return found

    def changed(self) -> list[str]:
        now = {name: _fingerprint(v) for name, v in self.values().items()}
        return [name for name, fp in now.items() if self.before.get(name, fp) != fp]


def _code_objects(code) -> list:
    """A code object and those nested in it (inner functions, lambdas, comprehensions)."""
    found = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found += _code_objects(const)
    return found


def _code_names(code) -> set[str]:
    return {name for block in _code_objects(code) for name in block.co_names}


def _fingerprint(value):
    if isinstance(value, (list, dict, set, bytearray)):
        return ("container", id(value), len(value))
    if value is None or isinstance(value, (bool, int, float, str)):
        return ("value", value)
    return ("object", id(value))


@contextlib.contextmanager
def _capture_print():
    """Record Python ``print`` calls made by user code while the step is traced."""
    calls: list[str] = []
    real_print = builtins.print

    def recording_print(*args, **kwargs):
        caller = sys._getframe(1)
        module = caller.f_globals.get("__name__", "")
        if module.split(".")[0] in ("tensorflow", "keras", "absl"):
            return real_print(*args, **kwargs)  # the libraries' own messages pass through
        text = kwargs.get("sep", " ").join(str(a) for a in args)
        calls.append(f"{caller.f_code.co_filename}:{caller.f_lineno}: {text[:80]}")

    builtins.print = recording_print
    try:
        yield calls
    finally:
        builtins.print = real_print


def _frozen_random(fn) -> list[str]:
    """Python or NumPy random generators and clocks the step's own code uses."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    glob = getattr(fn, "__globals__", {})
    hits = set()
    for block in _code_objects(code):
        instructions = list(dis.get_instructions(block))
        for i, ins in enumerate(instructions):
            if ins.opname not in ("LOAD_GLOBAL", "LOAD_NAME"):
                continue
            obj = glob.get(ins.argval)
            module = obj.__name__ if isinstance(obj, types.ModuleType) else ""
            following = instructions[i + 1].argval if i + 1 < len(instructions) else None
            origin = (getattr(obj, "__module__", "") or "").split(".")[0]
            if module in ("random", "time", "datetime", "numpy.random"):
                hits.add(ins.argval)
            elif module == "numpy" and following == "random":  # np.random.<anything>
                hits.add(f"{ins.argval}.random")
            elif callable(obj) and not module and origin in ("random", "time"):
                hits.add(ins.argval)  # from time import time, from random import random
    for name, value in _Watch(fn).values().items():  # generator objects held by the step
        if type(value).__module__.startswith(("numpy.random", "random")):
            hits.add(name)
    return sorted(hits)


def _add_trace_error(report: Report, where: str, err: Exception) -> None:
    message = str(err)
    located = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', message)
    place = f"{where}; {located[-1][0]}:{located[-1][1]}" if located else where
    last = [line.strip() for line in message.strip().splitlines() if line.strip()]
    detail = f"{type(err).__name__}: {last[-1] if last else ''}"
    if "numpy" in message and isinstance(err, AttributeError):
        what = "the step calls .numpy() on a tensor"
        why = (
            ".numpy() copies a value from the device to Python. A compiled TPU step has no "
            "Python values inside it, so it cannot even be traced."
        )
        fix = (
            "Keep the value a tensor inside the step (return it, or add it to a Keras metric) "
            "and call .numpy() on the result outside."
        )
    else:
        what = f"the step cannot be traced into a graph ({type(err).__name__})"
        why = f"A TPU runs only a traced, compiled step. Tracing failed with {detail}"
        fix = (
            "Make the step work under @tf.function first: tensor ops only, no Python "
            "conversions of tensor values (float(), bool(), .numpy())."
        )
    report.findings.append(Finding("step-not-traceable", "error", what, place, why, fix))


def _add_side_effects(report, where, printed, changed, random_names) -> None:
    if printed or changed:
        effects = [f"print() at {p}" for p in printed[:2]]
        effects += [f"changes Python variable '{name}'" for name in changed]
        report.findings.append(
            Finding(
                "python-side-effect",
                "warning",
                "the step has Python side effects: " + "; ".join(effects),
                where,
                "Python code in a step runs once, while it is traced, not at every step: on a "
                "TPU the compiled step repeats only the TensorFlow ops. A print shows once; a "
                "list gets one symbolic tensor instead of one value per step.",
                "Use tf.print for messages, return values from the step (or update a Keras "
                "metric) instead of appending to Python lists or globals.",
            )
        )
    if random_names:
        report.findings.append(
            Finding(
                "frozen-random",
                "warning",
                f"the step calls Python-side random numbers or clocks: {', '.join(random_names)}",
                where,
                "They are evaluated once, while tracing, and frozen into the compiled step as "
                "constants: every step on the TPU sees the same 'random' value or time.",
                "Use TensorFlow's random ops (tf.random.stateless_uniform with a step-dependent "
                "seed, or a tf.random.Generator) and measure time outside the step.",
            )
        )


def _graph_nodes(concrete):
    """``(op type, node name, NodeDef)`` for the graph and every function in its library."""
    graph_def = concrete.graph.as_graph_def()
    for node in graph_def.node:
        yield node.op, node.name, node
    for function in graph_def.library.function:
        for node in function.node_def:
            yield node.op, node.name, node


def _has_xla_kernel(op: str, cache: dict) -> bool | None:
    if op not in cache:
        try:
            from tensorflow.python.framework import kernels  # TF's own kernel registry
        except ImportError:  # pragma: no cover - present in every TF 2 release
            return None
        registered = kernels.get_registered_kernels_for_op(op).kernel
        cache[op] = any(k.device_type == "XLA_CPU_JIT" for k in registered)
    return cache[op]


def _produces_float64(node) -> bool:
    from tensorflow.core.framework import types_pb2

    if node.op in ("Placeholder", "_Arg"):
        return False  # inputs are reported by the dataset check
    if node.op == "Cast":
        return node.attr["DstT"].type == types_pb2.DT_DOUBLE  # casting *from* float64 is the cure
    for key in ("T", "dtype", "Tout", "out_type"):
        if key in node.attr and node.attr[key].type == types_pb2.DT_DOUBLE:
            return True
    return False


def _check_graph_ops(concrete, where: str, report: Report) -> tuple[set[str], dict]:
    """Report ops with no XLA kernel and float64 math.

    Returns the op types reported and ``{op type: node names}`` of ops with value-dependent
    output sizes, which only a full compile can judge (see :func:`_add_value_shape_ops`).
    """
    cache: dict = {}
    missing: dict[str, list[str]] = {}
    value_shape: dict[str, list[str]] = {}
    doubles = []
    for op, name, node in _graph_nodes(concrete):
        if op not in STRUCTURAL_OPS and _has_xla_kernel(op, cache) is False:
            missing.setdefault(op, []).append(name)
        if op in VALUE_SHAPE_OPS:
            value_shape.setdefault(op, []).append(name)
        if _produces_float64(node):
            doubles.append(name)
    report.checked.append("XLA ops")
    python_ops = {op: n for op, n in missing.items() if op in PYTHON_OPS}
    print_ops = {op: n for op, n in missing.items() if op in PRINT_OPS}
    if python_ops:
        words = sorted({PYTHON_OPS[op] for op in python_ops})
        nodes = [n for names in python_ops.values() for n in names]
        report.findings.append(
            Finding(
                "python-in-step",
                "error",
                f"the step runs Python through {' and '.join(words)}",
                f"{where}; op {', '.join(nodes[:3])}",
                "These ops call back into the Python interpreter on the host. XLA cannot "
                "compile them, so the TPU step fails to compile (or, where TensorFlow moves them "
                "to the host, every step waits for a round trip).",
                "Rewrite the function with TensorFlow ops (tf.math, tf.image, keras.ops), or do "
                "the work in the tf.data pipeline before the step.",
            )
        )
    if print_ops:
        nodes = [n for names in print_ops.values() for n in names]
        report.findings.append(
            Finding(
                "print-in-step",
                "warning",
                "the step calls tf.print",
                f"{where}; op {', '.join(nodes[:2])}",
                "tf.print has no XLA kernel: on a TPU it is moved to the host (outside "
                "compilation) or fails to compile, and every step waits for a device-to-host copy "
                "(unverified on hardware).",
                "Remove it from the training step; return the values and print them outside, "
                "or use a Keras callback.",
            )
        )
    for op, names in missing.items():
        if op in PYTHON_OPS or op in PRINT_OPS:
            continue
        report.findings.append(_unsupported_op(op, names, where))
    if doubles:
        report.findings.append(
            Finding(
                "float64",
                "warning",
                "the step computes in float64",
                f"{where}; op {', '.join(doubles[:3])}",
                FLOAT64_WHY,
                "Cast to float32 (or bfloat16) and keep constants float32: tf.constant(..., "
                "tf.float32), np.float32.",
            )
        )
    return set(missing), value_shape


def _add_value_shape_ops(report: Report, where: str, value_shape: dict, explained: set) -> None:
    """Without a full compile, flag ops whose output size depends on values (op by op)."""
    for op, names in value_shape.items():
        if op in explained:
            continue
        report.findings.append(
            Finding(
                "dynamic-shape-op",
                "warning",
                f"{VALUE_SHAPE_OPS[op]} gives a tensor whose size depends on the data",
                f"{where}; op {', '.join(names[:3])}",
                "XLA needs sizes at compile time: it either pads such a tensor to a bound and "
                "tracks the real size at run time, or cannot compile the step at all (this op was "
                "found op by op; a full compile would tell which).",
                "Keep shapes static: mask instead of selecting (tf.where(cond, x, 0) with three "
                "arguments), tf.reduce_sum(tf.one_hot(labels, n), 0) instead of tf.math.bincount, "
                "fixed-size tf.math.top_k instead of tf.unique.",
            )
        )


def _op_words(op: str) -> str:
    if op in OP_WORDS:
        return OP_WORDS[op]
    if op.startswith(("String", "Regex", "StaticRegex", "Substr", "Unicode")):
        return f"{op} (a string operation)"
    if op.startswith("Ragged"):
        return f"{op} (a ragged-tensor operation)"
    if op.startswith("Sparse"):
        return f"{op} (a sparse-tensor operation)"
    if op.startswith(("Decode", "Encode")):
        return f"{op} (decoding or encoding data)"
    if "HashTable" in op or op.startswith("Lookup"):
        return f"{op} (a lookup table, e.g. StringLookup)"
    return op


def _unsupported_op(op: str, names: list[str], where: str) -> Finding:
    if op.startswith("ImageProjectiveTransform"):
        fix = (
            "Apply this augmentation in the tf.data pipeline (dataset.map(augment)) instead of "
            "inside the model: it then runs on the TPU host's CPU."
        )
    else:
        fix = (
            "Do this work in the tf.data pipeline (dataset.map) before the step, or replace it "
            "with ops XLA can compile."
        )
    return Finding(
        "xla-unsupported-op",
        "error",
        f"XLA cannot compile {_op_words(op)}",
        f"{where}; op {', '.join(names[:3])}",
        "Everything in a TPU step is compiled by XLA; this op has no XLA kernel (checked "
        "against XLA's CPU registry, which is close to the TPU's), so the step fails to compile.",
        fix,
    )


def _compile(jit, compile_args, where: str, reported: set[str], report: Report) -> set | None:
    """Compile the traced step to HLO; None when it compiled, else the op types it explained."""
    try:
        hlo = jit.experimental_get_compiler_ir(*compile_args)(stage="hlo")
    except Exception as err:  # XLA's errors come as several types; the message says which
        return _add_compile_error(report, where, str(err), reported)
    report.checked.append("XLA compile")
    sources = {}
    for line in hlo.splitlines():
        if "set-dimension-size(" in line and "<=" in line:
            found = re.search(r'op_type="([^"]+)" op_name="([^"]+)"', line)
            bound = re.search(r"\[<=(\d+)", line)
            if found:
                sources.setdefault(
                    found.group(1), (found.group(2), bound.group(1) if bound else "?")
                )
    for op, (name, bound) in sources.items():
        report.findings.append(
            Finding(
                "dynamic-shape-op",
                "warning",
                f"{op} gives a tensor whose size depends on the data",
                f"{where}; op {name}",
                f"XLA compiles it with a bounded dynamic shape: the tensor is padded to its "
                f"largest possible size ({bound}) and the real size is tracked at run time. It "
                "runs, but at the maximum size, and TPU support for such shapes is partial "
                "(unverified on hardware).",
                "Keep shapes static: mask instead of selecting (tf.where(cond, x, 0) with three "
                "arguments, multiply by a 0/1 mask), fixed-size tf.math.top_k instead of "
                "tf.unique or tf.boolean_mask.",
            )
        )


def _add_compile_error(report: Report, where: str, message: str, reported: set[str]) -> set:
    """Turn XLA's error into a finding or a skip; return the op types it explains."""
    if "Detected unsupported operations" in message:
        new = [op for op in re.findall(r"(\w+) \(No registered", message) if op not in reported]
        if "_Arg" in new:
            report.skipped.append(f"full XLA compile of {where}: an input type XLA cannot take")
            return set()
        for op in new:
            report.findings.append(_unsupported_op(op, ["(named in XLA's error)"], where))
        if not new:
            report.checked.append("XLA compile (failed on those ops)")
        return set(new)
    if "Trying to access resource" in message:
        report.skipped.append(
            "full XLA compile: the step updates variables on several devices (a multi-replica "
            "optimizer), so XLA on the CPU cannot compile it in one piece; the op-by-op check "
            "ran. For a full compile, check the same step with a model and optimizer built "
            "without a multi-replica strategy."
        )
        return set()
    first = next((line.strip() for line in message.splitlines() if line.strip()), message)
    first = first.removeprefix("Failed getting HLO text: ").strip("'")
    explained = set()
    if "compile-time constant" in message:
        node = re.search(r"node `([^`]+)` with op (\w+)", message)
        what = "a shape in the step is computed from tensor values"
        if node:
            where = f"{where}; op {node.group(1)} ({node.group(2)})"
            explained.add(node.group(2))
        why = (
            "XLA needs every shape when it compiles; here a size depends on data, so the TPU "
            f"step cannot be compiled. XLA says: {first}"
        )
        fix = (
            "Use sizes known when tracing (Python ints, static shapes) and pad to a fixed "
            "maximum with a mask instead of sizing tensors from values."
        )
    else:
        what = "XLA cannot compile the step"
        why = f"A TPU step must compile with XLA. XLA says: {first}"
        fix = "Read XLA's message; compile the step with tf.function(jit_compile=True) to iterate."
    report.findings.append(Finding("xla-compile-failed", "error", what, where, why, fix))
    return explained


# --------------------------------------------------------------------------------- strategy


def _strategy_kind(strategy) -> str:
    import tensorflow as tf

    if "TPUStrategy" in type(strategy).__name__:
        return "tpu"
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        return "mirrored"
    return "other"


def _check_steps_per_execution(spe: int, strategy, replicas: int, report: Report) -> None:
    import keras

    report.checked.append("steps_per_execution")
    kind = _strategy_kind(strategy)
    if spe > 1 and kind == "mirrored" and replicas > 1 and keras.__version__.startswith("3."):
        from helpers.fitting import steps_per_execution_for

        if steps_per_execution_for(strategy, spe).value == spe:  # e.g. ReductionToOneDevice
            return
        report.findings.append(
            Finding(
                "spe-unsupported",
                "error",
                f"steps_per_execution={spe} with MirroredStrategy over {replicas} replicas",
                "model.compile(steps_per_execution=...)",
                "With Keras 3, fit() then fails with INVALID_ARGUMENT 'You must feed a value "
                "for placeholder tensor' (reproduced with Keras 3.8 to 3.15 on 2+ replicas, "
                "including this collection's simulated TPU, when the gradients are summed by "
                "collective all-reduce ops, MirroredStrategy's default; TPUStrategy compiles it "
                "differently, unverified on hardware).",
                "Choose it from the strategy (helpers.fitting.steps_per_execution_for): 1 on a "
                "MirroredStrategy with collective all-reduce, a larger value (e.g. 32) on "
                "TPUStrategy, or MirroredStrategy(cross_device_ops=ReductionToOneDevice()); or a "
                "custom loop that runs several steps per tf.function call "
                "(helpers.loops.make_train_steps).",
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
