"""The reference script's checkpoint part (restores, fit backups), and helpers.save_faults stopping
a real save in each of its phases: the script resumes from the last commit, leftovers untidied."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from helpers import save_faults

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
train_tpu = pytest.importorskip("train_tpu")

ORDER = [0, 8, 8]  # the data order the saves belong to (seed, global batch, examples)


def _tiny(seed: int = 0, hidden: int = 16, dropout: bool = False):
    """A small dense model on 4x4 images: the checkpoint part takes any model."""
    init = keras.initializers.GlorotUniform
    inputs = keras.Input((4, 4, 1))
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(hidden, activation="relu", kernel_initializer=init(seed))(x)
    if dropout:  # random masks: a resumed run must draw the ones the uninterrupted run drew
        x = keras.layers.Dropout(0.5, seed=7)(x)
    return keras.Model(inputs, keras.layers.Dense(3, kernel_initializer=init(seed + 1))(x))


def _trained_objects(seed: int = 0):
    model = _tiny(seed)
    optimizer = keras.optimizers.Adam(0.01)
    optimizer.build(model.trainable_variables)
    return model, optimizer


def _train(model, optimizer, steps: int = 2, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.random((8, 4, 4, 1), dtype=np.float32)
    y = rng.integers(0, 3, 8)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))


def _same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def _state(directory) -> tuple[str, list[str]]:
    state = tf.train.get_checkpoint_state(str(directory))
    names = [os.path.basename(p) for p in state.all_model_checkpoint_paths]
    return os.path.basename(state.model_checkpoint_path), names


@pytest.mark.parametrize("phase", save_faults.PHASES)
def test_a_save_interrupted_in_any_phase_resumes_from_the_last_commit(tmp_path, phase):
    """In this process: the save of ckpt-5 stops in ``phase`` (max_to_keep=3, so it sweeps); the
    script's restore, untidied, resumes from the last commit and its next save goes on."""
    model, optimizer = _trained_objects()
    manager, step = train_tpu.checkpointing(str(tmp_path), model, optimizer)
    for number in range(1, 5):
        step.assign(number)
        manager.save(checkpoint_number=number)
    committed = model.get_weights()
    _train(model, optimizer)
    step.assign(5)
    with pytest.raises(save_faults.SaveInterrupted), save_faults.interrupt_save(phase):
        manager.save(checkpoint_number=5)
    after_commit = phase in ("sweep", "restate")  # the rename of the state file is the commit
    latest, _ = _state(tmp_path)
    assert latest == ("ckpt-5" if after_commit else "ckpt-4")

    other, other_opt = _trained_objects(seed=9)  # a restarted run, with the script's restore
    restart_manager, other_step = train_tpu.checkpointing(str(tmp_path), other, other_opt)
    assert train_tpu.restore(restart_manager, other_step, ORDER) == (5 if after_commit else 4)
    expected = model.get_weights() if after_commit else committed
    assert _same(other.get_weights(), expected)
    # The restarted run saves on as usual, over the leftovers.
    other_step.assign(6)
    restart_manager.save(checkpoint_number=6)
    assert _state(tmp_path)[0] == "ckpt-6"
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-6")


def test_interrupt_save_refuses_an_unknown_phase():
    with pytest.raises(ValueError, match="phase must be one of"):
        with save_faults.interrupt_save("halfway"):
            pass


def _fit_setup(seed: int = 0):
    model = _tiny(seed)
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(True))
    rng = np.random.default_rng(0)
    x = rng.random((32, 4, 4, 1), dtype=np.float32)
    y = rng.integers(0, 3, 32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8, drop_remainder=True).repeat()
    return model, ds


STEPS = 4
FIT_ORDER = [*ORDER, STEPS]  # fit's backup also holds the steps per epoch


def _fit(backup, epochs, seed=0, order=FIT_ORDER, require=False):
    model, ds = _fit_setup(seed)
    callback, done = train_tpu.fit_backup(str(backup), model, order, require)
    history = model.fit(ds, epochs=epochs, steps_per_epoch=STEPS, callbacks=[callback], verbose=0)
    return model, history, done


def test_fit_backup_is_backup_and_restore_at_every_epoch_end_keeping_the_previous(tmp_path):
    backup, done = train_tpu.fit_backup(str(tmp_path), _fit_setup()[0], FIT_ORDER)
    assert isinstance(backup, keras.callbacks.BackupAndRestore) and done == 0
    assert backup.double_checkpoint and backup.save_freq == "epoch"
    assert not backup.delete_checkpoint
    assert json.loads((tmp_path / "order.json").read_text()) == FIT_ORDER


def test_fit_resumes_after_the_last_finished_epoch(tmp_path):
    backup = tmp_path / "backup"
    first, _, _ = _fit(backup, epochs=2)
    model, history, done = _fit(backup, epochs=3, seed=1)  # a restart: restored before fit
    assert done == 2 * STEPS  # where the restart's data must start
    assert len(history.history["loss"]) == 1  # only the third epoch was trained
    assert int(model.optimizer.iterations.numpy()) == 3 * STEPS
    again, history, done = _fit(backup, epochs=3, seed=2)  # finished: trains no more
    assert done == 3 * STEPS and history.history == {}
    assert _same(again.get_weights(), model.get_weights())


