"""The TPU facts the readiness checks measure against (Cloud TPU performance guide)."""

from __future__ import annotations

TILE_ROWS = 8  # the TPU pads the second-to-last dimension of a tile to 8 ...
TILE_COLS = 128  # ... and the last one to 128: the width of the matrix units (MXU)
WASTE_WARNING = 0.10  # a chosen size that pads away 10% or more of its work is worth a warning
BATCH_FOR_MXU = 128  # per-replica batch the Cloud TPU performance guide recommends

# Types TensorFlow can feed to a TPU (tensorflow/core/tpu/tpu_defs.h lists them); these cannot.
HOST_ONLY_DTYPES = ("string", "variant", "resource", "complex128")
FLOAT64_WHY = (
    "TPUs are built for bfloat16 and float32; float64 is not a native TPU type (TensorFlow's TPU "
    "type list accepts it, so XLA emulates or rejects it depending on the op; unverified on "
    "hardware)."
)


def round_up(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple``: the size the TPU pads it to."""
    return -(-n // multiple) * multiple
