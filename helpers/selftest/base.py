"""The machinery of the TPU self-test (notebook 00_tpu_self_test): what a check is, what it returns, and how
each one runs isolated, within a time limit, so that one broken check never hides the others.

A check is a function ``fn(context) -> Outcome``. It raises to fail (the error becomes the
check's evidence) or returns an :class:`Outcome` whose status is ``pass``, ``fail`` or ``info``
(measured, with no pass criterion on this hardware, e.g. a TPU's peak rate on a CPU).
"""

from __future__ import annotations

import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from helpers.strategy import SIMULATED_REPLICAS

__all__ = [
    "HARD_LIMIT_FACTOR",
    "HARD_LIMIT_GRACE",
    "STATUSES",
    "Check",
    "CheckResult",
    "Context",
    "Images",
    "Outcome",
    "judged",
    "run_check",
]

STATUSES = ("pass", "fail", "info")

# A check that runs past HARD_LIMIT_FACTOR x its budget + HARD_LIMIT_GRACE seconds is reported as
# failed and left behind, so a hung TPU compile cannot stop the report from being written.
HARD_LIMIT_FACTOR = 3.0
HARD_LIMIT_GRACE = 30.0


@dataclass(frozen=True)
class Outcome:
    """What a check found: a status, a one-line summary and its evidence (numbers, names)."""

    status: str
    summary: str
    evidence: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


def judged(problems: list[str], success: str, evidence: dict, notes=()) -> Outcome:
    """The outcome of a check from what its judge found: ``fail`` with every problem (each
    written from the evidence), or ``pass`` with the success sentence; never a success
    sentence under a failed status.
    """
    if problems:
        return Outcome("fail", "; ".join(problems), evidence, tuple(notes))
    return Outcome("pass", success, evidence, tuple(notes))


@dataclass(frozen=True)
class Check:
    """One check of the self-test: its key, title, the notebook that teaches it, its budget."""

    key: str
    title: str
    notebook: str
    budget: tuple[float, float]  # seconds in smoke mode, in full mode
    fn: Callable[[Context], Outcome]
    means: str = ""  # what its failure means (the table of 00_tpu_self_test)


@dataclass
class CheckResult:
    """A check after it ran: its outcome, or the error that failed it, and how long it took."""

    key: str
    title: str
    notebook: str
    status: str
    summary: str
    evidence: dict
    seconds: float
    budget_seconds: float
    error: str = ""
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "key": self.key,
            "title": self.title,
            "notebook": self.notebook,
            "status": self.status,
            "summary": self.summary,
            "evidence": self.evidence,
            "seconds": round(self.seconds, 2),
            "budget_seconds": self.budget_seconds,
            "error": self.error,
            "notes": list(self.notes),
        }


class _NoStrategy(RuntimeError):
    """A check needs the strategy, and the connect check did not produce one."""


@dataclass
class Context:
    """What the checks share: the mode, the strategy once connected, a scratch folder."""

    smoke: bool = False
    simulated_replicas: int = SIMULATED_REPLICAS
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tpu-self-test-")))
    strategy: object = None
    kind: str = ""
    _images: object = None

    def size(self, smoke, full):
        """``smoke`` in smoke mode, else ``full``: how much work a check does."""
        return smoke if self.smoke else full

    def need_strategy(self):
        if self.strategy is None:
            raise _NoStrategy("not run: there is no strategy (the connect check failed)")
        return self.strategy

    @property
    def replicas(self) -> int:
        return self.need_strategy().num_replicas_in_sync

    @property
    def on_tpu(self) -> bool:
        return self.kind == "TPU"

    def images(self):
        """Fashion-MNIST through the reference script's part "data" (``load_fashion_mnist``):
        uint8 ``[N, 28, 28, 1]`` pixels and int32 labels (offline from Debian's package, else
        Keras' download)."""
        if self._images is None:
            import train_tpu

            (x_train, y_train), (x_test, y_test) = train_tpu.load_fashion_mnist()
            self._images = Images(
                x_train[..., None],
                y_train.astype(np.int32),
                x_test[..., None],
                y_test.astype(np.int32),
            )
        return self._images

    def tfrecords(self, train: int, test: int) -> str:
        """The first ``train`` and ``test`` images written as the script writes its TFRecords
        (its part "tfrecords"), once per size; returns the folder."""
        import train_tpu

        images = self.images()
        folder = str(self.workdir / f"tfrecords-{train}-{test}")
        splits = {
            "train": (images.x_train[:train, ..., 0], images.y_train[:train]),
            "test": (images.x_test[:test, ..., 0], images.y_test[:test]),
        }
        train_tpu.write_tfrecords(folder, splits)
        return folder


