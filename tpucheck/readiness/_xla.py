"""What a traced graph holds: ops with no XLA kernel, float64 math, a full compile, and stateless
random ops seeded by a constant (the same numbers every time they run)."""

from __future__ import annotations

import re

from tpucheck import _tf
from tpucheck.readiness.report import Finding, Report
from tpucheck.tpu_facts import FLOAT64_WHY

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
    **dict.fromkeys(("PyFunc", "PyFuncStateless"), "tf.numpy_function"),
}
PRINT_OPS = frozenset({"PrintV2", "StringFormat", "Print"})
# Ops whose output size depends on tensor values: XLA pads them to a bound or cannot compile them.
VALUE_SHAPE_OPS = {
    "Where": "tf.where with one argument (or tf.boolean_mask)",
    "ListDiff": "tf.sets.difference / setdiff1d",
    "DynamicPartition": "tf.dynamic_partition",
    **dict.fromkeys(("Unique", "UniqueV2"), "tf.unique"),
    **dict.fromkeys(("UniqueWithCounts", "UniqueWithCountsV2"), "tf.unique_with_counts"),
    **dict.fromkeys(("DenseBincount", "Bincount"), "tf.math.bincount"),
    **{f"NonMaxSuppressionV{v}": "tf.image.non_max_suppression" for v in (3, 4, 5)},
}
_ROTATION = "image rotation, zoom or shear (Keras RandomRotation, RandomZoom, RandomTranslation)"
OP_WORDS = {
    **dict.fromkeys(("ImageProjectiveTransformV2", "ImageProjectiveTransformV3"), _ROTATION),
    "HistogramFixedWidth": "tf.histogram_fixed_width",
    "AsString": "tf.strings.as_string (a string operation)",
}
# Words for families of ops without an XLA kernel, by the start of their name.
_FAMILIES = (
    (("String", "Regex", "StaticRegex", "Substr", "Unicode"), "a string operation"),
    (("Ragged",), "a ragged-tensor operation"),
    (("Sparse",), "a sparse-tensor operation"),
    (("Decode", "Encode"), "decoding or encoding data"),
    (("Lookup",), "a lookup table, e.g. StringLookup"),
)


def _scopes(graph_def):
    """The node lists of a graph and of each function in its library (names are per scope)."""
    yield graph_def.node
    for function in graph_def.library.function:
        yield function.node_def


def graph_nodes(graph_def):
    """The nodes of a graph and of every function in its library."""
    for nodes in _scopes(graph_def):
        yield from nodes


def _produces_float64(node, double: int) -> bool:
    if node.op in ("Placeholder", "_Arg"):
        return False  # inputs are reported by the dataset check
    if node.op == "Cast":
        return node.attr["DstT"].type == double  # casting *from* float64 is the cure
    keys = ("T", "dtype", "Tout", "out_type")
    return any(key in node.attr and node.attr[key].type == double for key in keys)


def check_graph_ops(graph_def, where: str, report: Report, soft: bool) -> tuple[set[str], dict]:
    """Report ops with no XLA kernel (``soft``: soft placement on while traced) and float64 math;
    return the op types reported and ``{op: node names}`` of ops whose output size depends on
    values, which only a full compile can judge (:func:`add_value_shape_ops`)."""
    import tensorflow as tf

    kernels: dict = {}
    missing: dict[str, list[str]] = {}
    value_shape: dict[str, list[str]] = {}
    doubles = []
    for node in graph_nodes(graph_def):
        op, name = node.op, node.name
        if op not in kernels:
            kernels[op] = op in STRUCTURAL_OPS or _tf.has_xla_cpu_kernel(op)
        if not kernels[op]:
            missing.setdefault(op, []).append(name)
        if op in VALUE_SHAPE_OPS:
            value_shape.setdefault(op, []).append(name)
        if _produces_float64(node, tf.float64.as_datatype_enum):
            doubles.append(name)
    report.checked.append("XLA ops")
    python = [op for op in missing if op in PYTHON_OPS]
    printing = [name for op, names in missing.items() if op in PRINT_OPS for name in names]
    if python:
        words = sorted({PYTHON_OPS[op] for op in python})
        nodes = [name for op in python for name in missing[op]]
        report.add(
            "python-in-step",
            "warning" if soft else "error",
            f"the step runs Python through {' and '.join(words)}",
            f"{where}; op {', '.join(nodes[:3])}",
            "These ops call back into the Python interpreter on the host; XLA cannot compile "
            f"them. {NO_KERNEL_SOURCES} {_no_kernel_outcome(soft)}",
            "Rewrite the function with TensorFlow ops (tf.math, tf.image, keras.ops), or do "
            "the work in the tf.data pipeline before the step.",
        )
    if printing:
        report.add(
            "print-in-step",
            "warning",
            "the step calls tf.print",
            f"{where}; op {', '.join(printing[:2])}",
            "tf.print has no XLA kernel. With soft device placement on while the step is "
            "traced, TPUStrategy runs it on the host and every step waits for a "
            "device-to-host copy; with it off (the default) users report that it does not "
            "print on a TPU (tensorflow/tensorflow#44449, #43705). Unverified on hardware.",
            "Remove it from the training step; return the values and print them outside, "
            "or use a Keras callback.",
        )
    for op, names in missing.items():
        if op not in PYTHON_OPS and op not in PRINT_OPS:
            report.findings.append(_unsupported_op(op, names, where, soft))
    if doubles:
        report.add(
            "float64",
            "warning",
            "the step computes in float64",
            f"{where}; op {', '.join(doubles[:3])}",
            FLOAT64_WHY,
            "Cast to float32 (or bfloat16) and keep constants float32: tf.constant(..., "
            "tf.float32), np.float32.",
        )
    return set(missing), value_shape


