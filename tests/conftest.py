"""Shared test fixtures.

TensorFlow fixes its device list when its runtime starts, so each test that needs a given number
of logical devices (a simulated TPU) runs its code in a fresh Python process: ``run_python``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import processes, simulation
from tpucheck import runtime

ROOT = Path(__file__).resolve().parent.parent

# No test process, nor any process it starts, may load libtpu: on a host without a TPU it queries
# the cloud metadata service. TensorFlow imported in the test workers themselves sees this too.
os.environ.update(processes.CPU_ONLY)
simulation.offline_fashion_mnist()  # Keras loads Debian's copy: these machines have no internet

# A laptop's environment: no TPU hints, no hosted platform, not CI (None removes a variable).
NO_TPU = {
    name: None for name in (*runtime.TPU_ENV_HINTS, *runtime.COLAB_ENV, *runtime.KAGGLE_ENV, "CI")
}

# With pytest-xdist (make test: -n 2), a module's tests run on one worker, so its module fixtures
# are computed once; the tests of these modules each start their own processes, so they are spread
# over the workers instead: one long module no longer sets the wall time. Each group of name
# prefixes here stays together on one worker (its tests share a module fixture); the other tests
# of the module go one by one (a module fixture they share is made again on each worker that
# needs it: keep those cheap).
SPREAD_MODULES = {
    "test_strategy": (),
    "test_fitting": (),
    # The very small run's two tests share it; the slow ones share `reference`.
    "test_train_tpu": (("test_a_very_small_run_",), ("test_the_custom_loop_", "test_killed_")),
    # Each copies the repository and runs sync and lint on its own: the slowest module otherwise.
    "test_one_home": (),
    # The command's run and the planted one: two runs of the self-test, on two workers at once.
    "test_tpucheck_selftest": (
        (
            "test_the_command_passes_",
            "test_json_has_every_section_",
            "test_markdown_has_every_section_",
            "test_environment_names_the_simulated_tpu_",
            "test_each_check_carries_its_evidence",
        ),
        ("test_each_planted_failure_fails_its_check_", "test_the_checks_without_a_planted_"),
    ),
    # The photos' run is shared; each run on the fortunes writes and trains on its own.
    "test_examples": (("test_the_photos_", "test_a_short_run_on_the_photos_"),),
}


def _scope(nodeid: str) -> str:
    """The unit of work xdist gives one worker: the module, a group of SPREAD_MODULES, or the
    test itself."""
    path, _, test = nodeid.partition("::")
    groups = SPREAD_MODULES.get(Path(path).stem)
    if groups is None:
        return path
    for number, prefixes in enumerate(groups):
        if test.startswith(prefixes):
            return f"{path}::group-{number}"
    return nodeid


def _browser_missing() -> str | None:
    """Why the browser checks cannot run here, or None (tools/browser)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    try:
        import playwright  # noqa: F401
        from browser import chromium

        chromium()
    except (ImportError, RuntimeError) as err:
        return str(err)
    return None


_BROWSER_MISSING: list[str | None] = []  # computed once, when a browser test first runs


def pytest_runtest_setup(item):
    """A test marked browser skips where no Chromium or Playwright is installed, saying so,
    except where FIELD_GUIDE_BROWSER=required (CI): there the missing browser fails it. Decided
    when such a test is about to run, so a run that deselects them needs neither."""
    if item.get_closest_marker("browser") is None:
        return
    if not _BROWSER_MISSING:
        _BROWSER_MISSING.append(_browser_missing())
    missing = _BROWSER_MISSING[0]
    if missing and os.environ.get("FIELD_GUIDE_BROWSER") == "required":
        pytest.fail(f"the browser checks are required here: {missing}")
    if missing:
        pytest.skip(f"no browser here: {missing}")


