"""helpers.runtime: platform detection, TPU hints, and the no-silent-fallback check."""

from __future__ import annotations

import importlib.metadata

import pytest

from helpers import routes, runtime


@pytest.fixture(autouse=True)
def python_312(monkeypatch, tmp_path):
    """These tests read like a Kaggle user's Python; test_routes covers every other Python."""
    monkeypatch.setattr(routes, "python_version", lambda version_info=None: "3.12")
    monkeypatch.setattr(routes, "_record_path", lambda: tmp_path / "route.json")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"COLAB_RELEASE_TAG": "release-colab_20261101"}, "colab"),
        ({"KAGGLE_KERNEL_RUN_TYPE": "Interactive", "ISTPUVM": "1"}, "kaggle"),
        ({"TPU_ACCELERATOR_TYPE": "v5litepod-8"}, "cloud-tpu-vm"),
        ({"CI": "true"}, "ci"),
        ({}, "local"),
    ],
)
def test_detect_platform(env, expected):
    assert runtime.detect_platform(env) == expected


def test_tpu_hints_from_env_and_device_nodes(tmp_path):
    (tmp_path / "accel0").touch()
    (tmp_path / "vfio").mkdir()
    (tmp_path / "vfio" / "0").touch()
    (tmp_path / "vfio" / "vfio").touch()  # the control node, not a device
    hints = runtime.tpu_hints({"ISTPUVM": "1", "TPU_NAME": ""}, dev=tmp_path)
    assert hints == ["ISTPUVM=1", str(tmp_path / "accel0"), str(tmp_path / "vfio" / "0")]


def test_no_tpu_hints_on_a_plain_machine(tmp_path):
    assert runtime.tpu_hints({}, dev=tmp_path) == []


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
