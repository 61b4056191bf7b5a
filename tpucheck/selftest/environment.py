"""The environment section of the TPU self-test report, from environment variables, device nodes
and package metadata, so that it is written even when TensorFlow is missing or cannot drive the
TPU; the strategy's kind, replicas and devices once the connect check has run.
"""

from __future__ import annotations

import contextlib
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
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
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


def accelerator(kind: str, replicas: int | None = None) -> tuple[str, str]:
    """``(accelerator type, where that came from)`` for the report."""
    if found := os.environ.get("TPU_ACCELERATOR_TYPE"):
        return found, "environment variable TPU_ACCELERATOR_TYPE"
    if kind == "TPU" and (found := _tensorflow_device_kind()):
        return found, f"TensorFlow device details ({UNVERIFIED})"
    if kind == "TPU" or host.tpu_hints():
        return "TPU (type unknown)", "TPU hints only: TPU_ACCELERATOR_TYPE is not set"
    if kind == "simulated TPU":
        return f"none: a simulated TPU of {replicas} logical CPU devices", "train_tpu.connect"
    if kind:
        return f"none found by TensorFlow ({kind})", "TensorFlow's device list"
    return "unknown (TensorFlow did not start)", "nothing"


def collect(strategy=None, kind: str = "", errors: list[str] = ()) -> dict:
    """The environment section as a plain dict (JSON-ready); see :data:`LABELS` for the keys."""
    dist = host.tensorflow_distribution()
    replicas = strategy.num_replicas_in_sync if strategy is not None else None
    accelerator_type, source = accelerator(kind, replicas)
    chip = generation_of(accelerator_type)
    peak = f"{chip.name} ({chip.peak_bf16_tflops:g} TFLOP/s, {UNVERIFIED})" if chip else "none"
    hints, keras = host.tpu_hints(), host.installed("keras")
    tensorflow = dist[0] if dist else None
    seen = failures.conditions_seen(list(errors), hints=hints, tensorflow=tensorflow, keras=keras)
    load = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {
        "platform": host.detect_platform(),
        "tpu_hints": hints,
        "accelerator_type": accelerator_type,
        "accelerator_source": source,
        "tpu_generation": peak,
        "strategy": kind or "none (not connected)",
        "replicas": replicas,
        "devices": list(strategy.extended.worker_devices) if strategy is not None else [],
        "host_cpu": _host_cpu(),
        "cpu_count": os.cpu_count(),
        "load_average": load,
        "python": f"{_platform.python_version()} ({sys.implementation.name})",
        "tensorflow": f"{dist[0]} {dist[1]}" if dist else "not installed",
        "keras": keras or "not installed",
        "libtpu": host.installed("libtpu", "libtpu-nightly") or "not installed",
        "tpucheck": host.installed("tpu-field-guide") or "not installed (run from a clone)",
        "known_failures_seen": seen or "none",
    }
