"""tpucheck.topology: slices, topologies and device assignments built without a TPU."""

from __future__ import annotations

import base64
import itertools
import math

import numpy as np
import pytest

from helpers import plots
from tpucheck import topology as T

# A TopologyProto that TensorFlow returned for an 8-core v2/v3 TPU host, as published in a public
# test file (shawwn/gaping): mesh [2, 2, 1, 2], one task, eight devices. The v3-8 layout must match.
RECORDED_V3_8 = "CgQCAgECEAEYCCIgAAAAAAAAAAEBAAAAAQAAAQABAAAAAQABAQEAAAEBAAE="


@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("tensorflow")


def assignment_table(assignment) -> list[dict]:
    """One row per (replica, logical device): mesh coordinates, host (task) and TPU device index."""
    topology = assignment.topology
    rows = []
    for r in range(assignment.num_replicas):
        for d in range(assignment.num_cores_per_replica):
            coords = tuple(int(c) for c in assignment.coordinates(r, d))
            host = int(topology.task_ordinal_at_coordinates(coords))
            tpu_device = int(assignment.tpu_ordinal(r, d))
            rows.append(
                {"replica": r, "logical_device": d, "coordinates": coords, "host": host}
                | {"tpu_device": tpu_device}
            )
    return rows


def test_slices_are_consistent():
    for name, spec in T.SLICES.items():
        assert spec.name == name
        assert spec.num_cores == spec.num_chips * spec.cores_per_chip
        assert spec.num_hosts * spec.cores_per_host == spec.num_cores
        assert math.prod(spec.mesh_shape) == spec.num_cores
        assert spec.layout_source
    assert T.slice_spec("v3-8").cores_per_chip == 2
    assert T.slice_spec("v5e-8").cores_per_chip == 1
    assert T.slice_spec("v3-32").num_hosts > 1  # the pod slice spans hosts


def test_unknown_slice_names_the_known_ones():
    with pytest.raises(ValueError, match="known: .*v5e-8"):
        T.slice_spec("v9-8")


def test_spec_refuses_host_blocks_that_do_not_tile():
    with pytest.raises(ValueError, match="does not tile"):
        T.SliceSpec("bad", (3, 2, 1), 1, (2, 2, 1), 16, "test")


@pytest.mark.parametrize("name", list(T.SLICES))
def test_device_coordinates_cover_every_core_once(name):
    spec = T.slice_spec(name)
    coords = T.device_coordinates(spec)
    assert coords.shape == (spec.num_hosts, spec.cores_per_host, 4)
    flat = [tuple(c) for c in coords.reshape(-1, 4)]
    expected = set(itertools.product(*(range(m) for m in spec.mesh_shape)))
    assert len(flat) == len(set(flat)) and set(flat) == expected


def test_v3_8_layout_matches_a_recorded_topology(tf):
    recorded = tf.tpu.experimental.Topology(serialized=base64.b64decode(RECORDED_V3_8))
    assert T.same_layout(recorded, T.build_topology("v3-8"))
    assert T.matching_slice(recorded) == "v3-8"


def test_pod_slice_hosts_own_contiguous_blocks():
    spec = T.slice_spec("v3-32")
    for host in T.device_coordinates(spec):
        span = host[:, :3].max(0) - host[:, :3].min(0) + 1
        assert tuple(span) == spec.host_chips


@pytest.mark.parametrize("name", list(T.SLICES))
def test_topology_round_trips_through_its_serialised_form(tf, name):
    topology = T.build_topology(name)
    spec = T.slice_spec(name)
    assert list(topology.mesh_shape) == list(spec.mesh_shape)
    assert topology.num_tasks == spec.num_hosts
    assert topology.num_tpus_per_task == spec.cores_per_host
    again = tf.tpu.experimental.Topology(serialized=topology.serialized())
    assert T.same_layout(topology, again)
    assert T.matching_slice(again) == name


def test_a_reordered_layout_matches_no_slice(tf):
    spec = T.slice_spec("v3-8")
    coords = T.device_coordinates(spec)[:, ::-1]
    topology = tf.tpu.experimental.Topology(
        mesh_shape=list(spec.mesh_shape), device_coordinates=coords
    )
    assert T.matching_slice(topology) is None


