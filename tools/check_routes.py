"""Check the install routes of ``tpucheck.routes`` against the package index, installing nothing.

    python tools/check_routes.py        # make check-routes; CI runs it once

It asks pip whether each ``tensorflow-tpu`` release of ``routes.RELEASES`` has a wheel for each
Python of ``routes.PYTHONS_CHECKED`` (the release's ``pythons`` must agree), then resolves every
route's ``pip install`` arguments with their dependencies and reports the libtpu pip would pick
without the route's pin. Everything is ``pip install --dry-run --target TMP --python-version X.Y``:
TPU builds must never be installed on a machine without a TPU (see README).
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tpucheck import routes  # noqa: E402


def dry_run(args: list[str], python: str, *, deps: bool) -> dict | None:
    """pip's install report for ``args`` on ``python``, or None when it does not resolve."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [
            *(sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed"),
            *("--only-binary=:all:", "--python-version", python, "--target", f"{tmp}/target"),
            *("--report", str(report), *([] if deps else ["--no-deps"]), *args),
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            if "No matching distribution" not in done.stderr:
                raise RuntimeError(f"pip failed for {args} on {python}:\n{done.stderr[-2000:]}")
            return None
        return json.loads(report.read_text())


def wheel_pythons(versions: list[str]) -> dict[str, list[str]]:
    """For each ``tensorflow-tpu`` version, the Pythons of ``routes.PYTHONS_CHECKED`` it has a
    wheel for. The pip calls mostly wait on the index, so they run side by side."""
    pairs = [(version, python) for version in versions for python in routes.PYTHONS_CHECKED]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        reports = list(
            pool.map(lambda p: dry_run([f"tensorflow-tpu=={p[0]}"], p[1], deps=False), pairs)
        )
    found: dict[str, list[str]] = {version: [] for version in versions}
    for (version, python), report in zip(pairs, reports, strict=True):
        if report is not None:
            found[version].append(python)
    return found


def versions(report: dict) -> dict[str, str]:
    return {
        i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"]
        for i in report["install"]
    }


def main() -> int:
    problems = []
    print("Wheels by Python (tensorflow-tpu, --no-deps):")
    wheels = wheel_pythons([release.tensorflow for release in routes.RELEASES])
    for release, python in [(r, p) for r in routes.RELEASES for p in routes.PYTHONS_CHECKED]:
        has_wheel, claimed = python in wheels[release.tensorflow], python in release.pythons
        mark = "ok " if has_wheel == claimed else "BAD"
        print(f"  {mark} {release.requirement:<24} Python {python}: wheel={has_wheel}")
        if has_wheel != claimed:
            problems.append(f"{release.requirement} on {python}: table says {claimed}")

    print("Routes resolved with their dependencies:")
    unique = {}
    for row in routes.route_table():
        if row["tensorflow"] is not None:
            route = routes.choose_route(row["platform"], row["python"])
            install = route.commands[-1].split()[2:]  # after "pip install"
            unique.setdefault((tuple(install), route.python), route)

    def resolve(item):
        (install, python), route = item
        report = dry_run(list(install), python, deps=True)
        bare = None
        if report is not None and not route.release.libtpu_pinned_by_wheel:
            bare = dry_run([route.release.requirement], python, deps=True)
        return report, bare

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        resolved = list(pool.map(resolve, unique.items()))
    for ((install, python), route), (report, bare) in zip(unique.items(), resolved, strict=True):
        command = " ".join(install)
        if report is None:
            problems.append(f"{command} does not resolve on Python {python}")
            print(f"  BAD {command} on Python {python}: does not resolve")
            continue
        got = versions(report)
        print(
            f"  ok  {command} on Python {python}: tensorflow-tpu "
            f"{got.get('tensorflow-tpu')}, libtpu {got.get('libtpu')}, keras {got.get('keras')}, "
            f"numpy {got.get('numpy')}"
        )
        if got.get("libtpu") != route.release.libtpu:
            problems.append(f"{route.name}: pip picks libtpu {got.get('libtpu')}")
        if not route.release.libtpu_pinned_by_wheel:
            newest = versions(bare).get("libtpu") if bare else None
            print(f"      without the pin pip would take libtpu {newest}")

    if problems:
        print("\nThe route table disagrees with the package index:", *problems, sep="\n  ")
        return 1
    print("\nEvery route resolves, and the table's wheel facts match the package index.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
