"""helpers.tf_internals and tpucheck._tf: the TensorFlow internals each package uses, on this
TensorFlow, and nowhere else in it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from helpers import tf_internals
from tpucheck import _tf
from tpucheck import topology as topo

pytestmark = pytest.mark.stacks  # also run on the kaggle and colab stacks (make test)


def test_tpu_run_check_refuses_pure_eager_and_accepts_a_tf_function():
    def replica_id():
        return tf.distribute.get_replica_context().replica_id_in_sync_group

    with pytest.raises(NotImplementedError, match="does not support pure eager"):
        tf_internals.validate_tpu_run_function(replica_id)
    tf_internals.validate_tpu_run_function(tf.function(replica_id))


def test_the_three_annotations_are_what_tpustrategy_writes():
    @tf.function
    def annotated(images, weights):
        tiled = tf_internals.split_to_logical_devices(images, [1, 2, 4, 1])
        shared = tf_internals.replicate_to_logical_devices(weights)
        return tf_internals.assign_to_logical_device(tf.reduce_sum(tiled) * shared, 7)

    traced = annotated.get_concrete_function(tf.TensorSpec([8, 4, 8, 3]), tf.TensorSpec([16]))
    found = topo.sharding_annotations(traced)
    assert [a["kind"] for a in found] == ["split", "replicated", "one device"]
    assert found[0]["tiles"] == [1, 2, 4, 1] and found[0]["devices"] == list(np.arange(8))
    assert found[2]["devices"] == [7]


# --- the one home --------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
# Each package's one home (tpucheck never imports helpers, so it has its own); tools use helpers'.
HOMES = {"helpers": "helpers/tf_internals.py", "tools": "helpers/tf_internals.py"}
HOMES["tpucheck"] = "tpucheck/_tf.py"
PRIVATE = re.compile(r"^(?:tensorflow\.(?:python|core|compiler|tsl)|local_xla)(?:\.|$)")
# Modules that still import TensorFlow internals themselves, each to move into tf_internals.py:
# this list only shrinks (the test fails when a module on it no longer needs to be here). Empty:
# every private import is in the one home.
NOT_MOVED_YET: dict[str, list[str]] = {}


def private_imports(source: str) -> list[str]:
    """The TensorFlow-internal modules ``source`` imports, at any depth, sorted."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if PRIVATE.match(a.name)}
        elif isinstance(node, ast.ImportFrom) and node.module and PRIVATE.match(node.module):
            found.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module":
            names = [a.value for a in node.args if isinstance(a, ast.Constant)]
            found |= {n for n in names if isinstance(n, str) and PRIVATE.match(n)}
    return sorted(found)


def test_private_imports_are_found_however_they_are_written():
    source = (
        "import tensorflow as tf\nfrom tensorflow.python.ops import gen_io_ops\n"
        "def f():\n    import tensorflow.core.protobuf.x_pb2\n"
        "    importlib.import_module('tensorflow.python.eager')\n"
        "    from tensorflow import keras\n    import tensorflow_datasets.core\n"
    )
    assert private_imports(source) == [
        "tensorflow.core.protobuf.x_pb2",
        "tensorflow.python.eager",
        "tensorflow.python.ops",
    ]


def test_tensorflow_internals_are_imported_only_in_their_one_home():
    found = {}
    for folder, home in HOMES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if name != home and (imports := private_imports(path.read_text(encoding="utf-8"))):
                found[name] = imports
    moved = sorted(set(NOT_MOVED_YET) - set(found))
    assert moved == [], f"no longer import internals: take them off NOT_MOVED_YET: {moved}"
    elsewhere = {name: imports for name, imports in found.items() if name not in NOT_MOVED_YET}
    assert elsewhere == {}, f"wrap these in their package's home ({HOMES}), with the reason"
    for home in set(HOMES.values()):  # each home is used
        assert private_imports((ROOT / home).read_text(encoding="utf-8")), home


def test_the_helpers_internals_work_on_this_tensorflow():
    dataset = tf.data.Dataset.range(8)
    parts = [list(tf_internals.auto_shard(dataset, 2, w).as_numpy_iterator()) for w in range(2)]
    assert sorted(parts[0] + parts[1]) == list(range(8)) and parts[0] != parts[1]
    steps = tf_internals.save_steps()
    assert all(callable(getattr(module, name)) for module, name in steps.values())
    assert _tf.xla_op_sharding().REPLICATED != _tf.xla_op_sharding().MAXIMAL
