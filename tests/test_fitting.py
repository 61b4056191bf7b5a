"""What Keras' fit does with steps_per_execution under a strategy, which train_tpu's part "fit"
(``fit_steps_per_execution``, ``epoch_plan``) and notebook 03_keras_compile_and_fit rely on:
each test fails when a Keras or TensorFlow release changes it."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.stacks  # also run on the kaggle and colab stacks (make test)

NO_TPU = {"ISTPUVM": None, "TPU_NAME": None, "TPU_ACCELERATOR_TYPE": None}


def test_the_rule_matches_what_keras_really_does(run_python):
    """train_tpu.fit_steps_per_execution against real fits: this fails when Keras or TF change."""
    run_python(
        """
        import numpy as np, keras, tensorflow as tf
        import helpers, train_tpu
        from helpers import models
        from helpers.expected_errors import expect_error
        simulated = helpers.connect(4)
        devices = simulated.extended.worker_devices
        reduce_to_one = tf.distribute.MirroredStrategy(
            devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
        rng = np.random.default_rng(0)
        x = rng.random((64, 4, 4, 1), dtype=np.float32)
        y = rng.integers(0, 10, 64).astype(np.int32)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16, drop_remainder=True)

        def fit(strategy, spe):
            with strategy.scope():
                model = models.build_classifier((4, 4, 1))
                model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                              steps_per_execution=spe)
            return model.fit(ds, steps_per_epoch=4, verbose=0).history["loss"][0]

        assert train_tpu.fit_steps_per_execution(simulated, 4) == 1
        with expect_error(tf.errors.InvalidArgumentError, match="placeholder"):
            fit(simulated, 4)
        # The workaround notebook 03_keras_compile_and_fit gives for several GPUs.
        assert np.isclose(fit(reduce_to_one, 4), fit(reduce_to_one, 1), rtol=1e-5)
        print("ok")
        """,
        env=NO_TPU,
    )


def _toy_data(n=50, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, 4, 4, 1), dtype=np.float32), rng.integers(0, 10, n).astype(np.int32)


def _compiled_toy_model(steps_per_execution=1):
    import keras

    from helpers.models import build_classifier

    model = build_classifier((4, 4, 1))
    model.compile(
        "sgd",
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=steps_per_execution,
    )
    return model


def test_keras_rounds_steps_up_to_whole_executions():
    # Why train_tpu.epoch_plan runs whole calls, on this Keras: if a release changes it, this fails
    # and the advice in notebook 03_keras_compile_and_fit must change with it.
    import tensorflow as tf

    x, y = _toy_data(64)
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(8, drop_remainder=True)  # 8
    model = _compiled_toy_model(steps_per_execution=4)
    model.fit(batches.repeat(), steps_per_epoch=3, epochs=1, verbose=0)
    assert int(model.optimizer.iterations) == 4  # 3 asked for, one whole execution run
    assert model.predict(batches.repeat(), steps=3, verbose=0).shape[0] == 4 * 8
    assert model.predict(batches.take(6), verbose=0).shape[0] == 6 * 8  # finite: exact


def test_keras_reports_no_loss_for_finite_data_shorter_than_one_call_after_a_fit():
    # Under a strategy, after a fit on repeating data: the steps run, but the history is empty,
    # hence notebook 03_keras_compile_and_fit's one-step-per-call copy for its frozen-weights fit.
    import tensorflow as tf

    x, y = _toy_data(64)
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(8, drop_remainder=True)
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        model = _compiled_toy_model(steps_per_execution=4)
    model.fit(batches.repeat(), steps_per_epoch=4, epochs=1, verbose=0)
    history = model.fit(batches.take(2), epochs=1, verbose=0).history
    assert int(model.optimizer.iterations) == 6 and history == {}
    assert "loss" in model.fit(batches.take(4), epochs=1, verbose=0).history  # one whole call
