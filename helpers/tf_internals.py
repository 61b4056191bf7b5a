"""The one home of TensorFlow's internals: every private module the helpers use, with the reason.

The lessons show on a CPU what public calls do only on a ``TPUStrategy`` (TPU hardware), and a
few helpers need what TensorFlow does not publish. Private paths can move between releases: the
tests run every function on each stack's TensorFlow, and fail on a private import elsewhere.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "assign_to_logical_device",
    "auto_shard",
    "mirrored_reduce_parts",
    "omit_retracing_warning",
    "replicate_to_logical_devices",
    "save_steps",
    "split_to_logical_devices",
    "validate_tpu_run_function",
]


def validate_tpu_run_function(fn) -> None:
    """Run ``TPUStrategy.run``'s first check on ``fn`` without a TPU (notebook 04_custom_training_loops):
    ``NotImplementedError`` for a plain Python function ("pure eager"), a ``tf.function`` passes."""
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


# --- what the helpers need that TensorFlow does not publish --------------------------------------


def save_steps() -> dict[str, tuple[object, str]]:
    """The internal functions a checkpoint save calls, by step, as ``(module, attribute)``.

    ``merge`` (the shards into one checkpoint), ``state`` (the state file), ``rename`` (a file put
    in place) and ``delete`` (an old checkpoint's file): ``helpers.save_faults`` wraps them to stop
    a save at an exact instant (08). The public API has no hook inside a save.
    """
    from tensorflow.python.checkpoint import checkpoint_management
    from tensorflow.python.lib.io import file_io
    from tensorflow.python.ops import gen_io_ops

    return {
        "merge": (gen_io_ops, "merge_v2_checkpoints"),
        "state": (checkpoint_management, "update_checkpoint_state_internal"),
        "rename": (file_io, "rename"),
        "delete": (checkpoint_management, "_delete_file_if_exists"),
    }


def mirrored_reduce_parts():
    """``(MirroredExtended, DistributedValues, reduce_non_distributed_value)``, for the simulated
    TPU's reduce (:func:`helpers.simulation.reduce_like_tpu`)."""
    from tensorflow.python.distribute import cross_device_ops, mirrored_strategy, values

    return (
        mirrored_strategy.MirroredExtended,
        values.DistributedValues,
        cross_device_ops.reduce_non_distributed_value,
    )


def auto_shard(dataset, num_workers: int, index: int):
    """Worker ``index``'s part of ``dataset`` as a multi-worker strategy rewrites it inside
    ``experimental_distribute_dataset`` (06): what each worker would read, on one machine."""
    from tensorflow.python.distribute import input_ops

    return input_ops.auto_shard_dataset(dataset, num_workers, index, num_workers)


def omit_retracing_warning(function) -> None:
    """Turn off TensorFlow's "retracing" warning for one ``tf.function`` (``helpers.loops``, 04).

    TensorFlow counts traces per source line across all functions made from it and, after five,
    warns of retracing that is not happening; the switch is a private attribute of the function.
    """
    function._omit_frequent_tracing_warning = True
