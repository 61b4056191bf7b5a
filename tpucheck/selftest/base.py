"""The self-test's machinery: a check is a function ``fn(context) -> Outcome`` that raises to fail,
run isolated and within a time limit, so that one broken check never hides the others. ``info``
means measured with no criterion on this hardware (a TPU's peak on a CPU).
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
from functools import cached_property
from pathlib import Path

STATUSES = ("pass", "fail", "info")
# A check still running at HARD_LIMIT_FACTOR x its budget + HARD_LIMIT_GRACE seconds fails and is
# left behind, so that a hung TPU compile cannot stop the report from being written.
HARD_LIMIT_FACTOR = 3.0
HARD_LIMIT_GRACE = 30.0
SCRIPT_BATCH = 16  # the script runs' per-replica batch: small, and a multiple of 8


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


def judged(problems: list, success: str, evidence: dict, notes=()) -> Outcome:
    """``fail`` with every problem (None: no problem), else ``pass`` with the success sentence."""
    problems = [p for p in problems if p]
    status, summary = ("fail", "; ".join(problems)) if problems else ("pass", success)
    return Outcome(status, summary, evidence, tuple(notes))


@dataclass(frozen=True)
class Check:
    """One check; ``budget`` is (smoke, full) in seconds, ``means`` what its failure means."""

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


@dataclass
class Context:
    """What the checks share: the mode, the strategy once connected, a scratch folder, and
    Fashion-MNIST, whole and as a sample in the reference script's TFRecords."""

    smoke: bool = False
    simulated_replicas: int = 8  # train_tpu.connect's default: a v5e-8's cores
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tpu-self-test-")))
    strategy: object = None
    kind: str = ""

    def size(self, smoke, full):
        return smoke if self.smoke else full

    def need_strategy(self):
        if self.strategy is None:
            raise RuntimeError("not run: there is no strategy (the connect check failed)")
        return self.strategy

    @property
    def replicas(self) -> int:
        return self.need_strategy().num_replicas_in_sync

    @property
    def on_tpu(self) -> bool:
        return self.kind == "TPU"

    @cached_property
    def arrays(self):  # Fashion-MNIST's ((x_train, y_train), (x_test, y_test))
        import train_tpu

        return train_tpu.keras.datasets.fashion_mnist.load_data()

    @property
    def held_out(self) -> int:  # the examples of each held-out split in the sample
        return self.size(256, 1024)

    @cached_property
    def data(self):
        """The reference script's data set, cut to a sample."""
        import train_tpu

        limits = dict(train=self.size(1024, 4096), validation=self.held_out, test=self.held_out)

        class Sample(train_tpu.FashionMNIST):
            NAME = "fashion_mnist_sample"

            def examples(self):
                counts = dict.fromkeys(limits, 0)
                for name, split, item in super().examples():
                    if counts[split] < limits[split]:
                        counts[split] += 1
                        yield name, split, item

        return Sample()

    @cached_property
    def data_dir(self) -> str:
        """The folder of the sample's TFRecords (``train_tpu.py --prepare``)."""
        import train_tpu

        folder = str(self.workdir / "data")
        train_tpu.main(["--prepare", "--data-dir", folder], data=self.data)
        return folder

    def script(self, name: str, *args, examples: int, model=None):
        """``train_tpu.main`` as a user runs it, for an epoch of ``examples`` of the sample (and
        ``model`` for the script's): ``(what main returned, the lines it printed)``."""
        import train_tpu

        argv = ["--data-dir", self.data_dir, "--ckpt-dir", str(self.workdir / name), *args]
        argv += ["--epochs", "1", "--per-replica-batch", str(SCRIPT_BATCH)]
        argv += ["--train-examples", str(examples)]
        printed, model = io.StringIO(), model or train_tpu.build_cnn
        with contextlib.redirect_stdout(printed):
            run = train_tpu.main(argv, self.need_strategy(), self.data, model)
        return run, printed.getvalue().splitlines()


def _describe_error(err: BaseException, limit: int = 600) -> str:
    """``Type: message`` and where, outside installed libraries, it was raised."""
    text = str(err).strip()
    text = text[:limit] + " ..." if len(text) > limit else text
    frames = traceback.extract_tb(err.__traceback__)
    last = ([f for f in frames if "site-packages" not in f.filename] or frames or [None])[-1]
    where = f" (at {Path(last.filename).name}:{last.lineno} in {last.name})" if last else ""
    return f"{type(err).__name__}: {text}{where}"


def run_check(check: Check, context: Context) -> CheckResult:
    """Run one check in a thread of its own; never raise. A check still running at its hard
    limit fails and is left running (Python cannot stop a thread: the report says so)."""
    budget = check.budget[0] if context.smoke else check.budget[1]
    limit = HARD_LIMIT_FACTOR * budget + HARD_LIMIT_GRACE
    found = []

    def target():
        try:
            outcome = check.fn(context)
            if not isinstance(outcome, Outcome):
                raise TypeError(f"the check returned {outcome!r}, not an Outcome")
            found.append(outcome)
        except BaseException as err:  # every failure must become evidence, never stop the others
            found.append(err)

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
    outcome = found[0]
    if isinstance(outcome, BaseException):
        first_line = (str(outcome).strip().splitlines() or [""])[0][:200]
        result.summary = type(outcome).__name__ + (f": {first_line}" if first_line else "")
        result.error = _describe_error(outcome)
        return result
    result.status, result.summary = outcome.status, outcome.summary
    result.evidence, result.notes = outcome.evidence, outcome.notes
    if seconds > budget:
        result.notes += (f"took {seconds:.1f} s, over its budget of {budget:g} s",)
    return result
