"""The TensorFlow internals a lesson shows on a CPU, wrapped so lesson cells use public API only.

Each function names the private module it calls and why the public API cannot do it here: the
public calls exist only on a ``TPUStrategy``, which needs TPU hardware, and a lesson shows on any
machine what they do. Private import paths can move between TensorFlow releases; the unit tests
run every function on each stack's TensorFlow, so a move shows there first.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "assign_to_logical_device",
    "replicate_to_logical_devices",
    "split_to_logical_devices",
    "validate_tpu_run_function",
]


def validate_tpu_run_function(fn) -> None:
    """Run ``TPUStrategy.run``'s first check on ``fn`` without a TPU (notebook 04).

    Raises ``NotImplementedError`` for a plain Python function ("pure eager"); a ``tf.function``
    passes. Internal because the check is reachable only through ``TPUStrategy.run``.
    """
    from tensorflow.python.distribute.tpu_strategy import validate_run_function

    validate_run_function(fn)


def _sharding():
    # TPUStrategy's experimental_*_logical_device(s) methods annotate tensors with this module.
    from tensorflow.python.compiler.xla.experimental import xla_sharding

    return xla_sharding


def split_to_logical_devices(tensor, partition: list[int]):
    """Annotate ``tensor`` as ``TPUStrategy.experimental_split_to_logical_devices`` does (07).

    Dimension ``j`` is cut into ``partition[j]`` tiles, one per logical device, in order.
    """
    devices = np.arange(int(np.prod(partition))).reshape(partition)
    return _sharding().tile(tensor, devices, use_sharding_op=True)


def replicate_to_logical_devices(tensor):
    """Annotate ``tensor`` as ``experimental_replicate_to_logical_devices`` does (07)."""
    return _sharding().replicate(tensor, use_sharding_op=True)


def assign_to_logical_device(tensor, device: int):
    """Annotate ``tensor`` as ``experimental_assign_to_logical_device`` does (07)."""
    return _sharding().assign_device(tensor, device, use_sharding_op=True)
