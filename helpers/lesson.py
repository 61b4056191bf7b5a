"""What every lesson's setup cell runs after the helpers are installed: :func:`start`.

The cell itself (``tools/sync_notebooks.py`` writes it) only installs the helpers where they are
missing; :func:`start` then checks that they are this release's, quiets TensorFlow's logs
(:mod:`helpers.quiet`), checks that TensorFlow can drive the hardware here
(:func:`tpucheck.runtime.ensure_tensorflow`) or sets up Keras on JAX instead, makes
``import train_tpu`` give the collection's script (:func:`use_collections_script`), makes the
CPU a simulated TPU where there is no TPU (:mod:`helpers.simulation`), and prints one line
about what it found.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import sys
from pathlib import Path

import helpers
from helpers import jax_port, quiet, simulation
from helpers.strategy import SIMULATED_REPLICAS
from tpucheck import host as versions
from tpucheck import runtime

__all__ = [
    "ForeignHelpers",
    "ShadowedScript",
    "free_finished_models",
    "install_source",
    "start",
    "use_collections_script",
]

PROJECT = "tpu-field-guide"
# Where the helpers install from: `make sync` writes it from pyproject.toml's repository setting.
REPOSITORY = "https://github.com/tpu-field-guide/tpu-field-guide"
ONEDNN_SYSTEM_ALLOCATOR = "TF_ONEDNN_USE_SYSTEM_ALLOCATOR"


class ForeignHelpers(ImportError):
    """``import helpers`` found another release of this collection; the message says what to do."""


def install_source() -> str | None:
    """Where pip installed the helpers from, e.g. ``"main @ 1a2b3c4"``; None for a checkout."""
    try:
        text = importlib.metadata.distribution(PROJECT).read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    info = json.loads(text or "{}")
    vcs = info.get("vcs_info")
    if not vcs:
        return None  # an editable or local install: a clone of the repository
    commit = vcs.get("commit_id", "")[:7]
    return f"{vcs.get('requested_revision') or 'the default branch'} @ {commit}"


class ShadowedScript(ImportError):
    """This process already imported another ``train_tpu`` than the collection's."""


def use_collections_script(workdir: str | Path | None = None) -> str | None:
    """Make ``import train_tpu`` give the copy installed beside the helpers, not a learner's
    edited copy in ``workdir`` (default: the working directory, which Python imports from
    first); return a note when there is one. Raises :class:`ShadowedScript` when this process
    already imported another copy: only a restart can undo that.
    """
    ours = Path(helpers.__file__).resolve().parent.parent / "train_tpu.py"
    if not ours.exists():  # pragma: no cover - an install without the script
        return None
    loaded = sys.modules.get("train_tpu")
    if loaded is None:
        spec = importlib.util.spec_from_file_location("train_tpu", ours)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules["train_tpu"] = loaded
        try:
            spec.loader.exec_module(loaded)
        except BaseException:
            del sys.modules["train_tpu"]
            raise
    elif Path(loaded.__file__).resolve() != ours:
        raise ShadowedScript(
            f"This kernel imported {loaded.__file__}, not the collection's {ours}: restart the "
            "kernel and run the lesson from the top (your copy still runs as python train_tpu.py)."
        )
    theirs = Path(workdir or os.getcwd()) / "train_tpu.py"
    if theirs.exists() and theirs.resolve() != ours and theirs.read_bytes() != ours.read_bytes():
        return (
            f"Your {theirs} is not what the lessons import: they use the collection's {ours}. "
            "Run yours with !python train_tpu.py."
        )
    return None


def _check_release(release: str) -> str:
    """The helpers' version, or :class:`ForeignHelpers` when it is not ``release``."""
    version = getattr(helpers, "__version__", "")
    if version != release.lstrip("v"):
        raise ForeignHelpers(
            f"These notebooks need the helpers of {PROJECT} {release}, but `import helpers` "
            f"found version {version or 'unknown'} at {list(helpers.__path__)}. Run "
            f"`%pip install -U git+{REPOSITORY}@{release}`"
            " and restart the kernel."
        )
    source = install_source()
    if source and not source.startswith(release):
        return f"{version} (installed from {source}, not from the release tag {release})"
    return version


def _hardware(hints: list[str], simulated: int | None, jax: bool = False) -> str:
    if hints:
        return f"TPU hardware found ({', '.join(hints)})"
    if simulated is None:
        return "no TPU found"
    if simulated == 1:
        return "no TPU found: the lessons run on one CPU device (one replica, like a v5e-1)"
    unit = "CPU devices" if jax else "CPU devices, a simulated TPU"
    return f"no TPU found: the lessons run on {simulated} {unit}"


def _installed(name: str) -> str:
    return versions.installed(name) or "not installed"


def start(
    release: str,
    simulated_replicas: int | None = SIMULATED_REPLICAS,
    *,
    backend: str | None = "tensorflow",
) -> None:
    """Set up a lesson's process (see the module docstring) and print one line about it.

    ``backend`` is ``"tensorflow"`` (the lessons), ``"jax"`` (Keras on JAX, notebook 12_keras3_on_jax: no
    TensorFlow in the process) or ``None`` (a lesson with neither). Returns nothing, so the
    cell shows only the line.
    """
    version = _check_release(release)
    hints = runtime.tpu_hints()
    simulation.offline_fashion_mnist()  # Debian's copy, where there is no internet
    if backend == "tensorflow":
        if not hints:
            # oneDNN's CPU allocator never returns what it frees; the system allocator does, as
            # fast (10_tpu_readiness_check: 2.1 GiB -> 1.85). Before TensorFlow starts; inherited.
            os.environ.setdefault(ONEDNN_SYSTEM_ALLOCATOR, "1")
        quiet.quiet_tensorflow()  # before TensorFlow's first import
        runtime.ensure_tensorflow()  # stops here, with the fix, if TF can't drive the TPU
        if not hints:  # the simulated TPU, whichever connect() a lesson uses
            simulation.start()
        if note := use_collections_script():
            print(note)
        dist = versions.tensorflow_distribution()
        stack = f"{dist[0]} {dist[1]}, Keras {_installed('keras')}" if dist else "no TensorFlow"
    elif backend == "jax":
        jax_port.configure(simulated_replicas or 1)
        stack = f"Keras {_installed('keras')} on JAX {_installed('jax')}"
    elif backend is None:
        stack = "no TensorFlow or JAX needed"
    else:
        raise ValueError(f"backend is 'tensorflow', 'jax' or None, not {backend!r}")
    simulated = simulated_replicas if backend else None
    print(f"helpers {version}; {stack}; {_hardware(hints, simulated, backend == 'jax')}.")


def free_finished_models() -> int:
    """Free what the models a lesson has finished with still hold, once its cells ``del`` them;
    return how many of TensorFlow's gradient functions went.

    A notebook keeps every name it binds, and TensorFlow keeps the gradient function of each
    all-reduce a training step traced, with that step's graph and variables, for good
    (:func:`tpucheck._tf.forget_custom_gradients`): 0.1 GiB in notebook 05_bfloat16_mixed_precision.
    """
    import gc

    from tpucheck import _tf

    dropped = _tf.forget_custom_gradients()
    gc.collect()
    return dropped
