"""helpers.checkpoints: saving, atomic commits, restoring with clear errors, fit backups."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from helpers import checkpoints, save_faults

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


def _trained_objects(hidden: int = 16, seed: int = 0):
    from helpers import models

    model = models.build_classifier((4, 4, 1), 3, hidden=hidden, seed=seed)
    optimizer = keras.optimizers.Adam(0.01)
    optimizer.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64, name="step")
    return model, optimizer, step


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


@pytest.fixture
def saved(tmp_path):
    """A directory with two committed saves (ckpt-2, ckpt-4) of a model, optimizer and step."""
    model, optimizer, step = _trained_objects()
    checkpoint, manager = checkpoints.make_checkpoint(
        tmp_path / "ckpts", model=model, optimizer=optimizer, step=step
    )
    snapshots = {}
    for number in (2, 4):
        _train(model, optimizer)
        step.assign(number)
        manager.save(checkpoint_number=number)
        snapshots[number] = model.get_weights()
    return tmp_path / "ckpts", snapshots


def test_make_checkpoint_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="nothing to checkpoint"):
        checkpoints.make_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="max_to_keep"):
        checkpoints.make_checkpoint(tmp_path, max_to_keep=0, step=tf.Variable(0))


def test_restore_brings_back_model_optimizer_and_step(saved):
    directory, snapshots = saved
    model, optimizer, step = _trained_objects(seed=7)  # different initial weights
    path = checkpoints.restore(
        tf.train.Checkpoint(model=model, optimizer=optimizer, step=step), directory
    )
    assert path.endswith("ckpt-4")
    assert int(step.numpy()) == 4 and int(optimizer.iterations.numpy()) == 4
    assert _same(model.get_weights(), snapshots[4])


def test_checkpoint_contents_and_files(saved):
    directory, _ = saved
    latest = checkpoints.latest_checkpoint(directory)
    assert checkpoints.checkpoint_contents(latest) == ["model", "optimizer", "save_counter", "step"]
    files = checkpoints.checkpoint_files(latest)
    assert "ckpt-4.index" in files and any(".data-" in f for f in files)


def test_latest_checkpoint_of_an_empty_directory_is_none(tmp_path):
    assert checkpoints.latest_checkpoint(tmp_path) is None


def test_a_torn_save_is_never_the_latest(saved):
    directory, snapshots = saved
    created = checkpoints.simulate_torn_save(directory, 6)
    assert all((directory / name.rstrip("/")).exists() for name in created)
    assert checkpoints.latest_checkpoint(directory) == str(directory / "ckpt-4")
    assert tf.train.latest_checkpoint(str(directory)) == str(directory / "ckpt-4")

    model, optimizer, step = _trained_objects(seed=3)
    checkpoint, manager = checkpoints.make_checkpoint(
        directory, model=model, optimizer=optimizer, step=step
    )
    checkpoints.restore(checkpoint, directory)
    assert int(step.numpy()) == 4 and _same(model.get_weights(), snapshots[4])
    # The next save with the same number overwrites the leftovers and becomes the latest.
    _train(model, optimizer)
    step.assign(6)
    manager.save(checkpoint_number=6)
    assert checkpoints.latest_checkpoint(directory) == str(directory / "ckpt-6")
    other, other_opt, other_step = _trained_objects(seed=5)
    checkpoints.restore(
        tf.train.Checkpoint(model=other, optimizer=other_opt, step=other_step), directory
    )
    assert int(other_step.numpy()) == 6 and _same(other.get_weights(), model.get_weights())


def test_simulate_torn_save_refuses_bad_targets(saved, tmp_path):
    directory, _ = saved
    with pytest.raises(ValueError, match="already exists"):
        checkpoints.simulate_torn_save(directory, 4)
    with pytest.raises(checkpoints.CheckpointNotFoundError, match="not a directory"):
        checkpoints.simulate_torn_save(tmp_path / "nowhere", 1)


def test_a_listed_checkpoint_with_missing_files_is_skipped_never_a_fresh_start(saved):
    directory, snapshots = saved
    for path in directory.glob("ckpt-4.*"):
        path.unlink()
    assert tf.train.latest_checkpoint(str(directory)) is None  # the silent trap
    with pytest.warns(UserWarning, match="ckpt-4 is listed .* using ckpt-2"):
        assert checkpoints.latest_checkpoint(directory) == str(directory / "ckpt-2")
    model, optimizer, step = _trained_objects()
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    with pytest.warns(UserWarning):
        checkpoints.restore(checkpoint, directory)
    assert int(step.numpy()) == 2 and _same(model.get_weights(), snapshots[2])
    # With no complete checkpoint left, it is an error, not a silent start from step 0.
    for path in directory.glob("ckpt-2.*"):
        path.unlink()
    with pytest.raises(checkpoints.CheckpointNotFoundError, match="none of them has complete"):
        checkpoints.latest_checkpoint(directory)
    with pytest.raises(checkpoints.CheckpointNotFoundError, match="ckpt-4"):
        checkpoints.restore(checkpoint, directory)
    with pytest.raises(checkpoints.CheckpointNotFoundError):
        checkpoints.repair(directory)  # nothing is deleted then
    assert (directory / checkpoints.STATE_FILE).exists()


def _state(directory) -> tuple[str, list[str]]:
    state = tf.train.get_checkpoint_state(str(directory))
    names = [os.path.basename(p) for p in state.all_model_checkpoint_paths]
    return os.path.basename(state.model_checkpoint_path), names


@pytest.mark.parametrize("phase", save_faults.PHASES)
def test_a_save_interrupted_in_any_phase_is_repaired_to_the_last_commit(tmp_path, phase):
    """In this process: the save of ckpt-5 stops in ``phase`` (max_to_keep=3, so it sweeps)."""
    model, optimizer, step = _trained_objects()
    checkpoint, manager = checkpoints.make_checkpoint(
        tmp_path, model=model, optimizer=optimizer, step=step
    )
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

    repaired = checkpoints.repair(tmp_path)
    assert os.path.basename(repaired.latest) == latest
    names = sorted(os.listdir(tmp_path))
    assert not [n for n in names if "_temp" in n or ".tmp" in n or "tempstate" in n], names
    listed = _state(tmp_path)[1]
    assert all(checkpoints.checkpoint_files(tmp_path / n) for n in listed)
    assert listed == ([f"ckpt-{n}" for n in ((3, 4, 5) if after_commit else (2, 3, 4))])
    assert checkpoints.repair(tmp_path).changed is False  # idempotent

    other, other_opt, other_step = _trained_objects(seed=9)
    restart, restart_manager = checkpoints.make_checkpoint(
        tmp_path, model=other, optimizer=other_opt, step=other_step
    )
    checkpoints.restore(restart, tmp_path)
    assert int(other_step.numpy()) == (5 if after_commit else 4)
    expected = model.get_weights() if after_commit else committed
    assert _same(other.get_weights(), expected)
    # The restarted run saves on as usual, and its manager keeps max_to_keep checkpoints.
    other_step.assign(6)
    restart_manager.save(checkpoint_number=6)
    assert _state(tmp_path)[0] == "ckpt-6" and len(_state(tmp_path)[1]) == 3


def test_repair_of_an_empty_or_missing_directory_does_nothing(tmp_path):
    assert not checkpoints.repair(tmp_path / "nowhere").changed
    result = checkpoints.repair(tmp_path)
    assert result.latest is None and str(result).startswith("nothing to repair")


def test_interrupt_save_refuses_an_unknown_phase():
    with pytest.raises(ValueError, match="phase must be one of"):
        with save_faults.interrupt_save("halfway"):
            pass


def test_missing_checkpoints_raise_clear_errors(saved, tmp_path):
    directory, _ = saved
    checkpoint = tf.train.Checkpoint(model=_trained_objects()[0])
    with pytest.raises(checkpoints.CheckpointNotFoundError, match="None"):
        checkpoints.restore(checkpoint, None)
    with pytest.raises(checkpoints.CheckpointNotFoundError, match="no committed checkpoint"):
        checkpoints.restore(checkpoint, tmp_path)
    with pytest.raises(checkpoints.CheckpointNotFoundError, match="no complete checkpoint"):
        checkpoints.restore(checkpoint, directory / "ckpt-3")


def test_unmatched_names_raise_where_plain_restore_is_silent(saved):
    directory, _ = saved
    model = _trained_objects(seed=9)[0]
    before = model.get_weights()
    latest = checkpoints.latest_checkpoint(directory)
    tf.train.Checkpoint(net=model).restore(latest)  # no error ...
    assert _same(model.get_weights(), before)  # ... and nothing restored
    with pytest.raises(checkpoints.CheckpointMismatchError, match="found no value") as err:
        checkpoints.restore(tf.train.Checkpoint(net=model), latest, partial=True)
    message = str(err.value)
    assert "['model', 'optimizer', 'save_counter', 'step']" in message
    assert "hidden/kernel" in message and "[[" not in message  # names, not values


def test_a_model_of_another_shape_raises(saved):
    directory, _ = saved
    smaller = _trained_objects(hidden=8)[0]
    with pytest.raises(checkpoints.CheckpointMismatchError, match="another shape"):
        checkpoints.restore(tf.train.Checkpoint(model=smaller), directory, partial=True)


def test_partial_restore_must_be_asked_for(saved):
    directory, snapshots = saved
    model = _trained_objects(seed=4)[0]
    with pytest.raises(checkpoints.CheckpointMismatchError, match="partial=True"):
        checkpoints.restore(tf.train.Checkpoint(model=model), directory)
    checkpoints.restore(tf.train.Checkpoint(model=model), directory, partial=True)
    assert _same(model.get_weights(), snapshots[4])


def test_restore_from_an_empty_directory_says_how_to_start_fresh(saved, tmp_path):
    directory, snapshots = saved
    model, optimizer, step = _trained_objects(seed=2)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    (tmp_path / "new").mkdir()
    assert checkpoints.latest_checkpoint(tmp_path / "new") is None
    with pytest.raises(checkpoints.CheckpointNotFoundError, match="latest_checkpoint"):
        checkpoints.restore(checkpoint, tmp_path / "new")
    path = checkpoints.restore(checkpoint, directory)
    assert path.endswith("ckpt-4") and int(step.numpy()) == 4


# ------------------------------------------------------------------ fit + BackupAndRestore


def _fit_setup(seed: int = 0):
    from helpers import models

    model = models.build_classifier((4, 4, 1), 3, hidden=16, seed=seed)
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(True))
    rng = np.random.default_rng(0)
    x = rng.random((32, 4, 4, 1), dtype=np.float32)
    y = rng.integers(0, 3, 32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8, drop_remainder=True).repeat()
    return model, ds


STEPS = 4


def _fit(backup, epochs, seed=0):
    model, ds = _fit_setup(seed)
    callbacks = checkpoints.fit_backup_callbacks(backup, STEPS)
    history = model.fit(ds, epochs=epochs, steps_per_epoch=STEPS, callbacks=callbacks, verbose=0)
    return model, history


def test_fit_backup_callbacks_validate_and_configure(tmp_path):
    with pytest.raises(ValueError, match="steps_per_epoch must be a positive integer"):
        checkpoints.fit_backup_callbacks(tmp_path, 2.5)
    with pytest.raises(ValueError, match="steps_per_epoch must be a positive integer"):
        checkpoints.fit_backup_callbacks(tmp_path, 0)
    backup, check = checkpoints.fit_backup_callbacks(tmp_path, 3)
    assert isinstance(backup, keras.callbacks.BackupAndRestore)
    assert backup.double_checkpoint and backup.save_freq == "epoch"
    assert isinstance(check, keras.callbacks.Callback)


def test_fit_resumes_after_the_last_finished_epoch(tmp_path):
    backup = tmp_path / "backup"
    _fit(backup, epochs=2)
    model, history = _fit(backup, epochs=3, seed=1)  # a restart with the same callbacks
    assert len(history.history["loss"]) == 1  # only the third epoch was trained
    assert int(model.optimizer.iterations.numpy()) == 3 * STEPS


def test_fit_refuses_a_backup_whose_epoch_and_weights_disagree(tmp_path):
    backup = tmp_path / "backup"
    _fit(backup, epochs=2)
    # A kill after the weights of epoch 2 were written but before its epoch number was.
    (backup / "training_metadata.json").write_text(json.dumps({"epoch": 1, "batch": 0}))
    with pytest.raises(checkpoints.CheckpointMismatchError, match="weights are from step 8"):
        _fit(backup, epochs=3)


def test_a_torn_fit_backup_falls_back_to_the_previous_one(tmp_path):
    backup = tmp_path / "backup"
    _fit(backup, epochs=2)  # the second save keeps the first as .bkp
    weights = backup / "latest.weights.h5"
    weights.write_bytes(weights.read_bytes()[:2048])  # killed while writing
    model, history = _fit(backup, epochs=3, seed=1)
    assert len(history.history["loss"]) == 2  # resumed after epoch 1, from the previous backup
    assert int(model.optimizer.iterations.numpy()) == 3 * STEPS


def test_a_torn_fit_backup_without_a_previous_one_fails_loudly(tmp_path):
    backup = tmp_path / "backup"
    _fit(backup, epochs=1)  # one save: no previous backup to fall back to
    assert not (backup / "latest.weights.h5.bkp").exists()
    weights = backup / "latest.weights.h5"
    weights.write_bytes(weights.read_bytes()[:2048])
    with pytest.raises(OSError):
        _fit(backup, epochs=2)


# ------------------------------------------------- another strategy (fresh process, 8 devices)


def test_restore_from_8_replicas_onto_one_device(run_python, tmp_path):
    proc = run_python(
        f"""
        import helpers
        strategy = helpers.connect(8)
        import keras, numpy as np, tensorflow as tf
        from helpers import checkpoints, loops, models

        rng = np.random.default_rng(0)
        x = rng.random((64, 8, 8, 1), dtype=np.float32)
        y = rng.integers(0, 10, 64).astype(np.int32)
        with strategy.scope():
            model = models.build_classifier((8, 8, 1), seed=0)
            optimizer = keras.optimizers.Adam(0.01)
        loops.build_optimizer(strategy, optimizer, model)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64, drop_remainder=True)
        iterator = iter(strategy.experimental_distribute_dataset(ds))
        loops.make_train_steps(strategy, model, optimizer, 64)(iterator, tf.constant(3))
        assert int(optimizer.iterations.numpy()) == 3
        _, manager = checkpoints.make_checkpoint({str(tmp_path)!r}, model=model, optimizer=optimizer)
        path = manager.save()

        one = tf.distribute.OneDeviceStrategy("/cpu:0")
        with one.scope():
            served = models.build_classifier((8, 8, 1), seed=1)
        fresh = served.get_weights()
        checkpoints.restore(tf.train.Checkpoint(model=served), path, partial=True)
        assert served.distribute_strategy.num_replicas_in_sync == 1
        assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), served.get_weights()))
        assert not all(np.array_equal(a, b) for a, b in zip(fresh, served.get_weights()))

        slices = np.split(x, 8)
        dist_x = strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(slices[ctx.replica_id_in_sync_group]))
        per_replica = strategy.run(tf.function(lambda b: model(b, training=False)), args=(dist_x,))
        on_replicas = strategy.gather(per_replica, axis=0).numpy()
        on_one = served(x, training=False).numpy()
        print("MAXDIFF", float(np.max(np.abs(on_replicas - on_one))))
        assert np.allclose(on_replicas, on_one, atol=1e-5)
        assert np.array_equal(on_replicas.argmax(1), on_one.argmax(1))
        """
    )
    assert "MAXDIFF" in proc.stdout


def test_fit_backup_callbacks_give_lesson_08s_backup_and_restore(tmp_path):
    """The callback notebook 08_checkpoints_and_preemption builds (cell backup-callback) is the one the fit program gets."""
    keras = pytest.importorskip("keras")
    notebook = (
        Path(__file__).resolve().parent.parent / "notebooks" / "08_checkpoints_and_preemption.ipynb"
    )
    cells = json.loads(notebook.read_text())["cells"]
    lesson = {"keras": keras, "WORK": tmp_path}
    exec("".join(next(c for c in cells if c.get("id") == "backup-callback")["source"]), lesson)
    shown = lesson["backup"]
    given, check = checkpoints.fit_backup_callbacks(lesson["backup_dir"], steps_per_epoch=4)
    assert type(given) is type(shown) is keras.callbacks.BackupAndRestore
    settings = ("backup_dir", "save_freq", "double_checkpoint", "delete_checkpoint")
    assert {k: getattr(given, k) for k in settings} == {k: getattr(shown, k) for k in settings}
    assert isinstance(check, keras.callbacks.Callback)
