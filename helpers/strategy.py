"""``connect()``: the one entry point every notebook uses to get its distribution strategy.

Notebook 01_tpu_detection_and_connection writes its TPU and simulated-TPU paths out in plain TensorFlow
(a test checks that this module makes the same calls). The order of preference is

1. a TPU (``TPUClusterResolver(tpu="local")`` on a TPU VM, or a named TPU for a pod slice),
2. several GPUs (``MirroredStrategy``),
3. on a CPU, a *simulated TPU*: ``SIMULATED_REPLICAS`` logical CPU devices under a
   ``MirroredStrategy``, so per-replica batches, loss scaling and cross-replica reductions really
   run with many replicas,
4. one device (one GPU, or the CPU when ``simulated_replicas=1``).

Re-running a notebook cell is safe: the strategy is cached for the life of the kernel, because
``initialize_tpu_system`` must run once (a second call can drop variables already on the TPU)
and logical CPU devices can only be configured before TensorFlow's runtime starts.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

from helpers import failures, runtime, versions
from helpers.tf_internals import untuned_distributed_input

__all__ = [
    "SIMULATED_REPLICAS",
    "SIMULATED_TPU",
    "connect",
    "describe",
    "simulated_tpu",
    "StrategyError",
    "StrategyInfo",
    "untuned_distributed_input",
]

# TensorFlow, Keras and matplotlib are imported inside the functions that use them, so that
# `import helpers` works where TensorFlow is missing (a fresh Colab TPU runtime) and stays quick.

SIMULATED_TPU = "simulated TPU"
# Replicas of the simulated TPU unless a lesson asks for others: as many as the cores of the
# single-host TPUs the lessons are written for (a v5e-8, a v3-8). The one place this number is
# written: lessons' parameters cells, the self-test, the benchmark and the stacks read it.
SIMULATED_REPLICAS = 8
KINDS = ("TPU", "several GPUs", SIMULATED_TPU, "one device")


class StrategyError(RuntimeError):
    """The strategy asked for cannot be built in this kernel; the message says what to do."""


@dataclass
class _Choice:
    key: tuple
    strategy: object
    kind: str
    tpu: str | None = None
    on_cpu: bool = False  # only a CPU choice depends on simulated_replicas


_CHOSEN: list[_Choice] = []  # at most one entry: the strategy of this kernel


def connect(
    simulated_replicas: int = SIMULATED_REPLICAS,
    *,
    tpu: str | None = None,
    allow_cpu_fallback: bool = False,
):
    """Return the best ``tf.distribute.Strategy`` for this machine (see the module docstring).

    Args:
        simulated_replicas: replicas of the simulated TPU used when only a CPU is present
            (the notebooks' ``SIMULATED_REPLICAS`` parameter). 1 means a plain single device.
        tpu: a TPU name for a pod slice. Default: ``$TPU_NAME`` when set, else ``"local"``
            (the TPU attached to this VM).
        allow_cpu_fallback: when TPU hardware is present but unusable, warn and continue on
            the CPU instead of raising :class:`helpers.runtime.TPUUnusableError`.

    Calling again with the same arguments returns the same strategy object.
    Taught in notebooks 00, 10, 11.
    """
    if isinstance(simulated_replicas, bool) or not isinstance(simulated_replicas, int):
        raise TypeError(f"simulated_replicas must be an int, got {simulated_replicas!r}")
    if simulated_replicas < 1:
        raise ValueError(
            f"simulated_replicas must be at least 1, got {simulated_replicas}; "
            "use 8 to simulate one TPU v5e-8 or v3-8 host."
        )
    key = (simulated_replicas, tpu, allow_cpu_fallback)
    if _CHOSEN:
        return _reuse(_CHOSEN[0], key)

    import tensorflow as tf

    choice = None
    hints = runtime.tpu_hints()
    if hints or tpu:
        choice = _try_tpu(tf, key, tpu, hints, allow_cpu_fallback)
    if choice is None:
        try:
            choice = _local_strategy(tf, key, simulated_replicas)
        except StrategyError:
            if not (hints or tpu):
                raise
            # A failed TPU start already started TensorFlow's runtime: the CPU can no longer
            # be split, so the fallback the user allowed is a single CPU device.
            warnings.warn("Falling back to one CPU device (1 replica).", stacklevel=2)
            choice = _Choice(key, tf.distribute.OneDeviceStrategy("/cpu:0"), "one device")
            choice.on_cpu = True
    _CHOSEN.append(choice)
    return choice.strategy


def _reuse(previous: _Choice, key: tuple):
    if previous.key == key or not previous.on_cpu:
        return previous.strategy
    raise StrategyError(
        f"This kernel already runs a {previous.kind} with "
        f"{previous.strategy.num_replicas_in_sync} replica(s), and TensorFlow cannot change its "
        "devices once it has started. Restart the kernel to use other settings."
    )


def _try_tpu(tf, key, tpu, hints, allow_cpu_fallback) -> _Choice | None:
    platform = runtime.detect_platform()
    support = runtime.tensorflow_tpu_support()
    error: BaseException | None = None
    owner = failures.tpu_owner_in_process()
    if owner is not None:  # connecting would fail with "ioctl failed" or "already in use"
        held = failures.recognise("The TPU is already in use")
        support = runtime.TPUSupport(False, f"{owner} already holds the TPU: {held.meaning}")
    if support.usable is not False:
        name = tpu or os.environ.get("TPU_NAME") or "local"
        try:
            # The sequence notebook 01_tpu_detection_and_connection writes out (tests/test_lesson_code_tpu_detection_and_connection.py compares them).
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name)
            tf.config.experimental_connect_to_cluster(resolver)  # does nothing for "local"
            tf.tpu.experimental.initialize_tpu_system(resolver)
            return _Choice(key, tf.distribute.TPUStrategy(resolver), "TPU", name)
        except (ValueError, RuntimeError, tf.errors.OpError) as err:
            error = err
            support = runtime.TPUSupport(False, _explain_tpu_error(err))
    message = runtime.unusable_tpu_message(support, hints or [f"tpu={tpu}"], platform)
    if not allow_cpu_fallback:
        raise runtime.TPUUnusableError(message) from error
    warnings.warn(message + "\nallow_cpu_fallback=True: continuing on the CPU.", stacklevel=3)
    return None


def _explain_tpu_error(err: BaseException) -> str:
    """The known failure behind a failed TPU start, in words (helpers.failures), or its first line."""
    text = str(err)
    return failures.explain(err) or f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


def _local_strategy(tf, key, simulated_replicas: int) -> _Choice:
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) > 1:
        return _Choice(key, tf.distribute.MirroredStrategy(), "several GPUs")
    if gpus:
        return _Choice(key, tf.distribute.OneDeviceStrategy("/gpu:0"), "one device")
    if simulated_replicas == 1:
        untuned_distributed_input(tf)  # as on the simulated TPU: dropping an iterator is quick
        return _Choice(key, tf.distribute.OneDeviceStrategy("/cpu:0"), "one device", on_cpu=True)
    return _Choice(key, simulated_tpu(tf, simulated_replicas), SIMULATED_TPU, on_cpu=True)


def simulated_tpu(tf, replicas: int):
    """A ``MirroredStrategy`` over ``replicas`` logical CPU devices (notebook 01_tpu_detection_and_connection).

    It runs the multi-replica code paths of a TPU program (per-replica batches, all-reduce of
    gradients, ``strategy.reduce``) but not XLA's TPU compiler, the TPU's memory limits or its
    speed. Must run before any TensorFlow op; otherwise a :class:`StrategyError` says so.
    """
    cpu = tf.config.list_physical_devices("CPU")[0]
    wanted = [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is None or len(current) != replicas:
        try:
            tf.config.set_logical_device_configuration(cpu, wanted)
        except RuntimeError as err:
            started = len(tf.config.list_logical_devices("CPU"))
            raise StrategyError(
                f"Cannot split the CPU into {replicas} devices: TensorFlow already started with "
                f"{started} CPU device(s) (some TensorFlow op ran before connect()). Restart the "
                "kernel and call helpers.connect() before any other TensorFlow code."
            ) from err
    devices = [d.name for d in tf.config.list_logical_devices("CPU")[:replicas]]
    untuned_distributed_input(tf)
    return tf.distribute.MirroredStrategy(devices)


@dataclass
class StrategyInfo:
    """What :func:`connect` chose, printable as a short table (notebook 01_tpu_detection_and_connection)."""

    kind: str
    replicas: int
    devices: list[str] = field(default_factory=list)
    platform: str = ""
    tensorflow: str = ""
    keras: str = ""
    tpu: str | None = None

    def __str__(self) -> str:
        # Devices share a long host part (/job:localhost/replica:0/task:0): said once, so the
        # line fits an output area instead of wrapping inside a device name.
        hosts = {d.rpartition("/device:")[0] for d in self.devices}
        names = [d.rpartition("/device:")[2] for d in self.devices]
        devices = (
            ", ".join(names) if len(names) <= 4 else f"{names[0]}, {names[1]}, ... {names[-1]}"
        )
        if len(hosts) == 1 and next(iter(hosts)):
            devices += f" on {next(iter(hosts))}"
        rows = [
            ("strategy", self.kind + (f" ({self.tpu})" if self.tpu else "")),
            ("replicas", str(self.replicas)),
            ("devices", devices),
            ("platform", self.platform),
            ("TensorFlow", self.tensorflow),
            ("Keras", self.keras),
        ]
        return "\n".join(f"{name:<11} {value}" for name, value in rows)


def describe(strategy=None) -> StrategyInfo:
    """Describe ``strategy`` (default: the one :func:`connect` returned in this kernel).

    Taught in notebooks 00, 10, 11.
    """
    import keras
    import tensorflow as tf

    choice = _CHOSEN[0] if _CHOSEN else None
    if strategy is None:
        if choice is None:
            raise StrategyError("connect() has not been called in this kernel yet")
        strategy = choice.strategy
    known = choice is not None and choice.strategy is strategy
    dist = versions.tensorflow_distribution()
    return StrategyInfo(
        kind=choice.kind if known else type(strategy).__name__,
        replicas=strategy.num_replicas_in_sync,
        devices=list(strategy.extended.worker_devices),
        platform=runtime.detect_platform(),
        tensorflow=f"{tf.__version__} ({dist[0] if dist else 'unknown build'})",
        keras=keras.__version__,
        tpu=choice.tpu if known else None,
    )
