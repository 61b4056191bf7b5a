"""Run the reference script ``train_tpu.py`` inside a lesson, as its "Your script" section does.

A TPU serves one process, and a lesson's kernel already holds it (or the simulated TPU), so a
lesson cannot start ``python -m train_tpu`` as a second process. :func:`run_script` calls the
script's own ``main`` with the command-line arguments and the lesson's strategy instead: the same
code a learner runs in a terminal, with its lines printed as they come. Nothing here is code to
copy; the script is.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass, field

__all__ = ["DATA_DIR", "ScriptFailed", "ScriptRun", "run_script"]

# One TFRecord folder for every lesson: the script writes it once and each later run reads it.
DATA_DIR = os.path.join(tempfile.gettempdir(), "fashion_mnist_tfrecords")
_DONE = re.compile(r"^done: (\d+) steps, test accuracy ([0-9.]+) on all (\d+) test \w+")


class ScriptFailed(RuntimeError):
    """The script stopped with a problem to fix; the message is the script's own sentence."""


@dataclass
class ScriptRun:
    """What one run printed, and the numbers of its final ``done:`` line."""

    args: list[str]
    ckpt_dir: str
    lines: list[str] = field(default_factory=list)
    steps: int = 0
    test_accuracy: float = float("nan")
    test_images: int = 0


class _Tee(io.TextIOBase):
    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self):
        for stream in self.streams:
            stream.flush()


def run_script(strategy, *args: str, data_dir: str | None = None, ckpt_dir: str | None = None):
    """Run ``python -m train_tpu ARGS`` in this process on ``strategy``; return a :class:`ScriptRun`.

    ``data_dir`` defaults to :data:`DATA_DIR`, shared by every lesson; ``ckpt_dir`` to a new
    empty folder (pass one to resume a run). Raises :class:`ScriptFailed` with the script's
    sentence when it stops on a problem you must fix. Used by every lesson's "Your script".
    Taught in notebooks 01, 02, 03, 04, 05, 06, 08, 09, 13.
    """
    import train_tpu  # installed with the helpers (pyproject's py-modules)

    ckpt_dir = ckpt_dir or tempfile.mkdtemp(prefix="train_tpu-")
    argv = [*map(str, args), "--data-dir", data_dir or DATA_DIR, "--ckpt-dir", ckpt_dir]
    print("$ python -m train_tpu", shlex.join(argv), flush=True)
    printed = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, printed)):
        try:
            status = train_tpu.main(argv, strategy=strategy)
        except train_tpu.UsageError as err:
            raise ScriptFailed(f"train_tpu: {err}") from None
    if status:
        raise ScriptFailed(f"train_tpu exited with status {status}")
    run = ScriptRun(argv, ckpt_dir, printed.getvalue().splitlines())
    for line in run.lines:
        if match := _DONE.match(line):
            run.steps, run.test_images = int(match[1]), int(match[3])
            run.test_accuracy = float(match[2])
    return run
