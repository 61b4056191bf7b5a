"""The machinery of the TPU self-test: what a check is, what it returns, and how each one runs
isolated, within a time limit, so that one broken check never hides the others.

A check is a function ``fn(context) -> Outcome``. It raises to fail (the error becomes its
evidence) or returns an :class:`Outcome`: ``pass``, ``fail`` or ``info`` (measured, with no
criterion on this hardware, e.g. a TPU's peak rate on a CPU).
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATUSES = ("pass", "fail", "info")
# A check still running at HARD_LIMIT_FACTOR x its budget + HARD_LIMIT_GRACE seconds fails and is
# left behind, so that a hung TPU compile cannot stop the report from being written.
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
    """``fail`` with every problem (each written from the evidence), else ``pass`` with the
    success sentence: never a success sentence under a failed status."""
    if problems:
        return Outcome("fail", "; ".join(problems), evidence, tuple(notes))
    return Outcome("pass", success, evidence, tuple(notes))


@dataclass(frozen=True)
class Check:
    """One check: its key, title, the lesson that teaches it, budget (smoke, full) in seconds,
    function, and what its failure means (:func:`tpucheck.selftest.check_table`)."""

    key: str
    title: str
    notebook: str
    budget: tuple[float, float]
    fn: Callable[[Context], Outcome]
    means: str = ""


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
        return {**asdict(self), "seconds": round(self.seconds, 2), "notes": list(self.notes)}


class _NoStrategy(RuntimeError):
    """A check needs the strategy, and the connect check did not produce one."""


@dataclass
class Context:
    """What the checks share: the mode, the strategy once connected, a scratch folder, and the
    data: Fashion-MNIST's arrays, and a sample of it as the reference script's TFRecords."""

    smoke: bool = False
    simulated_replicas: int = 8  # train_tpu.connect's default: a v5e-8's cores
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tpu-self-test-")))
    strategy: object = None
    kind: str = ""
    _arrays: tuple = ()

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

    def arrays(self):
        """``(x_train, y_train), (x_test, y_test)``: uint8 ``[N, 28, 28]`` pixels and labels, as
        ``keras.datasets.fashion_mnist.load_data()`` gives them; read once."""
        if not self._arrays:
            import train_tpu

            self._arrays = train_tpu.keras.datasets.fashion_mnist.load_data()
        return self._arrays

    @property
    def held_out(self) -> int:
        """The examples of each held-out split (validation, test) in :meth:`data`."""
        return self.size(256, 1024)

    def data(self):
        """The reference script's data set cut to a sample: ``size(1024, 4096)`` training
        examples, and the first :attr:`held_out` of the validation and test splits."""
        import train_tpu

        limits = {"train": self.size(1024, 4096), "validation": self.held_out}
        limits["test"] = self.held_out

        class Sample(train_tpu.FashionMNIST):
            NAME = "fashion_mnist_sample"

            def examples(self):
                counts = dict.fromkeys(limits, 0)
                for name, split, item in super().examples():
                    if counts[split] < limits[split]:
                        counts[split] += 1
                        yield name, split, item

        return Sample()

    def prepare(self) -> str:
        """The folder of the sample's TFRecords, written once (``train_tpu.py --prepare``)."""
        import train_tpu

        folder = self.workdir / "data"
        if not (folder / "info.json").exists():
            train_tpu.main(["--prepare", "--data-dir", str(folder)], data=self.data())
        return str(folder)

    def script(self, name: str, *args, **kw):
        """``train_tpu.main`` as a user runs it, on this strategy and the sample (``--data-dir``:
        :meth:`prepare`; ``--ckpt-dir``: ``name`` in the scratch folder); ``(what main
        returned, the lines it printed)``."""
        import train_tpu

        argv = ["--data-dir", self.prepare(), "--ckpt-dir", str(self.workdir / name)]
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            run = train_tpu.main([*argv, *map(str, args)], self.need_strategy(), self.data(), **kw)
        return run, printed.getvalue().splitlines()


def _describe_error(err: BaseException, limit: int = 600) -> str:
    """``Type: message`` (cut to ``limit`` characters) and where, outside installed libraries,
    it was raised."""
    text = str(err).strip()
    text = text[:limit] + " ..." if len(text) > limit else text
    frames = traceback.extract_tb(err.__traceback__)
    last = ([f for f in frames if "site-packages" not in f.filename] or frames or [None])[-1]
    where = f" (at {Path(last.filename).name}:{last.lineno} in {last.name})" if last else ""
    return f"{type(err).__name__}: {text}{where}"


def run_check(check: Check, context: Context) -> CheckResult:
    """Run one check in a thread of its own; never raise. An exception becomes a failed check
    with the error as its evidence; a check still running at its hard limit fails and is left
    running in the background (Python cannot stop a thread: the report says so)."""
    budget = check.budget[0] if context.smoke else check.budget[1]
    limit = HARD_LIMIT_FACTOR * budget + HARD_LIMIT_GRACE
    box: dict = {}

    def target():
        try:
            box["outcome"] = check.fn(context)
        except Exception as err:  # every failure must become evidence, never stop the others
            box["error"] = err

    thread = threading.Thread(target=target, name=f"self-test-{check.key}", daemon=True)
    start = time.perf_counter()
    thread.start()
    thread.join(limit)
    seconds = time.perf_counter() - start
    result = CheckResult(check.key, check.title, check.notebook, "fail", "", {}, seconds, budget)
    if thread.is_alive():
        result.summary, result.evidence = f"did not finish within {limit:.0f} s", {"budget": budget}
        result.error = (
            f"still running after {seconds:.0f} s (budget {budget:g} s); it was left running "
            "in the background, so the timings of later checks may be disturbed"
        )
        return result
    if "error" not in box and "outcome" not in box:
        box["error"] = RuntimeError("the check stopped without a result (SystemExit?)")
    elif "error" not in box and not isinstance(box["outcome"], Outcome):
        box["error"] = TypeError(f"the check returned {box['outcome']!r}, not an Outcome")
    if "error" in box:
        err, message = box["error"], str(box["error"]).strip()
        result.summary = type(err).__name__ + (f": {message.splitlines()[0][:200]}" * bool(message))
        result.error = _describe_error(err)
        return result
    outcome: Outcome = box["outcome"]
    result.status, result.summary, result.evidence = (
        outcome.status,
        outcome.summary,
        outcome.evidence,
    )
    result.notes = outcome.notes
    if seconds > budget:
        result.notes = (*outcome.notes, f"took {seconds:.1f} s, over its budget of {budget:g} s")
    return result
