"""The global batch and its split over replicas: the one place that does this arithmetic.

A TPU core computes in tiles of 8 rows: :class:`BatchPlan` says what a per-replica batch costs.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from tpucheck.tpu_facts import BATCH_FOR_MXU, GENERATIONS, TILE_ROWS, round_up


def positive_int(name: str, value) -> int:
    """``value`` if it is a positive integer (NumPy's too; never a bool), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def near_multiples(n: int, k: int) -> str:
    """The multiples of ``k`` nearest ``n``, for a message: "96 or 104" (below ``k``: "8")."""
    lower = n // k * k
    return f"{lower} or {lower + k}" if lower else f"{k}"


@dataclass(frozen=True)
class BatchPlan:
    """How a global batch splits over the replicas, and what a TPU core makes of its share."""

    per_replica: int
    replicas: int

    @property
    def global_batch(self) -> int:
        return self.per_replica * self.replicas

    @property
    def padded_per_replica(self) -> int:
        """The rows a TPU core really computes: the per-replica batch rounded up to 8."""
        return round_up(self.per_replica, TILE_ROWS)

    @property
    def wasted_fraction(self) -> float:
        """Share of each core's rows that are padding (0 when the batch is a multiple of 8)."""
        return 1 - self.per_replica / self.padded_per_replica

    @property
    def advice(self) -> str:
        # The generations whose matrix units are larger, e.g. "v6e: 256 x 256".
        larger = "; ".join(
            f"{g.name}: {g.mxu_size} x {g.mxu_size}"
            for g in GENERATIONS.values()
            if g.mxu_size > BATCH_FOR_MXU
        )
        mxu = f"a {BATCH_FOR_MXU} x {BATCH_FOR_MXU} matrix unit ({larger or 'every generation'})"
        if self.per_replica % BATCH_FOR_MXU == 0:
            return f"a multiple of {BATCH_FOR_MXU}: fills {mxu}"
        if self.per_replica % TILE_ROWS == 0:
            return (
                f"a multiple of {TILE_ROWS}: no padding, but {BATCH_FOR_MXU} per replica would "
                f"fill {mxu}; fine when the dataset is small"
            )
        return (
            f"not a multiple of {TILE_ROWS}, which the Cloud TPU performance guide asks for: "
            f"if XLA pads it to {self.padded_per_replica} rows, {self.wasted_fraction:.0%} of a "
            "core's work is padding (an estimate: what XLA pads depends on its layout; "
            "unverified on hardware)"
        )

    def __str__(self) -> str:
        return (
            f"{self.per_replica} per replica x {self.replicas} "
            f"replica{'s' if self.replicas != 1 else ''} = global batch "
            f"{self.global_batch}; per replica {self.advice}"
        )


def plan_batch(per_replica_batch: int, replicas: int) -> BatchPlan:
    """Describe the global batch ``per_replica_batch x replicas`` (``fit`` takes the global
    batch and gives each replica an equal share) and what a TPU core makes of each share."""
    positive_int("per_replica_batch", per_replica_batch)
    positive_int("replicas", replicas)
    return BatchPlan(int(per_replica_batch), int(replicas))


def per_replica_batch(global_batch_size: int, replicas: int, *, over: str = "replica") -> int:
    """Each replica's share of a global batch; a TPU needs the same static batch on each, so an
    uneven split is refused with the nearest sizes that work (``over``: "worker", "device")."""
    positive_int("global_batch_size", global_batch_size)
    positive_int(f"{over}s", replicas)
    if global_batch_size % replicas:
        raise ValueError(
            f"global batch {global_batch_size} does not split over {replicas} {over}s; use a "
            f"multiple of {replicas}, e.g. {near_multiples(global_batch_size, replicas)} "
            f"(per-{over} batch x {over}s)."
        )
    return int(global_batch_size // replicas)
