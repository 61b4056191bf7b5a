"""The hardware run, on the TPU host: route, lessons, self-test, and one record.

    python -m tools.hardware.driver --platform kaggle --out /kaggle/working/hardware-run \\
        --commit SHA --run-id ID [--smoke] [--only NN ...]

Run from a checkout of the commit under test (``hardware.kernel`` makes one on the host). In
order, each step's output in ``OUT``:

1. the platform's install route, through ``helpers.runtime.ensure_tensorflow``, the same code
   every lesson's setup cell runs, with its guard: no TPU in sight, nothing is installed (so
   ``--platform local`` installs nothing); then the helpers of this checkout (``pip install -e``)
   and the runner's own packages at the pins of requirements-tools.txt (``install.log``);
2. every lesson with the collection's runner, ``tools/run_notebooks.py``, each in a fresh kernel,
   so the TensorFlow just installed is the one every lesson imports: no restart
   (``lessons/executed``, ``lessons/summary.json``, ``lessons.log``);
3. the self-test, ``python -m helpers.selftest`` (``self-test/tpu-self-test.json``);
4. ``devices.json`` (the self-test's view of the accelerator), ``pip-freeze.txt`` and
   ``record.json`` (``hardware.records``).

Exit status: 0 every lesson passed, 1 a lesson or the self-test failed, 2 no record. The last
line printed is the record's path. This process never imports TensorFlow.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from helpers import processes, routes, runtime, versions

from . import records

__all__ = ["RUNNER_PACKAGES", "build_record", "main", "selftest_figures"]

ROOT = records.ROOT
# What tools/run_notebooks.py and the lessons need beyond TensorFlow and Keras (installed at the
# pins of requirements-tools.txt; a TPU image has some of them at other versions, or none).
RUNNER_PACKAGES = ("papermill", "nbclient", "nbformat", "ipykernel", "xprof", "scikit-learn")
PASSED = ("passed", "cached")


def _run(command: list[str], log: Path, **kwargs) -> int:
    """Run ``command``, its output both shown and appended to ``log``; return its exit status."""
    print("$", " ".join(command), flush=True)
    with (
        log.open("a", encoding="utf-8") as out,
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs
        ) as proc,
    ):
        for line in proc.stdout:
            print(line, end="", flush=True)
            out.write(line)
    return proc.returncode


def _pins(names: tuple[str, ...]) -> list[str]:
    lines = (ROOT / "requirements-tools.txt").read_text(encoding="utf-8").splitlines()
    wanted = {name.lower() for name in names}
    return [line for line in lines if line.split("==")[0].strip().lower() in wanted]


def install(platform: str, out: Path) -> str | None:
    """Step 1; returns the route installed (its name), or None when nothing had to be."""
    log = out / "install.log"
    taken = None
    try:
        runtime.ensure_tensorflow(install=platform != "local")  # local never installs a route
    except runtime.RestartRequired as done:  # installed: the lessons' fresh kernels load it
        print(done, flush=True)
        taken = (routes.installed_route() or {}).get("name")
    except runtime.TPUUnusableError as err:  # no route: run anyway, the record will say so
        print(err, flush=True)
    if platform == "local":
        return taken
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    if _run([*pip, *_pins(RUNNER_PACKAGES)], log) or _run(
        [*pip, "--no-deps", "-e", str(ROOT)], log
    ):
        raise SystemExit(f"pip failed: see {log}")
    return taken


def selftest_figures(report: dict) -> dict:
    """The self-test's speed figures worth a record: the recipes, the pipeline, the matmuls."""
    evidence = {c["key"]: c.get("evidence", {}) for c in report.get("checks", [])}
    recipes = evidence.get("recipes", {})
    rates = recipes.get("examples_per_second", {})
    figures = {
        "recipe_speedup": recipes.get("speedup"),
        "collection_examples_per_second": rates.get("collection"),
        "classic_examples_per_second": rates.get("classic"),
        "input_pipeline_speedup": evidence.get("input_pipeline", {}).get("speedup"),
        "matmul_tflops": evidence.get("matmul_rate", {}).get("tflops_total"),
    }
    return {k: v for k, v in figures.items() if v is not None}


def _read_json(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def build_record(args, route: str | None, wall: float) -> dict:
    """``record.json`` from what the steps left in ``args.out``."""
    summary = _read_json(args.out / "lessons" / "summary.json") or {"rows": []}
    report = _read_json(args.out / "self-test" / "tpu-self-test.json")
    env = (report or {}).get("environment", {})
    dist = versions.tensorflow_distribution()
    return {
        "schema": records.SCHEMA,
        "version": records.VERSION,
        "run_id": args.run_id,
        "platform": args.platform,
        "mode": "smoke" if args.smoke else "full",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": args.commit,
        "accelerator": env.get("accelerator_type", "unknown: the self-test did not run"),
        "devices": env.get("devices", []),
        "python": sys.version.split()[0],
        "tensorflow": dist[1] if dist else None,
        "tensorflow_distribution": dist[0] if dist else None,
        "keras": versions.installed("keras"),
        "libtpu": versions.installed("libtpu", "libtpu-nightly"),
        "route": route,
        "lessons": [
            {
                "notebook": row["notebook"],
                "status": "passed" if row["status"] in PASSED else row["status"],
                "seconds": row["seconds"],
                "headline": row.get("error") or row.get("headline", ""),
            }
            for row in summary["rows"]
        ],
        "selftest": report
        and {
            "passed": report["passed"],
            "verdicts": {c["key"]: c["status"] for c in report["checks"]},
            "figures": selftest_figures(report),
        },
        "wall_seconds": round(wall, 1),
    }


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", required=True, choices=("kaggle", "colab", "local"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--commit", required=True, help="the commit this checkout is")
    parser.add_argument("--run-id", required=True, help="names this run in its record")
    parser.add_argument("--smoke", action="store_true", help="the lessons' quick versions")
    parser.add_argument("--only", action="append", default=[], help="lesson number prefix")
    parser.add_argument("--cell-timeout", type=int, default=1800)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    print(f"Hardware run {args.run_id} on {args.platform}, commit {args.commit}", flush=True)
    route = install(args.platform, args.out)
    env = processes.child_env({"PYTHONPATH": str(ROOT)}, cpu_only=False)
    lessons = [sys.executable, str(ROOT / "tools" / "run_notebooks.py"), "--out"]
    lessons += [str(args.out / "lessons"), "--cell-timeout", str(args.cell_timeout)]
    lessons += [*(["--smoke"] if args.smoke else []), *(f"--only={n}" for n in args.only)]
    _run(lessons, args.out / "lessons.log", env=env, cwd=ROOT)
    selftest = [sys.executable, "-m", "helpers.selftest", "--out", str(args.out / "self-test")]
    selftest += [*(["--smoke"] if args.smoke else []), "--no-install"]
    _run(selftest, args.out / "self-test.log", env=env, cwd=ROOT)
    freeze = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True)
    (args.out / "pip-freeze.txt").write_text(freeze.stdout, encoding="utf-8")
    record = build_record(args, route, time.perf_counter() - began)
    (args.out / "devices.json").write_text(json.dumps(record["devices"], indent=2) + "\n")
    path = args.out / "record.json"
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    failed = [r["notebook"] for r in record["lessons"] if r["status"] != "passed"]
    if not record["lessons"]:
        failed.append("the lessons (the runner wrote no summary)")
    if not (record["selftest"] or {}).get("passed"):
        failed.append("the self-test")
    print(f"Failed: {', '.join(failed)}" if failed else "Every lesson and the self-test passed.")
    print(path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
