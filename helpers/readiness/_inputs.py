"""Checks of the input pipeline, read from ``dataset.element_spec`` without pulling any data.

When the spec's batch dimension is None, the batch size comes from the pipeline's graph
(``_batching.read_batching``: its batch op, each ``zip`` component, the datasets a ``flat_map``
builds) or from the ``global_batch`` the user passes, and the split, tile and small-batch checks
run on it; when neither says it, ``skipped`` names the checks left out. The batch itself is
described by :class:`helpers.batches.BatchPlan` (notebook 03_keras_compile_and_fit), rendered here, never recomputed.
"""

from __future__ import annotations

from helpers.batches import per_replica_batch, plan_batch
from helpers.readiness._batching import Batching, read_batching
from helpers.readiness.report import Finding, Report
from helpers.tpu_facts import BATCH_FOR_MXU, FLOAT64_WHY, HOST_ONLY_DTYPES, TILE_ROWS

__all__ = ["check_dataset", "components", "kind_of", "replica_shares"]

# TensorFlow is imported inside kind_of(): importing this module must not import TensorFlow
# before the setup cell's quiet.quiet_tensorflow() (see _pipeline).


def components(spec, path: str = "element"):
    """Yield ``(path, spec)`` for every leaf of a (nested) element spec (notebook 10_tpu_readiness_check)."""
    if isinstance(spec, dict):
        for key, value in spec.items():
            yield from components(value, f"{path}[{key!r}]")
    elif isinstance(spec, (tuple, list)):
        for i, value in enumerate(spec):
            yield from components(value, f"{path}[{i}]")
    else:
        yield path, spec


def kind_of(spec) -> str:
    """``dense``, ``ragged``, ``sparse`` or ``other``: one leaf of an element spec (notebook 10_tpu_readiness_check)."""
    import tensorflow as tf

    if isinstance(spec, tf.TensorSpec):
        return "dense"
    if isinstance(spec, tf.RaggedTensorSpec):
        return "ragged"
    if isinstance(spec, tf.SparseTensorSpec):
        return "sparse"
    return "other"


def check_dataset(
    dataset, spec, replicas: int, report: Report, per_replica: bool = False, given_batch=None
) -> None:
    """Shapes, dtypes, the batch and prefetch. ``per_replica``: batches come from a ``dataset_fn``.

    ``given_batch``: the dataset's batch size as the user states it (``check(global_batch=)``),
    used where the pipeline does not say it.

    Part of the readiness check, notebook 10_tpu_readiness_check.
    """
    report.checked.append("dataset")
    report.stats["global_batch"] = None
    dynamic_batch, batch_sizes = [], set()
    float64, host = [], []
    for path, leaf in components(spec):
        kind = kind_of(leaf)
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
                "step must be numeric. The step fails to compile for the TPU (TensorFlow's input "
                "tutorial: string ops do not execute on TPUs).",
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
    batch = batch_sizes.pop() if len(batch_sizes) == 1 and not dynamic_batch else None
    source = ""
    if dynamic_batch:
        found = read_batching(dataset)
        info = found if isinstance(found, Batching) else None
        report.findings.append(_dynamic_batch(info, dynamic_batch, replicas, per_replica))
        batch = info.size if info is not None else None
        source = f" (read from the pipeline's {info.op}: the spec says None)" if info else ""
        report.stats["batch_from_pipeline"] = batch
        if info is None:
            why = found or "the pipeline has no batch op"
            batch, source = _given(given_batch, why, replicas, report)
    elif len(batch_sizes) > 1:
        why = f"the element's tensors have batch sizes {sorted(batch_sizes)}"
        batch, source = _given(given_batch, why, replicas, report)
    if batch is not None and given_batch is not None and batch != given_batch:
        raise ValueError(
            f"global_batch: the pipeline batches {batch} examples"
            f"{' per replica' if per_replica else ''}, not {given_batch}; pass the size it yields"
        )
    if batch is not None:
        _check_batch(batch, replicas, report, per_replica, source)
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
            "(tensorflow/python/distribute/tpu_strategy.py, _check_spec) "
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


def replica_shares(global_batch: int, replicas: int) -> list[int]:
    """How ``tf.distribute`` splits a global batch over the replicas, replica by replica.

    Every replica but the last ones gets ``ceil(global_batch / replicas)`` examples, the rest
    go to the next one and the others get none (checked against a real split in the tests):
    100 over 8 replicas is 13 x 7 and 9, 1 over 8 is 1 and 0 x 7.
    """
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


def _given(given_batch, why: str, replicas: int, report: Report) -> tuple[int | None, str]:
    """The batch the user passed where the pipeline does not say it, or a skipped entry."""
    if given_batch is not None:
        return given_batch, f" (global_batch={given_batch}: {why})"
    report.skipped.append(
        f"the batch split over {replicas} replica(s), tile and small-batch checks: {why}, so the "
        "batch size could not be read; pass global_batch= (the size you batch with) to check them"
    )
    return None, ""


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
        report.findings.append(
            Finding(
                "uneven-split",
                "warning",
                f"global batch {global_batch} does not split evenly over {replicas} replicas",
                f"{where}; batch dimension",
                f"tf.distribute gives the replicas {_shares(global_batch, replicas)} examples "
                "(a replica can get none), so the per-replica shape differs between replicas "
                "and their work is unequal. How TPUStrategy compiles such a batch (its dynamic "
                "padder) is unverified on hardware.",
                f"{str(err)[0].upper()}{str(err)[1:]} helpers.batches.per_replica_batch checks it.",
            )
        )
        return
    plan = plan_batch(per, replicas)
    report.stats["per_replica_batch"] = per
    if per % TILE_ROWS:
        report.findings.append(
            Finding(
                "batch-tiles",
                "warning",
                f"per-replica batch {per} is not a multiple of {TILE_ROWS}",
                where,
                f"{plan} (Cloud TPU performance guide: a batch divisible by {TILE_ROWS} or "
                f"{BATCH_FOR_MXU}).",
                f"About the same step time, without padding: {plan_batch(plan.padded_per_replica, replicas)}.",
            )
        )
    elif per < BATCH_FOR_MXU:
        report.findings.append(
            Finding(
                "small-batch",
                "note",
                f"per-replica batch {per} is below {BATCH_FOR_MXU}",
                where,
                f"{plan}; small batches also leave the TPU waiting on the host (fine for a quick "
                "test).",
                f"When memory allows, per-replica batch {BATCH_FOR_MXU} or more "
                "(global = per-replica x replicas).",
            )
        )
