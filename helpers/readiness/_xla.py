"""What XLA makes of the traced step: ops with no XLA kernel, float64 math, a full compile.

Part of the readiness check, notebook 10_tpu_readiness_check.
"""

from __future__ import annotations

import re

from helpers.readiness.report import Finding, Report
from helpers.tpu_facts import FLOAT64_WHY

__all__ = [
    "OP_WORDS",
    "PRINT_OPS",
    "PYTHON_OPS",
    "STRUCTURAL_OPS",
    "VALUE_SHAPE_OPS",
    "add_value_shape_ops",
    "check_graph_ops",
    "compile_step",
    "graph_nodes",
    "soft_placement_when_traced",
]

# TensorFlow is imported inside the functions: see _pipeline.

# What TPUStrategy does with an op that has no XLA kernel, read in TensorFlow 2.20.0's source:
# tpu.replicate() (tensorflow/python/tpu/tpu.py) asks for automatic outside compilation, which
# runs such ops on the host CPU, only when tf.config.get_soft_device_placement() is True while
# the step is traced; inside a traced function that is False unless the user called
# tf.config.set_soft_device_placement(True) (tensorflow/python/eager/context.py). Without it the
# TPU compile rejects the op (tensorflow/tensorflow#42454, on a Cloud TPU; #43705, a maintainer).
NO_KERNEL_SOURCES = (
    "TensorFlow 2.20's TPUStrategy runs ops without an XLA kernel on the host (automatic outside "
    "compilation) only when soft device placement is on while the step is traced "
    "(tensorflow/python/tpu/tpu.py), and inside a traced step it is off unless "
    "tf.config.set_soft_device_placement(True) was called (tensorflow/tensorflow#43705)."
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


def graph_nodes(concrete):
    """``(op type, node name, NodeDef)`` for the graph and every function in its library.

    Part of the readiness check, notebook 10_tpu_readiness_check.
    """
    graph_def = concrete.graph.as_graph_def()
    for node in graph_def.node:
        yield node.op, node.name, node
    for function in graph_def.library.function:
        for node in function.node_def:
            yield node.op, node.name, node


def _has_xla_kernel(op: str, cache: dict) -> bool | None:
    if op not in cache:
        from helpers import tf_internals

        cache[op] = tf_internals.has_xla_cpu_kernel(op)
    return cache[op]


def _produces_float64(node) -> bool:
    from helpers import tf_internals

    double = tf_internals.float64_enum()
    if node.op in ("Placeholder", "_Arg"):
        return False  # inputs are reported by the dataset check
    if node.op == "Cast":
        return node.attr["DstT"].type == double  # casting *from* float64 is the cure
    for key in ("T", "dtype", "Tout", "out_type"):
        if key in node.attr and node.attr[key].type == double:
            return True
    return False


def check_graph_ops(
    concrete, where: str, report: Report, soft: bool = False
) -> tuple[set[str], dict]:
    """Report ops with no XLA kernel and float64 math.

    ``soft``: soft device placement is on while a step is traced
    (:func:`soft_placement_when_traced`).

    Returns the op types reported and ``{op type: node names}`` of ops with value-dependent
    output sizes, which only a full compile can judge (see :func:`add_value_shape_ops`).

    Part of the readiness check, notebook 10_tpu_readiness_check.
    """
    cache: dict = {}
    missing: dict[str, list[str]] = {}
    value_shape: dict[str, list[str]] = {}
    doubles = []
    for op, name, node in graph_nodes(concrete):
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
                "warning" if soft else "error",
                f"the step runs Python through {' and '.join(words)}",
                f"{where}; op {', '.join(nodes[:3])}",
                "These ops call back into the Python interpreter on the host; XLA cannot compile "
                f"them. {NO_KERNEL_SOURCES} {_no_kernel_outcome(soft)}",
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
                "tf.print has no XLA kernel. With soft device placement on while the step is "
                "traced, TPUStrategy runs it on the host and every step waits for a "
                "device-to-host copy; with it off (the default) users report that it does not "
                "print on a TPU (tensorflow/tensorflow#44449, #43705). Unverified on hardware.",
                "Remove it from the training step; return the values and print them outside, "
                "or use a Keras callback.",
            )
        )
    for op, names in missing.items():
        if op in PYTHON_OPS or op in PRINT_OPS:
            continue
        report.findings.append(_unsupported_op(op, names, where, soft))
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


