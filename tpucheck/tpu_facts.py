"""TPU hardware facts as Google publishes them, in one place. They are the 8 x 128 layout a TPU
pads arrays to, the batch that fills a matrix unit (Cloud TPU performance guide), and each
generation's TensorCores, matrix units (MXUs), published peak, memory and devices per chip.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TILE_ROWS = 8  # the TPU pads the second-to-last dimension of an array to 8 (sublanes) ...
TILE_COLS = 128  # ... and the last one to 128 (lanes): the 8 x 128 layout of TPU memory
# The per-replica batch the Cloud TPU performance guide recommends: a multiple of 128 fills a
# 128 x 128 matrix unit (MXU). A v6e's MXUs are 256 x 256 (``Generation.mxu_size``), so there a
# multiple of 256 fills them: that follows from the size, no guide says it (unverified on hardware).
BATCH_FOR_MXU = 128

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


@dataclass(frozen=True)
class Generation:
    """One TPU generation as Google publishes it, per chip (none of it measured on hardware):
    ``devices_per_chip`` TensorFlow devices (replicas), 2 where each TensorCore is one (v2, v3), 1
    where there is one or two show as one "megacore" device (v4, v5p); each TensorCore holds
    ``mxus_per_tensorcore`` matrix units (MXUs) of ``mxu_size`` squared multiply-accumulators.
    """

    name: str
    peak_bf16_tflops: float
    devices_per_chip: int
    hbm_gib: float
    source: str
    tensorcores_per_chip: int = 1
    mxus_per_tensorcore: int = 4
    mxu_size: int = 128
    verified_on_hardware: bool = False

    def label(self) -> str:
        seen = "verified" if self.verified_on_hardware else "unverified"
        cores = f"{self.tensorcores_per_chip} TensorCore(s) of {self.mxus_per_tensorcore} "
        cores += f"{self.mxu_size}x{self.mxu_size} MXUs"
        return (
            f"TPU {self.name}: {self.peak_bf16_tflops:g} TFLOP/s bf16 per chip, {cores}, "
            f"{self.devices_per_chip} TensorFlow device(s) per chip ({seen} on hardware; "
            f"source: {self.source})"
        )


_DOCS = "Cloud TPU system architecture, cloud.google.com/tpu/docs/{}: 'Peak compute per chip'"
_MXU = "; MXUs: the TPU architecture page (128 x 128 before v6e) and each generation's page"

GENERATIONS: dict[str, Generation] = {
    g.name: g
    for g in (
        Generation(
            "v2", 45, 2, 16,
            "45 TFLOPS per chip of two cores, as quoted by secondary sources; the Cloud TPU v2 "
            "page was not found by this project's search" + _MXU,
            tensorcores_per_chip=2, mxus_per_tensorcore=1,
        ),
        Generation(
            "v3", 123, 2, 32, _DOCS.format("v3") + _MXU, tensorcores_per_chip=2,
            mxus_per_tensorcore=2,
        ),
        Generation(
            "v4", 275, 1, 32, _DOCS.format("v4") + "; 2 TensorCores as one megacore device" + _MXU,
            tensorcores_per_chip=2,
        ),
        Generation("v5e", 197, 1, 16, _DOCS.format("v5e") + "; one TensorCore per chip" + _MXU),
        Generation(
            "v5p", 459, 1, 95, _DOCS.format("v5p") + "; 2 TensorCores as one megacore device" + _MXU,
            tensorcores_per_chip=2,
        ),
        Generation(
            "v6e", 918, 1, 32,
            _DOCS.format("v6e") + " (Trillium); one TensorCore per chip, two 256 x 256 MXUs",
            mxus_per_tensorcore=2, mxu_size=256,
        ),
    )
}  # fmt: skip

# Accelerator types ("v5litepod-8" is Cloud's name for a v5e slice, "v6e-8", "v3-8") and device
# kinds as JAX prints them ("TPU v5 lite" is a v5e, "TPU v5" a v5p, "TPU v6 lite" a v6e).
_ACCELERATOR = re.compile(r"\bv(\d)\s?(litepod|lite|e|p)?\b", re.IGNORECASE)


def generation_of(accelerator_type: str | None) -> Generation | None:
    """The generation an accelerator type names (``"v5litepod-8"``, ``"v3-8"``, ``"TPU v4"``), or
    None."""
    match = _ACCELERATOR.search(accelerator_type or "")
    if match is None:
        return None
    number, suffix = match.group(1), (match.group(2) or "").lower()
    suffix = "e" if suffix.startswith("lite") else suffix
    if number == "5" and not suffix:
        suffix = "p"  # a plain "v5" device kind is the v5p (unverified on hardware)
    return GENERATIONS.get(f"v{number}{suffix}")
