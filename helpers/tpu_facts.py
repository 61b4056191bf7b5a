"""TPU hardware facts as Google publishes them, in one place (notebooks 00, 03, 07, 10).

The tiles a TPU core computes in and the batch that fills its matrix unit (Cloud TPU performance
guide), which ``batches.plan_batch`` and the readiness checks measure against; each generation's
published peak, memory and devices per chip, which the self-test and the slices of
``helpers.topology`` use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "BATCH_FOR_MXU",
    "FLOAT64_WHY",
    "GENERATIONS",
    "Generation",
    "HOST_ONLY_DTYPES",
    "TILE_COLS",
    "TILE_ROWS",
    "WASTE_WARNING",
    "generation_of",
    "round_up",
]

TILE_ROWS = 8  # the TPU pads the second-to-last dimension of a tile to 8 ...
TILE_COLS = 128  # ... and the last one to 128: the width of the matrix units (MXU)
WASTE_WARNING = 0.10  # a chosen size that pads away 10% or more of its work is worth a warning
BATCH_FOR_MXU = 128  # per-replica batch the Cloud TPU performance guide recommends: fills the MXU

# Types TensorFlow can feed to a TPU (tensorflow/core/tpu/tpu_defs.h lists them); these cannot.
HOST_ONLY_DTYPES = ("string", "variant", "resource", "complex128")
FLOAT64_WHY = (
    "TPUs are built for bfloat16 and float32; float64 is not a native TPU type (TensorFlow's TPU "
    "type list accepts it, so XLA emulates or rejects it depending on the op; unverified on "
    "hardware)."
)


def round_up(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple``: the size the TPU pads it to.

    Part of helpers.tpu_facts, taught in notebooks 00, 03, 07, 10.
    """
    return -(-n // multiple) * multiple


@dataclass(frozen=True)
class Generation:
    """One TPU generation: its published peak and memory per chip, and how TensorFlow sees a chip.

    ``devices_per_chip`` is the number of TensorFlow TPU devices (replicas, "cores" in the
    lessons) one chip shows: 2 where each TensorCore is its own device (v2, v3), 1 where a chip
    has one TensorCore (v5e, v6e) or presents its two as one "megacore" device (v4, v5p).
    ``hbm_gib`` is the chip's high-bandwidth memory as Google publishes it. None of these numbers
    was measured on hardware by this project. Taught in notebooks 00 and 07.
    """

    name: str
    peak_bf16_tflops: float
    devices_per_chip: int
    hbm_gib: float
    source: str
    verified_on_hardware: bool = False

    def label(self) -> str:
        seen = "verified" if self.verified_on_hardware else "unverified"
        peak = f"{self.peak_bf16_tflops:g} TFLOP/s bf16 per chip"
        devices = f"{self.devices_per_chip} TensorFlow device(s) per chip"
        return f"TPU {self.name}: {peak}, {devices} ({seen} on hardware; source: {self.source})"


_DOCS = "Cloud TPU system architecture, cloud.google.com/tpu/docs/{}: 'Peak compute per chip'"

GENERATIONS: dict[str, Generation] = {
    g.name: g
    for g in (
        Generation(
            "v2",
            45,
            2,
            16,
            "45 TFLOPS per chip of two cores, as quoted by secondary sources; the Cloud TPU v2 "
            "page was not found by this project's search",
        ),
        Generation("v3", 123, 2, 32, _DOCS.format("v3")),
        Generation("v4", 275, 1, 32, _DOCS.format("v4") + "; 2 TensorCores as one megacore device"),
        Generation("v5e", 197, 1, 16, _DOCS.format("v5e") + "; one TensorCore per chip"),
        Generation(
            "v5p", 459, 1, 95, _DOCS.format("v5p") + "; 2 TensorCores as one megacore device"
        ),
        Generation("v6e", 918, 1, 32, _DOCS.format("v6e") + " (Trillium); one TensorCore per chip"),
    )
}

# Accelerator types ("v5litepod-8" is Cloud's name for a v5e slice, "v6e-8", "v3-8") and device
# kinds as JAX prints them ("TPU v5 lite" is a v5e, "TPU v5" a v5p, "TPU v6 lite" a v6e).
_ACCELERATOR = re.compile(r"\bv(\d)\s?(litepod|lite|e|p)?\b", re.IGNORECASE)


def generation_of(accelerator_type: str | None) -> Generation | None:
    """The generation named by an accelerator type (``"v5litepod-8"``, ``"v3-8"``, ``"TPU v4"``).

    None when the text names no generation this table knows.
    Part of helpers.tpu_facts, taught in notebooks 00, 03, 07, 10.
    """
    match = _ACCELERATOR.search(accelerator_type or "")
    if match is None:
        return None
    number, suffix = match.group(1), (match.group(2) or "").lower()
    suffix = "e" if suffix.startswith("lite") else suffix
    if number == "5" and not suffix:
        suffix = "p"  # a plain "v5" device kind is the v5p (unverified on hardware)
    return GENERATIONS.get(f"v{number}{suffix}")
