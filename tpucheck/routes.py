"""Install routes: which TensorFlow can drive a TPU on this platform and Python, and how to get it.

``RELEASES`` (the ``tensorflow-tpu`` builds worth installing, their wheels' Pythons read with
``pip install --dry-run --python-version X.Y``, and ``libtpu``) and ``PLATFORMS`` (what Colab,
Kaggle and Cloud TPU VMs ship) cite their sources. :func:`choose_route` is pure, so a setup cell
never runs a pip command that cannot resolve here."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

# The Pythons the collection supports, oldest first: `make sync` writes them from pyproject.toml
# (requires-python and newest_python). The routes are checked for these and the next one.
SUPPORTED_PYTHONS = ("3.10", "3.11", "3.12", "3.13")
PYTHONS_CHECKED = (*SUPPORTED_PYTHONS, f"3.{int(SUPPORTED_PYTHONS[-1].split('.')[1]) + 1}")


@dataclass(frozen=True)
class Fact:
    """One statement the routes rely on, with where it comes from."""

    text: str
    source: str
    verified_on_hardware: bool = False

    def label(self) -> str:
        seen = "verified on hardware" if self.verified_on_hardware else "unverified on hardware"
        return f"{self.text} ({seen}; source: {self.source})"


@dataclass(frozen=True)
class TPURelease:
    """A ``tensorflow-tpu`` release and the ``libtpu`` to install with it."""

    tensorflow: str
    pythons: tuple[str, ...]  # the CPython versions with a wheel on PyPI
    libtpu: str  # the libtpu version to end up with
    libtpu_pinned_by_wheel: bool  # True: the wheel pins it exactly; False: we must pin it
    facts: tuple[Fact, ...] = ()

    @property
    def requirement(self) -> str:
        return f"tensorflow-tpu=={self.tensorflow}"

    def install_args(self) -> list[str]:
        """The arguments after ``pip install``."""
        pin = [] if self.libtpu_pinned_by_wheel else [f"libtpu=={self.libtpu}"]
        return [self.requirement, *pin]

    @property
    def verified_on_hardware(self) -> bool:
        return bool(self.facts) and all(f.verified_on_hardware for f in self.facts)


@dataclass(frozen=True)
class Platform:
    """What a hosted TPU platform ships and how a user changes it."""

    name: str
    label: str
    hardware: str
    python: str  # the Python its TPU image runs today
    tensorflow_shipped: str
    restart: str  # the menu command that restarts the kernel
    installs_automatically: bool  # the setup cell installs the route here (hosted runtimes)
    remove_first: tuple[str, ...] = ()  # builds that collide with tensorflow-tpu
    other_python: str = ""  # what to do when this platform's Python has no route
    facts: tuple[Fact, ...] = ()
    cores: int = 0  # TPU cores (TensorFlow devices, replicas) of its TPU; 0: varies


RELEASES: tuple[TPURelease, ...] = (
    # Preferred: the wheel pins its libtpu exactly, so pip cannot pair it with another one.
    TPURelease(
        tensorflow="2.19.1",
        pythons=("3.9", "3.10", "3.11", "3.12"),
        libtpu="0.0.10",
        libtpu_pinned_by_wheel=True,
        facts=(
            Fact(
                "tensorflow-tpu 2.19.1 has wheels for CPython 3.9 to 3.12 only and requires "
                "libtpu==0.0.10 and numpy<2.2",
                "PyPI metadata, checked with pip install --dry-run --python-version (Nov 2026)",
            ),
            Fact(
                "Keras pins tensorflow-tpu==2.19.1 as 'the last version of the TensorFlow that "
                "supports TPUs'; its own TPU CI runs the JAX backend only",
                "keras-team/keras requirements-tensorflow-tpu.txt (keras-team/keras#21974) and "
                ".github/workflows/tpu_tests.yml",
            ),
        ),
    ),
    # The only build with a Python 3.13 wheel. Its wheel asks for libtpu~=0.0.14, which lets pip
    # take the newest libtpu; we pin the release its requirement names instead.
    TPURelease(
        tensorflow="2.20.0",
        pythons=("3.9", "3.10", "3.11", "3.12", "3.13"),
        libtpu="0.0.14",
        libtpu_pinned_by_wheel=False,
        facts=(
            Fact(
                "tensorflow-tpu 2.20.0 has wheels up to CPython 3.13 (none for 3.14) and "
                "requires libtpu~=0.0.14, so pip alone installs the newest libtpu",
                "PyPI metadata, checked with pip install --dry-run --python-version (Nov 2026)",
            ),
            Fact(
                "tensorflow-tpu 2.20 beside a newer libtpu failed with 'No TPU platform found', "
                "so Kaggle stopped pre-installing it",
                "Kaggle/docker-python#1499 (commit 3e031bac, Sept 2025)",
            ),
            Fact(
                "tensorflow-tpu 2.20.0 with libtpu 0.0.14 drives a TPU: 0.0.14 is the lower bound "
                "of the wheel's own requirement and the NEXT_LIBTPU_VERSION of TensorFlow's "
                "setup.py during the 2.20 cycle; no report of this pair on a TPU was found",
                "tensorflow/tensorflow tensorflow/tools/pip_package/setup.py (master, 2.20 cycle)",
            ),
        ),
    ),
)

NEWEST_TPU_TENSORFLOW = "2.20.0"  # there is no tensorflow-tpu 2.21
# The newest libtpu on the package index when the routes were last checked (tools/platforms.py
# says when it moves): what pip takes for a tensorflow-tpu that does not pin libtpu exactly.
LIBTPU_NEWEST_SEEN = "0.0.52"

_JAX_WAY = (
    "or train with Keras 3 on the JAX backend, which the TPU image ships ready to use "
    "(keep TensorFlow out of that process)"
)

PLATFORMS: dict[str, Platform] = {
    "colab": Platform(
        name="colab",
        label="Colab, TPU runtime",
        hardware="v5e-1 (one TPU core); v6e-1 on paid tiers (one core, unverified)",
        python="3.13",
        cores=1,
        tensorflow_shipped="none",
        restart="Runtime > Restart session",
        installs_automatically=True,
        other_python=(
            "Colab's Command Palette has a 'Change runtime version' command (per session) that "
            "offers runtime 26.07 with Python 3.12, where tensorflow-tpu 2.19.1 installs; Colab "
            "publishes a TPU package list for 26.07, but this project could not confirm the "
            "switch on a TPU runtime (googlecolab/colabtools#6081). Otherwise use a Cloud TPU VM, "
            + _JAX_WAY
            + "."
        ),
        facts=(
            Fact("the free TPU is a v5e-1 TPU VM", "googlecolab/colabtools#5566"),
            Fact(
                "eligible (paid) accounts may choose a v6e-1 (Trillium): the same image, Python "
                "and route, one chip with one core, 32 GB HBM and 918 bf16 TFLOPs against the "
                "v5e's 16 GB and 197 TFLOPs; whether tensorflow-tpu 2.20.0 drives a v6e is "
                "unverified",
                "googlecolab/colab-vscode (accelerators V5E1, V6E1; #63); "
                "cloud.google.com/tpu/docs/v6e and /tpu/docs/v5e",
            ),
            Fact(
                "the TPU runtime has no TensorFlow since March 2025", "googlecolab/colabtools#5164"
            ),
            Fact(
                "the TPU runtime runs Python 3.13.15 since August 2026, with jax 0.7.2 and "
                "libtpu 0.0.21.1; runtime versions 26.07 and 26.04 ran Python 3.12",
                "googlecolab/colabtools#6081 and googlecolab/backend-info (pip-freeze.tpu.txt)",
            ),
        ),
    ),
    "kaggle": Platform(
        name="kaggle",
        label="Kaggle, TPU VM v5e-8",
        hardware="v5e-8 (8 TPU cores)",
        python="3.12",
        cores=8,
        tensorflow_shipped="tensorflow-cpu 2.20.0 (cannot use the TPU)",
        restart="Run > Restart & clear cell outputs",
        installs_automatically=True,
        remove_first=("tensorflow", "tensorflow-cpu"),
        other_python=(
            "Kaggle's TPU image chooses the Python; " + _JAX_WAY + ", or use a Cloud TPU VM."
        ),
        facts=(
            Fact(
                "the TPU image is Python 3.12 with tensorflow-cpu 2.20.0 beside jax, torch_xla "
                "and libtpu 0.0.17, and sets ISTPUVM=1; its TPU build of TensorFlow was removed "
                "in Sept 2025",
                "Kaggle/docker-python tpu/config.txt, tpu/requirements.in, tpu/Dockerfile; #1499",
            ),
            Fact(
                "installing a TPU build replaces the image's libtpu, so JAX and torch_xla "
                "cannot use the TPU in that session",
                "pip resolves tensorflow-tpu 2.19.1 to libtpu==0.0.10",
            ),
        ),
    ),
    "cloud-tpu-vm": Platform(
        name="cloud-tpu-vm",
        label="Google Cloud TPU VM",
        hardware="any TPU slice",
        python="the image's",
        tensorflow_shipped="TensorFlow from the tpu-vm-tf-X.Y.Z-pjrt runtime image",
        restart="restart the Python process",
        installs_automatically=False,
        other_python=(
            "Create the VM from a tpu-vm-tf-X.Y.Z-pjrt runtime image, which brings its own "
            "TensorFlow (this project found none newer than 2.18 documented), " + _JAX_WAY + "."
        ),
        facts=(
            Fact(
                "TensorFlow TPU VMs are created from tpu-vm-tf-X.Y.Z[-pod]-pjrt runtime images; "
                "v5e, v5p and v6e support TensorFlow 2.15 and later",
                "cloud.google.com/tpu/docs/runtimes and /tpu/docs/supported-versions",
            ),
        ),
    ),
}

OTHER = Platform(
    name="other",
    label="any other TPU host",
    hardware="a TPU",
    python="yours",
    tensorflow_shipped="whatever is installed",
    restart="restart the Python process or Jupyter kernel",
    installs_automatically=False,
    other_python=(
        f"Use Python {SUPPORTED_PYTHONS[0]} to {SUPPORTED_PYTHONS[-1]} (a virtual environment), "
        + _JAX_WAY
        + "."
    ),
)


class NoRoute(RuntimeError):
    """No TPU build of TensorFlow has a wheel for this Python; the message says the way out."""


@dataclass(frozen=True)
class Route:
    """How to get a TensorFlow that drives the TPU on one platform and Python."""

    platform: str
    python: str
    release: TPURelease
    commands: tuple[str, ...]
    restart: str
    installs_automatically: bool
    notes: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        return f"{self.platform}/py{self.python}/tensorflow-tpu-{self.release.tensorflow}"

    @property
    def verified_on_hardware(self) -> bool:
        return self.release.verified_on_hardware

    def describe(self) -> str:
        seen = "verified" if self.verified_on_hardware else "unverified"
        lines = [
            f"{self.name} ({seen} on TPU hardware)",
            *(f"  $ {c}" for c in self.commands),
            f"  then restart: {self.restart}",
            *(f"  note: {n}" for n in self.notes),
        ]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "platform": self.platform,
            "python": self.python,
            "tensorflow": self.release.requirement,
            "libtpu": self.release.libtpu,
            "commands": list(self.commands),
            "restart": self.restart,
            "verified_on_hardware": self.verified_on_hardware,
            "notes": list(self.notes),
        }


def python_version(version_info=None) -> str:
    """``"3.13"`` for the running interpreter (or for ``version_info``)."""
    info = sys.version_info if version_info is None else version_info
    return f"{info[0]}.{info[1]}"


def choose_route(platform: str = "other", python: str | None = None) -> Route:
    """The install route for ``platform`` (``host.detect_platform``'s name; unknown: ``OTHER``)
    and ``python`` (default: this one); :class:`NoRoute` when no TPU build has a wheel for it."""
    python = python or python_version()
    where = PLATFORMS.get(platform, OTHER)
    candidates = [r for r in RELEASES if python in r.pythons]  # preferred first
    if not candidates:
        working = sorted(
            {p for r in RELEASES for p in r.pythons}, key=lambda v: tuple(map(int, v.split(".")))
        )
        raise NoRoute(
            f"No TPU build of TensorFlow has a wheel for Python {python} "
            f"(tensorflow-tpu {RELEASES[0].tensorflow} supports Python {working[0]} to "
            f"{RELEASES[0].pythons[-1]}; {NEWEST_TPU_TENSORFLOW}, the last release, up to "
            f"{working[-1]}). Nothing was installed. On {where.label}: {where.other_python}"
        )
    release = candidates[0]
    commands = []
    if where.remove_first:
        commands.append("pip uninstall -y " + " ".join(where.remove_first))
    commands.append("pip install " + " ".join(release.install_args()))
    notes = []
    if not release.libtpu_pinned_by_wheel:
        notes.append(
            f"libtpu is pinned to {release.libtpu}: the wheel's own requirement would let pip "
            "take the newest libtpu, a pairing reported to fail with 'No TPU platform found'"
        )
    if platform in ("colab", "kaggle"):
        notes.append(
            "this replaces the image's libtpu: JAX cannot use the TPU in this runtime until it "
            "is reset"
        )
    return Route(
        platform=where.name,
        python=python,
        release=release,
        commands=tuple(commands),
        restart=where.restart,
        installs_automatically=where.installs_automatically,
        notes=tuple(notes),
    )


def route_table(pythons: tuple[str, ...] = PYTHONS_CHECKED) -> list[dict]:
    """Every platform x Python pair with its route or the reason there is none (README, 01)."""
    rows = []
    for platform in (*PLATFORMS, OTHER.name):
        for python in pythons:
            try:
                route = choose_route(platform, python)
                row = {
                    "commands": " && ".join(route.commands),
                    "tensorflow": route.release.tensorflow,
                }
            except NoRoute:
                row = {"commands": "", "tensorflow": None}
            ships = PLATFORMS.get(platform, OTHER).python == python
            rows.append({"platform": platform, "python": python, "platform_ships_it": ships, **row})
    return rows


def markdown_table(verified: dict[str, str] | None = None) -> str:
    """The platforms' routes as a Markdown table, every claim labelled; ``verified`` gives the
    "verified on a TPU" words of a platform's route (else "no"; ``tools/hardware/records.py``)."""
    verified = verified or {}
    lines = [
        "| platform | TPU | Python | TensorFlow it ships | what to do | verified on a TPU |",
        "|---|---|---|---|---|---|",
    ]
    for platform in PLATFORMS.values():
        if platform.python[0].isdigit():
            try:
                route = choose_route(platform.name, platform.python)
                todo = "<br>".join(f"`{c}`" for c in route.commands)
                todo += f", then restart ({route.restart})"
            except NoRoute:
                todo = platform.other_python
        else:
            todo = "use the image's TensorFlow (nothing to install)"
        lines.append(
            f"| {platform.label} | {platform.hardware} | {platform.python} | "
            f"{platform.tensorflow_shipped} | {todo} | {verified.get(platform.name, 'no')} |"
        )
    lines += ["", "| Python | tensorflow-tpu | libtpu | source |", "|---|---|---|---|"]
    for python in PYTHONS_CHECKED:
        release = next((r for r in RELEASES if python in r.pythons), None)
        if release is None:
            lines.append(f"| {python} | none: no TPU build has a wheel | | PyPI (checked by pip) |")
            continue
        pin = "pinned by the wheel" if release.libtpu_pinned_by_wheel else "pinned by this route"
        lines.append(
            f"| {python} | {release.tensorflow} | {release.libtpu} ({pin}) | "
            f"PyPI (checked by pip); unverified on hardware |"
        )
    return "\n".join(lines)


def _record_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tpu-field-guide" / "install-route.json"


def record_installed(route: Route, path: Path | None = None) -> Path:
    """Remember that ``route`` was installed here, for the self-test's report after a restart."""
    path = path or _record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {**route.to_dict(), "python_executable": sys.executable}
    path.write_text(json.dumps(record, indent=2), encoding="utf-8")
    return path


def installed_route(path: Path | None = None) -> dict | None:
    """The route :func:`record_installed` saved for this interpreter, or None."""
    path = path or _record_path()
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if record.get("python_executable") == sys.executable else None
