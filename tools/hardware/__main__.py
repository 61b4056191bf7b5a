"""``python -m tools.hardware kaggle|colab|local``: run every lesson on a TPU host, keep a record.

    python -m tools.hardware kaggle --quick    # first light: route, self-test, one lesson
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

from . import colab_lane, kaggle_lane, records
from .lane import Run, Stop, finish, head_commit


def local(run: Run, folder: Path) -> int:
    """The driver on this machine: installs nothing, its record says its devices are CPUs."""
    run.commit = head_commit()
    driver = [sys.executable, "-m", "tools.hardware.driver", "--platform", "local"]
    driver += ["--out", str(run.out), "--commit", run.commit, "--run-id", run.run_id]
    subprocess.run([*driver, *run.driver_args], cwd=records.ROOT)
    return finish(run.out / "record.json", folder, run.run_id)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.hardware", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("platform", choices=("kaggle", "colab", "local"))
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--smoke", action="store_true", help="the lessons' quick versions")
    mode.add_argument("--quick", action="store_true", help="first light: verifies the route only")
    parser.add_argument("--only", action="append", default=[], help="a lesson number prefix")
    parser.add_argument("--records", type=Path, help="where the record goes (default: see above)")
    parser.add_argument(
        "--out", type=Path, default=records.ROOT / "build" / "hardware", help="each run's outputs"
    )
    parser.add_argument("--limit-hours", type=float, help="wall-clock limit (9; 1 with --quick)")
    parser.add_argument("--poll", type=float, default=30.0, help="first status poll, seconds")
    parser.add_argument(
        "--stale-grace", type=float, default=600.0, help="kaggle: seconds an end may be stale"
    )
    parser.add_argument("--collect", default="", help="kaggle: OWNER/SLUG of an earlier run")
    parser.add_argument("--api-timeout", type=float, default=60.0, help="kaggle: request timeout")
    parser.add_argument("--api-retries", type=int, default=8, help="kaggle: retries (~27 min)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    flags = [f"--{mode}" for mode in ("smoke", "quick") if getattr(args, mode)]
    run = Run(args.platform, [*flags, *(f"--only={n}" for n in args.only)], args.out.resolve())
    folder = args.records or (
        records.LOCAL_RECORDS if args.platform == "local" else records.RECORDS
    )
    args.limit = (args.limit_hours or (1.0 if args.quick else 9.0)) * 3600
    try:
        if args.platform == "kaggle":
            return kaggle_lane.main(run, folder, args)
        if args.platform == "colab":
            return colab_lane.main(run, folder, args.limit)
        return local(run, folder)
    except Stop as stop:
        print(stop.detail, flush=True)
        print(f"No record: {stop.reason}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
