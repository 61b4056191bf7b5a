"""``connect()`` calls the reference script's ``train_tpu.connect``; ``describe()`` says what it chose.

The connection has one home, ``train_tpu.connect`` (notebook 01_tpu_detection_and_connection): a
TPU, several GPUs, or on a CPU a *simulated TPU* of ``SIMULATED_REPLICAS`` logical devices. Around
it, the replica count is checked, another count once TensorFlow has started is a clear error,
and the CPU behaves more like a TPU (:mod:`helpers.simulation`). ``train_tpu`` is imported inside
the functions: importing it sets ``KERAS_BACKEND=tensorflow``, and lesson 12_keras3_on_jax runs
Keras on JAX in a process that imports ``helpers``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tpucheck import host as versions
from tpucheck import runtime

__all__ = [
    "SIMULATED_REPLICAS",
    "SIMULATED_TPU",
    "connect",
    "describe",
    "StrategyError",
    "StrategyInfo",
]

SIMULATED_TPU = "simulated TPU"
# Replicas of the simulated TPU: the cores of the single-host TPUs the lessons are written for
# (a v5e-8, a v3-8). The one place this number is written; everything else reads it.
SIMULATED_REPLICAS = 8
_CONNECTED: list = []  # the strategy connect() returned last, for describe()


class StrategyError(RuntimeError):
    """The strategy asked for cannot be built in this kernel; the message says what to do."""


def connect(simulated_replicas: int = SIMULATED_REPLICAS):
    """``train_tpu.connect(simulated_replicas)``: the strategy for this machine, made once.

    ``simulated_replicas``: replicas of the simulated TPU when only a CPU is present (1: one
    CPU device). Calling again with the same count returns the same strategy; another count
    on a CPU raises :class:`StrategyError` (TensorFlow cannot change its devices once started).
    """
    if isinstance(simulated_replicas, bool) or not isinstance(simulated_replicas, int):
        raise TypeError(f"simulated_replicas must be an int, got {simulated_replicas!r}")
    if simulated_replicas < 1:
        raise ValueError(
            f"simulated_replicas must be at least 1, got {simulated_replicas}; "
            "use 8 to simulate one TPU v5e-8 or v3-8 host."
        )

    import train_tpu

    if not train_tpu.tpu_signs():
        from helpers import simulation  # here: python -m helpers.simulation imports helpers first

        simulation.start()  # before the strategy: its reduce and its iterators as on a TPU
    try:
        strategy = train_tpu.connect(simulated_replicas)  # the one made before, if any
    except train_tpu.UsageError as err:  # one sentence that says what to do
        unusable = runtime.TPUUnusableError if train_tpu.tpu_signs() else StrategyError
        raise unusable(str(err)) from None
    _CONNECTED[:] = [strategy]
    devices = strategy.extended.worker_devices
    on_cpu = all("CPU" in d.upper().rpartition("/device:")[2] for d in devices)
    if on_cpu and strategy.num_replicas_in_sync != simulated_replicas:
        raise StrategyError(
            f"This kernel already runs a {_kind(strategy)} with {strategy.num_replicas_in_sync} "
            "replica(s), and TensorFlow cannot change its devices once it has started. Restart "
            "the kernel to use other settings."
        )
    return strategy


def _kind(strategy) -> str:
    """ "TPU", "several GPUs", "simulated TPU" or "one device": what ``strategy`` runs on."""
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "TPU"
    devices = list(strategy.extended.worker_devices)
    if len(devices) == 1:
        return "one device"
    if all("GPU" in d.upper().rpartition("/device:")[2] for d in devices):
        return "several GPUs"
    return SIMULATED_TPU


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
    """Describe ``strategy`` (default: the one connected in this process)."""
    import keras
    import tensorflow as tf

    if strategy is None:
        strategy = _CONNECTED[0] if _CONNECTED else None
        if strategy is None:
            raise StrategyError("connect() has not been called in this kernel yet")
    dist = versions.tensorflow_distribution()
    found = _kind(strategy)
    return StrategyInfo(
        kind=found,
        replicas=strategy.num_replicas_in_sync,
        devices=list(strategy.extended.worker_devices),
        platform=runtime.detect_platform(),
        tensorflow=f"{tf.__version__} ({dist[0] if dist else 'unknown build'})",
        keras=keras.__version__,
        tpu=os.environ.get("TPU_NAME", "local") if found == "TPU" else None,
    )