@dataclass
class Images:
    """The self-test's data: uint8 pixels ``[N, 28, 28, 1]`` and int32 labels."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def _describe_error(err: BaseException, limit: int = 600) -> str:
    """``Type: message`` (cut to ``limit`` characters) and where in the code it was raised."""
    text = str(err).strip()
    if len(text) > limit:
        text = text[:limit] + " ..."
    where = ""
    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if "site-packages" not in f.filename]
    if frames:  # the deepest frame outside installed libraries says more than one in TensorFlow
        last = (ours or frames)[-1]
        where = f" (at {Path(last.filename).name}:{last.lineno} in {last.name})"
    return f"{type(err).__name__}: {text}{where}"


def _hard_limit(budget: float) -> float:
    """Seconds after which a check of ``budget`` seconds is abandoned."""
    return HARD_LIMIT_FACTOR * budget + HARD_LIMIT_GRACE


def run_check(check: Check, context: Context) -> CheckResult:
    """Run one check in a thread of its own; never raise.

    An exception becomes a failed check with the error as its evidence. A check still running
    at :func:`_hard_limit` of its budget is reported as failed and abandoned (Python cannot stop
    a thread, so its work may go on in the background; the report says so).
    """
    budget = check.budget[0] if context.smoke else check.budget[1]
    box: dict = {}

    def target():
        try:
            box["outcome"] = check.fn(context)
        except Exception as err:  # every failure must become evidence, never stop the others
            box["error"] = err

    thread = threading.Thread(target=target, name=f"self-test-{check.key}", daemon=True)
    start = time.perf_counter()
    thread.start()
    thread.join(_hard_limit(budget))
    seconds = time.perf_counter() - start
    base = {"key": check.key, "title": check.title, "notebook": check.notebook}
    if thread.is_alive():
        return CheckResult(
            **base,
            status="fail",
            summary=f"did not finish within {_hard_limit(budget):.0f} s",
            evidence={"budget_seconds": budget},
            seconds=seconds,
            budget_seconds=budget,
            error=(
                f"still running after {seconds:.0f} s (budget {budget:g} s); it was left running "
                "in the background, so the timings of later checks may be disturbed"
            ),
        )
    if "error" not in box and "outcome" not in box:
        box["error"] = RuntimeError("the check stopped without a result (SystemExit?)")
    elif "error" not in box and not isinstance(box["outcome"], Outcome):
        box["error"] = TypeError(f"the check returned {box['outcome']!r}, not an Outcome")
    if "error" in box:
        err = box["error"]
        message = str(err).strip()
        return CheckResult(
            **base,
            status="fail",
            summary=f"{type(err).__name__}: {message.splitlines()[0][:200]}"
            if message
            else type(err).__name__,
            evidence={},
            seconds=seconds,
            budget_seconds=budget,
            error=_describe_error(err),
        )
    outcome: Outcome = box["outcome"]
    notes = outcome.notes
    if seconds > budget:
        notes = (*notes, f"took {seconds:.1f} s, over its budget of {budget:g} s")
    return CheckResult(
        **base,
        status=outcome.status,
        summary=outcome.summary,
        evidence=outcome.evidence,
        seconds=seconds,
        budget_seconds=budget,
        notes=notes,
    )
