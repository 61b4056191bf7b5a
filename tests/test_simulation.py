"""helpers.simulation: the simulated TPU reduces as TPUStrategy does, finds Fashion-MNIST offline,
and runs a script.

Keras 3's ``fit`` averages its first distributed batch over the replicas before its first step
(``strategy.reduce("MEAN", batch, axis=None)``, ``_maybe_symbolic_build``). What it passes is
recorded here on the simulated TPU, then handed to TensorFlow's own
``TPUExtended._reduce_to`` on a stand-in for a TPUStrategy (FIELD-NOTES section 12): the tuple comes
back unchanged, one integer value raises TypeError, one float value is averaged. The simulated TPU
must do the same three things eagerly and keep MirroredStrategy's reduce inside a ``tf.function``.
Each case that needs devices runs in a fresh interpreter (conftest's ``run_python``).
"""

from __future__ import annotations

import json
import sys

import pytest
from conftest import ROOT

from helpers import simulation

pytestmark = pytest.mark.stacks  # TensorFlow's and Keras' behaviour, on every stack

# What both probes share: the simulated TPU of 2 replicas, and a stand-in for a TPUStrategy's
# `extended` with what TPUExtended._reduce_to reads of it (outside a TPU computation).
START = """
import json
from helpers import simulation
simulation.start()
import numpy as np
import tensorflow as tf
import train_tpu
from tensorflow.python.distribute import collective_util, tpu_strategy, values

strategy = train_tpu.connect(2)
keras = train_tpu.keras
MEAN = tf.distribute.ReduceOp.MEAN
HOST = "/job:localhost/replica:0/task:0/device:CPU:0"
ON_TPU = tpu_strategy.TPUExtended._reduce_to


class StandIn:  # TPUExtended, as far as _reduce_to reads it
    _num_replicas_in_sync = 2
    _host_device = HOST
    _broadcast_output = tpu_strategy.TPUExtended._broadcast_output


def outcome(reduce, value):
    try:
        got = reduce(value)
    except TypeError as err:
        return {"TypeError": str(err)}
    if got is value:
        return "unchanged"
    return np.asarray(got).tolist()


def per_replica(*parts):
    return values.PerReplica(tuple(tf.constant(p) for p in parts))
"""

# (a) what Keras 3's fit passes to strategy.reduce before its first step; (b) that tuple, one
# integer and one float PerReplica value through TPUExtended._reduce_to on the stand-in, called
# as strategy.reduce calls it (StrategyExtendedV2._reduce: destination and options).
FIRST_BATCH = (
    START
    + """
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
calls = []
reduce, reduce_to = strategy.reduce, strategy.extended._reduce_to


def recording(op, value, axis=None):
    calls.append(dict(op=str(op), axis=axis, step=int(model.optimizer.iterations.numpy()),
                      value=value))
    return reduce(op, value, axis)


def recording_to(op, value, destinations, options):
    calls[-1].update(destinations=destinations, options=type(options).__name__)
    return reduce_to(op, value, destinations, options)


strategy.reduce, strategy.extended._reduce_to = recording, recording_to
x = np.arange(32, dtype=np.float32).reshape(8, 4)
y = np.arange(8, dtype=np.int32) % 3
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4, drop_remainder=True).repeat()
model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)
first = calls[0]
batch = first.pop("value")
first["value"] = [[type(v).__name__, v.values[0].dtype.name, [list(t.shape) for t in v.values]]
                  for v in batch] if isinstance(batch, tuple) else type(batch).__name__
where = (first["destinations"], collective_util.Options())
on_tpu = lambda value: ON_TPU(StandIn(), MEAN, value, *where)
ints, floats = per_replica([1, 2], [4, 8]), per_replica([1.0, 2.0], [4.0, 8.0])
print("RESULT" + json.dumps(dict(
    first=first,
    tuple=outcome(on_tpu, batch),
    integer=outcome(on_tpu, ints),
    float=outcome(on_tpu, floats),
)))
"""
)


@pytest.fixture(scope="module")
def first_batch():
    from conftest import _run_python

    out = _run_python(FIRST_BATCH).stdout
    return json.loads(out.split("RESULT", 1)[1])


def test_keras_fit_averages_its_first_batch_as_an_x_y_tuple_before_its_first_step(first_batch):
    first = first_batch["first"]
    assert first["op"] == "MEAN" and first["axis"] is None and first["step"] == 0
    # A tuple (x, y) of PerReplica values: each replica's half of the batch of 4.
    assert first["value"] == [
        ["PerReplica", "float32", [[2, 4], [2, 4]]],
        ["PerReplica", "int32", [[2], [2]]],
    ]
    # strategy.reduce(axis=None) -> extended._reduce: to the current device, default options.
    assert first["destinations"] == "/device:CPU:0" and first["options"] == "Options"


def test_tpustrategys_reduce_returns_the_tuple_unchanged_and_fails_on_one_integer_value(
    first_batch,
):
    assert first_batch["tuple"] == "unchanged"  # reduce_non_distributed_value: MEAN is a no-op
    assert first_batch["integer"] == {
        "TypeError": "Cannot convert 0.5 to EagerTensor of dtype int32"
    }
    assert first_batch["float"] == [2.5, 5.0]  # ([1, 2] + [4, 8]) / 2


