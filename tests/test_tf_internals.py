"""helpers.tf_internals: the TensorFlow internals lessons 04 and 07 show, on this TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from helpers import tf_internals
from helpers import topology as topo


def test_tpu_run_check_refuses_pure_eager_and_accepts_a_tf_function():
    def replica_id():
        return tf.distribute.get_replica_context().replica_id_in_sync_group

    with pytest.raises(NotImplementedError, match="does not support pure eager"):
        tf_internals.validate_tpu_run_function(replica_id)
    tf_internals.validate_tpu_run_function(tf.function(replica_id))


def test_the_three_annotations_are_what_tpustrategy_writes():
    @tf.function
    def annotated(images, weights):
        tiled = tf_internals.split_to_logical_devices(images, [1, 2, 4, 1])
        shared = tf_internals.replicate_to_logical_devices(weights)
        return tf_internals.assign_to_logical_device(tf.reduce_sum(tiled) * shared, 7)

    traced = annotated.get_concrete_function(tf.TensorSpec([8, 4, 8, 3]), tf.TensorSpec([16]))
    found = topo.sharding_annotations(traced)
    assert [a["kind"] for a in found] == ["split", "replicated", "one device"]
    assert found[0]["tiles"] == [1, 2, 4, 1] and found[0]["devices"] == list(np.arange(8))
    assert found[2]["devices"] == [7]
