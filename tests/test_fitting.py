"""helpers.fitting: batch plan, steps_per_execution by strategy, loss parity."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import fitting

pytestmark = pytest.mark.stacks  # also run on the kaggle and colab stacks (make test)

NO_TPU = {"ISTPUVM": None, "TPU_NAME": None, "TPU_ACCELERATOR_TYPE": None}


# ---------------------------------------------------------------- steps_per_execution_for
class _Extended:
    def __init__(self, ops):
        self._cross_device_ops = ops


def _fake_strategy(class_name: str, replicas: int, ops_class: str | None = None):
    """An object of a subclass of tf.distribute's ``class_name``, its constructor never run."""
    import tensorflow as tf

    ops = type(ops_class, (), {})() if ops_class else None
    base = getattr(tf.distribute, class_name)
    fields = {"num_replicas_in_sync": replicas, "extended": _Extended(ops)}
    cls = type(class_name, (base,), fields)
    return object.__new__(cls)


def test_one_replica_keeps_the_wanted_steps():
    import tensorflow as tf

    value, reason = fitting.steps_per_execution_for(tf.distribute.get_strategy(), wanted=16)
    assert value == 16 and "one replica" in reason
    with pytest.raises(ValueError, match="positive integer"):
        fitting.steps_per_execution_for(tf.distribute.get_strategy(), wanted=0)


def test_tpu_strategy_gets_the_wanted_steps_marked_unverified():
    choice = fitting.steps_per_execution_for(_fake_strategy("TPUStrategy", 8), wanted=64)
    assert choice.value == 64
    assert "host round trip" in choice.reason and "unverified on hardware" in choice.reason


@pytest.mark.parametrize(
    ("ops", "expected", "words"),
    [
        ("CollectiveAllReduce", 1, "placeholder"),
        ("ReductionToOneDevice", 32, "no collective ops"),
        ("HierarchicalCopyAllReduce", 32, "no collective ops"),
        ("NcclAllReduce", 1, "not checked"),
        (None, 1, "not checked"),
    ],
)
def test_multi_replica_choice_follows_the_cross_device_ops(ops, expected, words):
    choice = fitting.steps_per_execution_for(_fake_strategy("MirroredStrategy", 4, ops), 32)
    assert choice.value == expected and words in choice.reason
    assert "MirroredStrategy with 4 replicas" in choice.reason


def test_the_rule_matches_what_keras_really_does(run_python):
    """The choice is checked against real fits: this fails when Keras or TF change behaviour."""
    run_python(
        """
        import numpy as np, keras, tensorflow as tf
        import helpers
        from helpers import fitting, models
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

        assert fitting.steps_per_execution_for(simulated, 4).value == 1
        with expect_error(tf.errors.InvalidArgumentError, match="placeholder"):
            fit(simulated, 4)
        assert fitting.steps_per_execution_for(reduce_to_one, 4).value == 4
        assert np.isclose(fit(reduce_to_one, 4), fit(reduce_to_one, 1), rtol=1e-5)
        print("ok")
        """,
        env=NO_TPU,
    )


def test_cross_device_ops_name_of_other_strategies_is_none():
    import tensorflow as tf

    assert fitting.cross_device_ops_name(tf.distribute.get_strategy()) is None
    assert fitting.cross_device_ops_name(object()) is None


# ------------------------------------------------------- whole_executions, a model to fit
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


@pytest.mark.parametrize(
    ("steps", "spe", "expected"), [(58, 32, 32), (64, 32, 64), (9, 1, 9), (7, 7, 7), (100, 8, 96)]
)
def test_whole_executions_rounds_down_to_a_multiple(steps, spe, expected):
    assert fitting.whole_executions(steps, spe) == expected


@pytest.mark.parametrize(
    ("steps", "spe", "message"),
    [(4, 32, "Choose steps_per_execution <= 4"), (0, 1, "steps must"), (8, True, "positive")],
)
def test_whole_executions_refuses_what_keras_cannot_do(steps, spe, message):
    with pytest.raises(ValueError, match=message):
        fitting.whole_executions(steps, spe)


def test_keras_rounds_steps_up_to_whole_executions():
    # What whole_executions guards against, on this Keras: if a release changes it, this fails
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


def test_keras3_fit_averages_its_first_batch_which_tpu_strategy_cannot_do_for_integers(run_python):
    """Why Keras 3's fit is expected to fail at its start on a TPU of several cores.

    Keras 3's fit (3.13 and 3.15) averages the first batch over the replicas with
    ``strategy.reduce("MEAN", ...)`` before it trains (``_maybe_symbolic_build``): integer
    pixels and labels included. TPUStrategy averages eagerly with ``add_n`` and then
    ``output *= 1 / n`` (tpu_strategy.py, ``TPUExtended._reduce_to``), which raises TypeError for
    an integer tensor; MirroredStrategy, the simulated TPU, divides with a cast and passes.
    Both halves run here on the CPU; the whole fails only on TPU hardware (unverified there).
    """
    run_python(
        """
        import numpy as np, keras, tensorflow as tf
        import helpers
        from helpers import models
        from tensorflow.python.distribute import reduce_util, tpu_strategy
        simulated = helpers.connect(4)
        averaged = []
        reduce = simulated.reduce
        def recording(op, value, axis):
            averaged.extend((op, v.values[0].dtype.name) for v in tf.nest.flatten(value))
            return reduce(op, value, axis)
        simulated.reduce = recording
        x = np.zeros((16, 4, 4, 1), np.uint8)
        y = np.zeros(16, np.int64)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8, drop_remainder=True)
        with simulated.scope():
            model = models.build_classifier((4, 4, 1))
            model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(simulated.experimental_distribute_dataset(ds), epochs=1, verbose=0)
        assert averaged[:2] == [("MEAN", "uint8"), ("MEAN", "int64")], averaged

        class TPUHost:  # what _reduce_to needs of the strategy after its arithmetic
            def _broadcast_output(self, destinations, output):
                return output
        for dtype, fails in (("uint8", True), ("int64", True), ("float32", False)):
            value = simulated.experimental_distribute_values_from_function(
                lambda ctx: tf.constant([ctx.replica_id_in_sync_group * 2], dtype))
            try:
                out = tpu_strategy.TPUExtended._reduce_to(
                    TPUHost(), reduce_util.ReduceOp.MEAN, value, None, None)
                assert not fails and float(out[0]) == 3.0, (dtype, out)
            except TypeError as err:
                assert fails and f"dtype {dtype}" in str(err), (dtype, err)
        print("ok")
        """,
        env=NO_TPU,
    )
