"""The hardware run, on the TPU host: route, lessons, self-test, and one record.

    python -m tools.hardware.driver --platform kaggle --out /kaggle/working/hardware-run \\
        --commit SHA --run-id ID [--smoke | --quick] [--only NAME ...]

Run from a checkout of the commit under test (``hardware.kernel`` makes one on the host). In
order, each step's output in ``OUT``:

1. the platform's install route, through ``tpucheck.runtime.ensure_tensorflow``, the same code
   every lesson's setup cell runs, with its guard: no TPU in sight, nothing is installed (so
   ``--platform local`` installs nothing); then the helpers of this checkout (``pip install -e``)
   and the runner's own packages at the pins of requirements-tools.txt (``install.log``);
2. every lesson with the collection's runner, ``tools/run_notebooks.py``, each in a fresh kernel,
   so the TensorFlow just installed is the one every lesson imports: no restart
   (``lessons/executed``, ``lessons/summary.json``, ``lessons.log``);
3. the self-test, ``python -m tpucheck selftest`` (``self-test/tpu-self-test.json``);
4. ``devices.json`` (the self-test's view of the accelerator), ``pip-freeze.txt`` and
   ``record.json`` (``hardware.records``), whose ``steps`` say what each step showed and how long
   it took: the route installed, the lessons, the TPU connected, each self-test check.

``--quick`` is the first light: the route, lesson 01_tpu_detection_and_connection and the self-test (both in full), and the
reference script's ``--smoke`` run (:func:`reference_script`); its record
can verify the platform's route and nothing else (``hardware.records``).

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

from helpers import processes
from tpucheck import host as versions
from tpucheck import routes, runtime

from . import records

ROOT = records.ROOT
# What tools/run_notebooks.py and the lessons need beyond TensorFlow and Keras (installed at the
# pins of requirements-tools.txt; a TPU image has some of them at other versions, or none).
RUNNER_PACKAGES = ("papermill", "nbclient", "nbformat", "ipykernel", "xprof")
PASSED = ("passed", "cached")
QUICK_LESSONS = ("tpu_detection_and_connection",)
QUICK = f"lesson {', '.join(QUICK_LESSONS)}"
# The reference script a learner takes home: the quick run runs its smoke mode.
REFERENCE_SCRIPT = "train_tpu"


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


def _step(name: str, status: str, began: float, detail: str) -> dict:
    return {
        "step": name,
        "status": status,
        "seconds": round(time.perf_counter() - began, 1),
        "detail": detail,
    }


def install(platform: str, out: Path) -> tuple[str | None, dict]:
    """Step 1: the route installed (its name, or None when nothing had to be), and its step."""
    log = out / "install.log"
    began = time.perf_counter()
    taken, status, detail = None, "passed", "nothing to install: TensorFlow can drive what is here"
    try:
        runtime.ensure_tensorflow(install=platform != "local")  # local never installs a route
    except runtime.RestartRequired as done:  # installed: the lessons' fresh kernels load it
        print(done, flush=True)
        taken = (routes.installed_route() or {}).get("name")
        detail = f"installed {taken}"
    except runtime.TPUUnusableError as err:  # no route: run anyway, the record will say so
        print(err, flush=True)
        status, detail = "failed", str(err).splitlines()[0]
    if platform == "local":
        return taken, _step("route", "skipped", began, "local installs nothing")
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    if _run([*pip, *_pins(RUNNER_PACKAGES)], log) or _run(
        [*pip, "--no-deps", "-e", str(ROOT)], log
    ):
        raise SystemExit(f"pip failed: see {log}")
    return taken, _step("route", status, began, detail)


def reference_script(args, env: dict) -> dict:
    """The quick run's last step: ``python -m train_tpu --smoke``, as a learner first runs it."""
    began = time.perf_counter()
    command = [sys.executable, "-m", REFERENCE_SCRIPT, "--smoke"]
    code = _run(command, args.out / "reference-script.log", env=env, cwd=ROOT)
    detail = f"python -m {REFERENCE_SCRIPT} --smoke exited {code}"
    return _step("reference script", "passed" if code == 0 else "failed", began, detail)


def selftest_steps(report: dict | None) -> list[dict]:
    """The TPU connecting, then each other self-test check: its status and seconds."""
    if report is None:
        return [{"step": "connect", "status": "did not run", "seconds": 0, "detail": ""}]
    return [
        {
            "step": "connect" if c["key"] == "connect" else f"self-test: {c['key']}",
            "status": c["status"],
            "seconds": c["seconds"],
            "detail": c.get("error") or c.get("summary", ""),
        }
        for c in report.get("checks", [])
    ]