def add_value_shape_ops(report: Report, where: str, value_shape: dict, explained: set) -> None:
    """Without a full compile, flag ops whose output size depends on values (op by op)."""
    for op, names in value_shape.items():
        if op not in explained:
            _dynamic_shape_op(
                report,
                VALUE_SHAPE_OPS[op],
                f"{where}; op {', '.join(names[:3])}",
                "XLA needs sizes at compile time: it either pads such a tensor to a bound and "
                "tracks the real size at run time, or cannot compile the step at all (this op "
                "was found op by op; a full compile would tell which).",
            )


def _dynamic_shape_op(report: Report, op: str, where: str, why: str) -> None:
    report.add(
        "dynamic-shape-op",
        "warning",
        f"{op} gives a tensor whose size depends on the data",
        where,
        why,
        "Keep shapes static: mask instead of selecting (tf.where(cond, x, 0) with three "
        "arguments, multiply by a 0/1 mask), tf.reduce_sum(tf.one_hot(labels, n), 0) instead "
        "of tf.math.bincount, fixed-size tf.math.top_k instead of tf.unique or tf.boolean_mask.",
    )


def _op_words(op: str) -> str:
    if op in OP_WORDS:
        return OP_WORDS[op]
    family = next((words for starts, words in _FAMILIES if op.startswith(starts)), None)
    family = "a lookup table, e.g. StringLookup" if "HashTable" in op else family
    return f"{op} ({family})" if family else op


def soft_placement_when_traced() -> bool:
    """What ``tf.config.get_soft_device_placement()`` says while a function is traced, when
    TPUStrategy reads it: False unless the user set it (eagerly True by default)."""
    import tensorflow as tf

    seen = []

    @tf.function(autograph=False)
    def probe():
        seen.append(tf.config.get_soft_device_placement())
        return tf.constant(0)

    # Traced, never called: a call of a fresh function each check counts as a retrace, and
    # TensorFlow warns about those.
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


def _unsupported_op(op: str, names: list[str], where: str, soft: bool) -> Finding:
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


def compile_step(
    jit, compile_args, where: str, reported: set[str], report: Report, soft: bool
) -> set | None:
    """Compile the traced step to HLO; None when it compiled, else the op types it explained."""
    import tensorflow as tf

    try:
        hlo = jit.experimental_get_compiler_ir(*compile_args)(stage="hlo")
    except Exception as err:  # XLA's errors come as several types; the message says which
        return _add_compile_error(report, where, str(err), reported, soft)
    report.checked.append("XLA compile")
    report.stats["compiled_for"] = next(  # whose XLA compiled it: a TPU's when one is connected
        (d for d in ("TPU", "GPU") if tf.config.list_logical_devices(d)), "CPU"
    )
    sources = {}
    for line in hlo.splitlines():  # a bounded dynamic dimension reads f32[<=8] or s32[3,<=8]
        found = re.search(r'op_type="([^"]+)" op_name="([^"]+)"', line)
        bound = re.search(r"<=(\d+)", line)
        if "set-dimension-size(" in line and found and bound:
            sources.setdefault(found.group(1), (found.group(2), bound.group(1)))
    for op, (name, bound) in sources.items():
        _dynamic_shape_op(
            report,
            op,
            f"{where}; op {name}",
            f"XLA compiles it with a bounded dynamic shape: the tensor is padded to its "
            f"largest possible size ({bound}) and the real size is tracked at run time. It "
            "runs, but at the maximum size, and TPU support for such shapes is partial "
            "(unverified on hardware).",
        )