def add_value_shape_ops(report: Report, where: str, value_shape: dict, explained: set) -> None:
    """Without a full compile, flag ops whose output size depends on values (op by op).

    Part of the readiness check, notebook 10_tpu_readiness_check.
    """
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


def soft_placement_when_traced() -> bool:
    """What ``tf.config.get_soft_device_placement()`` says while a function is traced.

    TPUStrategy reads it at that moment (see ``NO_KERNEL_SOURCES``); eagerly it reads True by
    default, inside a trace False unless the user set it.
    """
    import tensorflow as tf

    seen = []

    @tf.function(autograph=False)
    def probe():
        seen.append(tf.config.get_soft_device_placement())
        return tf.constant(0)

    probe.get_concrete_function()
    return bool(seen[0])


def _no_kernel_outcome(soft: bool) -> str:
    if soft:
        return (
            "Soft device placement is on here, so the op would run on the TPU host's CPU and "
            "every step would wait for a round trip between host and TPU (unverified on "
            "hardware)."
        )
    return (
        "It is off here, so the TPU step fails to compile ('Detected unsupported operations', "
        "as reported on a Cloud TPU in tensorflow/tensorflow#42454); unverified on hardware by "
        "this project."
    )


def _unsupported_op(op: str, names: list[str], where: str, soft: bool = False) -> Finding:
    if op.startswith("ImageProjectiveTransform"):
        fix = (
            "Apply this augmentation in the tf.data pipeline (dataset.map(augment)) instead of "
            "inside the model: it then runs on the TPU host's CPU (TensorFlow's input tutorial: "
            "on TPUs, put Keras preprocessing layers in tf.data)."
        )
    else:
        fix = (
            "Do this work in the tf.data pipeline (dataset.map) before the step, or replace it "
            "with ops XLA can compile."
        )
    return Finding(
        "xla-unsupported-op",
        "warning" if soft else "error",
        f"XLA cannot compile {_op_words(op)}",
        f"{where}; op {', '.join(names[:3])}",
        "Everything in a TPU step is compiled by XLA; this op has no XLA kernel (checked against "
        f"XLA's CPU registry, which is close to the TPU's). {NO_KERNEL_SOURCES} "
        f"{_no_kernel_outcome(soft)}",
        fix + " As a stopgap, tf.config.set_soft_device_placement(True) lets TPUStrategy run it "
        "on the host, slowly.",
    )


def _compiler_platform() -> str:
    """Whose XLA compiled the step: the TPU's when one is connected, else this host's."""
    import tensorflow as tf

    for kind in ("TPU", "GPU"):
        if tf.config.list_logical_devices(kind):
            return kind
    return "CPU"


def compile_step(
    jit, compile_args, where: str, reported: set[str], report: Report, soft: bool = False
) -> set | None:
    """Compile the traced step to HLO; None when it compiled, else the op types it explained.

    Part of the readiness check, notebook 10_tpu_readiness_check.
    """
    try:
        hlo = jit.experimental_get_compiler_ir(*compile_args)(stage="hlo")
    except Exception as err:  # XLA's errors come as several types; the message says which
        return _add_compile_error(report, where, str(err), reported, soft)
    report.checked.append("XLA compile")
    report.stats["compiled_for"] = _compiler_platform()
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


def _add_compile_error(
    report: Report, where: str, message: str, reported: set[str], soft: bool = False
) -> set:
    """Turn XLA's error into a finding or a skip; return the op types it explains."""
    if "Detected unsupported operations" in message:
        new = [op for op in re.findall(r"(\w+) \(No registered", message) if op not in reported]
        if "_Arg" in new:
            report.skipped.append(f"full XLA compile of {where}: an input type XLA cannot take")
            return set()
        for op in new:
            report.findings.append(_unsupported_op(op, ["(named in XLA's error)"], where, soft))
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
            "step cannot be compiled (Cloud TPU performance guide: models for Cloud TPU are "
            f"compiled by XLA). XLA says: {first}"
        )
        fix = (
            "Use sizes known when tracing (Python ints, static shapes) and pad to a fixed "
            "maximum with a mask instead of sizing tensors from values."
        )
    else:
        what = "XLA cannot compile the step"
        why = (
            "A TPU step must compile with XLA (Cloud TPU performance guide: models for Cloud TPU "
            f"are compiled by XLA). XLA says: {first}"
        )
        fix = "Read XLA's message; compile the step with tf.function(jit_compile=True) to iterate."
    report.findings.append(Finding("xla-compile-failed", "error", what, where, why, fix))
    return explained