def selftest_figures(report: dict) -> dict:
    """The self-test's speed figures worth a record: the recipes, the pipeline, the matmuls."""
    evidence = {c["key"]: c.get("evidence", {}) for c in report.get("checks", [])}
    recipes = evidence.get("recipes", {})
    rates = recipes.get("examples_per_second", {})
    figures = {
        "recipe_speedup": recipes.get("speedup"),
        "collection_examples_per_second": rates.get("collection"),
        "classic_examples_per_second": rates.get("classic"),
        "input_pipeline_examples_per_second": evidence.get("input_pipeline", {}).get(
            "examples_per_second"
        ),
        "matmul_tflops": evidence.get("matmul_rate", {}).get("tflops_total"),
    }
    return {k: v for k, v in figures.items() if v is not None}


def _read_json(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def build_record(args, route: str | None, wall: float, steps: list[dict] = ()) -> dict:
    """``record.json`` from what the steps left in ``args.out`` (and the ``steps`` timed)."""
    summary = _read_json(args.out / "lessons" / "summary.json") or {"rows": []}
    report = _read_json(args.out / "self-test" / "tpu-self-test.json")
    env = (report or {}).get("environment", {})
    dist = versions.tensorflow_distribution()
    return {
        "schema": records.SCHEMA,
        "version": records.VERSION,
        "run_id": args.run_id,
        "platform": args.platform,
        "mode": "quick" if args.quick else "smoke" if args.smoke else "full",
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
            "seconds": {c["key"]: c["seconds"] for c in report["checks"]},
        },
        "steps": [*steps[:2], *selftest_steps(report), *steps[2:]],  # in the order they ran
        "wall_seconds": round(wall, 1),
    }


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", required=True, choices=("kaggle", "colab", "local"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--commit", required=True, help="the commit this checkout is")
    parser.add_argument("--run-id", required=True, help="names this run in its record")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--smoke", action="store_true", help="the lessons' quick versions")
    mode.add_argument("--quick", action="store_true", help=f"the route, {QUICK}, the self-test")
    parser.add_argument("--only", action="append", default=[], help="a lesson's name or number")
    parser.add_argument("--cell-timeout", type=int, default=1800)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    mode = f" (quick: the route, {QUICK}, the self-test)" if args.quick else ""
    print(f"Hardware run {args.run_id} on {args.platform}{mode}, commit {args.commit}", flush=True)
    route, installed = install(args.platform, args.out)
    env = processes.child_env({"PYTHONPATH": str(ROOT)}, cpu_only=False)
    only = args.only or (list(QUICK_LESSONS) if args.quick else [])
    lessons = [sys.executable, str(ROOT / "tools" / "run_notebooks.py"), "--out"]
    lessons += [str(args.out / "lessons"), "--cell-timeout", str(args.cell_timeout)]
    lessons += [*(["--smoke"] if args.smoke else []), *(f"--only={n}" for n in only)]
    step = time.perf_counter()
    code = _run(lessons, args.out / "lessons.log", env=env, cwd=ROOT)
    ran = _step("lessons", "passed" if code == 0 else "failed", step, ", ".join(only) or "all")
    selftest = [sys.executable, "-m", "tpucheck", "selftest", "--out", str(args.out / "self-test")]
    selftest += ["--smoke"] if args.smoke else []
    _run(selftest, args.out / "self-test.log", env=env, cwd=ROOT)
    steps = [installed, ran, *([reference_script(args, env)] if args.quick else [])]
    freeze = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True)
    (args.out / "pip-freeze.txt").write_text(freeze.stdout, encoding="utf-8")
    record = build_record(args, route, time.perf_counter() - began, steps)
    (args.out / "devices.json").write_text(json.dumps(record["devices"], indent=2) + "\n")
    path = args.out / "record.json"
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    failed = [r["notebook"] for r in record["lessons"] if r["status"] != "passed"]
    if not record["lessons"]:
        failed.append("the lessons (the runner wrote no summary)")
    if not (record["selftest"] or {}).get("passed"):
        failed.append("the self-test")
    failed += [s["step"] for s in steps if s["status"] == "failed" and s["step"] != "lessons"]
    print(f"Failed: {', '.join(failed)}" if failed else "Every step run passed.")
    print(path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