# (c) the simulated TPU's own reduce, eagerly and inside a tf.function.
SIMULATED = (
    START
    + """
ds = tf.data.Dataset.from_tensor_slices((np.ones((4, 4), np.float32), np.arange(4, dtype=np.int32)))
batch = next(iter(strategy.experimental_distribute_dataset(ds.batch(4))))
eager = lambda value: strategy.extended._reduce_to(MEAN, value, "/device:CPU:0",
                                                    collective_util.Options())
ints, floats = per_replica([1, 2], [4, 8]), per_replica([1.0, 2.0], [4.0, 8.0])
first_replica = [np.asarray(t).tolist() for t in strategy.reduce("MEAN", batch, axis=None)]


@tf.function
def in_a_function():
    def replica_values():
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        return tf.cast(replica + 1, tf.int32) * 3, tf.cast(replica + 1, tf.float32)

    return strategy.reduce("MEAN", strategy.run(replica_values), axis=None)


from tensorflow.python.distribute import mirrored_strategy

wrapper = mirrored_strategy.MirroredExtended._reduce_to
simulation.reduce_like_tpu(tf)  # again: no second wrapper
print("RESULT" + json.dumps(dict(
    tuple=outcome(eager, batch),
    first_replica=first_replica,
    integer=outcome(eager, ints),
    float=outcome(eager, floats),
    in_a_function=[np.asarray(t).tolist() for t in in_a_function()],
    like_tpu=wrapper.like_tpu,
    wrapped_once=mirrored_strategy.MirroredExtended._reduce_to is wrapper,
)))
"""
)


def test_the_simulated_tpu_reduces_as_tpustrategy_does_eagerly_only(run_python):
    result = json.loads(run_python(SIMULATED).stdout.split("RESULT", 1)[1])
    assert result["like_tpu"] and result["wrapped_once"]
    # The same three outcomes as TPUExtended._reduce_to's (the tests above).
    assert result["tuple"] == "unchanged"
    assert result["integer"] == {"TypeError": "Cannot convert 0.5 to EagerTensor of dtype int32"}
    assert result["float"] == [2.5, 5.0]
    # What Keras then gets from strategy.reduce: the first replica's (x, y), as on a TPU.
    assert result["first_replica"] == [[[1.0] * 4] * 2, [0, 1]]
    # Inside a tf.function, MirroredStrategy's own reduce: a tuple mapped over, and integers
    # averaged as floats where a TPU's eager reduce raises.
    assert result["in_a_function"] == [4.5, 1.5]  # (3 + 6) / 2 and (1 + 2) / 2


def test_offline_fashion_mnist_links_the_four_files_and_leaves_existing_ones(tmp_path):
    source = tmp_path / "debian"
    source.mkdir()
    for name in simulation.FASHION_MNIST_FILES:
        (source / name).write_bytes(name.encode())
    home = tmp_path / "keras_home"
    folder = home / "datasets" / "fashion-mnist"
    folder.mkdir(parents=True)
    mine = folder / simulation.FASHION_MNIST_FILES[0]
    mine.write_bytes(b"the user's own copy")
    assert simulation.offline_fashion_mnist(source, home) is True
    assert sorted(p.name for p in folder.iterdir()) == sorted(simulation.FASHION_MNIST_FILES)
    assert not mine.is_symlink() and mine.read_bytes() == b"the user's own copy"
    for name in simulation.FASHION_MNIST_FILES[1:]:
        assert (folder / name).is_symlink() and (folder / name).resolve() == source / name
    assert simulation.offline_fashion_mnist(source, home) is True  # again: nothing to do
    # Without all four files nothing is linked; KERAS_HOME is where Keras looks.
    (source / simulation.FASHION_MNIST_FILES[2]).unlink()
    assert simulation.offline_fashion_mnist(source, tmp_path / "other") is False
    assert not (tmp_path / "other").exists()


def test_offline_fashion_mnist_follows_keras_home(tmp_path, monkeypatch):
    if not all(
        (simulation.DEBIAN_FASHION_MNIST / n).exists() for n in simulation.FASHION_MNIST_FILES
    ):
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    assert simulation.offline_fashion_mnist() is True
    assert len(list((tmp_path / "datasets" / "fashion-mnist").iterdir())) == 4


def test_python_m_helpers_simulation_runs_a_script_file(tmp_path):
    import subprocess

    from helpers import processes

    (tmp_path / "neighbour.py").write_text("WORD = 'found beside the script'\n")
    (tmp_path / "script.py").write_text(
        "import sys\n"
        "import neighbour\n"  # the script's folder is on sys.path, as for python script.py
        "from tensorflow.python.distribute import mirrored_strategy as m\n"
        "print(__name__, sys.argv[1:], neighbour.WORD, m.MirroredExtended._reduce_to.like_tpu)\n"
    )
    env = processes.child_env({"PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"})
    done = subprocess.run(
        [sys.executable, "-m", "helpers.simulation", "script.py", "--epochs", "2", "x"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "__main__ ['--epochs', '2', 'x'] found beside the script True\n"
