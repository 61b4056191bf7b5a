"""helpers.strategy.connect(): the simulated TPU, re-runs, bad input and unusable TPUs.

Each case runs in a fresh interpreter, because TensorFlow fixes its devices when it starts.
"""

from __future__ import annotations

import pytest

import helpers

NO_TPU = {
    "ISTPUVM": None,
    "TPU_NAME": None,
    "TPU_ACCELERATOR_TYPE": None,
    "TPU_WORKER_HOSTNAMES": None,
}


@pytest.mark.parametrize("bad", [0, -8])
def test_replica_count_must_be_positive(bad):
    with pytest.raises(ValueError, match="at least 1"):
        helpers.connect(bad)


@pytest.mark.parametrize("bad", ["8", 8.0, True])
def test_replica_count_must_be_an_int(bad):
    with pytest.raises(TypeError, match="must be an int"):
        helpers.connect(bad)


def test_simulated_tpu_and_rerun(run_python):
    out = run_python(
        """
        import helpers, tensorflow as tf
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
        """,
        env=NO_TPU,
    ).stdout
    assert "replicas    8" in out and "simulated TPU" in out


def test_one_replica_is_a_single_device(run_python):
    run_python(
        """
        import helpers, tensorflow as tf
        s = helpers.connect(1)
        assert s.num_replicas_in_sync == 1
        assert helpers.describe().kind == "one device"
        """,
        env=NO_TPU,
    )


def test_changing_replicas_in_one_kernel_is_a_clear_error(run_python):
    run_python(
        """
        import helpers
        from helpers.strategy import StrategyError
        helpers.connect(8)
        try:
            helpers.connect(4)
        except StrategyError as err:
            assert "Restart the kernel" in str(err), err
        else:
            raise SystemExit("no error")
        """,
        env=NO_TPU,
    )


def test_tensorflow_started_before_connect_is_a_clear_error(run_python):
    run_python(
        """
        import tensorflow as tf, helpers
        from helpers.strategy import StrategyError
        tf.constant(1.0) + 1.0  # starts the runtime with one CPU device
        try:
            helpers.connect(8)
        except StrategyError as err:
            assert "before any other TensorFlow code" in str(err), err
        else:
            raise SystemExit("no error")
        """,
        env=NO_TPU,
    )


def test_tpu_hinted_with_a_cpu_build_raises_not_falls_back(run_python):
    """The real failure: initialize_tpu_system on a CPU-only TensorFlow."""
    run_python(
        """
        import helpers
        from helpers import runtime
        # Pretend the package metadata looked fine, so connect() really tries the TPU.
        runtime.tensorflow_tpu_support = lambda: runtime.TPUSupport(None, "unknown")
        try:
            helpers.connect(8)
        except runtime.TPUUnusableError as err:
            text = str(err)
            assert "no TPU kernels" in text, text
            route = runtime.routes.choose_route("local")  # the route for this interpreter
            assert "ISTPUVM=1" in text and route.commands[-1] in text, text
        else:
            raise SystemExit("fell back silently")
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


def test_failed_tpu_start_falls_back_to_one_device_when_asked(run_python):
    run_python(
        """
        import warnings, helpers
        from helpers import runtime
        runtime.tensorflow_tpu_support = lambda: runtime.TPUSupport(None, "unknown")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s = helpers.connect(8, allow_cpu_fallback=True)
        assert s.num_replicas_in_sync == 1
        """,
        env={**NO_TPU, "ISTPUVM": "1"},
    )


def test_describe_before_connect_is_a_clear_error(run_python):
    run_python(
        """
        import helpers
        from helpers.strategy import StrategyError
        try:
            helpers.describe()
        except StrategyError as err:
            assert "connect()" in str(err)
        else:
            raise SystemExit("no error")
        """,
        env=NO_TPU,
    )
