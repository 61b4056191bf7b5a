"""The environment section of the TPU self-test report.

Everything here reads environment variables, device nodes and package metadata, so the section
can be written even when TensorFlow is missing or cannot drive the TPU. The strategy's kind,
replicas and devices are added once the connect check has run.
"""

from __future__ import annotations

import os
import platform as _platform
import sys
from pathlib import Path

from tpucheck import failures, host
from tpucheck.tpu_facts import generation_of

UNVERIFIED = "unverified on hardware"

# Labels for the Markdown table, in the order the report shows them.
LABELS = {
    "platform": "platform",
    "tpu_hints": "TPU hints",
    "accelerator_type": "accelerator type",
    "accelerator_source": "accelerator type from",
    "tpu_generation": "TPU generation (peak bf16 per chip)",
    "strategy": "strategy",
    "replicas": "replicas",
    "devices": "devices",
    "host_cpu": "host CPU",
    "cpu_count": "host CPU threads",
    "load_average": "load average (1, 5, 15 min)",
    "python": "Python",
    "tensorflow": "TensorFlow",
    "keras": "Keras",
    "libtpu": "libtpu",
    "tpucheck": "tpucheck (tpu-field-guide)",
    "known_failures_seen": "known failures seen (tpucheck.failures)",
}


def _host_cpu() -> str:
    """The CPU model from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _platform.processor() or _platform.machine() or "unknown"


def _tensorflow_device_kind() -> str | None:
    """What TensorFlow says the first TPU is, where it says anything (unverified on hardware)."""
    try:
        import tensorflow as tf

        devices = tf.config.list_physical_devices("TPU")
        if not devices:
            return None
        details = tf.config.experimental.get_device_details(devices[0])
        return details.get("device_name") or details.get("device_kind")
    except Exception:  # details are documented for GPUs only; any failure means "not known"
        return None


def accelerator(kind: str, replicas: int | None, env=None) -> tuple[str, str]:
    """``(accelerator type, where that came from)`` for the report."""
    env = os.environ if env is None else env
    if env.get("TPU_ACCELERATOR_TYPE"):
        return env["TPU_ACCELERATOR_TYPE"], "environment variable TPU_ACCELERATOR_TYPE"
    if kind == "TPU" and (found := _tensorflow_device_kind()):
        return found, f"TensorFlow device details ({UNVERIFIED})"
    if kind == "TPU" or host.tpu_hints(env):
        return "TPU (type unknown)", "TPU hints only: TPU_ACCELERATOR_TYPE is not set"
    if kind == "simulated TPU":
        return f"none: a simulated TPU of {replicas} logical CPU devices", "train_tpu.connect"
    if kind:
        return f"none found by TensorFlow ({kind})", "TensorFlow's device list"
    return "unknown (TensorFlow did not start)", "nothing"


def tpu_generation(kind: str, replicas: int | None = None):
    """The :class:`~tpucheck.tpu_facts.Generation` of this TPU, or None (no TPU, or a type the
    table does not know)."""
    if kind != "TPU" and not host.tpu_hints():
        return None
    return generation_of(accelerator(kind, replicas)[0])


def collect(strategy=None, kind: str = "", errors: list[str] = ()) -> dict:
    """The environment section as a plain dict (JSON-ready); see :data:`LABELS` for the keys."""
    dist = host.tensorflow_distribution()
    replicas = strategy.num_replicas_in_sync if strategy is not None else None
    accelerator_type, source = accelerator(kind, replicas)
    generation = tpu_generation(kind, replicas)
    load = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {
        "platform": host.detect_platform(),
        "tpu_hints": host.tpu_hints(),
        "accelerator_type": accelerator_type,
        "accelerator_source": source,
        "tpu_generation": (
            f"{generation.name} ({generation.peak_bf16_tflops:g} TFLOP/s, {UNVERIFIED})"
            if generation
            else "none"
        ),
        "strategy": kind or "none (not connected)",
        "replicas": replicas,
        "devices": list(strategy.extended.worker_devices) if strategy is not None else [],
        "host_cpu": _host_cpu(),
        "cpu_count": os.cpu_count(),
        "load_average": load,
        "python": f"{_platform.python_version()} ({sys.implementation.name})",
        "tensorflow": f"{dist[0]} {dist[1]}" if dist else "not installed",
        "keras": host.installed("keras") or "not installed",
        "libtpu": host.installed("libtpu", "libtpu-nightly") or "not installed",
        "tpucheck": host.installed("tpu-field-guide") or "not installed (run from a clone)",
        "known_failures_seen": failures.conditions_seen(
            list(errors),
            hints=host.tpu_hints(),
            tensorflow=dist[0] if dist else None,
            keras=host.installed("keras"),
        )
        or "none",
    }
