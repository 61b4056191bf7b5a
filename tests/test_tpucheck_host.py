"""tpucheck.host: the platform, the signs of TPU hardware, and installed versions from pip's
metadata (the one place that asks it)."""

import importlib.metadata

import pytest

from tpucheck import host

pytestmark = pytest.mark.stacks  # also run on the kaggle and colab stacks (make test)


def _metadata(monkeypatch, present: dict[str, str]) -> None:
    def version(name):
        if name not in present:
            raise importlib.metadata.PackageNotFoundError(name)
        return present[name]

    monkeypatch.setattr(importlib.metadata, "version", version)


def test_installed_gives_the_first_name_that_is_installed(monkeypatch):
    _metadata(monkeypatch, {"libtpu-nightly": "0.1.dev1", "keras": "3.13.2"})
    assert host.installed("libtpu", "libtpu-nightly") == "0.1.dev1"
    assert host.installed("keras") == "3.13.2"
    assert host.installed("jax") is None
    assert host.installed() is None


@pytest.mark.parametrize(
    "present, expected",
    [
        ({"tensorflow": "2.21.0"}, ("tensorflow", "2.21.0")),
        # Kaggle's image after a half-done route: the TPU build is the one that counts.
        ({"tensorflow-cpu": "2.20.0", "tensorflow-tpu": "2.19.1"}, ("tensorflow-tpu", "2.19.1")),
        ({"tensorflow": "2.20.0", "tensorflow-cpu": "2.20.0"}, ("tensorflow-cpu", "2.20.0")),
        ({"keras": "3.13.2"}, None),
    ],
)
def test_the_tensorflow_build_is_named_most_specific_first(monkeypatch, present, expected):
    _metadata(monkeypatch, present)
    assert host.tensorflow_distribution() == expected


def test_this_interpreter_has_a_tensorflow_build():
    name, version = host.tensorflow_distribution()
    assert name in host.TF_DISTRIBUTIONS
    assert version == importlib.metadata.version(name)


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
    assert host.detect_platform(env) == expected


def test_tpu_hints_from_env_and_device_nodes(tmp_path):
    (tmp_path / "accel0").touch()
    (tmp_path / "vfio").mkdir()
    (tmp_path / "vfio" / "0").touch()
    (tmp_path / "vfio" / "vfio").touch()  # the control node, not a device
    hints = host.tpu_hints({"ISTPUVM": "1", "TPU_NAME": ""}, dev=tmp_path)
    assert hints == ["ISTPUVM=1", str(tmp_path / "accel0"), str(tmp_path / "vfio" / "0")]


def test_no_tpu_hints_on_a_plain_machine(tmp_path):
    assert host.tpu_hints({}, dev=tmp_path) == []