def pytest_xdist_make_scheduler(config, log):
    """Scope = :func:`_scope`, the units of SPREAD_MODULES first (xdist's loadscope otherwise)."""
    from xdist.scheduler import LoadScopeScheduling

    class ModulesUnlessSpread(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            # The units of SPREAD_MODULES first (xdist orders the rest largest first): their tests
            # start their own processes, the longest work, so the run does not end with one of
            # them on one worker while the others wait.
            spread = (
                s for s in self.workqueue if Path(s.partition("::")[0]).stem in SPREAD_MODULES
            )
            first = next(spread, None)
            if first is not None:
                self.workqueue.move_to_end(first, last=False)
            super()._assign_work_unit(node)

    return ModulesUnlessSpread(config, log)


def _run_python(code: str, env: dict | None = None, timeout: float = 300, check: bool = True):
    """Run ``code`` in a fresh interpreter; return the CompletedProcess (text output).

    The child's environment is :func:`helpers.processes.child_env` (quiet, CPU only) with Python
    warnings off, plus ``env``; a value of None in ``env`` removes that variable. With ``check``
    a non-zero exit fails the test with its output shown.
    """
    child_env = processes.child_env({"PYTHONWARNINGS": "ignore", **(env or {})})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"child exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr[-4000:]}"
        )
    return proc


# What would make the script think it runs on a TPU VM or in CI: hidden from its processes.
_TPU_HINTS = ("ISTPUVM", "TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES", "CI")


def _script_command(args, script=None, **env: str) -> tuple[list[str], dict]:
    """(command, environment) that run the reference script (pyproject's script setting; or
    ``script``, an example's path) on the simulated TPU, as ``python -m helpers.simulation SCRIPT
    ARGS`` runs it, with ``env`` added. Put ``--kill-at STEP [--phase P] --`` first in ``args``
    to kill it at a save."""
    sys.path.insert(0, str(ROOT / "tools"))
    from script_parts import SCRIPT

    kill = list(args[: args.index("--") + 1]) if "--" in args else []
    args = list(args[len(kill) :])
    child_env = {k: v for k, v in os.environ.items() if k not in _TPU_HINTS}
    child_env.update(PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3", **env)
    command = [sys.executable, "-m", "helpers.simulation", *kill[:-1], str(script or SCRIPT)]
    return [*command, *args], child_env


def _run_script(args, cwd, timeout: float = 600, script=None, **env: str):
    """Run :func:`_script_command`'s command in ``cwd``; return the CompletedProcess."""
    command, child_env = _script_command(args, script, **env)
    return subprocess.run(
        command, cwd=cwd, env=child_env, capture_output=True, text=True, timeout=timeout
    )


def _done_accuracy(stdout: str) -> float:
    """The test accuracy of the script's final ``done:`` line."""
    return float(re.search(r"^done: .* test accuracy ([0-9.]+) on ", stdout, re.M).group(1))


def _done_baseline(stdout: str) -> float:
    """The ``done:`` line's accuracy of always answering the commonest class."""
    return float(re.search(r"^done: .*\(the commonest class alone: ([0-9.]+)\)", stdout, re.M)[1])


def fashion_mnist_slice(train: int, test: int):
    """``train_tpu.FashionMNIST`` cut to its first ``train`` training images (each in the split
    the script gives it: a tenth validates) and its first ``test`` test images: a data set of the
    script's own kind, small enough for a run of seconds."""
    import train_tpu

    class FashionMNISTSlice(train_tpu.FashionMNIST):
        def examples(self):
            first = {"train": train, "test": test}
            for name, split, item in super().examples():
                part, number = name.split("/")
                if int(number) < first[part]:
                    yield name, split, item

    return FashionMNISTSlice()


@pytest.fixture
def run_python():
    """Fixture form of :func:`_run_python`: ``run_python(code, env=..., check=...)``."""
    return _run_python


@pytest.fixture
def no_tpu_env(monkeypatch):
    """This process's environment made a laptop's: :data:`NO_TPU` removed."""
    for name in NO_TPU:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


class FakeClock:
    """A clock that stands still until a test moves it (``clock.now += seconds``)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    """tpucheck.timing's clock replaced by a :class:`FakeClock` (not the process-wide clock)."""
    from types import SimpleNamespace

    from tpucheck import timing

    fake = FakeClock()
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=fake))
    return fake
