"""The batch size a pipeline really yields, read from its ``tf.data`` graph (notebook 10_tpu_readiness_check).

The element spec says None for a batch dimension whenever a batch may be partial; this module
reads the size where the pipeline sets it, without pulling any data: the last ``batch`` op; each
component of a ``zip`` (paired images, a GAN's real images and noise); and the datasets a
``flat_map`` or ``interleave`` function builds, read from that function's graph. That last covers
the dataset Keras' array data adapter builds when ``fit`` gets NumPy arrays: it slices a tensor of
batched indices, then concatenates the partial batch. Where the size cannot be read, the reason is
returned instead, for the report's ``skipped``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["Batching", "read_batching", "transformation_kind"]

# TensorFlow is imported inside the functions: see _pipeline.

_BATCH_KINDS = ("_BatchDataset", "_ParallelBatchDataset", "_PaddedBatchDataset")
_FUNCTION_KINDS = ("_FlatMapDataset", "_InterleaveDataset", "_ParallelInterleaveDataset")
_UNBATCHING = ("_UnbatchDataset", "_RebatchDataset", "_WindowDataset", "_ScanDataset")
_GRAPH_BATCH_OPS = (
    "BatchDataset",
    "BatchDatasetV2",
    "ParallelBatchDataset",
    "PaddedBatchDatasetV2",
)


@dataclass(frozen=True)
class Batching:
    """The pipeline's batching, read from its graph: what the element spec cannot say.

    ``elements`` is the number of elements that reach the batch op per pass: a count, ``None``
    when tf.data cannot tell (a ``filter``, files), ``-1`` when the input repeats forever.
    ``repeat_after`` is True when a ``repeat()`` follows the batch op (each pass ends with its
    own partial batch). ``last``: the size of a last, partial batch read from the graph itself
    (Keras' array adapter concatenates it), when the element count is unknown.

    Part of the readiness check, notebook 10_tpu_readiness_check.
    """

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
    """``flat_map`` from ``_FlatMapDataset``: the transformation's name (notebook 10_tpu_readiness_check)."""
    kind = re.sub(r"(?<!^)(?=[A-Z])", "_", type(ds).__name__.strip("_")).lower()
    return kind.removesuffix("_dataset").removeprefix("parallel_")


def _inputs(ds) -> list:
    return list(getattr(ds, "_inputs", list)())  # tf.data's private but long-stable links


def read_batching(dataset, repeat_after: bool = False) -> Batching | str | None:
    """The batching of ``dataset``; a reason when it cannot be read; None when it has no batch op.

    Part of the readiness check, notebook 10_tpu_readiness_check.
    """
    import tensorflow as tf

    if not tf.executing_eagerly():
        return "the pipeline can only be read eagerly"
    ds = dataset
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
        if len(inputs) != 1:  # a source, or a transformation of several datasets
            return (
                None
                if not inputs
                else f"dataset.{transformation_kind(ds)}() combines several datasets"
            )
        ds = inputs[0]


def _count(ds) -> int | None:
    import tensorflow as tf

    count = int(ds.cardinality())
    return {int(tf.data.INFINITE_CARDINALITY): -1, int(tf.data.UNKNOWN_CARDINALITY): None}.get(
        count, count
    )


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
    known = [b for b in batched if b.batches is not None]
    # zip() stops with its shortest component: that one's last batch is the pass's last.
    first_to_end = min(known, key=lambda b: b.batches) if len(known) == len(batched) else None
    ops = ", ".join(b.op for b in batched)
    base = first_to_end or batched[0]
    return Batching(
        sizes[0],
        all(b.drop_remainder for b in batched),
        base.elements if first_to_end else None,
        repeat_after,
        f"zip({ops})",
        base.last if first_to_end else None,
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
    counts = [count for _, count, _ in parts]
    known = None not in counts and _count(ds._input_dataset) == 1
    elements = sum(s * c for s, c, _ in parts) if known else None
    drop = all(d for _, _, d in parts) and last is None
    kind = transformation_kind(ds)
    name = re.sub(rf"^__inference_Dataset_{kind}_|_\d+$", "", function.name.decode())
    return Batching(size, drop, elements, repeat_after, f"{kind}({name})", last)


def _parts(op, tf) -> list[tuple[int, int | None, bool]] | None:
    """``(batch size, batches or None, drop_remainder)`` for each dataset op concatenated."""
    if op.type == "Identity":
        return _parts(op.inputs[0].op, tf)
    if op.type == "ConcatenateDataset":
        first, second = _parts(op.inputs[0].op, tf), _parts(op.inputs[1].op, tf)
        return first + second if first and second else None
    if op.type in _GRAPH_BATCH_OPS:
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
