"""This host, read without starting TensorFlow: its platform, its signs of TPU hardware and the
versions of what is installed. Safe where TensorFlow is missing or cannot start.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Mapping
from pathlib import Path

# Environment variables that TPU hosts set (Kaggle sets ISTPUVM; Cloud TPU VMs the others), and
# those by which a hosted notebook platform is recognised.
TPU_ENV_HINTS = ("ISTPUVM", "TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES")
COLAB_ENV = ("COLAB_RELEASE_TAG", "COLAB_GPU")
KAGGLE_ENV = ("KAGGLE_KERNEL_RUN_TYPE", "KAGGLE_URL_BASE")
# Distribution names under which TensorFlow is installed, most specific first.
TF_DISTRIBUTIONS = (
    "tensorflow-tpu",
    "tensorflow-cpu",
    "tensorflow",
    "tensorflow-intel",
    "tf-nightly",
)


def detect_platform(env: Mapping[str, str] | None = None) -> str:
    """``"colab"``, ``"kaggle"``, ``"cloud-tpu-vm"``, ``"ci"`` or ``"local"``."""
    env = os.environ if env is None else env
    if any(name in env for name in COLAB_ENV) or "google.colab" in sys.modules:
        return "colab"
    if any(name in env for name in KAGGLE_ENV):
        return "kaggle"
    if any(name in env for name in ("TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES")):
        return "cloud-tpu-vm"
    if env.get("CI", "").lower() in ("1", "true", "yes"):
        return "ci"
    return "local"


def tpu_hints(env: Mapping[str, str] | None = None, dev: str | Path = "/dev") -> list[str]:
    """The signs of TPU hardware on this host, e.g. ``["ISTPUVM=1", "/dev/accel0"]`` (none: []);
    the device nodes are what the platforms document (``/dev/accel*`` on v4 and older,
    ``/dev/vfio/N`` on v5e and newer; unverified on hardware)."""
    env = os.environ if env is None else env
    hints = [f"{name}={env[name]}" for name in TPU_ENV_HINTS if env.get(name)]
    dev = Path(dev)
    hints += sorted(str(p) for p in dev.glob("accel*"))
    if (dev / "vfio").is_dir():
        hints += sorted(str(p) for p in (dev / "vfio").iterdir() if p.name.isdigit())
    return hints


def installed(*names: str) -> str | None:
    """The version of the first of ``names`` that is installed, or None."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def tensorflow_distribution() -> tuple[str, str] | None:
    """``(distribution, version)`` of the installed TensorFlow, or None."""
    for name in TF_DISTRIBUTIONS:
        if (version := installed(name)) is not None:
            return name, version
    return None
