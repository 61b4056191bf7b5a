"""examples/: the reference script's data part swapped for a folder of photos, and for texts.

Each example plugs its data class (and, for texts, its model) into ``train_tpu.run_as_program``;
the script's pipeline, loop, checkpoints and evaluation are unchanged. A short run of each trains
above its majority baseline on every stack: the photos are JPEG files the test writes (of mixed
sizes, colour, two of them cut short, a few PNGs under a .jpg name), the texts Debian's fortunes
(``apt-get install fortunes fortunes-de fortunes-es fortunes-it fortunes-br``: CI installs them
and must run these tests; elsewhere they skip, saying so). The --smoke runs of the texts are slow.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys

import numpy as np
import pytest
from conftest import ROOT, _done_accuracy, _done_baseline, _run_script

pytestmark = pytest.mark.stacks  # the reference script: on every stack, as test_train_tpu.py

sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT))

import image_folder  # noqa: E402
import text_fortunes  # noqa: E402

import train_tpu  # noqa: E402

IMAGE_FOLDER = ROOT / "examples" / "image_folder.py"
TEXT_FORTUNES = ROOT / "examples" / "text_fortunes.py"


def _ok(done):
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _epochs(stdout, epochs):
    return re.findall(rf"^epoch (\d+)/{epochs}: ", stdout, re.M)


# ---- a folder of photos ----

PHOTOS = {"blue": (2, 40), "green": (1, 60), "red": (0, 90)}  # class: (its colour channel, files)
TRUNCATED = ["green/005.jpg", "red/017.jpg"]  # JPEG files cut short: no decoder reads them


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Three classes of synthetic colour photos, 48 to 220 pixels a side and rarely square:
    noise with the class's colour strongest and a lighter square somewhere. Every tenth file
    is a PNG named .jpg; the TRUNCATED files hold the first half of their JPEG."""
    import tensorflow as tf

    folder = tmp_path_factory.mktemp("photos") / "shapes"
    rng = np.random.default_rng(0)
    for name, (channel, count) in PHOTOS.items():
        (folder / name).mkdir(parents=True)
        for i in range(count):
            height, width = rng.integers(48, 221, 2)
            image = rng.integers(0, 90, (height, width, 3))
            image[..., channel] += 120
            side = min(height, width) // 4
            top, left = rng.integers(side, height - side), rng.integers(side, width - side)
            image[top - side : top + side, left - side : left + side] += 40
            image = tf.constant(np.clip(image, 0, 255).astype(np.uint8))
            data = tf.io.encode_png(image) if i % 10 == 3 else tf.io.encode_jpeg(image)
            data = data.numpy()
            path = f"{name}/{i:03d}.jpg"
            if path in TRUNCATED:
                assert data.startswith(b"\xff\xd8")  # a JPEG
                data = data[: len(data) // 2]
            (folder / path).write_bytes(data)
    return folder


@pytest.fixture(scope="module")
def photo_run(photos, tmp_path_factory):
    """A short run: 32 x 32 pixels, 2 replicas of 8, 3 epochs."""
    cwd = tmp_path_factory.mktemp("photo_run")
    args = ["--images", str(photos), "--size", "32", "--replicas", "2", "--per-replica-batch", "8"]
    args += ["--epochs", "3", "--data-dir", "records", "--ckpt-dir", "ckpt"]
    return _ok(_run_script(args, cwd, script=IMAGE_FOLDER)), cwd


def test_the_photos_are_decoded_by_content_and_the_damaged_ones_named(photo_run):
    stdout, cwd = photo_run
    info = json.loads((cwd / "records" / "info.json").read_text())
    assert info["dataset"] == "shapes_32px"
    assert sorted(info["skipped"]) == TRUNCATED  # the PNGs named .jpg were read
    assert all(r and "\n" not in r for r in info["skipped"].values()), info  # TensorFlow's error
    counts = np.sum([info["classes"][s] for s in ("train", "validation", "test")], axis=0)
    assert counts.tolist() == [40, 59, 89]  # blue, green, red (sorted), less the two cut short
    assert min(info["classes"]["test"]) > 0
    assert stdout.startswith("2 unreadable examples left out: records/info.json names them\n")


def test_a_short_run_on_the_photos_trains_above_its_baseline(photo_run):
    stdout, cwd = photo_run
    assert _epochs(stdout, 3) == ["1", "2", "3"]
    info = json.loads((cwd / "records" / "info.json").read_text())
    test = info["classes"]["test"]
    assert _done_baseline(stdout) == round(max(test) / sum(test), 4)
    assert f" on {sum(test)} examples " in stdout
    assert _done_accuracy(stdout) > _done_baseline(stdout), stdout
    model = train_tpu.keras.models.load_model(cwd / "ckpt" / "model.keras")
    assert tuple(model.inputs[0].shape) == (None, 32, 32, 3)


def test_a_photo_is_fitted_into_the_square_without_stretching(tmp_path):
    import tensorflow as tf

    (tmp_path / "only").mkdir()
    wide = np.full((50, 200, 3), 255, np.uint8)  # white, 4 times as wide as high
    (tmp_path / "only" / "wide.png").write_bytes(tf.io.encode_png(wide).numpy())
    data = image_folder.ImageFolder(str(tmp_path), 40)
    ((name, _, item),) = data.examples()
    pixels, label = data.read(item)
    assert name == "only/wide.png" and label == 0
    assert pixels.dtype == np.uint8 and pixels.shape == (40, 40, 3)
    rows = pixels[:, :, 0].max(axis=1)
    assert rows.tolist() == [0] * 15 + [255] * 10 + [0] * 15  # black above and below


def test_the_photos_are_written_with_their_classes_mixed(photos):
    # --train-examples N trains on the first N written: not on the first classes alone.
    first = [
        name.split("/")[0] for name, _, _ in image_folder.ImageFolder(str(photos), 32).examples()
    ]
    assert len(first) == sum(count for _, count in PHOTOS.values())
    assert set(first[:20]) == set(PHOTOS)


# ---- texts: Debian's fortunes ----

INSTALL = "apt-get install " + " ".join(p for p, _ in text_fortunes.LANGUAGES.values())


def _fortunes_missing():
    """The first language whose files are missing, or None."""
    for language, (_, pattern) in text_fortunes.LANGUAGES.items():
        if not glob.glob(f"{text_fortunes.FOLDER}/{pattern}"):
            return language
    return None


# CI installs the packages (.ci/run) and must run these; elsewhere they skip, saying how.
needs_fortunes = pytest.mark.skipif(
    _fortunes_missing() is not None and not os.environ.get("CI"),
    reason=f"Debian's fortunes are not installed ({_fortunes_missing()} missing): {INSTALL}",
)


@needs_fortunes
def test_the_fortunes_are_int32_ids_of_one_length():
    data = text_fortunes.Fortunes()
    examples = list(data.examples())
    assert len(examples) > 50_000
    ids = np.stack([data.read(item)[0] for _, _, item in examples])
    assert ids.dtype == np.int32 and ids.shape[1:] == data.SHAPE == (text_fortunes.LENGTH,)
    assert text_fortunes.LENGTH % 8 == 0  # a TPU pads rows to tiles of 8
    assert ids.min() == 0 and ids.max() < text_fortunes.VOCABULARY
    assert (ids[:, 0] > 0).all()  # every text has a word: never all padding
    # Written in a mixed order (--train-examples takes the first): all five languages early.
    first = [data.read(item)[1] for _, split, item in examples[:500] if split == "train"]
    assert set(first) == set(range(5))


def test_the_vocabulary_is_counted_on_the_training_texts_only(monkeypatch):
    def text_in(split, words, tag):  # a last word of its own, whose number picks the split
        texts = (f"{words} {tag}{i}" for i in range(1000))
        text = next(t for t in texts if train_tpu.split_of(t, test=0.2) == split)
        return text, text.split()[-1]

    (train, a), (again, b) = (
        text_in("train", "la casa es grande", "a"),
        text_in("train", "la casa la casa", "b"),
    )
    test, _ = text_in("test", "la casa nueva", "t")
    validation, _ = text_in("validation", "vieja casa", "v")
    texts = {t: "Spanish" for t in (train, again, test, validation)}
    monkeypatch.setattr(text_fortunes.Fortunes, "texts", lambda self: texts)
    data = text_fortunes.Fortunes()
    examples = {item[0]: (split, item) for _, split, item in data.examples()}
    assert {t: split for t, (split, _) in examples.items()} == {
        train: "train", again: "train", test: "test", validation: "validation"
    }  # fmt: skip
    # The commonest first (la and casa 3 times each), from id 2 on: the training words only.
    assert data.vocabulary == {"la": 2, "casa": 3, "es": 4, "grande": 5, a: 6, b: 7}
    ids, label = data.read(examples[test][1])
    assert label == text_fortunes.Fortunes.CLASSES.index("Spanish")
    assert ids[:5].tolist() == [2, 3, 1, 1, 0]  # "nueva" and the last word, in no training text: 1
    assert data.read(examples[validation][1])[0][:4].tolist() == [1, 3, 1, 0]


@needs_fortunes
def test_a_short_run_on_the_fortunes_trains_above_its_baseline(tmp_path):
    args = ["--replicas", "2", "--per-replica-batch", "32", "--epochs", "2"]
    args += ["--train-examples", "2048", "--data-dir", "records", "--ckpt-dir", "ckpt"]
    stdout = _ok(_run_script(args, tmp_path, script=TEXT_FORTUNES))
    assert stdout.startswith("MirroredStrategy, 2 replica(s), ") and _epochs(stdout, 2) == [
        "1",
        "2",
    ]
    info = json.loads((tmp_path / "records" / "info.json").read_text())
    assert info["dataset"] == "fortunes" and info["skipped"] == {}
    test = info["classes"]["test"]
    assert _done_baseline(stdout) == round(max(test) / sum(test), 4) < 0.40  # German's share
    assert _done_accuracy(stdout) > _done_baseline(stdout) + 0.3, stdout


FLOOR = 0.90  # --smoke on 8 replicas reached 0.990 (German, the largest class: 34% of the test)


# With the custom loop, lesson 13_text_on_a_tpu runs the same --smoke training on every stack
# and asserts the same floor; fit's run is here only.
@pytest.mark.slow
@needs_fortunes
def test_the_fortunes_smoke_run_with_fit_reaches_the_floor(tmp_path):
    args = ["--smoke", "--fit", "--data-dir", "records", "--ckpt-dir", "ckpt"]
    stdout = _ok(_run_script(args, tmp_path, script=TEXT_FORTUNES))
    assert _epochs(stdout, 3) == ["1", "2", "3"]
    assert _done_accuracy(stdout) > FLOOR > _done_baseline(stdout), stdout
