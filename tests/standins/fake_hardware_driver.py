"""Plays the driver on a stand-in Colab host: the fixture record, for the commit checked out here.

``FIELD_GUIDE_HARDWARE_DRIVER=fake_hardware_driver`` makes the host script run this instead of
``tools.hardware.driver`` (tests/test_hardware_colab.py); ``FAKE_DRIVER=crash`` writes no record.
It refuses to write a record unless the folder it runs in is a checkout of the commit it was
given, so a passing test proves the host script fetched exactly that commit.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = []

parser = argparse.ArgumentParser()
for name in ("--platform", "--out", "--commit", "--run-id"):
    parser.add_argument(name, required=True)
parser.add_argument("--smoke", action="store_true")
parser.add_argument("--quick", action="store_true")
parser.add_argument("--only", action="append", default=[])
args = parser.parse_args()
head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
if head != args.commit:
    sys.exit(f"the checkout is {head}, not {args.commit}")
if os.environ.get("FAKE_DRIVER") == "crash":
    print("Traceback (most recent call last):\nRuntimeError: the driver crashed", flush=True)
    sys.exit(3)
fixture = Path(__file__).resolve().parents[1] / "data" / "hardware-record-tpu.json"
record = json.loads(fixture.read_text())
record.update(platform=args.platform, commit=args.commit, run_id=args.run_id, python="3.13.5")
record.update(
    tensorflow="2.20.0",
    libtpu="0.0.14",
    mode="quick" if args.quick else "smoke" if args.smoke else "full",
)
record["lessons"] = [{**row, "status": "passed"} for row in record["lessons"]]
Path(args.out).mkdir(parents=True, exist_ok=True)
(Path(args.out) / "record.json").write_text(json.dumps(record, indent=2))
print(f"{len(record['lessons'])} lessons; record written", flush=True)
