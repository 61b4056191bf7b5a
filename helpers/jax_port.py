"""Keras 3 on JAX: the collection's training with ``keras.distribution`` instead of TPUStrategy.

Notebook 12_keras3_on_jax runs the reference script's data and model parts on JAX (they never touch
TensorFlow) and keeps :class:`helpers.loops.Equivalence` (the 8-versus-1 verdict of notebook
04_custom_training_loops). What differs lives here:

- :func:`configure` runs before Keras or JAX is first imported: it selects the JAX backend,
  simulates devices on a CPU-only host and refuses a process that already imported TensorFlow
  (on a TPU host, TensorFlow and JAX in one process both try to own the TPU);
- :func:`mesh_shape`, the (batch, model) axes of a device mesh, and :func:`placement`, where an
  array lives;
- :func:`check_device_equivalence`, the same model trained under two distributions from the same
  weights on the same batches (:func:`train_same_batches`).

Nothing here imports TensorFlow; Keras and JAX are imported inside the functions that need
them, so importing this module never fixes the backend before :func:`configure` ran.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np

from helpers import loops
from tpucheck import runtime
from tpucheck.batches import per_replica_batch

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
    hints = runtime.tpu_hints(env, dev)
    hints += sorted(str(p) for p in Path(dev).glob("nvidia[0-9]*"))
    return hints


def _xla_flags(current: str, devices: int) -> str:
    """``current`` XLA_FLAGS with the host device count set to ``devices`` (others kept)."""
    kept = [flag for flag in current.split() if not flag.startswith(DEVICE_COUNT_FLAG + "=")]
    return " ".join([*kept, f"{DEVICE_COUNT_FLAG}={devices}"])


def thread_pool_size(devices: int, cores: int | None = None) -> int:
    """Threads for JAX's CPU pools so that ``devices`` simulated devices cannot starve them.

    jaxlib sizes each pool to the larger of the cores and the devices (``GetPjRtCpuClient`` in
    openxla/xla, xla/pjrt/cpu/cpu_client.cc): exactly the devices on a machine with fewer cores,
    the minimum for one collective. Each device's part of a collective holds a thread until all
    of them arrive, and the launch of a device whose earlier work is still queued holds one
    more while it waits; when those fill the pool, the queued work has no thread left, the
    last devices never arrive, and XLA ends the process after its rendezvous timeout
    ("Termination timeout for `all reduce` ... Expected 8 threads to join"). Twice the devices
    plus one leaves a thread for that work.
    """
    if devices < 1:
        raise ValueError(f"devices must be at least 1, got {devices}")
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

    Sets ``KERAS_BACKEND=jax`` and, when no TPU or GPU is in sight and ``simulated_devices`` >
    1, ``XLA_FLAGS`` so that JAX's CPU platform shows that many devices (the counterpart of
    the simulated TPU of notebook 01_tpu_detection_and_connection), and ``PJRT_NPROC`` (unless already set) to
    :func:`thread_pool_size`, so that a busy machine with fewer cores than devices does not
    deadlock in a collective. All of them only work before the first import of Keras and
    JAX, so a process that already imported them with other settings, or that imported
    TensorFlow at all, raises :class:`RestartKernel` with what to do. Calling it again with
    the same settings (a re-run cell) is fine. ``env``, ``modules`` and ``dev`` default to
    this process's; tests pass their own.
    """
    env = os.environ if env is None else env
    modules = sys.modules if modules is None else modules
    if isinstance(simulated_devices, bool) or not isinstance(simulated_devices, int):
        raise ValueError(f"simulated_devices must be an int, got {simulated_devices!r}")
    if simulated_devices < 1:
        raise ValueError(f"simulated_devices must be at least 1, got {simulated_devices}")
    if "tensorflow" in modules:
        raise RestartKernel(
            "TensorFlow is already imported in this process. On a TPU host TensorFlow and JAX "
            "would both claim the TPU: restart the kernel and run this notebook on its own."
        )
    wanted = {"KERAS_BACKEND": "jax"}
    if simulated_devices > 1 and not _accelerator_hints(env, dev):
        wanted["XLA_FLAGS"] = _xla_flags(env.get("XLA_FLAGS", ""), simulated_devices)
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
    """(batch, model) axes for ``devices``: ``model`` devices per copy when it divides, else 1.

    Taught in notebook 12.
    """
    if devices < 1 or model < 1:
        raise ValueError(f"need positive sizes, got devices={devices}, model={model}")
    model = model if devices % model == 0 else 1
    return devices // model, model


def placement(array) -> str:
    """How a JAX array is laid out: its partition spec, when it has one, and its device count.

    One device gives a ``SingleDeviceSharding``, which has no spec.
    Taught in notebook 12.
    """
    devices = len(array.sharding.device_set)
    spec = getattr(array.sharding, "spec", None)
    return f"{spec} on {devices} device(s)" if spec is not None else f"on {devices} device(s)"


# The oldest jaxlib on which sharded training with Keras' donated step state was seen to be right
# on simulated CPU devices: 0.10.2 (the main stack). On 0.7.2 (the kaggle and colab stacks) the
# 2 x 4 mesh of notebook 12_keras3_on_jax ended with different weights in about half of the runs, and in none
# of 20 without donation; the releases in between were not checked.
DONATION_RIGHT_FROM = (0, 10)


def donation_is_safe(jaxlib_version: str | None = None) -> bool:
    """Whether this jaxlib trains sharded models right when Keras donates the step's state.

    On a CPU with simulated devices, jaxlib 0.7.2 sometimes returns wrong weights from a sharded
    training step whose inputs are donated (Keras donates the model state to its compiled
    step); :data:`DONATION_RIGHT_FROM` says what was checked. ``jaxlib_version`` defaults to
    the installed one. Used by :func:`train_same_batches` (notebook 12_keras3_on_jax).
    """
    if jaxlib_version is None:
        jaxlib_version = importlib.metadata.version("jaxlib")
    parts = []
    for part in jaxlib_version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts) >= DONATION_RIGHT_FROM


@contextlib.contextmanager
def _keras_without_donation() -> Iterator[None]:
    """Keras' JAX trainer compiles its steps without donating the state, inside the block.

    Keras offers no switch for it: its trainer module compiles every step with its module-level
    ``jit``, which is replaced here by one that drops ``donate_argnums``. A Keras without that
    name is left alone.
    """
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
    """Train under ``distribution`` for ``steps`` batches, in order; return start, end, loss.

    The model is built in ``distribution.scope()`` (its variables take their layouts there),
    starts from ``weights`` when given, and trains with plain SGD, whose update is proportional
    to the gradient, on the first ``steps * global_batch_size`` rows. Where
    :func:`donation_is_safe` says no, the step keeps its inputs instead of donating them.
    Taught in notebook 12.
    """
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
    """Train the same model under ``distribution`` and ``reference``; compare the final weights.

    Both start from the weights ``make_model()`` draws under ``distribution`` and see the same
    batches. The verdict is notebook 04_custom_training_loops's :class:`helpers.loops.Equivalence`: the runs agree
    when the largest weight difference is below ``rtol`` times the largest update.
    Taught in notebook 12.
    """
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
