"""Notebook 08's restartable custom loop, as the lesson's cell writes it (cells ``restore-latest`` and ``resume-loop``).

The training program :mod:`helpers._programs.preemptible` runs this function, so the process the
notebook kills runs the lesson's own code; ``tests/test_lesson_code_08.py`` checks that the
functions below and the notebook's cells are the same code. Edit both together.
"""

from __future__ import annotations

import tensorflow as tf

from helpers import loops
from helpers.preemption import resumable_dataset

__all__: list[str] = []  # used by the training program and the tests only


def restore_latest(ckpt_dir, require_checkpoint=False, **objects):
    """A checkpoint of `objects` and its manager in ckpt_dir, restored from its latest save."""
    checkpoint = tf.train.Checkpoint(**objects)
    manager = tf.train.CheckpointManager(checkpoint, str(ckpt_dir), max_to_keep=3)
    if manager.latest_checkpoint:  # every saved value must find its variable, and vice versa
        checkpoint.restore(manager.latest_checkpoint).assert_consumed()
    elif require_checkpoint:  # a restarted job must never start again from step 0 unnoticed
        raise FileNotFoundError(f"no checkpoint in {ckpt_dir} to resume from")
    return manager


def train_resumable(run, model, optimizer, strategy, ckpt_dir, x, y, report=None, save=None):
    """Restore the latest checkpoint in ckpt_dir if there is one, then train to the end."""
    report = report or (lambda event, **values: None)  # the killed program logs each event
    save = save or (lambda manager, step: manager.save(checkpoint_number=step))
    step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
    objects = dict(model=model, optimizer=optimizer, step=step)
    manager = restore_latest(ckpt_dir, run.require_checkpoint, **objects)
    done = int(step.numpy())
    report("start", start_step=done, resumed_from=manager.latest_checkpoint)
    # The data order is a function of the step: a restart at step k sees the batches from k on.
    data = resumable_dataset(
        x, y, run.global_batch, run.steps_per_epoch, run.epochs, first_step=done, seed=run.seed
    )
    iterator = iter(strategy.experimental_distribute_dataset(data))
    train_steps = loops.make_train_steps(strategy, model, optimizer, run.global_batch)
    while done < run.total_steps:  # each call: up to steps_per_call steps, never past a save,
        ends = (run.save_interval, run.steps_per_epoch, run.total_steps)  # an epoch end, the end
        n = min(run.steps_per_call, *(end - done % end for end in ends))
        loss = float(train_steps(iterator, tf.constant(n)))
        done = int(step.assign_add(n).numpy())
        report("step", step=done, steps=n, loss=loss)
        if done % run.save_interval == 0 or done == run.total_steps:
            save(manager, done)
    return manager
