"""tools/platforms.py: the platform watch, on recorded copies of what the platforms publish."""

from __future__ import annotations

import dataclasses
import shutil
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tools  # a maintainer's tool: make test runs these on the main stack only

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import platforms  # noqa: E402

RECORDED = platforms.RECORDED
TODAY = RECORDED / platforms.TODAY  # the snapshot that stands for today


def test_todays_recorded_platforms_show_no_drift(capsys):
    assert platforms.main(["--recorded", "today"]) == 0
    assert "No platform fact moved" in capsys.readouterr().out


def test_kaggle_on_python_3_13_names_exactly_that_edit(capsys):
    assert platforms.main(["--recorded", str(RECORDED / "kaggle-python-3.13")]) == 1
    out = capsys.readouterr().out
    assert 'PLATFORMS["kaggle"] python="3.13"' in out
    assert out.count("edit:") == 1


def test_each_kind_of_move_gets_its_own_edit():
    today = platforms.read_published(TODAY)
    moved = dataclasses.replace(
        today,
        colab_tensorflow="tensorflow 2.21.0",
        tpu_wheels={**today.tpu_wheels, "2.21.0": ("3.12", "3.13", "3.14"), "2.20.0": ("3.13",)},
        libtpu_newest="0.0.60",
    )
    edits = {d.what: d.edit for d in platforms.compare(moved)}
    assert set(edits) == {
        "colab's TPU image: TensorFlow",
        "newest tensorflow-tpu",
        "tensorflow-tpu 2.20.0: Pythons with a wheel",
        "newest libtpu",
    }
    assert "NEWEST_TPU_TENSORFLOW = '2.21.0'" in edits["newest tensorflow-tpu"]
    assert "LIBTPU_NEWEST_SEEN = '0.0.60'" in edits["newest libtpu"]


def test_the_readers_follow_the_published_formats():
    assert platforms.read_colab("Ubuntu\nPython 3.14.1\n", "jax==0.8\ntensorflow==2.21.0\n") == (
        "3.14",
        "tensorflow 2.21.0",
    )
    config = "BASE_IMAGE=python:3.13-slim\nTENSORFLOW_VERSION=2.20.0\n"
    requirements = "# tensorflow-tpu==9\ntensorflow-tpu==${TENSORFLOW_VERSION}\njax[tpu]\n"
    assert platforms.read_kaggle(config, requirements) == ("3.13", "tensorflow-tpu 2.20.0")
    with pytest.raises(ValueError, match="BASE_IMAGE"):
        platforms.read_kaggle("BASE_IMAGE=ubuntu:24.04\n", "")


def test_a_missing_source_exits_2_naming_it(tmp_path, capsys):
    shutil.copytree(TODAY, tmp_path / "partial")
    (tmp_path / "partial" / "config.txt").unlink()
    assert platforms.main(["--recorded", str(tmp_path / "partial")]) == 2
    assert "config.txt" in capsys.readouterr().err
