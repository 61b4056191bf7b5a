"""Where is this notebook running, and can its TensorFlow drive the TPU it sees?

The checks read package metadata and :mod:`tpucheck.host` only, never TensorFlow, so they are
safe before ``connect()`` and where TensorFlow is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from tpucheck import failures, host, routes
from tpucheck.host import COLAB_ENV as COLAB_ENV  # re-exported: callers know them as runtime's
from tpucheck.host import KAGGLE_ENV as KAGGLE_ENV
from tpucheck.host import TPU_ENV_HINTS as TPU_ENV_HINTS
from tpucheck.host import detect_platform, tpu_hints


class TPUUnusableError(RuntimeError):
    """TPU hardware is present but this TensorFlow cannot use it. The message says the fix."""


class RestartRequired(RuntimeError):
    """Packages were installed into the running kernel; it must restart to load them."""


@dataclass(frozen=True)
class TPUSupport:
    """Whether the installed TensorFlow can drive a TPU: ``usable`` is True, False or None (unknown)."""

    usable: bool | None
    reason: str


def tensorflow_tpu_support() -> TPUSupport:
    """Judge from package metadata whether this TensorFlow can drive a TPU (notebook 01_tpu_detection_and_connection).

    "Unknown" (None) where unverified on hardware: ``tensorflow-tpu`` 2.20.0 beside the libtpu
    :mod:`tpucheck.routes` pins for it (with another, Kaggle saw "No TPU platform found"), and a
    plain ``tensorflow`` beside ``libtpu``, as Cloud TPU VM images ship.
    """
    dist = host.tensorflow_distribution()
    if dist is None:
        return TPUSupport(False, "TensorFlow is not installed")
    name, version = dist
    libtpu = host.installed("libtpu", "libtpu-nightly")
    if name == "tensorflow-cpu":
        return TPUSupport(False, f"tensorflow-cpu {version} is a CPU-only build")
    if name != "tensorflow-tpu":
        if libtpu is None:
            return TPUSupport(False, f"{name} {version} has no TPU support (no libtpu installed)")
        return TPUSupport(None, f"{name} {version} beside libtpu {libtpu}: may work (TPU VM image)")
    if libtpu is None:
        return TPUSupport(False, f"tensorflow-tpu {version} is installed without libtpu")
    release = next((r for r in routes.RELEASES if r.tensorflow == version), None)
    pair = f"tensorflow-tpu {version} with libtpu {libtpu}"
    if release is None:
        return TPUSupport(None, f"{pair}: not a known pairing")
    if release.libtpu_pinned_by_wheel:
        return TPUSupport(True, pair)
    if libtpu == release.libtpu:
        return TPUSupport(None, f"{pair}, the pinned pairing (unverified on hardware)")
    return TPUSupport(
        False,
        f"tensorflow-tpu {version} beside libtpu {libtpu} instead of {release.libtpu}, a pairing "
        "known to fail with 'No TPU platform found'",
    )


def unusable_tpu_message(support: TPUSupport, hints: list[str], platform: str) -> str:
    """Why the TPU cannot be used, and the fix: the install route for this platform and Python,
    or where there is none the way out."""
    found = (
        f"TPU hardware was found ({', '.join(hints)}) but TensorFlow cannot use it: "
        f"{support.reason}.\n"
    )
    fallback = (
        "This check stops instead of quietly training on the CPU. To learn on the CPU anyway, "
        "use a runtime without a TPU: there the lessons run on a simulated TPU."
    )
    try:
        route = routes.choose_route(platform)
    except routes.NoRoute as err:
        return f"{found}{err}\n{fallback}"
    commands = "\n".join(f"    {c}" for c in route.commands)
    notes = "".join(f"Note: {n}.\n" for n in route.notes)
    return (
        f"{found}Fix: run\n{commands}\n"
        f"then restart the runtime ({route.restart}) and run the notebook again.\n"
        f"{notes}{fallback}"
    )


def _pip(command: str) -> None:
    """Run one pip command of a route, shown as it runs; a failure ends with its known fix. Refused
    without TPU hardware in sight, where libtpu queries the cloud metadata service for minutes at
    every import."""
    if not tpu_hints():
        raise TPUUnusableError(
            f"Refusing to run `{command}`: no TPU hardware is in sight on this host, and a TPU "
            "build of TensorFlow (with its libtpu) belongs only on a TPU VM."
        )
    args = command.split()[1:]  # drop the leading "pip"
    print("$", command, flush=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", *args, "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
    )
    print(proc.stdout, end="", flush=True)
    if proc.returncode != 0:
        known = failures.explain(proc.stdout)
        reason = (
            f"pip's output above shows a known failure: {known}"
            if known
            else "A runtime without internet access cannot install packages: on Kaggle, turn "
            "on Internet in the notebook's settings. Then run the cell again."
        )
        raise TPUUnusableError(f"`{command}` failed (exit {proc.returncode}). {reason}")


def _no_tensorflow_message(platform: str) -> str:
    if platform not in ("colab", "kaggle"):
        return "TensorFlow is not installed. Locally: pip install -r requirements.txt"
    # Hosted CPU and GPU runtimes ship TensorFlow; one without it is most likely a TPU runtime
    # whose hardware this check did not recognise (the device-node hints are unverified).
    try:
        todo = "run\n" + "\n".join(f"    {c}" for c in routes.choose_route(platform).commands)
    except routes.NoRoute as err:
        todo = str(err)
    return (
        f"TensorFlow is not installed, and no TPU hardware was recognised on {platform}. "
        f"On a TPU runtime, {todo}\nand restart the runtime. On a CPU or GPU runtime: "
        "pip install tensorflow."
    )


def ensure_tensorflow(install: bool | None = None) -> TPUSupport:
    """Make sure the TensorFlow here fits the hardware here; run by every notebook's setup cell.

    Without a TPU in sight it only checks that TensorFlow is installed. Beside a TPU this
    TensorFlow cannot drive, it runs the install route where the platform installs automatically
    (``install=None``: Colab and Kaggle) and raises :class:`RestartRequired`; elsewhere, or with
    no route for this Python, it raises :class:`TPUUnusableError` saying what to do. It never
    falls back silently.
    """
    platform = detect_platform()
    hints = tpu_hints()
    support = tensorflow_tpu_support()
    keras = host.installed("keras")
    problem = failures.keras_distribution_problem(keras) if keras else None
    if problem:
        raise RuntimeError(f"The lessons need Keras 3.10 or newer. {problem}")
    if not hints and host.tensorflow_distribution() is None:
        raise ModuleNotFoundError(_no_tensorflow_message(platform))
    if not hints or support.usable is not False:
        return support
    try:
        route = routes.choose_route(platform)
    except routes.NoRoute:
        route = None
    if install is None:
        install = route is not None and route.installs_automatically
    if not install or route is None:
        raise TPUUnusableError(unusable_tpu_message(support, hints, platform))
    for command in route.commands:
        _pip(command)
    routes.record_installed(route)
    raise RestartRequired(
        f"Installed {route.release.requirement} (route {route.name}). Restart the runtime now "
        f"({route.restart}) and run the notebook again; this cell will then pass. The image's "
        "JAX and torch_xla cannot use the TPU in this runtime any more (jax-ml/jax#29989): run "
        "Keras on JAX (notebook 12_keras3_on_jax) in a fresh runtime."
    )
