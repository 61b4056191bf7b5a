"""The one home of TensorFlow's internals: every private module the helpers use, with the reason.

Each function names the private module it calls and why the public API cannot do it here: the
lessons show on a CPU what public calls do only on a ``TPUStrategy`` (which needs TPU hardware),
and a few helpers need what TensorFlow does not publish (the checkpoint state file, the XLA
sharding proto, the auto-shard rewrite). Private import paths can
move between TensorFlow releases; the unit tests run every function on each stack's TensorFlow,
so a move shows there first, and a test fails on a private import anywhere else in helpers/.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "assign_to_logical_device",
    "auto_shard",
    "float64_enum",
    "has_xla_cpu_kernel",
    "is_stateful_op",
    "omit_retracing_warning",
    "py_function_callback",
    "replicate_to_logical_devices",
    "save_steps",
    "split_to_logical_devices",
    "untuned_distributed_input",
    "validate_tpu_run_function",
    "write_checkpoint_state",
    "xla_op_sharding",
    "xplane_proto",
]


def validate_tpu_run_function(fn) -> None:
    """Run ``TPUStrategy.run``'s first check on ``fn`` without a TPU (notebook 04_custom_training_loops).

    Raises ``NotImplementedError`` for a plain Python function ("pure eager"); a ``tf.function``
    passes. Internal because the check is reachable only through ``TPUStrategy.run``.
    Taught in notebook 04.
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
    Taught in notebook 07.
    """
    devices = np.arange(int(np.prod(partition))).reshape(partition)
    return _sharding().tile(tensor, devices, use_sharding_op=True)


def replicate_to_logical_devices(tensor):
    """Annotate ``tensor`` as ``experimental_replicate_to_logical_devices`` does (07).

    Taught in notebook 07.
    """
    return _sharding().replicate(tensor, use_sharding_op=True)


def assign_to_logical_device(tensor, device: int):
    """Annotate ``tensor`` as ``experimental_assign_to_logical_device`` does (07).

    Taught in notebook 07.
    """
    return _sharding().assign_device(tensor, device, use_sharding_op=True)


# --- what the helpers need that TensorFlow does not publish --------------------------------------


def write_checkpoint_state(directory: str, **state) -> None:
    """Rewrite the ``checkpoint`` state file of ``directory`` (``helpers.checkpoints``, 08).

    ``tf.train.CheckpointManager`` writes it through this internal function; there is no public
    way to list only some checkpoints after a save was killed halfway.
    """
    from tensorflow.python.checkpoint import checkpoint_management

    checkpoint_management.update_checkpoint_state_internal(directory, **state)


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


def auto_shard(dataset, num_workers: int, index: int):
    """Worker ``index``'s part of ``dataset`` as a multi-worker strategy rewrites it (06).

    The strategies call this internal rewrite inside ``experimental_distribute_dataset``; calling
    it directly shows, on one machine, what each worker would read.
    """
    from tensorflow.python.distribute import input_ops

    return input_ops.auto_shard_dataset(dataset, num_workers, index, num_workers)


def xla_op_sharding():
    """The ``OpSharding`` proto class that XLA sharding annotations are stored as (07).

    Read back from a traced graph by ``helpers.topology.sharding_annotations``; TensorFlow
    publishes no reader for it.
    """
    try:
        from tensorflow.compiler.xla import xla_data_pb2
    except ImportError:  # pragma: no cover - newer layouts of the XLA protos
        from local_xla.xla import xla_data_pb2

    return xla_data_pb2.OpSharding


def omit_retracing_warning(function) -> None:
    """Turn off TensorFlow's "retracing" warning for one ``tf.function`` (``helpers.loops``, 04).

    TensorFlow counts traces per source line across all functions made from it and, after five,
    warns of retracing that is not happening; the switch is a private attribute of the function.
    """
    function._omit_frequent_tracing_warning = True


def untuned_distributed_input(tf) -> bool:
    """Run distributed iterators without tf.data's autotuning thread; True if it applies.

    Measured with TF 2.21 on the simulated TPU: dropping a distributed iterator that had been read
    for about 100 s took 42 to 111 s (at kernel shutdown, or when "Run all" runs again and a cell
    rebinds ``iterator = iter(...)``). py-spy and gdb show the main thread in
    ``RootDataset::Iterator::~Iterator`` waiting for the autotuning thread
    (``Model::OptimizeLoop``), which sleeps out an optimisation period that doubles up to 60 s
    as the iterator ages; a distributed iterator has one such thread on the host pipeline and one
    per replica. With autotuning off on both, the same drop took 0.3 s. One CPU device
    (``simulated_replicas=1``) stalled too: notebook 04_custom_training_loops's second "Run all" took 20 s instead of 11. TensorFlow has no public
    switch for the per-replica pipelines it builds inside ``OwnedMultiDeviceIterator``, so this
    wraps the two private places where they are made; it changes nothing if they are missing.
    ``AUTOTUNE`` values still work without the tuner: parallel calls use the CPU core count.
    """
    from tensorflow.python.data.ops import multi_device_iterator_ops as mdi

    per_device = getattr(mdi, "_create_device_dataset", None)
    owned = getattr(mdi, "OwnedMultiDeviceIterator", None)
    if per_device is None or owned is None:
        return False
    if getattr(per_device, "untuned", False):
        return True
    options = tf.data.Options()
    options.autotune.enabled = False

    def create_device_dataset(*args, **kwargs):
        return per_device(*args, **kwargs).with_options(options)

    create_device_dataset.untuned = True
    mdi._create_device_dataset = create_device_dataset
    init = owned.__init__

    def owned_init(self, dataset=None, *args, **kwargs):
        if dataset is not None:  # None when TensorFlow rebuilds the iterator from its components
            dataset = dataset.with_options(options)
        init(self, dataset, *args, **kwargs)

    owned.__init__ = owned_init
    return True


# --- what the readiness check and the profile reader read from TensorFlow's registries -----------


def py_function_callback(token: str):
    """The Python callable a ``tf.py_function``/``PyFunc`` op with ``token`` calls back, or None.

    ``script_ops._py_funcs`` is the private registry of those callbacks (readiness, 10): the graph
    stores only the token, and the report names the function behind it.
    """
    from tensorflow.python.ops import script_ops

    return script_ops._py_funcs.get(token)


def is_stateful_op(op: str) -> bool:
    """Whether TensorFlow registers ``op`` as stateful (an unknown op counts as stateful).

    ``op_def_registry`` is not public; the readiness check (10) needs it to tell a random op with a
    fixed seed from one that changes at every step.
    """
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op)
    return op_def is None or op_def.is_stateful


def has_xla_cpu_kernel(op: str) -> bool | None:
    """Whether ``op`` has an XLA kernel (registered for ``XLA_CPU_JIT``); None if unknowable.

    The kernel registry (``tensorflow.python.framework.kernels``) is private; the readiness check
    (10) uses it to find ops an XLA-compiled TPU step cannot run.
    """
    try:
        from tensorflow.python.framework import kernels
    except ImportError:  # pragma: no cover - present in every TF 2 release
        return None
    registered = kernels.get_registered_kernels_for_op(op).kernel
    return any(k.device_type == "XLA_CPU_JIT" for k in registered)


def float64_enum() -> int:
    """``DT_DOUBLE`` of TensorFlow's ``types.proto``: how a GraphDef's attributes name float64."""
    from tensorflow.core.framework import types_pb2

    return types_pb2.DT_DOUBLE


def xplane_proto():
    """The ``xplane_pb2`` module a profile's ``.xplane.pb`` is parsed with (profiling, 11)."""
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
    except ImportError:  # older layouts of the TensorFlow wheel
        from tsl.profiler.protobuf import xplane_pb2
    return xplane_pb2
