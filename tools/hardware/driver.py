"""The hardware run on a TPU host: the route, the lessons, the self-test, and one record.

    python -m tools.hardware.driver --platform kaggle --out OUT --commit SHA --run-id ID \\
        [--smoke | --quick] [--only NAME ...]

Run from a checkout of the commit under test; everything goes into ``OUT``. The route is
installed as the lessons' setup cell does (``tpucheck.runtime``; ``local`` installs nothing);
each lesson runs in a fresh kernel (``tools/run_notebooks.py``) that imports the TensorFlow just
installed, so this process never imports TensorFlow. Exit status 0 when every step passed, else
1; the last line printed is the record's path.
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
# What tools/run_notebooks.py and the lessons need beyond TensorFlow and Keras, at the pins of
# requirements-tools.txt (a TPU image has some of them at other versions, or none).
RUNNER_PACKAGES = ["papermill", "nbclient", "nbformat", "ipykernel", "xprof"]
QUICK_LESSON = "tpu_detection_and_connection"
QUICK = f"the route, lesson {QUICK_LESSON}, the self-test"


def streamed(command: list[str], log: Path, **kwargs) -> int:
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


def _step(name: str, status: str, began: float, detail: str) -> dict:
    seconds = round(time.perf_counter() - began, 1)
    return {"step": name, "status": status, "seconds": seconds, "detail": detail}


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
    pins = ["-c", str(ROOT / "requirements-tools.txt"), *RUNNER_PACKAGES]
    if streamed([*pip, *pins], log) or streamed([*pip, "--no-deps", "-e", str(ROOT)], log):
        raise SystemExit(f"pip failed: see {log}")
    return taken, _step("route", status, began, detail)


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


def build_record(args, route: str | None, wall: float, steps: list[dict]) -> dict:
    """``record.json`` from what the steps left in ``args.out`` (and the ``steps`` timed)."""
    summary = records.read_json(args.out / "lessons" / "summary.json")
    report = records.read_json(args.out / "self-test" / "tpu-self-test.json") or None
    env = (report or {}).get("environment", {})
    dist = versions.tensorflow_distribution() or (None, None)
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
        "tensorflow": dist[1],
        "tensorflow_distribution": dist[0],
        "keras": versions.installed("keras"),
        "libtpu": versions.installed("libtpu", "libtpu-nightly"),
        "route": route,
        "lessons": [
            {
                "notebook": row["notebook"],
                "status": row["status"],  # never "cached": the driver asks for no cache
                "seconds": row["seconds"],
                "headline": row.get("error") or row.get("headline", ""),
            }
            for row in summary.get("rows", [])
        ],
        "selftest": report and {"passed": report["passed"], "figures": selftest_figures(report)},
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
    mode.add_argument("--quick", action="store_true", help=QUICK)
    parser.add_argument("--only", action="append", default=[], help="a lesson's name or number")
    parser.add_argument("--cell-timeout", type=int, default=1800)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    out = args.out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    mode = f" (quick: {QUICK})" if args.quick else ""
    print(f"Hardware run {args.run_id} on {args.platform}{mode}, commit {args.commit}", flush=True)
    route, installed = install(args.platform, out)
    env = processes.child_env({"PYTHONPATH": str(ROOT)}, cpu_only=False)
    smoke = ["--smoke"] if args.smoke else []
    only = args.only or ([QUICK_LESSON] if args.quick else [])

    def run_step(name: str, command: list[str], log: str, detail: str = "") -> dict:
        """``command`` as a timed step; its detail says how it exited unless ``detail`` is given."""
        started = time.perf_counter()
        code = streamed(command, out / log, env=env, cwd=ROOT)
        detail = detail or f"python {' '.join(command[1:])} exited {code}"
        return _step(name, "failed" if code else "passed", started, detail)

    lessons = [sys.executable, str(ROOT / "tools" / "run_notebooks.py"), "--out"]
    lessons += [str(out / "lessons"), "--cell-timeout", str(args.cell_timeout), *smoke]
    lessons += [f"--only={n}" for n in only]
    steps = [installed, run_step("lessons", lessons, "lessons.log", ", ".join(only) or "all")]
    selftest = [sys.executable, "-m", "tpucheck", "selftest", "--out", str(out / "self-test")]
    streamed([*selftest, *smoke], out / "self-test.log", env=env, cwd=ROOT)
    if args.quick:  # the reference script, as a learner first runs it
        script = [sys.executable, "-m", "train_tpu", "--smoke"]
        steps.append(run_step("reference script", script, "reference-script.log"))
    freeze = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True)
    (out / "pip-freeze.txt").write_text(freeze.stdout, encoding="utf-8")
    record = build_record(args, route, time.perf_counter() - began, steps)
    (out / "devices.json").write_text(json.dumps(record["devices"], indent=2) + "\n")
    path = out / "record.json"
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    failed = records.failures(record)
    print(f"Failed: {', '.join(failed)}" if failed else "Every step run passed.")
    print(path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
