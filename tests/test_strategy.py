"""helpers.connect() calls the reference script's connect(): the simulated TPU, re-runs, bad input,
TPU hardware (pretended) and unusable TPUs.

Each case runs in a fresh interpreter, because TensorFlow fixes its devices when it starts.
"""

from __future__ import annotations

import json

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
        # helpers.simulation.start() ran first: distributed iterators run untuned, so dropping an
        # old one does not stall, and an eager reduce follows TPUStrategy's.
        from tensorflow.python.data.ops import multi_device_iterator_ops as mdi
        from tensorflow.python.distribute import mirrored_strategy
        assert mdi._create_device_dataset.untuned
        assert mirrored_strategy.MirroredExtended._reduce_to.like_tpu
        it = iter(s.experimental_distribute_dataset(tf.data.Dataset.range(64).batch(16)))
        assert sum(int(tf.reduce_sum(v)) for v in next(it).values) == sum(range(16))
        print(info)
        try:
            helpers.connect(4)
        except StrategyError as err:
            assert "with 8 replica(s)" in str(err) and "Restart the kernel" in str(err), err
        else:
            raise SystemExit("changing replicas: no error")
        """,
        # Not the quiet environment of the other tests: quiet_tensorflow() must set it up.
        env={**NO_TPU, "TF_CPP_MIN_LOG_LEVEL": None, "PYTHONWARNINGS": None},
    )
    assert "replicas    8" in proc.stdout and "simulated TPU" in proc.stdout
    assert proc.stderr.strip() == "", f"TensorFlow wrote to stderr:\n{proc.stderr}"


def test_tensorflow_started_before_connect_is_one_sentence_and_caches_nothing(run_python):
    run_python(
        """
        import tensorflow as tf, helpers
        import train_tpu
        from helpers import strategy
        from helpers.strategy import StrategyError
        tf.constant(1.0) + 1.0  # starts the runtime with one CPU device
        for replicas in (8, 1):  # the script splits the CPU even for one replica
            try:
                helpers.connect(replicas)
            except StrategyError as err:
                assert str(err) == "TensorFlow started already: restart and connect() first.", err
            else:
                raise SystemExit(f"connect({replicas}): no error")
        assert train_tpu._STRATEGY == [] and strategy._CONNECTED == []  # nothing was cached
        """,
        env=NO_TPU,
    )


def test_one_replica_is_one_device(run_python):
    run_python(
        """
        import tensorflow as tf, helpers
        s = helpers.connect(1)
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


def test_tpu_hinted_with_a_cpu_build_raises_with_one_sentence(run_python):
    """The real failure: initialize_tpu_system on a CPU-only TensorFlow. Never a CPU fallback."""
    run_python(
        """
        import helpers
        from tpucheck import runtime
        try:
            helpers.connect(8)
        except runtime.TPUUnusableError as err:
            text = str(err)
            assert "TPU hardware is here (ISTPUVM=1)" in text, text
            assert text.endswith("install its TPU build (this file's docstring says how) and restart.")
        else:
            raise SystemExit("fell back silently")
        """,
        env={**NO_TPU, "ISTPUVM": "1"},
    )


# The script's connect on pretended TPU hardware: TensorFlow's four TPU entry points replaced by
# recorders. The calls, their argument and their order are lesson 01_tpu_detection_and_connection's, and a second connect()
# makes none (a second initialize_tpu_system can lose the TPU's variables, tensorflow#31961).
ON_TPU = """
import json, os
os.environ["ISTPUVM"] = "1"  # a sign of TPU hardware (train_tpu.TPU_SIGNS)
import tensorflow as tf
import helpers, train_tpu

calls = []


class Resolver:
    def __init__(self, tpu=None):
        self.tpu = tpu
        calls.append(["TPUClusterResolver", tpu])


class Strategy:
    num_replicas_in_sync = 8

    def __init__(self, resolver):
        calls.append(["TPUStrategy", resolver.tpu])

    extended = type("Extended", (), {"worker_devices": [f"/device:TPU:{i}" for i in range(8)]})


tf.distribute.cluster_resolver.TPUClusterResolver = Resolver
tf.config.experimental_connect_to_cluster = (
    lambda r: calls.append(["experimental_connect_to_cluster", r.tpu]))
tf.tpu.experimental.initialize_tpu_system = (
    lambda r: calls.append(["initialize_tpu_system", r.tpu]))
tf.distribute.TPUStrategy = Strategy
first = helpers.connect(8)
second = train_tpu.connect(8)
print("RESULT" + json.dumps(dict(calls=calls, same=first is second, signs=train_tpu.tpu_signs(),
                                 kind=helpers.describe(first).kind)))
"""


def test_connect_on_tpu_hardware_makes_the_four_calls_once(run_python):
    out = run_python(ON_TPU, env=NO_TPU).stdout
    result = json.loads(out.split("RESULT", 1)[1])
    assert result["calls"] == [
        ["TPUClusterResolver", "local"],
        ["experimental_connect_to_cluster", "local"],
        ["initialize_tpu_system", "local"],
        ["TPUStrategy", "local"],
    ]
    assert result["same"] and "ISTPUVM=1" in result["signs"] and result["kind"] == "TPU"
