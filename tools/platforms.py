"""The platform watch: compare ``tpucheck.routes`` with what Colab, Kaggle and the package index publish.

    python tools/platforms.py                      # make platforms: the published files, online
    python tools/platforms.py --recorded DIR       # the same files, recorded in DIR
    python tools/platforms.py --recorded today     # the snapshot that stands for today (TODAY)

It reads what each platform publishes about its TPU image (:data:`SOURCES`: Colab's Python and
pip freeze in googlecolab/backend-info, Kaggle's ``tpu/config.txt`` and ``tpu/requirements.in`` in
Kaggle/docker-python) and, through pip, the releases of ``tensorflow-tpu`` and ``libtpu`` and the
Pythons each ``tensorflow-tpu`` of the routes has a wheel for (recorded: ``index.json``,
``{"tensorflow-tpu": {"VERSION": [PYTHONS]}, "libtpu": [VERSIONS]}``). Each difference is printed
with the one edit it calls for. Exit code 1 when something moved, 2 when a source cannot be read
(no network: use ``--recorded``). ``.github/workflows/platforms.yml`` runs it weekly.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tpucheck import routes  # noqa: E402

RAW = "https://raw.githubusercontent.com/{}/refs/heads/main/{}"
RECORDED = Path(__file__).resolve().parent.parent / "tests" / "data" / "platforms"
# The recorded snapshot that stands for today, which the tests and `make platforms RECORDED=today`
# read: recording a new one is a new folder in RECORDED and this name.
TODAY = "2026-11"
SOURCES = {  # file name in a recorded folder: (repository, path)
    "os-info-tpu.txt": ("googlecolab/backend-info", "os-info-tpu.txt"),
    "pip-freeze.tpu.txt": ("googlecolab/backend-info", "pip-freeze.tpu.txt"),
    "config.txt": ("Kaggle/docker-python", "tpu/config.txt"),
    "requirements.in": ("Kaggle/docker-python", "tpu/requirements.in"),
}
TENSORFLOW_BUILDS = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu")
ROUTES_FILE = "tpucheck/routes.py"


@dataclass(frozen=True)
class Published:
    """What the platforms and the index say today."""

    colab_python: str
    colab_tensorflow: str  # "none", or "tensorflow-cpu 2.20.0"
    kaggle_python: str
    kaggle_tensorflow: str
    tpu_wheels: dict[str, tuple[str, ...]]  # tensorflow-tpu version -> Pythons with a wheel
    libtpu_newest: str


@dataclass(frozen=True)
class Drift:
    """One fact that moved, and the edit that follows it."""

    what: str
    ours: str
    published: str
    edit: str

    def __str__(self) -> str:
        return (
            f"{self.what}: routes say {self.ours}, published {self.published}\n  edit: {self.edit}"
        )


def read_colab(os_info: str, freeze: str) -> tuple[str, str]:
    """Colab's TPU runtime: its Python (X.Y) and the TensorFlow it ships ("none" if absent)."""
    python = re.search(r"^Python (\d+\.\d+)", os_info, re.MULTILINE)
    if python is None:
        raise ValueError("os-info-tpu.txt names no Python")
    shipped = [
        f"{name} {version}"
        for name, version in re.findall(r"^([\w.-]+)==(\S+)", freeze, re.MULTILINE)
        if name.lower().replace("_", "-") in TENSORFLOW_BUILDS
    ]
    return python.group(1), ", ".join(shipped) or "none"


def read_kaggle(config: str, requirements: str) -> tuple[str, str]:
    """Kaggle's TPU image: its Python (X.Y) and the TensorFlow build and version it installs."""
    settings = dict(re.findall(r"^(\w+)=(\S*)", config, re.MULTILINE))
    python = re.fullmatch(r"python:(\d+\.\d+)\S*", settings.get("BASE_IMAGE", ""))
    if python is None:
        raise ValueError("tpu/config.txt has no BASE_IMAGE=python:X.Y")
    shipped = []
    for line in requirements.splitlines():
        line = line.split("#", 1)[0].strip()
        match = re.fullmatch(r"([\w.-]+)\s*==\s*(\S+)", line)
        if match and match.group(1).lower().replace("_", "-") in TENSORFLOW_BUILDS:
            version = re.sub(r"\$\{(\w+)\}", lambda m: settings.get(m.group(1), "?"), match[2])
            shipped.append(f"{match.group(1)} {version}")
    return python.group(1), ", ".join(shipped) or "none"


def _fetch(name: str, timeout: float = 15) -> str:
    repository, path = SOURCES[name]
    url = RAW.format(repository, path)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read().decode()
    except OSError as err:
        raise SystemExit(
            f"cannot read {url} ({err}): no network to GitHub here? "
            "Run with --recorded DIR on files saved from it."
        ) from None