def test_tensorflow_wants_four_mesh_dimensions_even_for_one_core_chips(tf):
    with pytest.raises(ValueError, match="mesh_shape"):
        tf.tpu.experimental.Topology(mesh_shape=[2, 4, 1], device_coordinates=np.zeros((1, 8, 3)))


@pytest.mark.parametrize(
    ("mesh", "logical", "expected"),
    [
        ((2, 2, 1, 2), 1, [1, 1, 1, 1]),
        ((2, 2, 1, 2), 2, [1, 1, 1, 2]),  # both cores of one chip
        ((2, 2, 1, 2), 4, [2, 1, 1, 2]),
        ((2, 2, 1, 2), 8, [2, 2, 1, 2]),
        ((2, 4, 1, 1), 2, [2, 1, 1, 1]),  # v5e: one core per chip, so neighbouring chips
        ((2, 4, 1, 1), 4, [2, 2, 1, 1]),
        ((4, 4, 1, 2), 8, [2, 2, 1, 2]),  # compact, not a 4-chip row
    ],
)
def test_computation_shape(mesh, logical, expected):
    shape = T.computation_shape_for(mesh, logical)
    assert shape == expected
    assert math.prod(shape) == logical
    assert all(m % s == 0 for m, s in zip(mesh, shape, strict=True))


@pytest.mark.parametrize(
    ("mesh", "logical", "match"),
    [
        ((2, 2, 1, 2), 3, "divisor of 8"),
        ((2, 2, 1, 2), 16, "cannot tile"),
        ((1, 1, 1, 1), 2, "1 core"),
        ((2, 2, 1, 2), 0, "cannot tile"),
        ((3, 1, 1, 2), 4, "divisor of 6"),
        ((2, 2, 2), 2, "4 entries"),
    ],
)
def test_computation_shape_refusals(mesh, logical, match):
    with pytest.raises(ValueError, match=match):
        T.computation_shape_for(mesh, logical)


def test_computation_shape_wants_an_int():
    with pytest.raises(TypeError):
        T.computation_shape_for((2, 2, 1, 2), 2.0)
    with pytest.raises(TypeError):
        T.computation_shape_for((2, 2, 1, 2), True)


def _valid_counts(cores):
    return [k for k in (1, 2, 4, 8) if k <= cores]


@pytest.mark.parametrize("name", list(T.SLICES))
def test_every_core_serves_exactly_one_replica_and_logical_device(tf, name):
    topology = T.build_topology(name)
    cores = T.slice_spec(name).num_cores
    for k in _valid_counts(cores):
        assignment = T.build_assignment(topology, k)
        assert assignment.num_cores_per_replica == k
        assert assignment.num_replicas * k == cores
        assert (T.core_usage(assignment) == 1).all()
        replica, logical = T.assignment_grid(assignment)
        assert (replica >= 0).all() and (logical >= 0).all()
        pairs = set(zip(replica.ravel(), logical.ravel(), strict=True))
        assert len(pairs) == cores


def test_replica_blocks_stay_inside_one_host_on_the_pod_slice(tf):
    assignment = T.build_assignment(T.build_topology("v3-32"), 8)
    rows = assignment_table(assignment)
    assert len(rows) == 32
    for r in range(assignment.num_replicas):
        hosts = {row["host"] for row in rows if row["replica"] == r}
        assert len(hosts) == 1


def test_assignment_table_agrees_with_the_topology(tf):
    topology = T.build_topology("v3-8")
    assignment = T.build_assignment(topology, 2)
    for row in assignment_table(assignment):
        coords = row["coordinates"]
        assert topology.tpu_device_ordinal_at_coordinates(coords) == row["tpu_device"]
        assert tuple(assignment.coordinates(row["replica"], row["logical_device"])) == coords


def test_one_core_chips_cannot_pair_cores_on_a_chip(tf):
    # What TensorFlow itself says when asked for two cores of one v5e chip.
    with pytest.raises(ValueError, match="does not fit"):
        tf.tpu.experimental.DeviceAssignment.build(
            T.build_topology("v5e-8"), computation_shape=[1, 1, 1, 2], num_replicas=4
        )


def test_assignment_grid_detects_a_core_used_twice(tf):
    topology = T.build_topology("v3-8")
    twice = tf.tpu.experimental.DeviceAssignment(topology, [[[0, 0, 0, 0]], [[0, 0, 0, 0]]])
    assert T.core_usage(twice)[0, 0, 0, 0] == 2
    with pytest.raises(ValueError, match="assigned twice"):
        T.assignment_grid(twice)


