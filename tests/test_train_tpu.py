"""train_tpu.py, the reference script: what it imports, its errors, its data, its runs, its resume.

Training runs are fresh processes on the simulated TPU (``python -m helpers.simulation
train_tpu.py ARGS``: a simulated TPU needs its own TensorFlow runtime). On every stack: the cheap
checks, one very small run whose exported model is loaded back without a strategy, and fit on one
replica. Marked slow (the main stack only): the --smoke runs, the custom loop's floor and its
kill-and-resume (killed just before an epoch ends, or inside a save), fit's kill-and-resume, and
fit on uint8 pixels. The kill tests run on the small data set, at 16 per replica: a resumed run
must end with the weights of an uninterrupted one, bit for bit.
"""

from __future__ import annotations

import ast
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    _done_accuracy,
    _done_baseline,
    _run_script,
    _script_command,
    fashion_mnist_slice,
)

pytestmark = pytest.mark.stacks  # also run on the kaggle and colab stacks (make test)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from script_parts import SCRIPT  # noqa: E402  (pyproject.toml's script setting)

sys.path.insert(0, str(ROOT))

import tensorflow as tf  # noqa: E402

import train_tpu  # noqa: E402
from helpers import save_faults  # noqa: E402

keras = train_tpu.keras
FLOOR = 0.80  # 03_keras_compile_and_fit's and 04_custom_training_loops' floor on Fashion-MNIST
# The reference run: --smoke's examples and epochs at the script's default batch and replicas
# (its parser's, so that the numbers below follow them), a save every half epoch, so that kills
# land inside an epoch.
SMOKE = train_tpu.parse_args(["--smoke"])
STEPS = SMOKE.train_examples // (SMOKE.per_replica_batch * SMOKE.replicas)  # an epoch's
RUN = ["--smoke", "--save-every", str(STEPS // 2), "--steps-per-call", "8"]
# The small data set: the first 1,280 training images (1,122 of them train, 158 validate: the
# script's split by name) and the first 300 test images.
SMALL_TRAIN, SMALL_VALIDATION, SMALL_TEST = 1122, 158, 300


def _weights(folder):
    """Every saved value of the latest checkpoint but the save counter, by name."""
    reader = tf.train.load_checkpoint(str(folder))
    names = [n for n, _ in tf.train.list_variables(str(folder))]
    return {n: reader.get_tensor(n) for n in names if "save_counter" not in n and "OBJECT" not in n}


def _assert_same_arrays(expected, got):
    assert expected.keys() == got.keys() and len(got) > 10
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)  # bit for bit


def _epochs(stdout, epochs):
    return re.findall(rf"^epoch (\d+)/{epochs}: ", stdout, re.M)  # the epochs printed


def _ok(done):
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


# ---- what the script is made of, and its arguments ----


def test_imports_only_tensorflow_numpy_and_the_standard_library():
    text = SCRIPT.read_text(encoding="utf-8")
    tree = ast.parse(text)
    names = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names - set(sys.stdlib_module_names) == {"tensorflow", "numpy"}
    # Keras is TensorFlow's: Keras 3, or tf-keras where TF_USE_LEGACY_KERAS=1 (test_tf_keras.py).
    assert re.search(r"^keras = tf\.keras\b", text, re.M)


@pytest.mark.parametrize(
    "argv, error",
    [
        (["--epochs", "0"], "argument --epochs: must be a whole number of at least 1, not '0'"),
        (["--replicas", "eight"], "argument --replicas: must be a whole number of at least 1, not"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_arguments_exit_with_status_2_and_one_line(argv, error, capsys):
    with pytest.raises(SystemExit) as caught:
        train_tpu.parse_args(argv)
    assert caught.value.code == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said[0].startswith("usage: train_tpu ")  # argparse's usage, then its one line
    assert said[-1].startswith(f"train_tpu: error: {error}")
    assert [line for line in said if "error" in line] == said[-1:]


def test_a_batch_off_the_multiple_of_8_is_a_warning(capsys):
    assert train_tpu.parse_args(["--per-replica-batch", "12"]).per_replica_batch == 12
    assert capsys.readouterr().err == "warning: --per-replica-batch is not a multiple of 8.\n"
    train_tpu.parse_args(["--per-replica-batch", "16"])
    assert capsys.readouterr().err == ""


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as caught:
        train_tpu.parse_args(["--help"])
    text = capsys.readouterr().out
    assert caught.value.code == 0
    for option in ("--ckpt-dir", "--data-dir", "--prepare", "--replicas", "--epochs",
                   "--per-replica-batch", "--steps-per-call", "--save-every", "--learning-rate",
                   "--train-examples", "--seed", "--smoke", "--fit", "--bf16", "--no-bf16", "--uint8",
                   "--require-checkpoint"):  # fmt: skip
        assert option in text, option


def _hidden_policies(strategy, **kw):
    model, _ = train_tpu.build(strategy, 1e-3, shape=(28, 28, 1), classes=10, **kw)
    return {layer.dtype_policy.name for layer in model.layers[1:-1]}, model.layers[-1].compute_dtype


def test_bfloat16_by_default_on_a_tpu_only():
    # A TPU multiplies in bfloat16; a CPU without AVX-512 computes its gradients on a slow path.
    class TPUStrategyV2(tf.distribute.OneDeviceStrategy):  # tf.distribute.TPUStrategy's name
        pass

    assert tf.distribute.TPUStrategy.__name__ == "TPUStrategyV2"
    assert _hidden_policies(_strategy()) == ({"float32"}, "float32")
    assert _hidden_policies(TPUStrategyV2("/cpu:0")) == ({"mixed_bfloat16"}, "float32")
    assert _hidden_policies(_strategy(), bf16=True) == ({"mixed_bfloat16"}, "float32")
    assert _hidden_policies(TPUStrategyV2("/cpu:0"), bf16=False) == ({"float32"}, "float32")
    assert train_tpu.parse_args([]).bf16 is None
    assert train_tpu.parse_args(["--no-bf16"]).bf16 is False


# ---- the data: written once, checked before every run ----


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    """The small data set's TFRecords, written by the script's own part."""
    folder = tmp_path_factory.mktemp("small") / "records"
    info = train_tpu.write_tfrecords(str(folder), fashion_mnist_slice(1280, SMALL_TEST))
    found = {split: sum(counts) for split, counts in info["classes"].items()}
    assert found == {"train": SMALL_TRAIN, "validation": SMALL_VALIDATION, "test": SMALL_TEST}
    return folder


def _strategy():
    """The default strategy (one device): main() given it needs no devices of its own."""
    return tf.distribute.get_strategy()


def test_records_are_read_from_every_file_at_once_in_a_fixed_order(small_data):
    # Record k of a split is in file k % 8. Read from the 8 files at once and in turn, the
    # records come back in the order they were written (read one file after another, the
    # first 16 would be records 0, 8, 16, ... of file 0), every time.
    written = [
        item[1] for _, split, item in fashion_mnist_slice(1280, 0).examples() if split == "train"
    ]
    ctx = tf.distribute.InputContext()  # one host, one replica
    assert len(list(small_data.glob("train-*-of-00008.tfrecord"))) == train_tpu.SHARDS == 8
    for _ in range(2):
        first = next(iter(train_tpu.read_records(str(small_data), "train", ctx).batch(16)))
        _, labels = train_tpu.parse(first, train_tpu.FashionMNIST())
        assert labels.numpy().tolist() == [int(y) for y in written[:16]]


def test_a_resumed_pipeline_gives_the_batches_an_uninterrupted_one_gives(small_data):
    ctx, data = tf.distribute.InputContext(), train_tpu.FashionMNIST()
    kw = dict(batch=32, data=data, steps=10, epochs=3, seed=5)  # 3 epochs of 10 batches

    def labels(start):
        ds = train_tpu.train_dataset(str(small_data), ctx, start=start, **kw)
        return [y.numpy().tolist() for _, y in ds]

    whole = labels(0)
    assert len(whole) == 30 and whole[:10] != whole[10:20]  # each epoch its own shuffle
    assert labels(13) == whole[13:]  # resumed at step 13: epoch 2's fourth batch on


def test_every_test_example_is_evaluated_once_in_static_batches(small_data):
    ctx, data = tf.distribute.InputContext(), train_tpu.FashionMNIST()
    steps = math.ceil(SMALL_TEST / 64)  # 5 batches of 64: 20 blank examples fill the last
    ds = train_tpu.eval_dataset(str(small_data), ctx, 64, data, steps)
    batches = list(ds.take(2 * steps))  # it repeats: the second pass is the first again
    assert {tuple(x.shape) for x, _, _ in batches} == {(64, 28, 28, 1)}
    weights = np.concatenate([w.numpy() for _, _, w in batches[:steps]])
    assert weights.sum() == SMALL_TEST and set(weights[SMALL_TEST:]) == {0.0}
    again = np.concatenate([y.numpy() for _, y, _ in batches[steps:]])
    assert again.tolist() == np.concatenate([y.numpy() for _, y, _ in batches[:steps]]).tolist()


class Tiny:
    """A data set of 20 two-byte examples whose read fails for items 3 and 7."""

    NAME = "tiny"
    CLASSES = ["even", "odd"]
    SHAPE, DTYPE = (2,), "uint8"

    def examples(self):
        for i in range(20):
            yield f"item-{i}", "test" if i % 5 == 0 else "train", i

    def read(self, i):
        if i in (3, 7):
            raise ValueError(f"item {i} is damaged\n(its second line)")
        return np.full(self.SHAPE, i, np.uint8), i % 2


def test_an_unreadable_example_is_left_out_counted_and_named(tmp_path, capsys):
    folder = str(tmp_path / "tiny")
    info = train_tpu.main(["--prepare", "--data-dir", folder], data=Tiny())
    said = capsys.readouterr().out
    assert said == f"2 unreadable examples left out: {folder}/info.json names them\n"
    assert info["skipped"] == {
        "item-3": "item 3 is damaged (its second line)",
        "item-7": "item 7 is damaged (its second line)",
    }
    # 18 read: the 4 test examples (0, 5, 10, 15) and 14 of train (3 and 7, odd, left out).
    assert info["classes"] == {"test": [2, 2], "train": [8, 6]}
    assert json.loads((tmp_path / "tiny" / "info.json").read_text()) == info
    # --prepare again only checks what is there.
    before = (tmp_path / "tiny" / "info.json").stat().st_mtime_ns
    assert train_tpu.main(["--prepare", "--data-dir", folder], data=Tiny()) == info
    assert (tmp_path / "tiny" / "info.json").stat().st_mtime_ns == before
    assert capsys.readouterr().out == ""


def test_an_example_of_the_wrong_shape_is_one_sentence(tmp_path):
    class Wrong(Tiny):
        def read(self, i):
            return np.zeros(3, np.uint8), 0

    with pytest.raises(train_tpu.UsageError) as caught:
        train_tpu.write_tfrecords(str(tmp_path / "wrong"), Wrong())
    assert str(caught.value) == "item-0 is not uint8 (2,): fix tiny's read."


def test_another_data_sets_folder_is_refused_in_one_sentence(tmp_path):
    folder = str(tmp_path / "tiny")
    train_tpu.write_tfrecords(folder, Tiny())
    with pytest.raises(train_tpu.UsageError) as caught:
        train_tpu.main(["--data-dir", folder, "--ckpt-dir", str(tmp_path / "ckpt")])
    assert str(caught.value) == (
        f"{folder} holds another data set than fashion_mnist: copy it again, or delete the folder "
        "and the script writes it anew."
    )


def _damaged_copy(small_data, tmp_path, damage):
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


# The first training file holds 141 of the 1,122 training images, 830 bytes each on disk.
@pytest.mark.parametrize(
    "damage, sentence",
    [
        ("short", "train-00000-of-00008.tfrecord holds 116930 bytes where info.json says 117030"),
        ("missing", "train-00000-of-00008.tfrecord holds 0 bytes where info.json says 117030"),
        ("stray", "train-00000-of-00004.tfrecord holds 117030 bytes where info.json says nothing"),
    ],
)
def test_damaged_data_is_refused_before_training(small_data, tmp_path, damage, sentence):
    folder = _damaged_copy(small_data, tmp_path, damage)
    with pytest.raises(train_tpu.UsageError) as caught:  # before a strategy is asked for
        train_tpu.main(["--data-dir", str(folder), "--ckpt-dir", str(tmp_path / "ckpt")])
    assert str(caught.value) == (
        f"{folder}/{sentence}: copy it again, or delete the folder and the script writes it anew."
    )
    assert not (tmp_path / "ckpt").exists()  # nothing trained
    assert train_tpu.read_info(str(small_data), train_tpu.FashionMNIST())  # the original is whole


def test_damaged_data_ends_the_script_with_one_sentence(small_data, tmp_path):
    folder = _damaged_copy(small_data, tmp_path, "short")
    done = _run_script(["--data-dir", str(folder), "--ckpt-dir", "ckpt"], tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stdout == ""
    (last,) = [line for line in done.stderr.splitlines() if line.startswith("train_tpu:")]
    assert last.startswith(f"train_tpu: {folder}/train-00000-of-00008.tfrecord holds 116930 ")


def test_hosts_of_a_pod_refuse_to_write_the_data(tmp_path):
    """Each host would write the same files at once: main() asks for --prepare instead."""

    class Pod:  # what main() asks of a strategy before it reads or writes any data
        def distribute_datasets_from_function(self, make):
            return make(tf.distribute.InputContext(num_input_pipelines=4, input_pipeline_id=1))

    folder = str(tmp_path / "d")
    with pytest.raises(train_tpu.UsageError) as caught:
        train_tpu.main(["--data-dir", folder, "--ckpt-dir", str(tmp_path / "c")], strategy=Pod())
    assert str(caught.value) == f"No TFRecords in {folder}: write them with --prepare first."
    assert not (tmp_path / "d").exists()


# ---- refusals at the start of a run ----


def test_an_unwritable_folder_is_one_sentence(tmp_path, small_data):
    blocker = tmp_path / "file"
    blocker.write_text("")
    args = ["--ckpt-dir", str(blocker / "ckpt"), "--data-dir", str(small_data)]
    with pytest.raises(train_tpu.UsageError) as caught:
        train_tpu.main(args, strategy=_strategy())
    assert str(caught.value) == f"Cannot write to {blocker}/ckpt ({blocker} is not a directory)."


def test_require_checkpoint_refuses_an_empty_folder_without_a_traceback(tmp_path, small_data):
    args = ["--require-checkpoint", "--ckpt-dir", "empty", "--data-dir", str(small_data)]
    done = _run_script([*args, "--replicas", "2"], tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "train_tpu: No checkpoint in empty to resume from."
    )
    assert (
        "starting at step" not in done.stdout and not (tmp_path / "empty" / "checkpoint").exists()
    )


def test_fit_asked_to_resume_does_not_take_the_custom_loops_checkpoint(tmp_path, small_data):
    # A custom-loop checkpoint in the folder: --fit keeps its backup in CKPT_DIR/fit.
    ckpt = tmp_path / "ckpt"
    model, optimizer = train_tpu.build(_strategy(), 1e-3, shape=(28, 28, 1), classes=10)
    manager, step = train_tpu.checkpointing(str(ckpt), model, optimizer)
    step.assign(8)
    manager.save(checkpoint_number=8)
    args = ["--fit", "--require-checkpoint", "--ckpt-dir", str(ckpt), "--data-dir", str(small_data)]
    with pytest.raises(train_tpu.UsageError) as caught:
        train_tpu.main(args, strategy=_strategy())
    assert str(caught.value) == f"No checkpoint in {ckpt}/fit to resume from."


# ---- runs on every stack ----


@pytest.fixture(scope="module")
def very_small_run(tmp_path_factory, small_data):
    """2 replicas of 32: a global batch of 64, 17 steps per epoch of 1,122 images; the 158
    validation and 300 test images fill 3 and 5 batches, the last one padded."""
    cwd = tmp_path_factory.mktemp("very_small")
    args = "--replicas 2 --per-replica-batch 32 --epochs 2 --steps-per-call 4 --save-every 6"
    done = _run_script([*args.split(), "--data-dir", str(small_data), "--ckpt-dir", "ckpt"], cwd)
    return _ok(done), cwd / "ckpt"


def test_a_very_small_run_prints_a_line_per_epoch_and_evaluates_every_test_example(
    very_small_run, small_data
):
    stdout, ckpt = very_small_run
    lines = stdout.strip().splitlines()
    assert lines[:2] == [
        f"MirroredStrategy, 2 replica(s), Keras {keras.__version__}, float32, global batch 64, "
        "17 steps per epoch",
        "starting at step 0",
    ]
    for epoch, line in enumerate(lines[2:4], 1):
        assert re.fullmatch(
            rf"epoch {epoch}/2: loss [0-9.]+, validation loss [0-9.]+, accuracy [0-9.]+ "
            rf"\({SMALL_VALIDATION} examples\); [0-9,]+ examples/s",
            line,
        ), line
    info = json.loads((small_data / "info.json").read_text())
    baseline = max(info["classes"]["test"]) / SMALL_TEST  # always the commonest class
    assert lines[4] == (
        f"done: 34 steps, test accuracy {_done_accuracy(stdout):.4f} on {SMALL_TEST} examples (the "
        f"commonest class alone: {baseline:.4f}); model in ckpt/model.keras"
    )
    assert len(lines) == 5 and _done_baseline(stdout) == round(baseline, 4)
    assert _weights(ckpt)["step/.ATTRIBUTES/VARIABLE_VALUE"] == 34
    assert _done_accuracy(stdout) > 2 * baseline  # it learned something in 34 steps


def test_a_very_small_run_exports_a_model_that_predicts_without_a_strategy(
    very_small_run, small_data
):
    """model.keras loads on the CPU with Keras alone (no TPU, no strategy, no script code) and
    predicts what the trained model predicts: the checkpoint's weights in the script's CNN."""
    _, ckpt = very_small_run
    assert not tf.distribute.has_strategy()
    loaded = keras.models.load_model(ckpt / "model.keras")
    records = train_tpu.read_records(str(small_data), "test", tf.distribute.InputContext())
    x, y = train_tpu.parse(next(iter(records.batch(SMALL_TEST))), train_tpu.FashionMNIST())
    predicted = loaded.predict(x, batch_size=100, verbose=0)
    assert predicted.shape == (SMALL_TEST, 10) and np.isfinite(predicted).all()

    trained = train_tpu.build_cnn((28, 28, 1), 10)  # the run's model, its weights restored
    tf.train.Checkpoint(model=trained).read(tf.train.latest_checkpoint(str(ckpt))).expect_partial()
    np.testing.assert_allclose(predicted, trained.predict(x, batch_size=100, verbose=0), atol=1e-3)
    accuracy = np.mean(predicted.argmax(axis=1) == y.numpy())
    assert accuracy == pytest.approx(_done_accuracy(very_small_run[0]), abs=1.5 / SMALL_TEST)


def test_fit_on_one_replica_runs_its_epoch_plan(tmp_path, small_data):
    # One replica takes many steps per call, as a TPU does. 1,016 images make 127 batches of 8:
    # calls of 50 would train 100 of them; the plan's 3 calls of 42 leave one out.
    args = "--fit --replicas 1 --per-replica-batch 8 --train-examples 1016 --epochs 2".split()
    stdout = _ok(
        _run_script([*args, "--data-dir", str(small_data), "--ckpt-dir", "ckpt"], tmp_path)
    )
    lines = stdout.strip().splitlines()
    assert lines[0].endswith("global batch 8, 126 steps per epoch (99.2% of 127)")
    assert lines[1] == "starting at step 0" and _epochs(stdout, 2) == ["1", "2"]
    assert lines[4] == "fit with steps_per_execution=42" and lines[5].startswith("done: 252 steps")
    assert (tmp_path / "ckpt" / "fit" / "latest.weights.h5").exists()


# ---- slow: the --smoke runs, killed and resumed ----


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """Fashion-MNIST's TFRecords, written once by the script's own parts, for the runs below."""
    folder = tmp_path_factory.mktemp("data") / "records"
    train_tpu.write_tfrecords(str(folder), train_tpu.FashionMNIST())
    return folder


# The kill tests' runs: the small data set at 16 per replica, 3 epochs of KILLED_STEPS steps, two
# steps per call and a save every half epoch, so that kills land inside an epoch.
KILLED_STEPS = SMALL_TRAIN // (16 * SMOKE.replicas)
KILLED = ["--per-replica-batch", "16", "--epochs", "3", "--steps-per-call", "2"]
KILLED += ["--save-every", str(KILLED_STEPS // 2)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, small_data):
    """The kill tests' uninterrupted run: its output and its checkpoint folder."""
    cwd = tmp_path_factory.mktemp("reference")
    done = _run_script([*KILLED, "--data-dir", str(small_data), "--ckpt-dir", "ckpt"], cwd)
    return _ok(done), cwd / "ckpt"


@pytest.mark.slow
def test_the_custom_loop_reaches_the_floor(tmp_path, data_dir):
    # Three epochs, as users run it on a CPU (float32): 161 s in a CI run on a processor
    # without AVX-512.
    command = [*RUN, "--data-dir", str(data_dir), "--ckpt-dir", "c"]
    stdout = _ok(_run_script(command, tmp_path))
    assert _epochs(stdout, SMOKE.epochs) == [str(e) for e in range(1, SMOKE.epochs + 1)]
    assert _done_accuracy(stdout) > FLOOR > _done_baseline(stdout), stdout
    assert " on 10000 examples (the commonest class alone: 0.1000)" in stdout


@pytest.mark.slow
def test_killed_before_an_epoch_ends_it_resumes_mid_epoch_with_the_same_weights(
    tmp_path, small_data, reference
):
    # Killed just before the save at the end of epoch 2: the save half an epoch earlier stays
    # the latest, so the restart resumes mid-epoch 2 and its epoch line says so.
    args = [*KILLED, "--data-dir", str(small_data), "--ckpt-dir", "ckpt"]
    killed = _run_script(["--kill-at", str(2 * KILLED_STEPS), "--", *args], tmp_path)
    assert killed.returncode == -9, killed.stderr[-3000:]
    resumed = _ok(_run_script([*args, "--require-checkpoint"], tmp_path))
    assert f"\nresumed at step {2 * KILLED_STEPS - KILLED_STEPS // 2}\n" in resumed
    assert _epochs(resumed, 3) == ["2", "3"]
    resumed_line = rf"^epoch 2/3: loss [0-9.]+ \(its last {KILLED_STEPS // 2} steps: resumed\)"
    assert re.search(resumed_line, resumed, re.M), resumed
    _assert_same_arrays(_weights(reference[1]), _weights(tmp_path / "ckpt"))
    assert _done_accuracy(resumed) == _done_accuracy(reference[0])


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["merge", "sweep"])
def test_killed_inside_a_save_it_resumes_from_the_last_committed_one(
    tmp_path, small_data, reference, phase
):
    # The save of step 2.5 epochs, killed in `phase` (helpers.save_faults.PHASES): before the
    # state file's rename (merge: the new files complete, not yet named) the restart resumes
    # from the save before; after it (sweep: the oldest save half deleted) from this one.
    assert phase in save_faults.PHASES
    kill_at = 2 * KILLED_STEPS + KILLED_STEPS // 2
    args = [*KILLED, "--data-dir", str(small_data), "--ckpt-dir", "ckpt"]
    killed = _run_script(["--kill-at", str(kill_at), "--phase", phase, "--", *args], tmp_path)
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert (tmp_path / "ckpt" / f"ckpt-{kill_at}.index").exists()
    resumed = _ok(_run_script([*args, "--require-checkpoint"], tmp_path))
    resumed_at = kill_at if phase == "sweep" else 2 * KILLED_STEPS
    assert f"\nresumed at step {resumed_at}\n" in resumed
    _assert_same_arrays(_weights(reference[1]), _weights(tmp_path / "ckpt"))
    assert _done_accuracy(resumed) == _done_accuracy(reference[0])


def _backup_weights(folder):
    """Every array of fit's backup (Keras' latest.weights.h5), by its place in the file."""
    import h5py

    arrays = {}
    with h5py.File(folder / "latest.weights.h5", "r") as weights:
        weights.visititems(
            lambda name, item: arrays.update({name: item[()]}) if hasattr(item, "shape") else None
        )
    return arrays


def _run_until(args, cwd, line_start):
    """Run the script and SIGKILL it as soon as it prints a line starting with `line_start`."""
    command, env = _script_command(args)
    run = subprocess.Popen(
        command, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        for line in run.stdout:
            if line.startswith(line_start):
                run.kill()
                break
    finally:
        run.kill()
        run.wait(timeout=60)
    return run.returncode


@pytest.mark.slow
def test_fit_killed_mid_epoch_resumes_at_its_last_epoch_with_the_same_weights(tmp_path, small_data):
    # SIGKILL as soon as epoch 1's line is out (its backup is written before the line): the
    # kill lands inside epoch 2, whose steps are lost; the restart trains epochs 2 and 3 on the
    # data an uninterrupted run gives them, and ends with its weights, bit for bit. On the small
    # data and two replicas: fit takes one step per call here, which at --smoke's 8 replicas
    # and 1,024 examples a step took over 15 minutes on a busy 2-core machine.
    epochs, batch = 3, 32
    steps = SMALL_TRAIN // (2 * batch)
    args = ["--fit", "--replicas", "2", "--per-replica-batch", str(batch), "--epochs", str(epochs)]
    args += ["--data-dir", str(small_data), "--ckpt-dir", "ckpt"]
    (tmp_path / "whole").mkdir()
    whole = _ok(_run_script(args, tmp_path / "whole"))
    # Several replicas of a MirroredStrategy: one step per call (keras-team/keras#19246).
    assert "\nfit with steps_per_execution=1\n" in whole
    assert _done_accuracy(whole) > 2 * _done_baseline(whole), whole

    (tmp_path / "killed").mkdir()
    assert _run_until(args, tmp_path / "killed", f"epoch 1/{epochs}") == -9
    resumed = _ok(_run_script([*args, "--require-checkpoint"], tmp_path / "killed"))
    assert f"\nresumed at step {steps}\n" in resumed
    assert _epochs(resumed, epochs) == [str(e) for e in range(2, epochs + 1)]
    expected = _backup_weights(tmp_path / "whole" / "ckpt" / "fit")
    _assert_same_arrays(expected, _backup_weights(tmp_path / "killed" / "ckpt" / "fit"))
    assert _done_accuracy(resumed) == _done_accuracy(whole)


@pytest.mark.slow
def test_fit_trains_on_uint8_pixels_on_the_simulated_tpu(tmp_path, small_data):
    # Keras 3's fit first averages a batch over the replicas: the simulated TPU hands the
    # (uint8 pixels, int32 labels) tuple back unchanged, as TPUStrategy does (test_simulation.py);
    # the model's Rescaling layer scales the bytes on the device.
    args = ["--fit", "--uint8", "--replicas", "2", "--per-replica-batch", "32", "--epochs", "2"]
    stdout = _ok(_run_script([*args, "--data-dir", str(small_data), "--ckpt-dir", "c"], tmp_path))
    assert _epochs(stdout, 2) == ["1", "2"] and "\nfit with steps_per_execution=1\n" in stdout
    assert _done_accuracy(stdout) > 2 * _done_baseline(stdout), stdout
    loaded = keras.models.load_model(tmp_path / "c" / "model.keras")
    assert loaded.inputs[0].dtype in ("uint8", tf.uint8)