def _pip_versions(package: str) -> list[str]:
    command = [sys.executable, "-m", "pip", "index", "versions", package]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    found = re.search(r"Available versions: (.*)", done.stdout)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"pip cannot list {package} on the package index:\n{done.stderr[-800:]}")
    return [v.strip() for v in found.group(1).split(",")]


def _index_online() -> dict:
    from check_routes import wheel_pythons  # pip install --dry-run, as make check-routes asks

    wanted = {r.tensorflow for r in routes.RELEASES} | {_pip_versions("tensorflow-tpu")[0]}
    return {"tensorflow-tpu": wheel_pythons(sorted(wanted)), "libtpu": _pip_versions("libtpu")}


def read_published(recorded: Path | None) -> Published:
    """Every source, from ``recorded`` (a folder of saved files) or online."""
    if recorded is None:
        text = {name: _fetch(name) for name in SOURCES}
        index = _index_online()
    else:
        missing = [n for n in (*SOURCES, "index.json") if not (recorded / n).exists()]
        if missing:
            raise SystemExit(f"{recorded} lacks {', '.join(missing)}")
        text = {name: (recorded / name).read_text() for name in SOURCES}
        index = json.loads((recorded / "index.json").read_text())
    colab = read_colab(text["os-info-tpu.txt"], text["pip-freeze.tpu.txt"])
    kaggle = read_kaggle(text["config.txt"], text["requirements.in"])
    wheels = {v: tuple(p) for v, p in index["tensorflow-tpu"].items()}
    return Published(*colab, *kaggle, wheels, index["libtpu"][0])


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def compare(published: Published) -> list[Drift]:
    """The facts of ``tpucheck.routes`` that differ from ``published``, each with its edit."""
    drifts = []

    def moved(what: str, ours: str, seen: str, edit: str) -> None:
        drifts.append(Drift(what, ours, seen, f"{ROUTES_FILE}: {edit}"))

    sync = "; then `make sync`, which regenerates everything that states it"
    for name, python, shipped in (
        ("colab", published.colab_python, published.colab_tensorflow),
        ("kaggle", published.kaggle_python, published.kaggle_tensorflow),
    ):
        ours, image = routes.PLATFORMS[name], f"{name}'s TPU image"
        if ours.python != python:
            moved(
                f"{image}: Python",
                ours.python,
                python,
                f'PLATFORMS["{name}"] python="{python}"{sync}',
            )
        if not ours.tensorflow_shipped.startswith(shipped):
            edit = f'PLATFORMS["{name}"] tensorflow_shipped="{shipped} ..."{sync}'
            moved(f"{image}: TensorFlow", ours.tensorflow_shipped, shipped, edit)
    newest = max(published.tpu_wheels, key=_key)
    if newest != routes.NEWEST_TPU_TENSORFLOW:
        edit = (
            f"add TPURelease(tensorflow={newest!r}, ...) to RELEASES and set "
            f"NEWEST_TPU_TENSORFLOW = {newest!r}; `make check-routes` checks its wheels"
        )
        moved("newest tensorflow-tpu", routes.NEWEST_TPU_TENSORFLOW, newest, edit)
    for release in routes.RELEASES:
        seen = published.tpu_wheels.get(release.tensorflow)
        ours = tuple(p for p in release.pythons if p in routes.PYTHONS_CHECKED)
        if seen is not None and (seen := tuple(sorted(seen, key=_key))) != ours:
            what = f"tensorflow-tpu {release.tensorflow}: Pythons with a wheel"
            edit = f"TPURelease(tensorflow={release.tensorflow!r}) pythons"
            moved(what, ", ".join(ours), ", ".join(seen), edit)
    if (libtpu := published.libtpu_newest) != routes.LIBTPU_NEWEST_SEEN:
        edit = (
            f"LIBTPU_NEWEST_SEEN = {libtpu!r}, after checking that no route takes it unpinned "
            "(tensorflow-tpu 2.20.0 pins ~=0.0.14)"
        )
        moved("newest libtpu", routes.LIBTPU_NEWEST_SEEN, libtpu, edit)
    return drifts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--recorded", type=Path, help="read saved copies of the sources here ('today': TODAY's)"
    )
    args = parser.parse_args(argv)
    if args.recorded == Path("today"):
        args.recorded = RECORDED / TODAY
    try:
        published = read_published(args.recorded)
    except SystemExit as stop:
        print(stop, file=sys.stderr)
        return 2
    drifts = compare(published)
    where = f"recorded in {args.recorded}" if args.recorded else "online"
    for drift in drifts:
        print(drift)
    if drifts:
        print(f"{len(drifts)} platform fact(s) moved ({where}).")
        return 1
    print(f"No platform fact moved ({where}): tpucheck/routes.py matches what is published.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
