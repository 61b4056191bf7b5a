"""tpucheck.runtime: the no-silent-fallback check (the platform and the TPU hints it reads are
tpucheck.host's: tests/test_tpucheck_host.py)."""

from __future__ import annotations

import importlib.metadata
import subprocess

import pytest

from tpucheck import host as versions
from tpucheck import routes, runtime


@pytest.fixture(autouse=True)
def python_312(monkeypatch, tmp_path):
    """These tests read like a Kaggle user's Python; test_routes covers every other Python."""
    monkeypatch.setattr(routes, "python_version", lambda version_info=None: "3.12")
    monkeypatch.setattr(routes, "_record_path", lambda: tmp_path / "route.json")


def _fake_packages(monkeypatch, installed: dict[str, str]):
    def version(name):
        if name in installed:
            return installed[name]
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", version)


@pytest.mark.parametrize(
    ("installed", "usable", "reason_part"),
    [
        ({}, False, "not installed"),
        ({"tensorflow-cpu": "2.20.0"}, False, "CPU-only"),
        ({"tensorflow-tpu": "2.19.1", "libtpu": "0.0.10"}, True, "libtpu 0.0.10"),
        ({"tensorflow-tpu": "2.20.0", "libtpu": "0.0.17"}, False, "No TPU platform found"),
        ({"tensorflow-tpu": "2.20.0", "libtpu": "0.0.14"}, None, "unverified on hardware"),
        ({"tensorflow-tpu": "2.19.1"}, False, "without libtpu"),
        ({"tensorflow": "2.19.0", "libtpu": "0.0.10"}, None, "may work"),
        ({"tensorflow": "2.21.0"}, False, "no libtpu"),
    ],
)
def test_tensorflow_tpu_support(monkeypatch, installed, usable, reason_part):
    _fake_packages(monkeypatch, installed)
    support = runtime.tensorflow_tpu_support()
    assert support.usable is usable
    assert reason_part in support.reason


def test_fix_commands_follow_the_route_for_this_python():
    assert list(routes.choose_route("colab", "3.12").commands) == [
        "pip install tensorflow-tpu==2.19.1"
    ]
    kaggle = routes.choose_route("kaggle", "3.12").commands
    assert kaggle[0].startswith("pip uninstall -y") and "tensorflow-cpu" in kaggle[0]
    assert kaggle[1] == "pip install tensorflow-tpu==2.19.1"


def test_ensure_tensorflow_passes_without_tpu(no_tpu_env, monkeypatch):
    monkeypatch.setattr(runtime, "tpu_hints", lambda: [])
    assert isinstance(runtime.ensure_tensorflow(), runtime.TPUSupport)


def test_ensure_tensorflow_without_any_tensorflow(no_tpu_env, monkeypatch):
    monkeypatch.setattr(runtime, "tpu_hints", lambda: [])
    _fake_packages(monkeypatch, {})
    with pytest.raises(ModuleNotFoundError, match="requirements.txt"):
        runtime.ensure_tensorflow()


def test_tpu_hinted_but_unusable_raises_with_the_fix(no_tpu_env, monkeypatch):
    monkeypatch.setattr(runtime, "tpu_hints", lambda: ["TPU_ACCELERATOR_TYPE=v5litepod-8"])
    _fake_packages(monkeypatch, {"tensorflow-cpu": "2.21.0"})
    with pytest.raises(runtime.TPUUnusableError) as err:
        runtime.ensure_tensorflow()
    message = str(err.value)
    assert "CPU-only build" in message
    assert "pip install tensorflow-tpu==2.19.1" in message
    assert "restart" in message and "simulated TPU" in message


def test_kaggle_installs_the_fix_and_asks_for_a_restart(no_tpu_env, monkeypatch):
    no_tpu_env.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    monkeypatch.setattr(runtime, "tpu_hints", lambda: ["ISTPUVM=1"])
    _fake_packages(monkeypatch, {"tensorflow-cpu": "2.20.0"})
    ran = []
    monkeypatch.setattr(runtime, "_pip", ran.append)
    with pytest.raises(runtime.RestartRequired, match="Restart & clear"):
        runtime.ensure_tensorflow()
    assert ran == list(routes.choose_route("kaggle").commands)


def test_install_can_be_refused_on_kaggle(no_tpu_env, monkeypatch):
    no_tpu_env.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    monkeypatch.setattr(runtime, "tpu_hints", lambda: ["ISTPUVM=1"])
    _fake_packages(monkeypatch, {"tensorflow-cpu": "2.20.0"})
    monkeypatch.setattr(runtime, "_pip", lambda c: pytest.fail("must not install"))
    with pytest.raises(runtime.TPUUnusableError, match="uninstall -y"):
        runtime.ensure_tensorflow(install=False)


def test_usable_tpu_build_passes(no_tpu_env, monkeypatch):
    monkeypatch.setattr(runtime, "tpu_hints", lambda: ["ISTPUVM=1"])
    _fake_packages(monkeypatch, {"tensorflow-tpu": "2.19.1", "libtpu": "0.0.10"})
    assert runtime.ensure_tensorflow().usable is True


def test_a_route_install_that_fails_says_which_failure_it_was(monkeypatch, capsys):
    posted = (  # googlecolab/colabtools#5209
        "ERROR: Cannot install tensorflow-tpu==2.16.1 and tensorflow-tpu==2.18.0 because these "
        "package versions have conflicting dependencies.\n\nThe conflict is caused by:\n"
        "    tensorflow-tpu 2.18.0 depends on libtpu==2.18.0\n"
    )
    done = subprocess.CompletedProcess([], 1, stdout=posted + "\n")
    monkeypatch.setattr(runtime.subprocess, "run", lambda *a, **k: done)
    monkeypatch.setattr(runtime, "tpu_hints", lambda: ["ISTPUVM=1"])
    with pytest.raises(runtime.TPUUnusableError) as err:
        runtime._pip("pip install tensorflow-tpu==2.18.0")
    assert "the conflict: libtpu==2.18.0" in str(err.value)
    assert "depends on libtpu==2.18.0" in capsys.readouterr().out  # pip's own words shown


def test_the_setup_stops_on_a_keras_with_the_multi_replica_bugs(no_tpu_env, monkeypatch):
    installed = {"tensorflow": "2.19.0", "keras": "3.9.2"}
    monkeypatch.setattr(versions, "installed", lambda *names: installed.get(names[0]))
    with pytest.raises(RuntimeError, match="keras-team/keras#21061"):
        runtime.ensure_tensorflow()
