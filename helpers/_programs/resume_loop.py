"""Notebook 08's restartable custom loop, as the lesson's cell writes it (cell ``resume-loop``).

The training program :mod:`helpers._programs.preemptible` runs this function, so the process the
notebook kills runs the lesson's own code; ``tests/test_lesson_code_08.py`` checks that the
function below and the notebook's cell are the same code. Edit both together.
"""

from __future__ import annotations

import tensorflow as tf

from helpers import loops
from helpers.preemption import resumable_dataset

__all__: list[str] = []  # used by the training program and the tests only


def train_resumable(
    model,
    optimizer,
    strategy,
    ckpt_dir,
    x,
    y,
    *,
    epochs,
    steps_per_epoch,
    global_batch,
    save_every,
    steps_per_call=2,
    seed=0,
    require_checkpoint=False,
    report=lambda event, **values: None,
    save=lambda manager, step: manager.save(checkpoint_number=step),
):
    """Restore the latest checkpoint in ckpt_dir if there is one, then train to the end."""
    step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    manager = tf.train.CheckpointManager(checkpoint, str(ckpt_dir), max_to_keep=3)
    if manager.latest_checkpoint:
        # Every value in the file must find its variable, and every variable its value.
        checkpoint.restore(manager.latest_checkpoint).assert_consumed()
    elif require_checkpoint:  # a restarted job must never start again from step 0 unnoticed
        raise FileNotFoundError(f"no checkpoint in {ckpt_dir} to resume from")
    start = int(step.numpy())
    report("start", start_step=start, resumed_from=manager.latest_checkpoint)

    # The data order is a function of the step: a restart at step k sees the batches from k on.
    dataset = resumable_dataset(
        x, y, global_batch, steps_per_epoch, epochs, first_step=start, seed=seed
    )
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    train_steps = loops.make_train_steps(strategy, model, optimizer, global_batch)  # notebook 04

    total = epochs * steps_per_epoch
    done = start
    while done < total:
        # One call runs up to steps_per_call steps, never past a save or an epoch end.
        n = min(
            steps_per_call,
            save_every - done % save_every,
            steps_per_epoch - done % steps_per_epoch,
            total - done,
        )
        loss = float(train_steps(iterator, tf.constant(n)))
        done = int(step.assign_add(n).numpy())
        report("step", step=done, steps=n, loss=loss)
        if done % save_every == 0 or done == total:
            save(manager, done)  # from the host, between training calls
    return manager
