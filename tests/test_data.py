"""helpers.data: offline fallback, batch-size checks, static shapes."""

from __future__ import annotations

import gzip
import socket

import numpy as np
import pytest

from helpers import data


def test_offline_without_the_files_falls_back_to_digits_with_one_notice(
    monkeypatch, tmp_path, capsys
):
    monkeypatch.setenv("HOME", str(tmp_path))  # nothing in Keras' cache
    monkeypatch.setattr(data, "DEBIAN_FASHION_MNIST", tmp_path / "absent")
    monkeypatch.setattr(data, "network_available", lambda *a, **k: False)
    monkeypatch.setattr(data, "_from_keras", lambda name: pytest.fail("must not download"))
    images = data.load_images()
    assert images.name == "digits"
    out = capsys.readouterr().out
    assert out.count("Notice") == 1 and "apt-get install dataset-fashion-mnist" in out
    assert images.image_shape == (8, 8, 1)
    assert len(images.x_train) + len(images.x_test) == 1797
    assert images.x_train.dtype == np.float32 and images.y_train.dtype == np.int32
    assert 0.0 <= images.x_train.min() and images.x_train.max() <= 1.0
    assert set(np.unique(images.y_train)) == set(range(10))


def _write_idx(path, array):
    header = bytes([0, 0, 8, array.ndim]) + np.array(array.shape, ">u4").tobytes()
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_fashion_mnist_is_read_from_the_debian_files_without_network(monkeypatch, tmp_path):
    rng = np.random.default_rng(0)
    images = {s: rng.integers(0, 256, (n, 28, 28)) for s, n in (("train", 12), ("t10k", 5))}
    for split, pixels in images.items():
        _write_idx(tmp_path / f"{split}-images-idx3-ubyte.gz", pixels)
        _write_idx(tmp_path / f"{split}-labels-idx1-ubyte.gz", np.arange(len(pixels)) % 10)
    monkeypatch.setattr(data, "DEBIAN_FASHION_MNIST", tmp_path)
    monkeypatch.setattr(data, "network_available", lambda *a, **k: pytest.fail("no probe"))
    loaded = data.load_images("fashion_mnist", max_test=3)
    assert loaded.name == "fashion_mnist" and loaded.source == str(tmp_path)
    assert loaded.x_train.shape == (12, 28, 28, 1) and loaded.x_test.shape == (3, 28, 28, 1)
    np.testing.assert_allclose(loaded.x_train[..., 0] * 255, images["train"], atol=1e-3)
    assert loaded.y_train.tolist() == [i % 10 for i in range(12)]
    assert loaded.class_names[9] == "Ankle boot"


def test_a_file_that_is_not_idx_is_refused(tmp_path):
    with gzip.open(tmp_path / "x.gz", "wb") as f:
        f.write(b"PK\x03\x04not idx")
    with pytest.raises(ValueError, match="not an idx file"):
        data._read_idx(tmp_path / "x.gz")


@pytest.mark.skipif(
    not data.DEBIAN_FASHION_MNIST.exists(), reason="apt-get install dataset-fashion-mnist"
)
def test_the_installed_fashion_mnist_is_the_whole_dataset():
    images = data.load_images()
    assert (len(images.x_train), len(images.x_test)) == (60_000, 10_000)
    assert np.bincount(images.y_test).tolist() == [1000] * 10  # balanced, as published


def test_network_probe_does_not_hang_when_unreachable(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("unreachable")

    monkeypatch.setattr(socket, "create_connection", refuse)
    assert data.network_available() is False


def test_network_probe_honours_its_timeout():
    # 192.0.2.0/24 is reserved for documentation: nothing answers, so only the timeout ends it.
    import time

    start = time.perf_counter()
    assert data.network_available(("192.0.2.1", 9), timeout=0.2) is False
    assert time.perf_counter() - start < 5


def test_digits_split_is_disjoint_and_reproducible():
    a, b = data.load_images("digits"), data.load_images("digits")
    np.testing.assert_array_equal(a.x_test, b.x_test)
    train = {x.tobytes() for x in a.x_train}
    overlap = sum(x.tobytes() in train for x in a.x_test)
    assert overlap < 0.05 * len(a.x_test)  # a few duplicate images exist in the raw data


def test_max_train_and_unknown_dataset():
    assert len(data.load_images("digits", max_train=100).x_train) == 100
    with pytest.raises(ValueError, match="unknown dataset"):
        data.load_images("cifar")


def test_make_dataset_has_static_batch_shape():
    images = data.load_images("digits")
    ds = data.make_dataset(images.x_train, images.y_train, 64, replicas=8)
    x_spec, y_spec = ds.element_spec
    assert x_spec.shape.as_list() == [64, 8, 8, 1]
    assert y_spec.shape.as_list() == [64]
    x, y = next(iter(ds))
    assert x.shape == (64, 8, 8, 1)


def test_make_dataset_eval_mode_is_finite_and_ordered():
    images = data.load_images("digits")
    ds = data.make_dataset(images.x_test, images.y_test, 64, training=False)
    batches = list(ds)
    assert len(batches) == len(images.x_test) // 64  # the remainder is dropped
    np.testing.assert_array_equal(batches[0][1].numpy(), images.y_test[:64])


def test_make_dataset_rejects_bad_batches():
    x, y = np.zeros((10, 2), np.float32), np.zeros(10, np.int32)
    with pytest.raises(ValueError, match="does not split"):
        data.make_dataset(x, y, 9, replicas=8)
    with pytest.raises(ValueError, match="only 10 examples"):
        data.make_dataset(x, y, 16, replicas=8)
