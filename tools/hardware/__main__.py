"""``python -m tools.hardware kaggle|colab|local``: run every lesson on a TPU host, keep a record.

    python -m tools.hardware kaggle --quick    # first light: the route, the self-test, lesson 01_tpu_detection_and_connection
    python -m tools.hardware kaggle            # a private kernel on Kaggle's TPU v5e-8
    python -m tools.hardware kaggle --collect OWNER/SLUG   # a run started earlier
    python -m tools.hardware colab             # `colab run --tpu v5e1` (signed in once)
    python -m tools.hardware local --smoke     # here, on the simulated TPU: a dry run

Exit status 0: a record was written and everything in it passed; 1: a record with failures; 2:
no record (the message says why). The last line printed is the record's path, or why none.
Records go to hardware/records/ (build/hardware/records/ for ``local``, never committed).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from . import colab_lane, kaggle_lane, kernel, records
from .lane import Run, Stop, finish


def local(run: Run, folder) -> int:
    """The driver on this machine: installs nothing, its record says its devices are CPUs."""
    run.commit, _ = kernel.head_commit()
    driver = [sys.executable, "-m", "tools.hardware.driver", "--platform", "local"]
    driver += ["--out", str(run.out), "--commit", run.commit, "--run-id", run.run_id]
    subprocess.run([*driver, *run.driver_args()], cwd=records.ROOT)
    return finish(run.out / "record.json", folder, run.run_id)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.hardware", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("platform", choices=("kaggle", "colab", "local"))
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--smoke", action="store_true", help="the lessons' quick versions")
    mode.add_argument(
        "--quick",
        action="store_true",
        help="first light: the route, the self-test and lesson 01_tpu_detection_and_connection only (verifies the route only)",
    )
    parser.add_argument("--only", action="append", default=[], help="a lesson number prefix")
    parser.add_argument("--records", help="where the record goes (default: see above)")
    parser.add_argument("--out", help="the folder of each run's outputs (default: build/hardware)")
    parser.add_argument(
        "--limit-hours",
        type=float,
        help="wall-clock limit of the run (default 9; 1 with --quick)",
    )
    parser.add_argument("--poll", type=float, default=30.0, help="first status poll, seconds")
    parser.add_argument(
        "--stale-grace",
        type=float,
        default=600.0,
        help="seconds an end state seen before the run started is taken for the previous run",
    )
    parser.add_argument("--collect", default="", help="kaggle: OWNER/SLUG of an earlier run")
    parser.add_argument(
        "--api-timeout", type=float, default=60.0, help="kaggle: seconds a request may take"
    )
    parser.add_argument(
        "--api-retries",
        type=int,
        default=8,
        help="kaggle: retries in a row of a failing status or download call (back-off from "
        "--poll, doubling to 5 min: about 27 min with the defaults) before the lane stops",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    run = Run(args.platform, smoke=args.smoke, only=args.only, quick=args.quick)
    if args.out:
        run.parent = Path(args.out).resolve()
    default = records.LOCAL_RECORDS if args.platform == "local" else records.RECORDS
    folder = Path(args.records) if args.records else default
    limit = (args.limit_hours or (1.0 if args.quick else 9.0)) * 3600
    try:
        if args.platform == "kaggle":
            options = kaggle_lane.Options(
                limit, args.poll, args.stale_grace, args.api_timeout, args.api_retries
            )
            return kaggle_lane.main(run, folder, options, args.collect)
        if args.platform == "colab":
            return colab_lane.main(run, folder, limit)
        return local(run, folder)
    except Stop as stop:
        print(stop.detail, flush=True)
        print(f"No record: {stop.reason}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
