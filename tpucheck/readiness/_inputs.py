"""Checks of the input pipeline, read from ``dataset.element_spec`` and its graph, no data pulled:
shapes, dtypes, the batch (read from the pipeline's batch ops where the spec says None), and
what the pipeline's own functions run (Python on the host, constant seeds)."""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass

from tpucheck import _tf
from tpucheck.batches import per_replica_batch, plan_batch
from tpucheck.readiness._xla import PYTHON_OPS, add_constant_seeds, constant_seed_ops, graph_nodes
from tpucheck.readiness.report import Finding, Report
from tpucheck.tpu_facts import BATCH_FOR_MXU, FLOAT64_WHY, HOST_ONLY_DTYPES, TILE_ROWS


def components(spec, path: str = "element"):
    """Yield ``(path, spec)`` for every leaf of a (nested) element spec."""
    if isinstance(spec, dict):
        for key, value in spec.items():
            yield from components(value, f"{path}[{key!r}]")
    elif isinstance(spec, (tuple, list)):
        for i, value in enumerate(spec):
            yield from components(value, f"{path}[{i}]")
    else:
        yield path, spec


def kind_of(spec) -> str:
    """``dense``, ``ragged``, ``sparse`` or ``other``: one leaf of an element spec."""
    import tensorflow as tf

    kinds = {tf.TensorSpec: "dense", tf.RaggedTensorSpec: "ragged", tf.SparseTensorSpec: "sparse"}
    return next((kind for cls, kind in kinds.items() if isinstance(spec, cls)), "other")


def check_dataset(dataset, spec, replicas: int, report: Report, per_replica, given_batch) -> None:
    """Shapes, dtypes, the batch and prefetch. ``per_replica``: a ``dataset_fn``'s batches;
    ``given_batch``: ``check(global_batch=)``, where the pipeline does not say it."""
    report.checked.append("dataset")
    report.stats["global_batch"] = None
    dynamic_batch, batch_sizes = [], set()
    float64, host = [], []
    for path, leaf in components(spec):
        kind = kind_of(leaf)
        if kind in ("ragged", "sparse"):
            _add_nondense(report, kind, path, leaf)
        elif kind == "other":
            report.add(
                "composite-input",
                "warning",
                f"{type(leaf).__name__} in the dataset element",
                f"dataset, {path}",
                "A TPU step receives dense tensors of fixed shape; other structures have to "
                "be taken apart on the host first.",
                "Convert it to dense tensors in the tf.data pipeline (dataset.map).",
            )
            continue
        dtype = leaf.dtype.name  # dense, ragged and sparse specs all have one
        if dtype in HOST_ONLY_DTYPES:
            host.append(f"{path} ({dtype})")
        elif dtype == "float64":
            float64.append(path)
        if kind != "dense" or leaf.shape.rank == 0:
            continue
        if leaf.shape.rank is None:
            _add_dynamic(report, path, "its rank (number of dimensions) is unknown")
            continue
        if leaf.shape[0] is None:
            dynamic_batch.append(path)
        else:
            batch_sizes.add(leaf.shape[0])
        other = [i for i, d in enumerate(leaf.shape[1:], 1) if d is None]
        if other:
            _add_dynamic(report, path, f"dimension(s) {other} of shape {leaf.shape} are None")
    if host:
        report.add(
            "host-dtype",
            "error",
            "the dataset yields types a TPU cannot hold",
            f"dataset, {', '.join(host)}",
            "A TPU has no string (or variant, complex128) type: every tensor that reaches the "
            "step must be numeric. The step fails to compile for the TPU (TensorFlow's input "
            "tutorial: string ops do not execute on TPUs).",
            "Turn it into numbers in the pipeline (e.g. a keras.layers.StringLookup in "
            "dataset.map), or drop it from the element before it reaches the step.",
        )
    if float64:
        report.add(
            "float64",
            "warning",
            "float64 data reaches the step",
            f"dataset, {', '.join(float64)}",
            f"{FLOAT64_WHY} It also doubles the bytes every batch sends from host to TPU, "
            "and a float32 model casts it down anyway.",
            "Convert once, before the pipeline: x.astype('float32') for NumPy arrays, or "
            "dataset.map(lambda x, y: (tf.cast(x, tf.float32), y)).",
        )
    batch = batch_sizes.pop() if len(batch_sizes) == 1 and not dynamic_batch else None
    source, why = "", None
    if dynamic_batch:
        found = read_batching(dataset)
        info = found if isinstance(found, Batching) else None
        report.findings.append(_dynamic_batch(info, dynamic_batch, replicas, per_replica))
        report.stats["batch_from_pipeline"] = info.size if info else None
        if info:
            batch, source = info.size, f" (read from the pipeline's {info.op}: the spec says None)"
        else:
            why = found or "the pipeline has no batch op"
    elif len(batch_sizes) > 1:
        why = f"the element's tensors have batch sizes {sorted(batch_sizes)}"
    if why and given_batch is not None:
        batch, source = given_batch, f" (global_batch={given_batch}: {why})"
    elif why:
        report.skipped.append(
            f"the batch split over {replicas} replica(s), tile and small-batch checks: {why}, so "
            "the batch size could not be read; pass global_batch= (the size you batch with) to "
            "check them"
        )
    if batch is not None and given_batch is not None and batch != given_batch:
        raise ValueError(
            f"global_batch: the pipeline batches {batch} examples"
            f"{' per replica' if per_replica else ''}, not {given_batch}; pass the size it yields"
        )
    if batch is not None:
        _check_batch(batch, replicas, report, per_replica, source)
    last = dataset
    while "Options" in type(last).__name__ and hasattr(last, "_input_dataset"):
        last = last._input_dataset  # look through with_options()' wrappers (private, long-stable)
    if "Prefetch" not in type(last).__name__:
        report.add(
            "no-prefetch",
            "note",
            "the pipeline does not end with prefetch()",
            "dataset, last transformation",
            "A TPU finishes a step faster than most hosts prepare a batch; prefetch lets the "
            "host prepare the next batch while the TPU computes.",
            "End the pipeline with .prefetch(tf.data.AUTOTUNE).",
        )