def test_the_custom_loops_checkpoint_holds_the_dropout_seed(tmp_path):
    model = _tiny(dropout=True)
    optimizer = keras.optimizers.Adam(0.01)
    optimizer.build(model.trainable_variables)
    x = np.ones((8, 4, 4, 1), np.float32)
    for _ in range(3):
        model(x, training=True)  # each call draws masks: the seed state moves on
    manager, step = train_tpu.checkpointing(str(tmp_path), model, optimizer)
    step.assign(3)
    manager.save(checkpoint_number=3)
    again = _tiny(dropout=True)
    again_optimizer = keras.optimizers.Adam(0.01)
    again_optimizer.build(again.trainable_variables)
    restart, step = train_tpu.checkpointing(str(tmp_path), again, again_optimizer)
    assert train_tpu.restore(restart, step, ORDER) == 3
    seeds = [v for v in again.non_trainable_variables if "seed" in v.path]
    assert seeds and all(
        np.array_equal(a, b)
        for a, b in zip(model.non_trainable_variables, again.non_trainable_variables, strict=True)
    )
    np.testing.assert_array_equal(model(x, training=True), again(x, training=True))


def test_a_checkpoint_of_another_model_is_one_sentence(tmp_path):
    """Saved without the Dropout's seed state (as before the script kept it): refused in a
    sentence, not a traceback."""
    model, optimizer = _tiny(dropout=True), keras.optimizers.Adam(0.01)
    optimizer.build(model.trainable_variables)
    step = tf.Variable(3, dtype=tf.int64)
    old = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    tf.train.CheckpointManager(old, str(tmp_path), max_to_keep=3).save(checkpoint_number=3)
    again, again_optimizer = _tiny(dropout=True), keras.optimizers.Adam(0.01)
    again_optimizer.build(again.trainable_variables)
    manager, step = train_tpu.checkpointing(str(tmp_path), again, again_optimizer)
    with pytest.raises(train_tpu.UsageError) as caught:
        train_tpu.restore(manager, step, ORDER)
    sentence = str(caught.value)
    assert sentence.startswith(f"{tmp_path}/ckpt-3 was saved by another model (")
    assert sentence.endswith("): resume with the code that wrote it, or use a new --ckpt-dir.")
    assert "\n" not in sentence


def test_restore_refuses_to_start_over_when_asked_to_resume(tmp_path):
    model, optimizer = _trained_objects()
    manager, step = train_tpu.checkpointing(str(tmp_path / "ckpt"), model, optimizer)
    with pytest.raises(train_tpu.UsageError) as caught:
        train_tpu.restore(manager, step, ORDER, require=True)
    assert str(caught.value) == f"No checkpoint in {tmp_path / 'ckpt'} to resume from."
    assert train_tpu.restore(manager, step, ORDER) == 0  # not asked to: a start from step 0


def test_restore_refuses_another_data_order(tmp_path):
    model, optimizer = _trained_objects()
    manager, step = train_tpu.checkpointing(str(tmp_path), model, optimizer)
    assert train_tpu.restore(manager, step, ORDER) == 0
    step.assign(2)
    manager.save(checkpoint_number=2)
    with pytest.raises(train_tpu.UsageError) as caught:
        train_tpu.restore(manager, step, [0, 16, 8])  # another global batch
    assert str(caught.value) == f"{tmp_path} was trained in another order: use a new --ckpt-dir."
    assert train_tpu.restore(manager, step, ORDER) == 2


def test_fit_backup_refuses_to_start_over_when_asked_to_resume(tmp_path):
    with pytest.raises(train_tpu.UsageError, match=r"^No checkpoint in .*backup to resume from\.$"):
        _fit(tmp_path / "backup", epochs=1, require=True)


def test_fit_backup_refuses_another_data_order(tmp_path):
    backup = tmp_path / "backup"
    _fit(backup, epochs=1)
    with pytest.raises(train_tpu.UsageError, match="was trained in another order"):
        _fit(backup, epochs=2, order=[*ORDER, STEPS + 1])


def test_a_torn_fit_backup_falls_back_to_the_previous_one(tmp_path):
    backup = tmp_path / "backup"
    _fit(backup, epochs=2)  # the second save keeps the first as .bkp
    weights = backup / "latest.weights.h5"
    weights.write_bytes(weights.read_bytes()[:2048])  # killed while writing
    model, history, done = _fit(backup, epochs=3, seed=1)
    assert done == STEPS and len(history.history["loss"]) == 2  # from the previous backup
    assert int(model.optimizer.iterations.numpy()) == 3 * STEPS


def test_the_scripts_fit_backup_is_lesson_08s_backup_and_restore(tmp_path):
    """The callback notebook 08_checkpoints_and_preemption builds (cell backup-callback) is the script's."""
    keras = pytest.importorskip("keras")
    notebook = (
        Path(__file__).resolve().parent.parent / "notebooks" / "08_checkpoints_and_preemption.ipynb"
    )
    cells = json.loads(notebook.read_text())["cells"]
    lesson = {"keras": keras, "WORK": tmp_path}
    exec("".join(next(c for c in cells if c.get("id") == "backup-callback")["source"]), lesson)
    shown = lesson["backup"]
    given, _ = train_tpu.fit_backup(str(lesson["backup_dir"]), _fit_setup()[0], FIT_ORDER)
    assert type(given) is type(shown) is keras.callbacks.BackupAndRestore
    settings = ("backup_dir", "save_freq", "double_checkpoint", "delete_checkpoint")
    assert {k: getattr(given, k) for k in settings} == {k: getattr(shown, k) for k in settings}