def test_partial_assignment_leaves_idle_cores(tf):
    topology = T.build_topology("v3-8")
    partial = tf.tpu.experimental.DeviceAssignment.build(topology, num_replicas=2)
    replica, _ = T.assignment_grid(partial)
    assert (replica >= 0).sum() == 2 and (replica == -1).sum() == 6


def test_check_split_returns_the_piece_per_logical_device():
    assert T.check_split((8, 28, 32, 3), (1, 2, 4, 1), 8) == (8, 14, 8, 3)
    assert T.check_split((None, 64), (1, 2), 2) == (None, 32)  # unknown sizes are not checked


@pytest.mark.parametrize(
    ("shape", "parts", "devices", "match"),
    [
        ((8, 28, 28, 3), (1, 2, 4), 8, "rank 4"),
        ((8, 28, 28, 3), (1, 2, 2, 1), 8, "product must be 8"),
        ((8, 30, 28, 3), (1, 4, 2, 1), 8, r"dimension 1 has size 30.*28 or 32"),
        ((8, 3), (1, 4), 4, r"dimension 1 has size 3.*e\.g\. 4\)"),
        ((8, 28), (0, 2), 2, "positive"),
    ],
)
def test_check_split_explains_each_rule(shape, parts, devices, match):
    with pytest.raises(T.SplitError, match=match):
        T.check_split(shape, parts, devices)


def test_check_logical_device():
    assert T.check_logical_device(1, 2) == 1
    with pytest.raises(ValueError, match="numbered 0 to 1"):
        T.check_logical_device(2, 2)
    with pytest.raises(ValueError, match="does not exist"):
        T.check_logical_device(-1, 4)


def test_sharding_annotations_read_back_what_was_annotated(tf):
    from tensorflow.python.compiler.xla.experimental import xla_sharding

    @tf.function
    def annotated(x):
        a = xla_sharding.tile(x, np.arange(4).reshape(1, 4), use_sharding_op=True)
        b = xla_sharding.replicate(x, use_sharding_op=True)
        c = xla_sharding.assign_device(x, 1, use_sharding_op=True)
        return a + b + c

    found = T.sharding_annotations(annotated.get_concrete_function(tf.TensorSpec([2, 8])))
    assert [f["kind"] for f in found] == ["split", "replicated", "one device"]
    assert found[0]["tiles"] == [1, 4] and found[0]["devices"] == [0, 1, 2, 3]
    assert found[2]["devices"] == [1]


def test_sharding_annotations_of_a_plain_function_are_empty(tf):
    plain = tf.function(lambda x: x * 2).get_concrete_function(tf.TensorSpec([2]))
    assert T.sharding_annotations(plain) == []


def test_tpu_topology_reads_the_resolver(tf):
    from types import SimpleNamespace

    from tensorflow.core.protobuf.tpu import topology_pb2

    proto = topology_pb2.TopologyProto()
    proto.ParseFromString(T.build_topology("v5e-8").serialized())
    strategy = SimpleNamespace(cluster_resolver=SimpleNamespace(_tpu_topology=proto))
    assert T.matching_slice(T.tpu_topology(strategy)) == "v5e-8"
    with pytest.raises(ValueError, match="no TPU topology"):
        T.tpu_topology(SimpleNamespace(cluster_resolver=None))


def test_plot_assignments_draws_one_panel_per_assignment(tf):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    assignments = {
        name: T.build_assignment(T.build_topology(name), 2) for name in ("v3-8", "v5e-8", "v3-32")
    }
    fig = plots.plot_assignments(grid=T.assignment_grid, assignments=assignments, columns=2)
    visible = [ax for ax in fig.axes if ax.axison]
    assert len(visible) == 3
    labels = [t.get_text() for t in visible[0].texts]
    assert "r0\nl0" in labels and "r0\nl1" in labels
    hosts = [t.get_text() for t in visible[2].texts if t.get_text().startswith("host")]
    assert {"host 0", "host 3"} <= set(hosts)
    plt.close(fig)
    with pytest.raises(ValueError, match="nothing to plot"):
        plots.plot_assignments(grid=T.assignment_grid, assignments={})
