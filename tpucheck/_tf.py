"""tpucheck's one home of TensorFlow's internals, each with the reason the public API cannot serve.

Private paths can move between TensorFlow releases; the tests run every function on each stack.
"""

from __future__ import annotations

import contextlib


def py_function_callback(token: str):
    """The Python callable a ``PyFunc`` op with ``token`` calls back, or None: the graph holds
    only the token, ``script_ops._py_funcs`` the callable (the readiness check names it)."""
    from tensorflow.python.ops import script_ops

    return script_ops._py_funcs.get(token)


def is_stateful_op(op: str) -> bool:
    """Whether ``op`` is registered stateful (an unknown op counts as stateful): the readiness
    check tells a random op with a fixed seed from one that changes (``op_def_registry``)."""
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op)
    return op_def is None or op_def.is_stateful


def has_xla_cpu_kernel(op: str) -> bool:
    """Whether ``op`` has an XLA kernel (for ``XLA_CPU_JIT``): the ops an XLA-compiled TPU step
    cannot run (the kernel registry is private)."""
    from tensorflow.python.framework import kernels

    registered = kernels.get_registered_kernels_for_op(op).kernel
    return any(k.device_type == "XLA_CPU_JIT" for k in registered)


def xplane_proto():
    """The ``xplane_pb2`` module a profile's ``.xplane.pb`` is parsed with."""
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
    except ImportError:  # older layouts of the TensorFlow wheel
        from tsl.profiler.protobuf import xplane_pb2
    return xplane_pb2


def untuned_distributed_input(tf) -> bool:
    """Run distributed iterators without tf.data's autotuning threads; True if it applies.

    Dropping a distributed iterator waits for those threads (host pipeline and each replica's),
    whose sleep doubles up to 60 s as it ages: 42 to 111 s after 100 s of reading with TF 2.21
    on the simulated TPU, 0.3 s without. No public switch reaches ``OwnedMultiDeviceIterator``'s
    per-replica pipelines, so this wraps the two private places that make them (``AUTOTUNE``
    then uses the CPU core count).
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


def xla_op_sharding():
    """The ``OpSharding`` proto class of XLA sharding annotations: TensorFlow has no reader."""
    try:
        from tensorflow.compiler.xla import xla_data_pb2
    except ImportError:  # pragma: no cover - newer layouts of the XLA protos
        from local_xla.xla import xla_data_pb2

    return xla_data_pb2.OpSharding


def gradient_registry() -> dict | None:
    """TensorFlow's gradient functions by name, or None where the private registry has moved
    (``tf.RegisterGradient`` and graph-mode ``tf.custom_gradient`` add to it; nothing removes)."""
    from tensorflow.python.framework import ops

    registry = getattr(getattr(ops, "gradient_registry", None), "_registry", None)
    return registry if isinstance(registry, dict) else None


def forget_custom_gradients(keep=()) -> int:
    """Drop the ``tf.custom_gradient`` functions registered so far, but those named in ``keep``,
    once nobody differentiates their traced functions again; return how many. Each all-reduce
    traced in a replica context (every Keras 3 ``apply_gradients`` under a strategy) registers one
    for good, holding its graph and captured variables after their model is gone: 0.42 GiB in
    notebook 10_tpu_readiness_check, 0.32 GiB in the self-test.
    """
    registry = gradient_registry() or {}
    names = [n for n in registry if n.startswith("CustomGradient-") and n not in keep]
    for name in names:
        del registry[name]
    return len(names)


@contextlib.contextmanager
def forgetting_custom_gradients():
    """On leaving, :func:`forget_custom_gradients` registered inside the block."""
    keep = set(gradient_registry() or ())
    try:
        yield
    finally:
        forget_custom_gradients(keep)
