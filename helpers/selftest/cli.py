"""``python -m helpers.selftest``: the TPU self-test as one command (notebook 00_tpu_self_test).

    pip install -q git+<repository>@<release>     (README.md and notebook 00_tpu_self_test give the line)
    python -m helpers.selftest [--out DIR] [--smoke] [--simulated-replicas N] [--[no-]install]

Writes ``DIR/tpu-self-test.md`` and ``DIR/tpu-self-test.json``, prints the Markdown, and exits
0 when no check failed, 1 when one did, 2 when the self-test could not start.

The command is a process of its own, so it can do what a notebook cannot: when TPU hardware is
present and the installed TensorFlow cannot drive it, it runs the install route of
:mod:`helpers.routes` (where the platform installs automatically, Colab and Kaggle, or with
``--install``) and then replaces itself with a fresh Python process (``os.execv``) that imports
the new TensorFlow: no runtime restart. It never installs twice; where no route exists it stops
with the reason, and still writes a report saying so.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

from helpers import processes, routes, runtime, selftest
from helpers.selftest import environment
from helpers.selftest.base import CheckResult
from helpers.selftest.report import SelfTestReport, standard_notes
from helpers.strategy import SIMULATED_REPLICAS

__all__ = ["RESTARTED_ENV", "main", "parse", "prepare", "restart"]

# TensorFlow, Keras and matplotlib are imported inside the functions that use them, so that
# `import helpers` works where TensorFlow is missing (a fresh Colab TPU runtime) and stays quick.

# Set in the restarted process, so that it never installs a second time.
RESTARTED_ENV = "TPU_FIELD_GUIDE_SELF_TEST_RESTARTED"


def parse(argv: list[str]) -> argparse.Namespace:
    """The command's arguments."""
    parser = argparse.ArgumentParser(
        prog="python -m helpers.selftest", description="TPU self-test with a shareable report."
    )
    parser.add_argument("--out", default=".", help="folder for the report files (default: .)")
    parser.add_argument("--smoke", action="store_true", help="the quick mode CI runs")
    parser.add_argument(
        "--simulated-replicas",
        type=int,
        default=SIMULATED_REPLICAS,
        help=f"replicas of the simulated TPU when only a CPU is present (default: {SIMULATED_REPLICAS})",
    )
    parser.add_argument(
        "--install",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="install TensorFlow's TPU build if this TensorFlow cannot drive the TPU found "
        "(default: only on Colab and Kaggle)",
    )
    return parser.parse_args(argv)


def restart(argv: list[str]) -> None:
    """Replace this process by a fresh ``python -m helpers.selftest`` with the same arguments."""
    os.environ[RESTARTED_ENV] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "helpers.selftest", *argv])


def prepare(install: bool | None, argv: list[str]) -> str | None:
    """Make sure this TensorFlow fits the hardware; return why the self-test cannot run, or None.

    May install the TPU build and restart the process (see the module docstring).
    """
    restarted = os.environ.get(RESTARTED_ENV) == "1"
    try:
        runtime.ensure_tensorflow(install=False if restarted else install)
    except runtime.RestartRequired:
        taken = routes.installed_route() or {}
        print(
            f"Installed {taken.get('tensorflow', 'the TPU build')} (route {taken.get('name')}). "
            "Starting the self-test again in a fresh process: no runtime restart needed.",
            flush=True,
        )
        restart(argv)
    except (runtime.TPUUnusableError, ModuleNotFoundError) as err:
        if restarted:
            return f"Even after installing the TPU build, TensorFlow cannot use the TPU.\n{err}"
        if "Fix: run" in str(err):
            return (
                f"{err}\nOr let the self-test run those commands and start itself again: "
                "python -m helpers.selftest --install"
            )
        return str(err)
    return None


def _setup_failure(problem: str, smoke: bool, command: str):
    """A report that says why the checks could not run, with the environment around it."""
    first = selftest.DEFAULT_CHECKS[0]
    result = CheckResult(
        key=first.key,
        title=first.title,
        notebook=first.notebook,
        status="fail",
        summary=problem.strip().splitlines()[0],
        evidence={},
        seconds=0.0,
        budget_seconds=first.budget[0 if smoke else 1],
        error=problem,
    )
    return SelfTestReport(
        environment=environment.collect(),
        checks=[result],
        mode="smoke" if smoke else "full",
        seconds=0.0,
        created=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        command=command,
        notes=["The self-test stopped before its checks: see the error of the first check."]
        + standard_notes(on_tpu=False)[2:3],
    )


def main(argv: list[str] | None = None, plan=None) -> int:
    """Run the self-test; ``plan`` replaces its checks (tests plant failures with it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    command = " ".join(["python -m helpers.selftest", *argv])
    problem = prepare(args.install, argv)
    if problem:
        print(problem, flush=True)
        md, js = _setup_failure(problem, args.smoke, command).write(args.out)
        print(f"\nReport written to {md} and {js}")
        return 2
    # Before TensorFlow's first import: the one log level of helpers.processes.
    os.environ.setdefault(processes.LOG_LEVEL_VARIABLE, processes.TF_LOG_LEVEL)
    # Keras warns on every fit with a tf.data input that its shuffle argument is ignored.
    warnings.filterwarnings("ignore", message=".*shuffle=True.* was passed", category=UserWarning)
    import tensorflow as tf  # here: after the log level above, and only once the install is done

    tf.get_logger().setLevel("ERROR")
    report = selftest.run(
        smoke=args.smoke,
        simulated_replicas=args.simulated_replicas,
        plan=plan,
        progress=lambda line: print(line, flush=True),
        command=command,
    )
    md, js = report.write(args.out)
    print("\n" + report.markdown())
    print(f"Report written to {md} and {js}")
    print(report.headline().replace("**", ""))  # last: what was tested, then the verdict
    return 0 if report.passed else 1
