"""train_tpu.py, the reference script: what it imports, its errors, its accuracy and its resume.

Training runs are fresh processes (a simulated TPU needs its own TensorFlow runtime). On every
stack: the cheap checks and one very small run. The full runs are marked slow (make test runs
them on the main stack only), since the lessons run the same on every stack: 03 `--fit` and its
floor, 04 the custom loop and its floor, 08 the SIGKILL mid-save and the bit-for-bit resume. The
custom-loop run that checks the accuracy floor is also the uninterrupted reference of the
kill-and-resume test here (a kill just before an epoch ends): the resumed run must end with its
weights, bit for bit. The first-step loss on 8 replicas against one device (08) and the readiness
check of the script's pipeline, model and step (10) are asserted by those lessons on every stack,
and not repeated here.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.stacks  # also run on the kaggle and colab stacks (make test)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from script_parts import SCRIPT  # noqa: E402  (pyproject.toml's script setting)

sys.path.insert(0, str(ROOT))

import train_tpu  # noqa: E402

FLOOR = 0.80  # the test accuracy lessons 03_keras_compile_and_fit and 04_custom_training_loops assert on Fashion-MNIST, quick versions too
# The reference run: --smoke's images and epochs at the script's default batch and replicas
# (its parser's, so that the numbers below follow them), a save every half epoch, so that kills
# land inside an epoch.
SMOKE = train_tpu.parse_args(["--smoke"])
STEPS = SMOKE.train_examples // (SMOKE.per_replica_batch * SMOKE.replicas)  # an epoch's
RUN = ["--smoke", "--save-every", str(STEPS // 2), "--steps-per-call", "8"]
HIDE = ("ISTPUVM", "TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES", "CI")

# Kills the script where the test says: before the save of step K (mid-epoch, unsaved steps
# lost) or inside it in one phase of helpers.save_faults (the injection notebook 08_checkpoints_and_preemption uses):
# python -m helpers.save_faults --kill-at K --phase PHASE -- ARGS
KILLER = ["-m", "helpers.save_faults"]


def _env():
    env = {k: v for k, v in os.environ.items() if k not in HIDE}
    return {**env, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}


def _run(args, cwd, code=None, timeout=600, prefix=None):
    start = prefix or (["-c", code] if code else [str(SCRIPT)])
    command = [sys.executable, *start, *args]
    return subprocess.run(
        command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout
    )


def _accuracy(stdout):
    return float(re.search(r"^done: .* test accuracy ([0-9.]+) on all", stdout, re.M).group(1))


def _weights(folder):
    """Every saved value of the latest checkpoint but the save counter, by name."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(folder))
    names = [n for n, _ in tf.train.list_variables(str(folder))]
    return {n: reader.get_tensor(n) for n in names if "save_counter" not in n and "OBJECT" not in n}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """The TFRecords, written once by the script's own parts, for every run here."""
    folder = tmp_path_factory.mktemp("data") / "records"
    (x, y), (xt, yt) = train_tpu.load_fashion_mnist()
    train_tpu.write_tfrecords(str(folder), {"train": (x, y), "test": (xt, yt)})
    return folder


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data_dir):
    cwd = tmp_path_factory.mktemp("reference")
    done = _run([*RUN, "--data-dir", str(data_dir), "--ckpt-dir", "ckpt"], cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, cwd / "ckpt"


def test_imports_only_tensorflow_keras_numpy_and_the_standard_library():
    tree = ast.parse(SCRIPT.read_text(encoding="utf-8"))
    names = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    # tf_keras: only with TF_USE_LEGACY_KERAS=1, in place of keras (tests/test_tf_keras.py).
    assert names - set(sys.stdlib_module_names) == {"tensorflow", "keras", "tf_keras", "numpy"}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--epochs", "0"], "Argument --epochs: must be a whole number of at least 1, not '0'"),
        (["--replicas", "eight"], "Argument --replicas: must be a whole number of at least 1, not"),
        (["--bogus"], "Unrecognized arguments: --bogus (see --help)."),
    ],
)
def test_bad_arguments_are_one_sentence(argv, message):
    with pytest.raises(train_tpu.UsageError) as caught:
        train_tpu.parse_args(argv)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_batch_off_the_multiple_of_8_is_a_warning(capsys):
    assert train_tpu.parse_args(["--per-replica-batch", "12"]).per_replica_batch == 12
    assert "not a multiple of 8" in capsys.readouterr().err


