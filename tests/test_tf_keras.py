"""The reference script on tf-keras (Keras 2), the fallback Google's own TensorFlow pod tests run.

The script's ``keras = tf.keras`` is tf-keras where ``TF_USE_LEGACY_KERAS=1`` (the main stack
installs tf-keras), Keras 3 otherwise. Its quick run cut to 4,096 examples must reach the floor
03_keras_compile_and_fit asserts for that many, and ``fit`` must resume from
tf-keras' own backup. Main stack only: the other stacks are the platforms' pins, which do not
carry tf-keras.
"""

from __future__ import annotations

import re

import pytest
from conftest import _done_accuracy, _run_script

# 03_keras_compile_and_fit's floor on Fashion-MNIST for 4,096 training examples (16,384: 0.80).
# The script's full quick run must reach 0.80 in tests/test_train_tpu.py; a quarter of it here.
FLOOR = 0.70


def _run(args, cwd):
    return _run_script(args, cwd, timeout=900, TF_USE_LEGACY_KERAS="1")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    import train_tpu

    folder = tmp_path_factory.mktemp("data") / "records"
    train_tpu.write_tfrecords(str(folder), train_tpu.FashionMNIST())
    return str(folder)


@pytest.mark.slow
def test_the_quick_run_trains_on_tf_keras_to_the_floor(tmp_path, data_dir):
    import tf_keras  # the main stack's requirements install it: missing, the test fails

    done = _run(["--smoke", "--train-examples", "4096", "--data-dir", data_dir], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f", Keras {tf_keras.__version__}, " in done.stdout.splitlines()[0]
    assert tf_keras.__version__.startswith("2.")
    assert len(re.findall(r"^epoch \d/3: loss", done.stdout, re.M)) == 3
    assert _done_accuracy(done.stdout) > FLOOR, done.stdout
    assert (tmp_path / "checkpoints-smoke" / "model.keras").exists()


@pytest.mark.slow
def test_fit_on_tf_keras_resumes_from_its_own_backup(tmp_path, data_dir):
    # tf-keras' BackupAndRestore keeps a tf.train.Checkpoint in BACKUP/chief, not Keras 3's
    # weights file: the script's fit_backup restores it before fit, and --require-checkpoint
    # finds it.
    args = ["--fit", "--train-examples", "4096", "--data-dir", data_dir, "--ckpt-dir", "ckpt"]
    first = _run([*args, "--epochs", "1"], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert ", 4 steps per epoch\nstarting at step 0\n" in first.stdout
    assert (tmp_path / "ckpt" / "fit" / "chief" / "checkpoint").exists()
    again = _run([*args, "--epochs", "2", "--require-checkpoint"], tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "\nresumed at step 4\n" in again.stdout
    assert re.findall(r"^epoch (\d)/2", again.stdout, re.M) == ["2"]