def _add_nondense(report: Report, kind: str, path: str, leaf) -> None:
    to_dense = "t.to_tensor(shape=[None, MAX_LEN])" if kind == "ragged" else "tf.sparse.to_dense(t)"
    report.add(
        f"{kind}-input",
        "error",
        f"a {kind} tensor in the dataset element",
        f"dataset, {path} ({leaf})",
        f"TPUStrategy.experimental_distribute_dataset raises ValueError for {kind} tensors "
        "(tensorflow/python/distribute/tpu_strategy.py, _check_spec) "
        "unless they stay on the host (InputOptions(experimental_fetch_to_device=False)), "
        "and the step itself needs dense tensors of fixed shape to compile.",
        f"Make it dense with a fixed size in the pipeline: dataset.map with {to_dense}, or "
        "padded_batch(..., padded_shapes=fixed sizes, drop_remainder=True). Only if the step "
        "must see it, distribute with tf.distribute.InputOptions("
        "experimental_fetch_to_device=False) and densify it there.",
    )


def _add_dynamic(report: Report, path: str, detail: str) -> None:
    report.add(
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


def replica_shares(global_batch: int, replicas: int) -> list[int]:
    """How ``tf.distribute`` splits a global batch over the replicas: ``ceil(batch / replicas)``
    each while they last (100 over 8: 13 x 7 and 9; 1 over 8: 1 and 0 x 7)."""
    share = -(-global_batch // replicas)
    return [min(share, max(0, global_batch - i * share)) for i in range(replicas)]


def _shares(total: int, replicas: int) -> str:
    """``13 (7 replicas) and 9 (1 replica)``: how tf.distribute splits ``total`` examples."""
    sizes = replica_shares(total, replicas)
    if len(set(sizes)) == 1:
        return f"{sizes[0]} per replica"
    return " and ".join(
        f"{size} ({sizes.count(size)} replica{'s' if sizes.count(size) > 1 else ''})"
        for size in sorted(set(sizes), reverse=True)
    )


def _dynamic_batch(info: Batching | None, paths, replicas: int, per_replica: bool) -> Finding:
    """The ``dynamic-batch`` finding, worded from what the pipeline really does."""
    where = f"dataset, dimension 0 of {', '.join(paths)}"
    if info is None:
        return Finding(
            "dynamic-batch",
            "warning",
            "the batch size is unknown (None) in the element spec",
            where,
            "XLA compiles the TPU step for fixed shapes. The check found no batch op whose size "
            "it can read, so neither the split over the replicas nor a smaller last batch can "
            "be checked in advance.",
            "Batch with a fixed size: dataset.batch(batch_size, drop_remainder=True).",
        )
    b, op = info.size, info.op
    where = f"{where}; {op} in the pipeline"
    static = f"drop_remainder=True in {op}"
    padder = (
        "TPUStrategy compiles a step whose batch dimension is None with its dynamic padder, "
        "RunOptions.experimental_enable_dynamic_batch_size, on by default (unverified on "
        "hardware)"
    )
    read = f"The check read the batch size {b} from {op} and checks the split with it."
    if info.repeats_before:
        return Finding(
            "dynamic-batch",
            "note",
            f"every batch has {b} examples, though the element spec says None",
            where,
            f"repeat() comes before {op}, so the pipeline never ends and never yields a partial "
            f"batch; the None only says that {op} would keep one. {read} {padder}.",
            f"Optional: {static} makes the fixed size visible in the spec too; nothing else "
            "changes.",
        )
    remainder = info.remainder
    if remainder == 0:
        return Finding(
            "dynamic-batch",
            "note",
            f"no partial batch with this data ({info.elements} elements in batches of {b}), "
            "though the element spec says None",
            where,
            f"{info.elements} divides by {b}, so every batch is full. {read}",
            f"If the data size can change, {static} keeps every batch full.",
        )
    if remainder is None:
        what = f"the last batch of each pass may be smaller than {b}"
        detail = (
            f"tf.data cannot count the elements that reach {op} (files, filter), so the last "
            "batch of each pass may be partial"
        )
    else:
        what = f"each pass over the data ends with a batch of {remainder}, not {b}"
        detail = (
            f"{info.elements} elements in batches of {b}: {info.elements // b} full, then one of "
            f"{remainder}"
            if info.elements is not None
            else f"{op} yields batches of {b}, then one of {remainder}"
        )
        if not per_replica and replicas > 1:
            detail += f", split {_shares(remainder, replicas)}"
    if info.repeat_after:
        detail += f"; repeat() comes after {op}, so that batch returns every epoch"
        fix = f"Move repeat() before {op} and give fit() steps_per_epoch, or use {static}."
    else:
        fix = (
            f"For training: dataset.repeat() before {op} and steps_per_epoch in fit(), or "
            f"{static} (drops those examples each pass). For evaluation, where every example "
            "counts, a partial batch is expected: keep it, or pad the data to whole batches."
        )
    return Finding(
        "dynamic-batch",
        "warning",
        what,
        where,
        f"{detail}. XLA compiles a step per input shape: that batch costs a second compile or "
        f"padded work, and the replicas get unequal shares. {padder}. {read}",
        fix,
    )


def _check_batch(batch: int, replicas: int, report: Report, per_replica: bool, source: str) -> None:
    report.checked.append("per-replica batch" if per_replica else "batch split")
    if per_replica:  # a dataset_fn's batch is one replica's: nothing to split
        global_batch = batch * replicas
        where = f"dataset_fn, per-replica batch {batch}{source} x {replicas} replicas"
    else:
        global_batch = batch
        where = f"dataset, global batch {global_batch}{source} / {replicas} replicas"
    report.stats["global_batch"] = global_batch
    try:
        per = per_replica_batch(global_batch, replicas)
    except ValueError as err:  # its message names the nearest batches that split
        report.add(
            "uneven-split",
            "warning",
            f"global batch {global_batch} does not split evenly over {replicas} replicas",
            f"{where}; batch dimension",
            f"tf.distribute gives the replicas {_shares(global_batch, replicas)} examples "
            "(a replica can get none), so the per-replica shape differs between replicas "
            "and their work is unequal. How TPUStrategy compiles such a batch (its dynamic "
            "padder) is unverified on hardware.",
            f"{str(err)[0].upper()}{str(err)[1:]} tpucheck.batches.per_replica_batch checks it.",
        )
        return
    plan = plan_batch(per, replicas)
    report.stats["per_replica_batch"] = per
    if per % TILE_ROWS:
        report.add(
            "batch-tiles",
            "warning",
            f"per-replica batch {per} is not a multiple of {TILE_ROWS}",
            where,
            f"{plan} (Cloud TPU performance guide: a batch divisible by {TILE_ROWS} or "
            f"{BATCH_FOR_MXU}).",
            f"About the same step time, without padding: {plan_batch(plan.padded_per_replica, replicas)}.",
        )
    elif per < BATCH_FOR_MXU:
        report.add(
            "small-batch",
            "note",
            f"per-replica batch {per} is below {BATCH_FOR_MXU}",
            where,
            f"{plan}; small batches also leave the TPU waiting on the host (fine for a quick "
            "test).",
            f"When memory allows, per-replica batch {BATCH_FOR_MXU} or more "
            "(global = per-replica x replicas).",
        )


# ------------------------------------------------------------- the batch size, from the graph

_BATCH_KINDS = ("_BatchDataset", "_ParallelBatchDataset", "_PaddedBatchDataset")
_FUNCTION_KINDS = ("_FlatMapDataset", "_InterleaveDataset", "_ParallelInterleaveDataset")
_UNBATCHING = ("_UnbatchDataset", "_RebatchDataset", "_WindowDataset", "_ScanDataset")
_BATCH_OPS = ("BatchDataset", "BatchDatasetV2", "ParallelBatchDataset", "PaddedBatchDatasetV2")


@dataclass(frozen=True)
class Batching:
    """The pipeline's batching, read from its graph. ``elements`` reaching the batch op per pass:
    a count, None (a ``filter``, files), ``-1`` (repeats forever); ``repeat_after``: a
    ``repeat()`` follows the batch op; ``last``: a partial last batch read from the graph."""

    size: int
    drop_remainder: bool
    elements: int | None
    repeat_after: bool
    op: str
    last: int | None = None

    @property
    def repeats_before(self) -> bool:
        return self.elements == -1

    @property
    def remainder(self) -> int | None:
        """Examples in the last, partial batch of a pass (0: none); None when it cannot be told."""
        if self.drop_remainder or self.repeats_before:
            return 0
        if self.elements is None:
            return self.last
        return self.elements % self.size

    @property
    def batches(self) -> float | None:
        """Batches per pass (``inf`` when it repeats forever); None when it cannot be told."""
        if self.repeats_before:
            return math.inf
        if self.elements is None:
            return None
        return self.elements // self.size + (0 if self.remainder == 0 else 1)


def transformation_kind(ds) -> str:
    """``flat_map`` from ``_FlatMapDataset``: the transformation's name."""
    kind = re.sub(r"(?<!^)(?=[A-Z])", "_", type(ds).__name__.strip("_")).lower()
    return kind.removesuffix("_dataset").removeprefix("parallel_")


def _inputs(ds) -> list:
    return list(getattr(ds, "_inputs", list)())  # tf.data's private but long-stable links


def read_batching(ds, repeat_after: bool = False) -> Batching | str | None:
    """The batching of ``ds``; a reason when it cannot be read; None when it has no batch op."""
    import tensorflow as tf

    if not tf.executing_eagerly():
        return "the pipeline can only be read eagerly"
    while True:
        name = type(ds).__name__
        if name in _BATCH_KINDS:
            return _from_batch_op(ds, repeat_after)
        if name == "_ZipDataset":
            return _from_zip(ds, repeat_after)
        if name in _FUNCTION_KINDS:
            return _from_function(ds, repeat_after)
        if name in _UNBATCHING:
            return f"dataset.{transformation_kind(ds)}() regroups the elements after any batch op"
        repeat_after = repeat_after or name == "_RepeatDataset"
        inputs = _inputs(ds)
        if len(inputs) > 1:
            return f"dataset.{transformation_kind(ds)}() combines several datasets"
        if not inputs:  # a source, with no batch op
            return None
        ds = inputs[0]


def _count(ds) -> int | None:
    import tensorflow as tf

    count = int(ds.cardinality())  # tf.data.INFINITE_CARDINALITY is -1, as Batching.elements
    return None if count == tf.data.UNKNOWN_CARDINALITY else count


def _from_batch_op(ds, repeat_after: bool) -> Batching | str:
    try:
        size, drop = int(ds._batch_size), bool(ds._drop_remainder)
        elements = _count(ds._input_dataset)
    except (AttributeError, TypeError, ValueError):
        return f"the size of dataset.{transformation_kind(ds)}() is not a constant"
    return Batching(size, drop, elements, repeat_after, f"{transformation_kind(ds)}({size})")


def _from_zip(ds, repeat_after: bool) -> Batching | str | None:
    """Each zipped component's batching; components without a batch op pass through whole."""
    found = [read_batching(part, repeat_after) for part in _inputs(ds)]
    reasons = [f for f in found if isinstance(f, str)]
    if reasons:
        return f"a zip() component: {reasons[0]}"
    batched = [f for f in found if f is not None]
    if not batched:
        return None
    sizes = sorted({b.size for b in batched})
    if len(sizes) > 1:
        return f"zip() pairs batches of different sizes ({', '.join(map(str, sizes))})"
    # zip() stops with its shortest component: that one's last batch is the pass's last.
    known = all(b.batches is not None for b in batched)
    first = min(batched, key=lambda b: b.batches) if known else None
    return Batching(
        sizes[0],
        all(b.drop_remainder for b in batched),
        first.elements if first else None,
        repeat_after,
        f"zip({', '.join(b.op for b in batched)})",
        first.last if first else None,
    )


def _from_function(ds, repeat_after: bool) -> Batching | str:
    """The batches a ``flat_map``/``interleave`` function's datasets yield, from its graph."""
    import tensorflow as tf

    where = f"dataset.{transformation_kind(ds)}()"
    try:
        function = ds._functions()[0].function
        parts = _parts(function.graph.outputs[0].op, tf)
    except (AttributeError, IndexError, TypeError, ValueError):
        parts = None
    if not parts:
        return f"the datasets {where} builds have no batch size the check can read"
    sizes = [size for size, _, _ in parts]
    size, last = sizes[0], None
    if len(set(sizes)) > 1:
        if sizes[:-1] != [size] * (len(sizes) - 1) or sizes[-1] > size or parts[-1][1] != 1:
            return f"the datasets {where} builds yield batches of sizes {sorted(set(sizes))}"
        last = sizes[-1]  # full batches, then one partial batch (Keras' array adapter)
    known = all(count is not None for _, count, _ in parts) and _count(ds._input_dataset) == 1
    elements = sum(s * c for s, c, _ in parts) if known else None
    drop = all(d for _, _, d in parts) and last is None
    op = _transformation(ds, function.name.decode()).removeprefix("dataset.")
    return Batching(size, drop, elements, repeat_after, op, last)


def _parts(op, tf) -> list[tuple[int, int | None, bool]] | None:
    """``(batch size, batches or None, drop_remainder)`` for each dataset op concatenated."""
    if op.type == "Identity":
        return _parts(op.inputs[0].op, tf)
    if op.type == "ConcatenateDataset":
        first, second = _parts(op.inputs[0].op, tf), _parts(op.inputs[1].op, tf)
        return first + second if first and second else None
    if op.type in _BATCH_OPS:
        size = tf.get_static_value(op.inputs[1])
        drop = tf.get_static_value(op.inputs[-1]) if op.type != "BatchDataset" else False
        return None if size is None or drop is None else [(int(size), None, bool(drop))]
    shapes = [tf.TensorShape(shape) for shape in op.get_attr("output_shapes")]
    dims = {shape[0] if shape.rank else None for shape in shapes}
    if len(dims) != 1 or None in dims:
        return None
    count = None
    if op.type == "TensorSliceDataset":  # one element per row of the sliced tensors
        count = op.inputs[0].shape[0] if op.inputs[0].shape.rank else None
    elif op.type == "TensorDataset":
        count = 1
    return [(int(dims.pop()), count, True)]


# ------------------------------------------------------------------ the pipeline's functions


def _datasets(dataset):
    """The dataset and every dataset it reads from (tf.data's private but long-stable links)."""
    seen, todo = set(), [dataset]
    while todo:
        ds = todo.pop()
        if id(ds) in seen:
            continue
        seen.add(id(ds))
        yield ds
        todo += _inputs(ds)


def _transformation(ds, function_name: str) -> str:
    """``dataset.map(parse)`` from a dataset object and its traced function's name."""
    kind = transformation_kind(ds)
    name = re.sub(rf"^__inference_Dataset_{kind}_|_\d+$", "", function_name)
    return f"dataset.{kind}({name})"


def function_place(fn) -> str:
    """``name() at file:line`` of a Python function."""
    fn = inspect.unwrap(fn)
    name = getattr(fn, "__qualname__", repr(fn))
    try:
        return f"{name}() at {inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        return f"{name}()"


def _python_callable(token: bytes) -> str | None:
    """The Python function a ``PyFunc`` op calls back, or ``generator`` (from_generator's)."""
    func = _tf.py_function_callback(token.decode())
    func = getattr(func, "_func", func)  # tf.py_function wraps it in an EagerFunc
    if func is None:
        return None
    name = getattr(inspect.unwrap(func), "__qualname__", "")
    if "_from_generator" in name or "_GeneratorState" in name:
        return "generator"
    return function_place(func)


def check_pipeline(dataset, report: Report) -> None:
    """Python in ``map`` & co. or a Python generator feeding the pipeline; constant seeds."""
    functions, generator, seeded = [], False, []
    for ds in _datasets(dataset):
        for wrapper in getattr(ds, "_functions", list)():
            function = wrapper.function
            where = _transformation(ds, function.name.decode())
            graph = function.graph.as_graph_def()
            for node in graph_nodes(graph):
                if node.op not in PYTHON_OPS:
                    continue
                target = _python_callable(node.attr["token"].s)
                if target == "generator":
                    generator = True
                else:
                    functions.append(f"{where}: {PYTHON_OPS[node.op]}({target or node.name})")
            if names := constant_seed_ops(graph):
                seeded.append(f"{where} ({', '.join(names[:2])})")
    report.checked.append("pipeline functions")
    if functions:
        report.findings.append(_host_python(sorted(set(functions)), generator=False))
    if generator:
        report.findings.append(_host_python(["dataset, built by Dataset.from_generator"], True))
    if seeded:
        add_constant_seeds(report, "; ".join(seeded[:3]), pipeline=True)


def _host_python(places: list[str], generator: bool) -> Finding:
    if generator:
        what = "a Python generator feeds the input pipeline (Dataset.from_generator)"
        fix = (
            "Read the data with tf.data itself: Dataset.from_tensor_slices for arrays that fit "
            "in memory, or write it once to sharded TFRecord files and read them with "
            "TFRecordDataset (notebook 06_input_pipelines)."
        )
    else:
        what = "the input pipeline runs Python on the host (tf.py_function / tf.numpy_function)"
        fix = (
            "Rewrite the function with TensorFlow ops (tf.image, tf.strings, tf.io, "
            "keras.ops), vectorised over the batch; or preprocess once, offline, and store "
            "the result as TFRecords (notebook 06_input_pipelines)."
        )
    return Finding(
        "python-in-pipeline",
        "warning",
        what,
        "; ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else ""),
        "The host must prepare batches for every TPU core. Python code in the pipeline runs "
        "under the interpreter's lock, one element at a time, however many parallel calls "
        "map is given: the classic cause of an idle TPU. Such a pipeline also cannot be "
        "serialised, so it cannot move to tf.data service or to other hosts.",
        fix,
    )
