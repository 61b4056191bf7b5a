"""A fast check that fails on behaviour: train_tpu.py's numbers on a small fixed run, recorded.

The other fast tests of the script check its messages, its files and that it learns at all; a
change to its optimizer, its model or a default would pass them. This one runs ``main()`` on the
simulated TPU (2 replicas, the script's default per-replica batch, float32, seed 0) on a slice of
Fashion-MNIST for a few steps, and compares what it returns (the global batch, the steps, the loss
and validation accuracy of each epoch, the test loss and accuracy) and its parser's defaults with
tests/data/script_behaviour.json. The tolerances absorb TensorFlow 2.19, 2.20 and 2.21 (the three
stacks, measured: see the file's "measured" entry) and no more, so that Adam -> SGD, a Dense layer
of another width, or another default replica count or batch fails here with what differs.

A change of behaviour that is intended is recorded again, and the file committed with it:

    python tests/test_script_behaviour.py --record

(``python tests/test_script_behaviour.py`` alone prints the comparison.)
"""

from __future__ import annotations

import json
import math
import platform
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.stacks  # a contributor's check, and each stack's (make test-unit)

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
RECORD = TESTS / "data" / "script_behaviour.json"
RECORD_COMMAND = "python tests/test_script_behaviour.py --record"
# The run: everything but the per-replica batch given, so that the parser's default counts.
ARGS = ["--replicas", "2", "--no-bf16", "--seed", "0", "--epochs", "3", "--steps-per-call", "4"]
SLICE = (1536, 512)  # the first training images (a tenth of them validate) and test images
# The three stacks gave the same numbers to the last bit on one machine; another CPU may round
# otherwise. A loss may differ by 0.2% of itself, an accuracy by one of the 191 validation images.
LOSS_RTOL = 2e-3
ACCURACY_ATOL = 0.006
DEFAULTS = ("replicas", "per_replica_batch", "learning_rate", "epochs", "steps_per_call", "seed")

RUN = """
import json, sys
from helpers import simulation
simulation.start()  # the simulated TPU, as python -m helpers.simulation runs the script
sys.path.insert(0, {tests!r})
from conftest import fashion_mnist_slice
import tensorflow as tf
import train_tpu

defaults = vars(train_tpu.parse_args([]))
run = train_tpu.main({args!r}, data=fashion_mnist_slice(*{slice!r}))
numbers = {{k: getattr(run, k) for k in ("global_batch", "steps", "examples", "done")}}
numbers.update({{k: [float(epoch[k]) for epoch in run.history] for k in run.history[0]}})
numbers.update(test_loss=float(run.test_loss), test_accuracy=float(run.test_accuracy))
print("RESULT" + json.dumps(dict(
    defaults={{k: defaults[k] for k in {defaults!r}}},
    run=numbers,
    versions=f"TensorFlow {{tf.__version__}}, Keras {{train_tpu.keras.__version__}}",
)))
"""


def measure() -> dict:
    """Run the script's main() on the slice in a fresh process; what it returned, by name."""
    from helpers import processes

    with tempfile.TemporaryDirectory() as work:
        folders = ["--data-dir", f"{work}/data", "--ckpt-dir", f"{work}/ckpt"]
        code = RUN.format(tests=str(TESTS), args=[*ARGS, *folders], slice=SLICE, defaults=DEFAULTS)
        env = processes.child_env({"PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"})
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            cwd=work, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    if done.returncode != 0 or "RESULT" not in done.stdout:
        raise RuntimeError(f"the run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    found = json.loads(done.stdout.split("RESULT", 1)[1])
    found["versions"] += f", Python {platform.python_version()}"
    return found


def _close(got, expected, key) -> bool:
    if isinstance(expected, list):
        return len(got) == len(expected) and all(
            _close(g, e, key) for g, e in zip(got, expected, strict=True)
        )
    if "accuracy" in key:
        return math.isclose(got, expected, rel_tol=0, abs_tol=ACCURACY_ATOL)
    if "loss" in key:
        return math.isclose(got, expected, rel_tol=LOSS_RTOL)
    return got == expected  # counts and defaults: exactly


def differences(found: dict, record: dict) -> list[str]:
    """One line for each number that differs from the record beyond its tolerance."""
    lines = []
    for part in ("defaults", "run"):
        for key, expected in record[part].items():
            got = found[part].get(key)
            if got is None or not _close(got, expected, key):
                got, expected = json.dumps(_round(got)), json.dumps(_round(expected))
                lines.append(f"{part} {key}: {got}, recorded {expected}")
    return lines


def _round(value):
    if isinstance(value, list):
        return [_round(v) for v in value]
    return round(value, 4) if isinstance(value, float) else value


def message(problems: list[str], record: dict) -> str:
    return (
        f"train_tpu.py no longer does what {RECORD.relative_to(ROOT)} recorded "
        f"({record['versions']}; losses within {LOSS_RTOL:.1%}, accuracies within "
        f"{ACCURACY_ATOL}):\n  " + "\n  ".join(problems) + "\nIf the change is intended, "
        f"record the new numbers and commit the file: {RECORD_COMMAND}"
    )


def test_the_script_behaves_as_recorded():
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    found = measure()
    problems = differences(found, record)
    if problems:
        pytest.fail(message(problems, record), pytrace=False)


def main(argv: list[str]) -> int:
    found = measure()
    if argv == ["--record"]:
        measured = json.loads(RECORD.read_text()).get("measured", "") if RECORD.exists() else ""
        record = {**found, "measured": measured}
        RECORD.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"recorded in {RECORD.relative_to(ROOT)} ({found['versions']})")
        return 0
    problems = differences(found, json.loads(RECORD.read_text(encoding="utf-8")))
    print("\n".join(problems) or "as recorded")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
