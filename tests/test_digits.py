"""tests/digits.py: the offline digits of the tests, batch-size checks, static shapes."""

from __future__ import annotations

import digits as data
import numpy as np
import pytest


def test_digits_are_8x8_balanced_scaled_and_the_same_every_time():
    images = data.digits()
    assert images.name == "digits" and images.image_shape == (8, 8, 1)
    assert (len(images.x_train), len(images.x_test)) == (1440, 360)
    assert images.x_train.dtype == np.float32 and images.y_train.dtype == np.int32
    assert 0.0 <= images.x_train.min() and images.x_train.max() <= 1.0
    counts = np.bincount(np.concatenate([images.y_train, images.y_test]))
    assert counts.tolist() == [180] * 10
    again = data.digits()
    np.testing.assert_array_equal(images.x_test, again.x_test)
    assert not np.array_equal(images.x_test, data.digits(seed=1).x_test)


def test_no_two_digits_are_equal_and_the_classes_differ():
    images = data.digits()
    every = np.concatenate([images.x_train, images.x_test])
    assert len({x.tobytes() for x in every}) == len(every)
    # The glyphs set the classes apart: the mean images of two classes are far apart.
    means = np.stack([images.x_train[images.y_train == c].mean(axis=0) for c in range(10)])
    gaps = [np.abs(means[a] - means[b]).sum() for a in range(10) for b in range(a + 1, 10)]
    assert min(gaps) > 1.0


def test_digits_can_be_learned():
    # A nearest-mean classifier on the training split already does far better than chance (10%).
    images = data.digits()
    flat = lambda x: x.reshape(len(x), -1)  # noqa: E731
    means = np.stack([flat(images.x_train[images.y_train == c]).mean(axis=0) for c in range(10)])
    distances = ((flat(images.x_test)[:, None, :] - means[None]) ** 2).sum(axis=-1)
    assert (distances.argmin(axis=1) == images.y_test).mean() > 0.5


def test_max_train_and_max_test_keep_the_first_examples():
    images, few = data.digits(), data.digits(max_train=100, max_test=7)
    assert len(few.x_train) == 100 and len(few.x_test) == 7
    np.testing.assert_array_equal(few.x_train, images.x_train[:100])
    assert str(few) == "digits: 100 training and 7 test images of shape (8, 8, 1), 10 classes"


def test_make_dataset_has_static_batch_shape():
    images = data.digits()
    ds = data.make_dataset(images.x_train, images.y_train, 64, replicas=8)
    x_spec, y_spec = ds.element_spec
    assert x_spec.shape.as_list() == [64, 8, 8, 1]
    assert y_spec.shape.as_list() == [64]
    x, y = next(iter(ds))
    assert x.shape == (64, 8, 8, 1)


def test_make_dataset_eval_mode_is_finite_and_ordered():
    images = data.digits()
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
