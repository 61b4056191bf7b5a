"""Keras 3 on JAX with ``keras.distribution`` instead of TPUStrategy (notebook 12_keras3_on_jax).

Keras and JAX are imported inside the functions (TensorFlow never): importing this module does
not fix the backend before :func:`configure` ran.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np

from helpers import loops
from tpucheck import runtime
from tpucheck.batches import per_replica_batch, positive_int

__all__ = [
    "check_device_equivalence",
    "configure",
    "donation_is_safe",
    "mesh_shape",
    "placement",
    "RestartKernel",
    "thread_pool_size",
    "train_same_batches",
]

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
# jaxlib's CPU client sizes its two thread pools from this variable, read once when JAX starts
# (``DefaultThreadPoolSize`` in openxla/xla, xla/pjrt/utils.cc; jaxlib 0.7.2 and 0.10.2 both
# read it). It is an environment variable, not an XLA flag: a jaxlib that did not know it would
# ignore it, where an unknown XLA flag ends the process.
POOL_SIZE_VARIABLE = "PJRT_NPROC"


class RestartKernel(RuntimeError):
    """This process already imported something that fixes the backend or the devices."""


def _accelerator_hints(env: Mapping[str, str] | None = None, dev: str | Path = "/dev") -> list[str]:
    """Signs of a TPU (``runtime.tpu_hints``) or an NVIDIA GPU (``/dev/nvidia0``) on this host."""
    return runtime.tpu_hints(env, dev) + sorted(str(p) for p in Path(dev).glob("nvidia[0-9]*"))


def thread_pool_size(devices: int, cores: int | None = None) -> int:
    """Threads for JAX's CPU pools so that ``devices`` simulated devices cannot starve them.

    jaxlib sizes each pool to max(cores, devices) (``GetPjRtCpuClient``, openxla/xla
    xla/pjrt/cpu/cpu_client.cc). A collective holds one thread per device until all arrive, and a
    device whose earlier work is still queued holds one more: with fewer cores than devices the
    queued work gets no thread and XLA ends the process ("Termination timeout for `all reduce`
    ... Expected 8 threads to join"). Twice the devices plus one leaves a thread for it.
    """
    positive_int("devices", devices)
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(cores or 1, 2 * devices + 1)


def configure(
    simulated_devices: int = 8,
    *,
    env: dict[str, str] | None = None,
    modules: Mapping[str, object] | None = None,
    dev: str | Path = "/dev",
) -> dict[str, str]:
    """Prepare this process for Keras on JAX; return the environment variables it set.

    Sets ``KERAS_BACKEND=jax`` and, with no TPU or GPU in sight, ``XLA_FLAGS`` for
    ``simulated_devices`` CPU devices and ``PJRT_NPROC`` (unless set) to :func:`thread_pool_size`.
    They work only before Keras and JAX are first imported: :class:`RestartKernel` when they were
    imported with other settings, or TensorFlow was (on a TPU host both would claim the TPU).
    """
    env = os.environ if env is None else env
    modules = sys.modules if modules is None else modules
    positive_int("simulated_devices", simulated_devices)
    if "tensorflow" in modules:
        raise RestartKernel(
            "TensorFlow is already imported in this process. On a TPU host TensorFlow and JAX "
            "would both claim the TPU: restart the kernel and run this notebook on its own."
        )
    wanted = {"KERAS_BACKEND": "jax"}
    if simulated_devices > 1 and not _accelerator_hints(env, dev):
        flags = env.get("XLA_FLAGS", "").split()
        kept = [flag for flag in flags if not flag.startswith(DEVICE_COUNT_FLAG + "=")]
        wanted["XLA_FLAGS"] = " ".join([*kept, f"{DEVICE_COUNT_FLAG}={simulated_devices}"])
        if POOL_SIZE_VARIABLE not in env:
            wanted[POOL_SIZE_VARIABLE] = str(thread_pool_size(simulated_devices))
    for name in ("keras", "jax"):
        if name in modules and any(env.get(k) != v for k, v in wanted.items()):
            raise RestartKernel(
                f"{name} is already imported with other settings ({', '.join(wanted)} must be "
                "set before its first import): restart the kernel."
            )
    env.update(wanted)
    return wanted


def mesh_shape(devices: int, model: int = 4) -> tuple[int, int]:
    """(batch, model) axes for ``devices``: ``model`` devices per copy when it divides, else 1."""
    if devices < 1 or model < 1:
        raise ValueError(f"need positive sizes, got devices={devices}, model={model}")
    model = model if devices % model == 0 else 1
    return devices // model, model


def placement(array) -> str:
    """How a JAX array is laid out: its partition spec (a single device has none), device count."""
    devices = len(array.sharding.device_set)
    spec = getattr(array.sharding, "spec", None)
    return f"{spec} on {devices} device(s)" if spec is not None else f"on {devices} device(s)"


# Sharded training with Keras' donated step state was right on jaxlib 0.10.2 (the main stack); on
# 0.7.2 (kaggle, colab) the 2 x 4 mesh of 12_keras3_on_jax ended with different weights in about
# half of the runs, and in none of 20 without donation. Releases in between were not checked.
DONATION_RIGHT_FROM = (0, 10)


def donation_is_safe(jaxlib_version: str | None = None) -> bool:
    """Whether this jaxlib (default: the installed one) trains sharded models right when Keras
    donates the step's state (:data:`DONATION_RIGHT_FROM`)."""
    if jaxlib_version is None:
        jaxlib_version = importlib.metadata.version("jaxlib")
    major_minor = re.findall(r"\d+", jaxlib_version)[:2]
    return tuple(int(n) for n in major_minor) >= DONATION_RIGHT_FROM


@contextlib.contextmanager
def _keras_without_donation() -> Iterator[None]:
    """Keras' JAX trainer compiles its steps without donating the state, inside the block: Keras
    has no switch, so its trainer module's ``jit`` is replaced by one that drops
    ``donate_argnums`` (a Keras without that name is left alone)."""
    import jax

    try:
        from keras.src.backend.jax import trainer
    except ImportError:
        trainer = None
    original = getattr(trainer, "jit", None)
    if original is not jax.jit:  # not the Keras this was written for (or Flax NNX's jit)
        yield
        return

    def jit_keeping_inputs(fun, **options):
        options.pop("donate_argnums", None)
        return original(fun, **options)

    trainer.jit = jit_keeping_inputs
    try:
        yield
    finally:
        trainer.jit = original


def train_same_batches(
    distribution,
    make_model: Callable,
    x: np.ndarray,
    y: np.ndarray,
    global_batch_size: int,
    *,
    steps: int,
    weights: list[np.ndarray] | None = None,
    learning_rate: float = 0.1,
):
    """Train with plain SGD under ``distribution`` on the first ``steps`` batches, in order, from
    ``weights`` when given; return the start and end weights, the loss and the weights' names."""
    import keras

    needed = steps * global_batch_size
    if len(x) < needed:
        raise ValueError(f"{steps} steps of {global_batch_size} need {needed} rows; got {len(x)}")
    with distribution.scope():
        model = make_model()
        if weights is not None:
            model.set_weights(weights)
        model.compile(
            optimizer=keras.optimizers.SGD(learning_rate),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        start = [np.array(w) for w in model.get_weights()]
        keep_inputs = contextlib.nullcontext() if donation_is_safe() else _keras_without_donation()
        with keep_inputs:
            history = model.fit(
                x[:needed], y[:needed], batch_size=global_batch_size, shuffle=False, verbose=0
            )
        end = [np.array(w) for w in model.get_weights()]
    names = [v.path for v in model.weights]
    return start, end, float(history.history["loss"][-1]), names


def check_device_equivalence(
    distribution,
    reference,
    make_model: Callable,
    x: np.ndarray,
    y: np.ndarray,
    global_batch_size: int,
    *,
    steps: int = 3,
    rtol: float = 1e-3,
) -> loops.Equivalence:
    """Train the same model under ``distribution`` and ``reference`` from the same weights on the
    same batches; compare the final weights (:class:`helpers.loops.Equivalence`)."""
    devices = len(distribution.device_mesh.devices.flatten())
    reference_devices = len(reference.device_mesh.devices.flatten())
    if devices == reference_devices:
        raise ValueError(f"both distributions use {devices} device(s): nothing to compare")
    per_replica_batch(global_batch_size, devices)
    start, multi, multi_loss, names = train_same_batches(
        distribution, make_model, x, y, global_batch_size, steps=steps
    )
    _, single, single_loss, _ = train_same_batches(
        reference, make_model, x, y, global_batch_size, steps=steps, weights=start
    )
    pair, losses = (devices, reference_devices), (multi_loss, single_loss)
    # Devices, not replicas: a sharded model has fewer copies than devices (2 on a 2 x 4 mesh).
    return loops.compare_runs(pair, steps, names, start, (multi, single), losses, rtol, "devices")