def _add_compile_error(report: Report, where: str, message: str, reported: set, soft: bool) -> set:
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
    guide = (
        "(Cloud TPU performance guide: models for Cloud TPU are compiled by XLA). "
        f"XLA says: {first}"
    )
    explained = set()
    what = "XLA cannot compile the step"
    why = f"A TPU step must compile with XLA {guide}"
    fix = "Read XLA's message; compile the step with tf.function(jit_compile=True) to iterate."
    if "compile-time constant" in message:
        node = re.search(r"node `([^`]+)` with op (\w+)", message)
        what = "a shape in the step is computed from tensor values"
        if node:
            where = f"{where}; op {node.group(1)} ({node.group(2)})"
            explained.add(node.group(2))
        why = (
            "XLA needs every shape when it compiles; here a size depends on data, so the TPU "
            f"step cannot be compiled {guide}"
        )
        fix = (
            "Use sizes known when tracing (Python ints, static shapes) and pad to a fixed "
            "maximum with a mask instead of sizing tensors from values."
        )
    report.add("xla-compile-failed", "error", what, where, why, fix)
    return explained


# ------------------------------------------------------------------------- constant seeds

# Where the seed enters each stateless op that turns a seed into random numbers. The newer
# ``...V2`` ops take a key made by ``StatelessRandomGetKeyCounter``, which is listed instead.
SEED_INPUT = {
    **dict.fromkeys(("StatelessRandomGetKeyCounter", "StatelessRandomGetKeyCounterAlg"), 0),
    **dict.fromkeys(
        (f"Stateless{op}" for op in (
            "RandomUniform", "RandomNormal", "TruncatedNormal", "RandomUniformInt",
            "RandomUniformFullInt", "RandomBinomial", "RandomPoisson", "RandomGammaV2",
            "ParameterizedTruncatedNormal",
        )),
        1,
    ),
    "StatelessMultinomial": 2,
    "StatelessSampleDistortedBoundingBox": 3,
}  # fmt: skip


def _constant(name: str, by_name: dict, known: dict, depth: int = 0) -> bool:
    """True when the tensor ``name`` folds to a constant: Const ops and pure ops of constants."""
    # "node:output:index" in functions, "node:index" in graphs; a name that is no node is an
    # argument of the function (a value from outside): not a constant.
    name = name.lstrip("^").split(":")[0]
    if name not in known:
        node = by_name.get(name)
        if node is None or depth > 50:
            known[name] = False
        elif node.op in ("Const", "HostConst"):
            known[name] = True
        elif _tf.is_stateful_op(node.op) or node.op.endswith("Call") or not node.input:
            known[name] = False  # variables, placeholders, random state, function calls
        else:
            data = [i for i in node.input if not i.startswith("^")]
            known[name] = all(_constant(i, by_name, known, depth + 1) for i in data)
    return known[name]


def constant_seed_ops(graph_def) -> list[str]:
    """Names of the stateless random ops in ``graph_def`` whose seed is a constant."""
    found = []
    for nodes in _scopes(graph_def):
        by_name, known = {node.name: node for node in nodes}, {}
        for node in nodes:
            index = SEED_INPUT.get(node.op, len(node.input))  # not a seeded op: out of range
            if index < len(node.input) and _constant(node.input[index], by_name, known):
                found.append(node.name)
    return found


def add_constant_seeds(report, where: str, *, pipeline: bool = False) -> None:
    """Report ops found by :func:`constant_seed_ops`, at ``where``, as a ``constant-seed`` warning."""
    runs = "for every element and every epoch" if pipeline else "at every step"
    if pipeline:
        fix = (
            "Give each element its own seed: number the elements after repeat() (dataset.repeat()"
            ".enumerate(), so that epochs differ too) and pass seed=tf.stack([SEED, index]); or zip "
            "with tf.data.Dataset.random(seed=SEED).batch(2) and use that as the seed; Keras' "
            "random layers (RandomFlip, ...) keep their own seed state and are fine."
        )
    else:
        fix = (
            "Make the seed change every step: seed=tf.stack([SEED, tf.cast(optimizer.iterations, "
            "tf.int64)]), or draw from a tf.random.Generator or keras.random.SeedGenerator made "
            "once, outside the step."
        )
    report.add(
        "constant-seed",
        "warning",
        f"a stateless random op is seeded by a constant: the same numbers {runs}",
        where,
        "A stateless random op is a pure function of its seed. With a Python constant as the "
        f"seed, the compiled graph draws identical 'noise' {runs}: dropout that always drops "
        "the same units, augmentation that never changes. Nothing fails; the model just "
        "trains on less randomness than written.",
        fix,
    )