def test_an_unwritable_folder_is_one_sentence(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(train_tpu.UsageError, match=r"^Cannot write to .*file/ckpt"):
        train_tpu.main(["--ckpt-dir", str(blocker / "ckpt"), "--data-dir", str(tmp_path)])


def test_require_checkpoint_refuses_an_empty_folder_without_a_traceback(tmp_path):
    done = _run(["--require-checkpoint", "--ckpt-dir", "empty", "--data-dir", "d"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "train_tpu: No checkpoint in empty to resume from (--require-checkpoint)."
    )
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_fit_asked_to_resume_does_not_take_the_custom_loops_checkpoint(tmp_path):
    # A custom-loop checkpoint in the folder: --fit keeps its backup in CKPT_DIR/fit.
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "checkpoint").write_text('model_checkpoint_path: "ckpt-32"\n')
    (tmp_path / "ckpt" / "ckpt-32.index").write_text("")
    with pytest.raises(train_tpu.UsageError, match=r"^No checkpoint in .*ckpt/fit to resume"):
        train_tpu.main(["--fit", "--require-checkpoint", "--ckpt-dir", str(tmp_path / "ckpt")])


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as caught:
        train_tpu.parse_args(["--help"])
    text = capsys.readouterr().out
    assert caught.value.code == 0
    for option in ("--ckpt-dir", "--data-dir", "--replicas", "--epochs", "--per-replica-batch",
                   "--steps-per-call", "--seed", "--smoke", "--fit", "--no-bf16",
                   "--cast-on-host", "--require-checkpoint"):  # fmt: skip
        assert option in text, option


def test_connect_again_with_another_replica_count_is_refused(monkeypatch):
    """The CPU is split once per process: connect(4) after connect(8) cannot return 4 replicas.
    A TPU or GPU strategy (no count asked for) is returned whatever the count."""
    simulated, tpu = object(), object()
    monkeypatch.setattr(train_tpu, "_CONNECTED", [(simulated, 8)])
    assert train_tpu.connect(8) is simulated and train_tpu.connected() is simulated
    with pytest.raises(train_tpu.UsageError, match=r"^This process simulates 8 replica\(s\)"):
        train_tpu.connect(4)
    monkeypatch.setattr(train_tpu, "_CONNECTED", [(tpu, None)])
    assert train_tpu.connect(4) is tpu


def test_what_only_the_simulated_tpu_needs_stays_in_its_part():
    # Outside the part "simulation", the script only calls it: keep, keep_fits_iterator, leave.
    sys.path.insert(0, str(ROOT / "tools"))
    import script_parts

    text = SCRIPT.read_text(encoding="utf-8")
    simulation = script_parts.parts(text)["simulation"]
    outside = text.replace(simulation, "")
    for only_there in ("os._exit", "KEPT", "_CONNECTED[0][1]", "simulated()"):
        assert only_there in simulation and only_there not in outside, only_there


def test_on_a_tpu_or_gpu_the_simulation_part_does_nothing(monkeypatch):
    tpu = object()
    monkeypatch.setattr(train_tpu, "_CONNECTED", [(tpu, None)])  # no replica count of ours
    monkeypatch.setattr(train_tpu, "KEPT", [])
    iterator = object()
    assert train_tpu.keep(iterator) is iterator and train_tpu.KEPT == []
    with pytest.raises(SystemExit) as ended:  # atexit hooks run (TPUStrategy registers one)
        train_tpu.leave(3)
    assert ended.value.code == 3
    monkeypatch.setattr(train_tpu, "_CONNECTED", [(object(), 8)])  # the simulated TPU
    assert train_tpu.keep(iterator) is iterator and train_tpu.KEPT == [iterator]


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    """A few TFRecords, written by the script's own parts: 1,024 training and 300 test images."""
    folder = tmp_path_factory.mktemp("small") / "records"
    (x, y), (xt, yt) = train_tpu.load_fashion_mnist()
    train_tpu.write_tfrecords(
        str(folder), {"train": (x[:1024], y[:1024]), "test": (xt[:300], yt[:300])}
    )
    return folder


def test_records_are_read_from_every_file_at_once_in_a_fixed_order(small_data):
    # 8 files of 128 training images: file k starts with image 128 k. Read in parallel, the
    # first 8 records are each file's first, in file order, every time.
    (_, y), _ = train_tpu.load_fashion_mnist()
    files = sorted(str(p) for p in small_data.glob("train-*.tfrecord"))
    for _ in range(2):
        first = next(iter(train_tpu.read_records(files).batch(8)))
        _, labels = train_tpu.parse_batch(first)
        assert labels.numpy().tolist() == y[0:1024:128].tolist()


def _damaged_copy(small_data, tmp_path, damage):
    import shutil

    folder = tmp_path / "records"
    shutil.copytree(small_data, folder)
    first = folder / "train-00000-of-00008.tfrecord"
    if damage == "short":  # a copy cut off
        first.write_bytes(first.read_bytes()[:-100])
    elif damage == "missing":
        first.unlink()
    else:  # a file from another write
        (folder / "train-00000-of-00004.tfrecord").write_bytes(first.read_bytes())
    return folder


@pytest.mark.parametrize(
    "damage, sentence",
    [
        ("short", "train-00000-of-00008.tfrecord holds 107164 bytes where info.json says 107264"),
        ("missing", "train-00000-of-00008.tfrecord is missing (info.json lists it): copy"),
        ("stray", "train-00000-of-00004.tfrecord is not listed in info.json: move it elsewhere."),
    ],
)
def test_damaged_data_is_refused_before_training(small_data, tmp_path, damage, sentence):
    folder = _damaged_copy(small_data, tmp_path, damage)
    with pytest.raises(train_tpu.UsageError, match=re.escape(sentence)):
        train_tpu.main(["--data-dir", str(folder), "--ckpt-dir", str(tmp_path / "ckpt")])
    assert not (tmp_path / "ckpt" / "checkpoint").exists()  # nothing trained
    assert train_tpu.read_info(str(small_data))["train"] == [128] * 8  # the original is whole


def test_damaged_data_ends_the_script_with_one_sentence(small_data, tmp_path):
    folder = _damaged_copy(small_data, tmp_path, "short")
    done = _run(["--data-dir", str(folder), "--ckpt-dir", "ckpt"], tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (last,) = [line for line in done.stderr.splitlines() if line.startswith("train_tpu:")]
    assert "cut short or changed): copy the folder again, or delete it" in last


def test_a_very_small_run_prints_a_line_per_epoch_and_evaluates_every_test_image(
    tmp_path, small_data
):
    # 2 replicas of 32: a global batch of 64, 16 steps per epoch; 300 test images fill 5
    # batches, the last one padded.
    args = (
        "--replicas 2 --per-replica-batch 32 --epochs 2 --steps-per-call 4 --save-every 6".split()
    )
    args += ["--data-dir", str(small_data), "--ckpt-dir", "ckpt"]
    done = _run(args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0] == (
        f"MirroredStrategy, 2 replica(s), {train_tpu.KERAS}, global batch 64, 16 steps per "
        "epoch; starting at step 0"
    )
    for epoch, line in enumerate(lines[1:3], 1):
        assert re.match(rf"epoch {epoch}/2: loss [0-9.]+, test loss [0-9.]+, test accuracy", line)
        assert "(300 images)" in line
    assert lines[3].startswith("done: 32 steps, test accuracy")
    assert "on all 300 test images" in lines[3] and len(lines) == 4
    assert _weights(tmp_path / "ckpt")["step/.ATTRIBUTES/VARIABLE_VALUE"] == 32


def test_fit_on_one_replica_runs_its_epoch_plan(tmp_path, small_data):
    # One replica takes many steps per call, as a TPU does. 1,016 images make 127 batches of 8:
    # calls of 50 would train 100 of them; the plan's 3 calls of 42 leave one out.
    args = "--fit --replicas 1 --per-replica-batch 8 --train-examples 1016 --epochs 2".split()
    args += ["--data-dir", str(small_data), "--ckpt-dir", "ckpt"]
    done = _run(args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "126 steps per epoch (99.2% of 127 batches)" in done.stdout
    assert "fit with steps_per_execution=42" in done.stdout
    assert len(re.findall(r"^epoch \d/2: loss [0-9.]+, test loss", done.stdout, re.M)) == 2


def test_the_model_every_proof_builds_is_float32_and_draws_no_random_numbers():
    """The proofs of equality (lessons, self-test, the loopback workers) build
    build_model(**EXACT) and compare weights to the last bit: a layer added to the script's model
    that draws random numbers in training (Dropout) fails here, before any lesson runs."""
    model = train_tpu.build_model(**train_tpu.EXACT, seed=0)
    computed = {layer.compute_dtype for layer in model.layers[1:]}  # after the uint8 input
    assert computed == {"float32"} and {w.dtype for w in model.weights} == {"float32"}
    x = np.random.default_rng(0).integers(0, 256, (4, 28, 28, 1)).astype(np.uint8)
    first, second = (np.asarray(model(x, training=True)) for _ in range(2))
    assert np.array_equal(first, second), (
        "build_model(**EXACT) gives two outputs for one input in training: switch its random "
        "layers off in EXACT, or the proofs of equality fail"
    )


def test_keras3_fits_failure_to_average_integers_says_what_to_do(monkeypatch):
    # The TypeError TPUStrategy raises from Keras 3's first-batch average (tests/test_fitting.py
    # runs both halves); any other TypeError is left alone, and tf-keras never averages.
    strategy = train_tpu.tf.distribute.get_strategy()
    failure = TypeError("Cannot convert 0.125 to EagerTensor of dtype uint8")
    problem = train_tpu.fit_start_error(failure, strategy)
    assert isinstance(problem, train_tpu.UsageError)
    assert "TF_USE_LEGACY_KERAS=1 (pip install tf-keras~=" in str(problem)
    assert "dtype uint8" in str(problem) and "without --fit" in str(problem)
    assert train_tpu.fit_start_error(TypeError("unsupported operand"), strategy) is None
    monkeypatch.setattr(train_tpu, "LEGACY_KERAS", True)
    assert train_tpu.fit_start_error(failure, strategy) is None


@pytest.mark.slow
def test_the_custom_loop_reaches_the_floor(reference):
    stdout, _ = reference
    assert len(re.findall(rf"^epoch \d/{SMOKE.epochs}: loss", stdout, re.M)) == SMOKE.epochs
    assert _accuracy(stdout) > FLOOR, stdout
    assert "on all 10000 test images" in stdout


@pytest.mark.slow
def test_killed_before_an_epoch_ends_it_resumes_mid_epoch_with_the_same_weights(
    tmp_path, data_dir, reference
):
    # Killed just before the save at the end of epoch 2: the save half an epoch earlier stays
    # the latest, so the restart resumes mid-epoch 2 and its epoch line says so.
    # 08_checkpoints_and_preemption kills the script inside a mid-epoch save (the phase that
    # leaves a torn save) on every stack.
    args = [*RUN, "--data-dir", str(data_dir), "--ckpt-dir", "ckpt"]
    kill = ["--kill-at", str(2 * STEPS), "--phase", "before", "--"]
    killed = _run([*kill, *args], tmp_path, prefix=KILLER)
    assert killed.returncode == -9, killed.stderr[-3000:]
    resumed = _run([*args, "--require-checkpoint"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed at step {2 * STEPS - STEPS // 2}" in resumed.stdout
    resumed_line = (
        rf"^epoch 2/{SMOKE.epochs}: loss [0-9.]+ \(its last {STEPS // 2} steps: resumed\)"
    )
    assert re.search(resumed_line, resumed.stdout, re.M)
    expected, got = _weights(reference[1]), _weights(tmp_path / "ckpt")
    assert expected.keys() == got.keys() and len(got) > 10
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)  # bit for bit
    assert _accuracy(resumed.stdout) == _accuracy(reference[0])


@pytest.fixture(scope="module")
def fit_reference(tmp_path_factory, data_dir):
    """--fit's uninterrupted run: --smoke's epochs of STEPS steps, its backup in ckpt/fit."""
    cwd = tmp_path_factory.mktemp("fit")
    done = _run(["--smoke", "--fit", "--data-dir", str(data_dir), "--ckpt-dir", "ckpt"], cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, cwd / "ckpt" / "fit"


def _backup_weights(folder):
    """Every array of fit's backup (Keras' latest.weights.h5), by its place in the file."""
    import h5py

    arrays = {}
    with h5py.File(folder / "latest.weights.h5", "r") as weights:
        weights.visititems(
            lambda name, item: arrays.update({name: item[()]}) if hasattr(item, "shape") else None
        )
    return arrays


@pytest.mark.slow
def test_fit_reaches_the_floor(fit_reference):
    stdout, _ = fit_reference
    # 8 replicas of a MirroredStrategy: one step per call (keras-team/keras#19246).
    assert "fit with steps_per_execution=1" in stdout
    assert len(re.findall(rf"^epoch \d/{SMOKE.epochs}: loss", stdout, re.M)) == SMOKE.epochs
    assert _accuracy(stdout) > FLOOR, stdout


@pytest.mark.slow
def test_fit_killed_mid_epoch_resumes_at_its_last_epoch_with_the_same_weights(
    tmp_path, data_dir, fit_reference
):
    # SIGKILL as soon as epoch 1's line is out (its backup is written before the line): the
    # kill lands inside epoch 2, whose steps are lost; the restart trains epochs 2 and 3 on the
    # data an uninterrupted run gives them, and ends with its weights, bit for bit.
    args = ["--smoke", "--fit", "--data-dir", str(data_dir), "--ckpt-dir", "ckpt"]
    run = subprocess.Popen(
        [sys.executable, str(SCRIPT), *args], cwd=tmp_path, env=_env(), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for line in run.stdout:
            if line.startswith(f"epoch 1/{SMOKE.epochs}"):
                run.kill()
                break
    finally:
        run.kill()
        run.wait(timeout=60)
    assert run.returncode == -9
    resumed = _run([*args, "--require-checkpoint"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"{STEPS} steps per epoch; resumed at step {STEPS}" in resumed.stdout
    later = [str(epoch) for epoch in range(2, SMOKE.epochs + 1)]
    assert re.findall(rf"^epoch (\d)/{SMOKE.epochs}", resumed.stdout, re.M) == later
    expected, got = _backup_weights(fit_reference[1]), _backup_weights(tmp_path / "ckpt" / "fit")
    assert expected.keys() == got.keys() and len(got) > 10
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)  # bit for bit
    assert _accuracy(resumed.stdout) == _accuracy(fit_reference[0])
