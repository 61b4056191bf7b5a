"""Checks of the input pipeline, read from ``dataset.element_spec`` without pulling any data."""

from __future__ import annotations

from helpers.readiness.report import Finding, Report
from helpers.tpu_facts import (
    BATCH_FOR_MXU,
    FLOAT64_WHY,
    HOST_ONLY_DTYPES,
    TILE_ROWS,
    round_up,
)


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
    import tensorflow as tf

    if isinstance(spec, tf.TensorSpec):
        return "dense"
    if isinstance(spec, tf.RaggedTensorSpec):
        return "ragged"
    if isinstance(spec, tf.SparseTensorSpec):
        return "sparse"
    return "other"


def check_dataset(dataset, spec, replicas: int, report: Report, per_replica: bool = False) -> None:
    """Shapes, dtypes, the batch and prefetch. ``per_replica``: batches come from a ``dataset_fn``."""
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
                "dataset.batch(batch_size, drop_remainder=True); for training, repeat() before "
                "batch() and pass steps_per_epoch to fit().",
            )
        )
    elif len(batch_sizes) == 1:
        _check_batch(batch_sizes.pop(), replicas, report, per_replica)
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


def _check_batch(batch: int, replicas: int, report: Report, per_replica: bool) -> None:
    report.checked.append("per-replica batch" if per_replica else "batch split")
    if per_replica:  # a dataset_fn's batch is one replica's: nothing to split
        global_batch = batch * replicas
        where = f"dataset_fn, per-replica batch {batch} x {replicas} replicas"
    else:
        global_batch = batch
        where = f"dataset, global batch {global_batch} / {replicas} replicas"
    report.stats["global_batch"] = global_batch
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
        padded = round_up(per, TILE_ROWS)
        report.findings.append(
            Finding(
                "batch-tiles",
                "warning",
                f"per-replica batch {per} is not a multiple of {TILE_ROWS}",
                where,
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
                where,
                "The 128 x 128 matrix units are used best with 128 or more rows per replica; "
                "small batches leave the TPU waiting on the host (fine for a quick test).",
                f"When memory allows, per-replica batch {BATCH_FOR_MXU} or more "
                "(global = per-replica x replicas).",
            )
        )
