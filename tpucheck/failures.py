"""The errors TPU users really post, what each means, and the fix: one table, one place.

Each :class:`KnownFailure` is recognised by stable fragments of the text users posted (its
sources name the threads), in an exception, pip's output or a log line (``python -m tpucheck
explain``). Nothing here imports TensorFlow, JAX or torch_xla; none of it was verified on TPU
hardware: the texts are the users'.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class KnownFailure:
    """One failure users report: the fragments that identify it, its meaning, its fix, sources."""

    key: str
    signs: tuple[str, ...]  # regular expressions; any one of them identifies the failure
    meaning: str
    fix: str
    sources: tuple[str, ...]

    def matches(self, text: str) -> bool:
        return any(re.search(sign, text) for sign in self.signs)


FAILURES: tuple[KnownFailure, ...] = (
    KnownFailure(
        "tensorflow-without-tpu",
        (
            r"No OpKernel was registered to support Op 'ConfigureDistributedTPU'",
            r"Registered devices: \[CPU(, XLA_CPU)?\]",
        ),
        "this TensorFlow has no TPU support: a CPU build (tensorflow or tensorflow-cpu) runs on "
        "a TPU VM, as Colab's and Kaggle's TPU images are today",
        "install the TPU build of this platform's route (the route table, notebook 01_tpu_detection_and_connection) and "
        "restart the runtime; the setup cell does both on Colab and Kaggle",
        (
            "googlecolab/colabtools#5203",
            "googlecolab/colabtools#5228",
            "tensorflow/tensorflow#89797",
            "tensorflow/tensorflow#96203",
        ),
    ),
    KnownFailure(
        "libtpu-mismatch",
        (
            r"No TPU platform found",
            r"Unexpected PJRT_Plugin_Attributes_Args size",
            r"Mismatched PJRT plugin PJRT API version",
            r"Unexpected PJRT_Api size",
        ),
        "the libtpu installed was built for another framework release than this TensorFlow "
        "(pip took the newest libtpu, or another library brought its own)",
        "install the route's exact pair in a fresh runtime: tensorflow-tpu==2.19.1 (it pins "
        "libtpu 0.0.10), or tensorflow-tpu==2.20.0 with libtpu==0.0.14",
        ("Kaggle/docker-python#1499", "jax-ml/jax#29989", "google/flax#4122"),
    ),
    KnownFailure(
        "tpu-held-elsewhere",
        (
            r"The TPU is already in use",
            r"already in use by (process with pid|another process)",
            r"ioctl failed",
            r"Unable to initialize backend 'tpu'",
        ),
        "another library in this process (JAX, torch_xla) or another process already holds the "
        "TPU, and a TPU serves one process and one framework",
        "restart the runtime and run this notebook alone, without importing jax or torch_xla "
        "(never delete /tmp/libtpu_lockfile while a process holds the TPU)",
        (
            "Kaggle/docker-python#1370",
            "keras-team/keras#19448",
            "googlecolab/colabtools#4567",
            "jax-ml/jax#22070",
        ),
    ),
    KnownFailure(
        "libtpu-pin-conflict",
        (
            r"Cannot install tensorflow-tpu",
            r"depends on libtpu==\d+\.\d+\.\d+\w*",
        ),
        "an older tensorflow-tpu (2.16 to 2.18) pins a libtpu==2.x that is not on PyPI, so pip "
        "cannot resolve it",
        "install this platform's route instead (tensorflow-tpu 2.19.1 or 2.20.0, whose libtpu "
        "is on PyPI); for an older release add Google's --find-links index",
        ("googlecolab/colabtools#5209", "googlecolab/colabtools#5228"),
    ),
    KnownFailure(
        "jax-lost-libtpu",
        (
            r"cloud_tpu_init failed",
            r"has no attribute 'get_library_path'",
            r"A Google TPU may be present on this machine",
        ),
        "installing a TPU build of TensorFlow replaced the libtpu that JAX needs, so JAX fell "
        "back to the CPU",
        "run Keras on JAX (notebook 12_keras3_on_jax) in a fresh runtime where no TPU build of TensorFlow was "
        "installed",
        ("jax-ml/jax#29989", "jax-ml/jax#28811"),
    ),
    KnownFailure(
        "bare-tpu-resolver",
        (r"Please provide a TPU Name to connect to",),
        "TPUClusterResolver() was given no TPU name; on a TPU VM the name is 'local'",
        "TPUClusterResolver(tpu='local'), which the reference script's connect() uses",
        ("googlecolab/colabtools#4637", "tensorflow/tensorflow#70827"),
    ),
)

# The package a pip conflict names: "tensorflow-tpu 2.18.0 depends on libtpu==2.18.0".
_CONFLICT = re.compile(r"depends on (libtpu==[\w.]+)")


def recognise(text: str | BaseException) -> KnownFailure | None:
    """The known failure ``text`` (or an exception's message) shows, or None."""
    text = f"{type(text).__name__}: {text}" if isinstance(text, BaseException) else text
    return next((failure for failure in FAILURES if failure.matches(text)), None)


def explain(text: str | BaseException) -> str | None:
    """A sentence with the meaning, the fix and the sources of a known failure; else None."""
    failure = recognise(text)
    if failure is None:
        return None
    named = _CONFLICT.search(str(text))
    conflict = f" (the conflict: {named.group(1)})" if named else ""
    sources = ", ".join(failure.sources)
    return f"{failure.meaning}{conflict}. Fix: {failure.fix}. Reported in {sources}."


def markdown_table() -> str:
    """The table: what users see, what it means, the fix, where reported."""
    rows = ["| what you see | what it means | the fix | reported in |", "|---|---|---|---|"]
    for failure in FAILURES:
        seen = "<br>".join(f"`{_plain(sign)}`" for sign in failure.signs[:2])
        rows.append(
            f"| {seen} | {failure.meaning} | {failure.fix} | {', '.join(failure.sources)} |"
        )
    return "\n".join(rows)


def _plain(sign: str) -> str:
    """A regular expression as the text it matches, for reading."""
    text = re.sub(r"\(([^()|]*)\|[^()]*\)", r"\1", sign)  # (a|b) -> a
    text = re.sub(r"\\d\+|\\w\*|\?|\(|\)", "", text)
    return text.replace("\\", "").replace("==.", "==").strip(". ")


def _tpu_owner_in_process(
    modules: Mapping[str, object] | None = None, fd_dir: str | Path = "/proc/self/fd"
) -> str | None:
    """The library of this process that already holds the TPU, or None, found without starting
    anything: JAX's backends (``jax._src.xla_bridge._backends``), torch_xla's runtime flag (both
    private, in the releases the TPU images ship), or an open TPU device node or libtpu lock file
    among this process's file descriptors. Unverified on hardware."""
    modules = sys.modules if modules is None else modules
    bridge = modules.get("jax._src.xla_bridge")
    if "tpu" in (getattr(bridge, "_backends", None) or {}):
        return "JAX"
    xlac = getattr(modules.get("torch_xla"), "_XLAC", None)
    started = getattr(xlac, "_xla_runtime_is_initialized", None)
    if started is not None and started() and os.environ.get("PJRT_DEVICE", "TPU") == "TPU":
        return "torch_xla"
    with contextlib.suppress(OSError):  # no /proc (macOS), or not readable
        for entry in Path(fd_dir).iterdir():
            with contextlib.suppress(OSError):  # closed meanwhile
                link = os.readlink(entry)
                if re.match(r"^/dev/(accel\d+|vfio/\d+)$", link) or "libtpu_lock" in link:
                    return "this process (a library already opened the TPU)"
    return None


def conditions_seen(
    texts: list[str] = (),
    *,
    hints: list[str] | None = None,
    tensorflow: str | None = None,
    keras: str | None = None,
    modules: Mapping[str, object] | None = None,
) -> list[str]:
    """The known traps this process is in, by key, in the table's order: TPU hardware (``hints``)
    beside no TensorFlow or a CPU-only build (``tensorflow``), another library holding the TPU, a
    Keras with the multi-replica bugs, and the known failures ``texts`` (errors met) show."""
    seen = {f.key for text in texts if (f := recognise(text))}
    if hints and tensorflow in (None, "tensorflow-cpu"):
        seen.add("tensorflow-without-tpu")
    if _tpu_owner_in_process(modules) is not None:
        seen.add("tpu-held-elsewhere")
    found = [f.key for f in FAILURES if f.key in seen]
    if keras and keras_distribution_problem(keras):
        found.append("keras-multi-replica-bugs")
    return found


def keras_distribution_problem(version: str) -> str | None:
    """What goes wrong with this Keras 3 under a multi-replica strategy, or None: before 3.8
    ``fit`` summed unscaled gradients (keras-team/keras#20609); 3.7 to 3.9 summed loss and metric
    totals across replicas until they were NaN (keras-team/keras#21061, fixed in 3.10)."""
    parts = [int(p) for p in re.findall(r"\d+", version)[:2]]
    if len(parts) < 2 or parts[0] != 3 or parts[1] >= 10:
        return None
    what = (
        "losses and metrics become NaN under a multi-replica strategy (keras-team/keras#21061)"
        if parts[1] >= 7
        else "fit does not scale the loss by the replica count (keras-team/keras#20609)"
    )
    return f"Keras {version}: {what}. Fix: pip install -U 'keras>=3.10', then restart."


def main(argv: list[str] | None = None) -> int:
    """``python -m tpucheck explain [TEXT ...]``: the meaning and fix of a known failure in TEXT
    (else stdin); ``--table`` prints them all. Exit status 1 when no known failure matches."""
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--table"]:
        print(markdown_table())
        return 0
    found = explain(" ".join(argv) if argv else sys.stdin.read())
    print(found or "No known TPU failure in this text (--table lists the known ones).")
    return 0 if found else 1
