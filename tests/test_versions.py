"""helpers.versions: installed versions from pip's metadata, the one place that asks it."""

import importlib.metadata

import pytest

from helpers import processes, versions

pytestmark = pytest.mark.stacks  # also run on the kaggle and colab stacks (make test)


def _metadata(monkeypatch, present: dict[str, str]) -> None:
    def version(name):
        if name not in present:
            raise importlib.metadata.PackageNotFoundError(name)
        return present[name]

    monkeypatch.setattr(importlib.metadata, "version", version)


def test_installed_gives_the_first_name_that_is_installed(monkeypatch):
    _metadata(monkeypatch, {"libtpu-nightly": "0.1.dev1", "keras": "3.13.2"})
    assert versions.installed("libtpu", "libtpu-nightly") == "0.1.dev1"
    assert versions.installed("keras") == "3.13.2"
    assert versions.installed("jax") is None
    assert versions.installed() is None


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
    assert versions.tensorflow_distribution() == expected
    # The runner's cache and the log policy read the same answer.
    assert processes.tensorflow_version() == (expected[1] if expected else "")


def test_this_interpreter_has_a_tensorflow_build():
    name, version = versions.tensorflow_distribution()
    assert name in versions.TF_DISTRIBUTIONS
    assert version == importlib.metadata.version(name)
