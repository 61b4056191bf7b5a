"""tpucheck.batches: the global batch, its split over replicas, and what a TPU core makes of it."""

from __future__ import annotations

import pytest

from tpucheck import batches


# ----------------------------------------------------------------------------- plan_batch
def test_plan_batch_multiplies_and_judges_the_tiles():
    full = batches.plan_batch(128, 8)
    assert full.global_batch == 1024 and full.wasted_fraction == 0
    assert "fills" in full.advice and "x 8 replicas = global batch 1024" in str(full)
    # the matrix unit's size comes from tpu_facts: 128 x 128, and a v6e's 256 x 256
    assert "128 x 128" in full.advice and "v6e: 256 x 256" in full.advice
    assert "x 1 replica = global batch 128" in str(batches.plan_batch(128, 1))

    small = batches.plan_batch(16, 8)
    assert small.global_batch == 128 and small.padded_per_replica == 16
    assert "no padding" in small.advice

    odd = batches.plan_batch(12, 4)
    assert odd.padded_per_replica == 16
    assert odd.wasted_fraction == pytest.approx(0.25)
    assert "if XLA pads it to 16 rows, 25% of a core's work is padding (an estimate" in odd.advice


@pytest.mark.parametrize(
    ("per_replica", "replicas", "name"),
    [
        (0, 8, "per_replica_batch"),
        (16, 0, "replicas"),
        (16.0, 8, "per_replica_batch"),
        (True, 8, "per_replica_batch"),
    ],
)
def test_plan_batch_rejects_bad_sizes(per_replica, replicas, name):
    with pytest.raises(ValueError, match=f"{name} must be a positive integer"):
        batches.plan_batch(per_replica, replicas)


@pytest.mark.parametrize(("batch", "replicas", "per"), [(64, 8, 8), (1024, 8, 128), (7, 1, 7)])
def test_per_replica_batch(batch, replicas, per):
    assert batches.per_replica_batch(batch, replicas) == per


def test_a_split_over_workers_says_workers():
    with pytest.raises(ValueError, match="does not split over 3 workers; use a multiple of 3"):
        batches.per_replica_batch(64, 3, over="worker")
    assert batches.per_replica_batch(64, 2, over="worker") == 32


def test_indivisible_batch_names_the_nearest_valid_sizes():
    with pytest.raises(ValueError, match=r"use a multiple of 8, e\.g\. 96 or 104"):
        batches.per_replica_batch(100, 8)
    with pytest.raises(ValueError, match=r"e\.g\. 8 \("):
        batches.per_replica_batch(3, 8)


@pytest.mark.parametrize(("batch", "replicas"), [(0, 8), (64, 0), (-8, 8), (64.0, 8), (True, 1)])
def test_invalid_sizes_are_rejected(batch, replicas):
    with pytest.raises(ValueError, match="positive integer"):
        batches.per_replica_batch(batch, replicas)
