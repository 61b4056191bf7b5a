"""helpers.strategy.connect(): the simulated TPU, re-runs, bad input and unusable TPUs.

Each case runs in a fresh interpreter, because TensorFlow fixes its devices when it starts.
"""

from __future__ import annotations

import pytest
from conftest import NO_TPU

import helpers


@pytest.mark.parametrize("bad", [0, -8])
def test_replica_count_must_be_positive(bad):
    with pytest.raises(ValueError, match="at least 1"):
        helpers.connect(bad)


@pytest.mark.parametrize("bad", ["8", 8.0, True])
def test_replica_count_must_be_an_int(bad):
    with pytest.raises(TypeError, match="must be an int"):
        helpers.connect(bad)


# Each fresh interpreter costs an import of TensorFlow (several seconds on 2 cores), so cases
# that can share one run in one, in an order where each leaves the next a valid start.


def test_simulated_tpu_rerun_and_a_clear_error_for_other_settings_all_quietly(run_python):
    proc = run_python(
        """
        import logging, os
        from helpers import quiet
        quiet.quiet_tensorflow(import_now=True)  # as every notebook's setup cell does
        assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "2"
        assert logging.getLogger("tensorflow").level == logging.WARNING

        import helpers
        from helpers.strategy import StrategyError
        try:
            helpers.describe()
        except StrategyError as err:
            assert "connect()" in str(err)
        else:
            raise SystemExit("describe() before connect(): no error")

        import tensorflow as tf
        s = helpers.connect(8)
        assert helpers.connect(8) is s, "re-running must return the same strategy"
        info = helpers.describe()
        assert info.kind == "simulated TPU", info
        assert s.num_replicas_in_sync == 8 and len(info.devices) == 8
        assert isinstance(s, tf.distribute.MirroredStrategy)
        assert tf.__version__ in info.tensorflow
        # Distributed iterators run untuned, so dropping an old one does not stall (strategy.py).
        from tensorflow.python.data.ops import multi_device_iterator_ops as mdi
        assert mdi._create_device_dataset.untuned
        it = iter(s.experimental_distribute_dataset(tf.data.Dataset.range(64).batch(16)))
        assert sum(int(tf.reduce_sum(v)) for v in next(it).values) == sum(range(16))
        print(info)
        try:
            helpers.connect(4)
        except StrategyError as err:
            assert "Restart the kernel" in str(err), err
        else:
            raise SystemExit("changing replicas: no error")
        """,
        # Not the quiet environment of the other tests: quiet_tensorflow() must set it up.
        env={**NO_TPU, "TF_CPP_MIN_LOG_LEVEL": None, "PYTHONWARNINGS": None},
    )
    assert "replicas    8" in proc.stdout and "simulated TPU" in proc.stdout
    assert proc.stderr.strip() == "", f"TensorFlow wrote to stderr:\n{proc.stderr}"


def test_one_replica_and_tensorflow_started_before_connect(run_python):
    run_python(
        """
        import tensorflow as tf, helpers
        from helpers.strategy import StrategyError, _CHOSEN
        tf.constant(1.0) + 1.0  # starts the runtime with one CPU device
        try:
            helpers.connect(8)
        except StrategyError as err:
            assert "before any other TensorFlow code" in str(err), err
        else:
            raise SystemExit("no error")
        assert not _CHOSEN  # nothing was cached by the failed call
        s = helpers.connect(1)  # one device needs no split: it works
        assert s.num_replicas_in_sync == 1
        assert helpers.describe().kind == "one device"
        # The one-device path installs the same untuned wrapper as the simulated TPU (strategy.py
        # says what stall it prevents); reading through it still gives the right batch.
        from tensorflow.python.data.ops import multi_device_iterator_ops as mdi
        assert mdi._create_device_dataset.untuned
        it = iter(s.experimental_distribute_dataset(tf.data.Dataset.range(64).batch(16)))
        assert int(tf.reduce_sum(next(it))) == sum(range(16))
        """,
        env=NO_TPU,
    )


def test_tpu_hinted_with_a_cpu_build_raises_then_falls_back_to_one_device_when_asked(
    run_python,
):
    """The real failure: initialize_tpu_system on a CPU-only TensorFlow."""
    run_python(
        """
        import warnings, helpers
        from helpers import runtime
        # Pretend the package metadata looked fine, so connect() really tries the TPU.
        runtime.tensorflow_tpu_support = lambda: runtime.TPUSupport(None, "unknown")
        # JAX already holds the TPU in this process (its private backends dict says so): refused
        # before TensorFlow touches the TPU, with the reason.
        import sys, types
        import tensorflow  # first: it looks into a JAX module it finds loaded
        sys.modules["jax._src.xla_bridge"] = types.SimpleNamespace(_backends={"tpu": None})
        try:
            helpers.connect(8)
        except runtime.TPUUnusableError as err:
            assert "JAX already holds the TPU" in str(err), str(err)
        else:
            raise SystemExit("connected beside JAX")
        del sys.modules["jax._src.xla_bridge"]
        try:
            helpers.connect(8)
        except runtime.TPUUnusableError as err:
            text = str(err)  # the real error of a CPU build, explained
            assert "has no TPU support" in text and "colabtools#5203" in text, text
            route = runtime.routes.choose_route("local")  # the route for this interpreter
            assert "ISTPUVM=1" in text and route.commands[-1] in text, text
        else:
            raise SystemExit("fell back silently")
        # The failed TPU start started TensorFlow's runtime: the fallback is one CPU device.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s = helpers.connect(8, allow_cpu_fallback=True)
        assert s.num_replicas_in_sync == 1
        """,
        env={**NO_TPU, "ISTPUVM": "1"},
    )


def test_tpu_hinted_known_unusable_can_fall_back_when_asked(run_python):
    out = run_python(
        """
        import warnings, helpers
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            s = helpers.connect(8, allow_cpu_fallback=True)
        assert s.num_replicas_in_sync == 8, s.num_replicas_in_sync
        assert any("continuing on the CPU" in str(w.message) for w in caught)
        print("ok")
        """,
        env={**NO_TPU, "ISTPUVM": "1"},
    ).stdout
    assert "ok" in out
