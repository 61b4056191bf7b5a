"""TPU slices, their topologies and device assignments, built without a TPU (notebook 07_model_parallelism).

A ``tf.tpu.experimental.Topology`` (the mesh ``(x, y, z, cores per chip)`` and each host's
device coordinates) is built from the layouts in :data:`SLICES`, from the platforms'
documentation (``SliceSpec.layout_source`` says how far each is verified);
``DeviceAssignment.build`` is pure Python, so it runs on a CPU exactly as on a TPU. The rules of
``experimental_split_to_logical_devices`` and ``experimental_assign_to_logical_device`` are
checked before a TPU would, with errors that say what to change.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tpucheck import _tf
from tpucheck.batches import near_multiples
from tpucheck.tpu_facts import GENERATIONS


class SplitError(ValueError):
    """A tensor cannot be split over the logical devices as asked; the message says why."""


@dataclass(frozen=True)
class SliceSpec:
    """The shape of a TPU slice: chip grid, cores per chip, chips per host (``host_chips``, the
    block of chips one host, TensorFlow's *task*, drives; they tile the grid), memory per chip."""

    name: str
    chips: tuple[int, int, int]
    cores_per_chip: int
    host_chips: tuple[int, int, int]
    hbm_gib_per_chip: float
    layout_source: str

    def __post_init__(self):
        for axis, (total, block) in enumerate(zip(self.chips, self.host_chips, strict=True)):
            if block < 1 or total % block:
                raise ValueError(
                    f"{self.name}: host block {self.host_chips} does not tile the chip grid "
                    f"{self.chips} along axis {axis}"
                )
        if self.cores_per_chip < 1:
            raise ValueError(f"{self.name}: cores_per_chip must be at least 1")

    @property
    def mesh_shape(self) -> tuple[int, int, int, int]:
        """The 4 numbers TensorFlow wants: chips along x, y, z, then cores per chip."""
        return (*self.chips, self.cores_per_chip)

    @property
    def num_chips(self) -> int:
        return math.prod(self.chips)

    @property
    def num_cores(self) -> int:
        return self.num_chips * self.cores_per_chip

    @property
    def num_hosts(self) -> int:
        return math.prod(c // b for c, b in zip(self.chips, self.host_chips, strict=True))

    @property
    def cores_per_host(self) -> int:
        return self.num_cores // self.num_hosts

    @property
    def hbm_gib_per_core(self) -> float:
        return self.hbm_gib_per_chip / self.cores_per_chip


# Where each slice's layout comes from, and how far it is verified.
_LAYOUT_SOURCES = {
    "v5e-1": "one chip with one core (Colab's free TPU): nothing to order",
    "v5e-8": (
        "2x4 chips, one core each, one host (Cloud TPU v5e docs); device order x-fastest "
        "as JAX lists v5e devices: unverified on hardware for TensorFlow"
    ),
    "v3-8": (
        "2x2 chips, two cores each, one host (Cloud TPU v3 docs); device order equals a "
        "serialised topology of an 8-core v2/v3 host published in a public test file "
        "(shawwn/gaping); not checked on hardware by this project"
    ),
    "v3-32": (
        "4x4 chips over 4 hosts of 2x2 chips (Cloud TPU v3 docs); which host owns which "
        "block, and the order of the hosts: unverified on hardware"
    ),
}
# name: (chip grid, chips per host); cores and memory per chip come from tpucheck.tpu_facts.
_GRIDS = {
    "v5e-1": ((1, 1, 1), (1, 1, 1)),
    "v5e-8": ((2, 4, 1), (2, 4, 1)),
    "v3-8": ((2, 2, 1), (2, 2, 1)),
    "v3-32": ((4, 4, 1), (2, 2, 1)),
}


def _slice(name: str) -> SliceSpec:
    chips, host_chips = _GRIDS[name]
    chip = GENERATIONS[name.split("-")[0]]
    return SliceSpec(
        name, chips, chip.devices_per_chip, host_chips, chip.hbm_gib, _LAYOUT_SOURCES[name]
    )


SLICES: dict[str, SliceSpec] = {name: _slice(name) for name in _GRIDS}


def slice_spec(name: str | SliceSpec) -> SliceSpec:
    """Look up a slice by name (``"v3-8"``, ``"v5e-8"``, ``"v5e-1"``, ``"v3-32"``)."""
    if isinstance(name, SliceSpec):
        return name
    try:
        return SLICES[name]
    except KeyError:
        raise ValueError(f"unknown slice {name!r}; known: {', '.join(SLICES)}") from None


def device_coordinates(spec: str | SliceSpec) -> np.ndarray:
    """``[hosts, devices per host, 4]`` mesh coordinates ``(x, y, z, core)``, as TensorFlow lists them:
    hosts tile the chip grid x fastest; within a host core fastest, then x, y, z (the order of
    the recorded v2/v3-8 topology)."""
    spec = slice_spec(spec)
    hx, hy, hz = spec.host_chips
    blocks = [range(c // b) for c, b in zip(spec.chips, spec.host_chips, strict=True)]
    within = list(itertools.product(range(hz), range(hy), range(hx), range(spec.cores_per_chip)))
    hosts = [
        [(bx * hx + x, by * hy + y, bz * hz + z, core) for z, y, x, core in within]
        for bz, by, bx in itertools.product(*reversed(blocks))
    ]
    return np.asarray(hosts, dtype=np.int32)


def build_topology(spec: str | SliceSpec):
    """A ``tf.tpu.experimental.Topology`` for a slice in :data:`SLICES`, built on any machine (the
    v3-8 one notebook 07_model_parallelism writes by hand)."""
    import tensorflow as tf

    spec = slice_spec(spec)
    return tf.tpu.experimental.Topology(
        mesh_shape=list(spec.mesh_shape), device_coordinates=device_coordinates(spec)
    )


def computation_shape_for(mesh_shape: Sequence[int], logical_devices: int) -> list[int]:
    """The block of cores ``(x, y, z, core)`` one replica spans when it has ``logical_devices``:
    the cores of a chip first (the fastest links), then along the shortest side, each side a
    divisor of the mesh's, so that identical blocks tile the whole slice."""
    if isinstance(logical_devices, bool) or not isinstance(logical_devices, (int, np.integer)):
        raise TypeError(f"logical_devices must be an int, got {logical_devices!r}")
    mesh = [int(m) for m in mesh_shape]
    if len(mesh) != 4:
        raise ValueError(f"mesh_shape must have 4 entries (x, y, z, core), got {mesh}")
    cores = math.prod(mesh)
    if logical_devices < 1 or logical_devices > cores or cores % logical_devices:
        raise ValueError(
            f"{logical_devices} logical devices per replica cannot tile a slice of {cores} "
            f"core(s) (mesh {mesh}): use a divisor of {cores}, "
            f"e.g. {', '.join(str(d) for d in range(1, cores + 1) if cores % d == 0)}"
        )
    shape = [1, 1, 1, 1]
    shape[3] = math.gcd(logical_devices, mesh[3])  # the cores of one chip first
    for prime in _prime_factors(logical_devices // shape[3]):
        # Grow the shortest side that still divides the mesh: blocks stay compact (and inside
        # one host when they can), which keeps a replica's logical devices close together.
        fits = [a for a in (0, 1, 2) if mesh[a] % (shape[a] * prime) == 0]
        # Never empty: logical_devices divides the core count, so every prime factor still
        # missing from the block divides a side that has room for it.
        assert fits, (mesh, shape, prime)
        axis = min(fits, key=lambda a: (shape[a], a))
        shape[axis] *= prime
    return shape


def _prime_factors(n: int) -> list[int]:
    factors, p = [], 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    return factors


def build_assignment(topology, logical_devices: int = 1):
    """``DeviceAssignment.build`` with one replica per block of ``logical_devices`` cores, so
    every core serves exactly one (replica, logical device) pair (as notebook
    07_model_parallelism builds by hand)."""
    import tensorflow as tf

    mesh = [int(m) for m in topology.mesh_shape]
    shape = computation_shape_for(mesh, logical_devices)
    replicas = math.prod(mesh) // logical_devices
    return tf.tpu.experimental.DeviceAssignment.build(
        topology, computation_shape=shape, num_replicas=replicas
    )


def core_usage(assignment) -> np.ndarray:
    """How many (replica, logical device) pairs each core of the mesh serves (want: all 1)."""
    mesh = [int(m) for m in assignment.topology.mesh_shape]
    counts = np.zeros(mesh, dtype=np.int32)
    np.add.at(counts, tuple(np.asarray(assignment.core_assignment).reshape(-1, len(mesh)).T), 1)
    return counts


def assignment_grid(assignment) -> tuple[np.ndarray, np.ndarray]:
    """Two mesh-shaped arrays: the replica and the logical device each core serves (-1: idle)."""
    mesh = [int(m) for m in assignment.topology.mesh_shape]
    replica = np.full(mesh, -1, dtype=np.int32)
    logical = np.full(mesh, -1, dtype=np.int32)
    core_assignment = np.asarray(assignment.core_assignment)
    for r in range(assignment.num_replicas):
        for d in range(assignment.num_cores_per_replica):
            coords = tuple(core_assignment[r, d])
            if replica[coords] >= 0:
                raise ValueError(f"core {coords} is assigned twice")
            replica[coords], logical[coords] = r, d
    return replica, logical


def same_layout(a, b) -> bool:
    """True when two topologies have the same mesh and list their devices in the same order."""
    return np.array_equal(a.mesh_shape, b.mesh_shape) and np.array_equal(
        a.device_coordinates, b.device_coordinates
    )


def matching_slice(topology) -> str | None:
    """The name of the :data:`SLICES` entry whose layout equals ``topology``, or None."""
    for name in SLICES:
        if same_layout(topology, build_topology(name)):
            return name
    return None


def tpu_topology(strategy):
    """The topology a real TPU reported when ``initialize_tpu_system`` initialised it (TPU only),
    read back from the cluster resolver (a private attribute in TensorFlow 2.19 to 2.21)."""
    import tensorflow as tf

    resolver = getattr(strategy, "cluster_resolver", None)
    proto = getattr(resolver, "_tpu_topology", None)
    if proto is None:
        raise ValueError(
            "no TPU topology on this strategy: it is not a TPUStrategy whose TPU was initialised "
            "by initialize_tpu_system (helpers.connect does that on a TPU)"
        )
    return tf.tpu.experimental.Topology(serialized=proto.SerializeToString())


def check_split(
    shape: Sequence[int | None], partition_dimensions: Sequence[int], logical_devices: int
) -> tuple[int | None, ...]:
    """Check ``experimental_split_to_logical_devices(tensor, partition_dimensions)`` in advance,
    by the rules TPUStrategy enforces; the shape of the piece each logical device receives."""
    shape = tuple(None if s is None else int(s) for s in shape)
    parts = tuple(int(p) for p in partition_dimensions)
    if len(parts) != len(shape):
        raise SplitError(
            f"partition_dimensions {list(parts)} has {len(parts)} entries but the tensor has rank "
            f"{len(shape)} (shape {shape}): give one entry per dimension, 1 where it is not split"
        )
    if any(p < 1 for p in parts):
        raise SplitError(f"partition_dimensions must be positive, got {list(parts)}")
    pieces = math.prod(parts)
    if pieces != logical_devices:
        raise SplitError(
            f"partition_dimensions {list(parts)} cut the tensor into {pieces} pieces, but each "
            f"replica has {logical_devices} logical devices: their product must be "
            f"{logical_devices}"
        )
    for axis, (size, part) in enumerate(zip(shape, parts, strict=True)):
        if size is not None and size % part:
            raise SplitError(
                f"dimension {axis} has size {size}, which does not split into {part} equal pieces: "
                f"make it a multiple of {part} (e.g. {near_multiples(size, part)}) or split "
                "another dimension"
            )
    return tuple(None if s is None else s // p for s, p in zip(shape, parts, strict=True))


def check_logical_device(logical_device_id: int, logical_devices: int) -> int:
    """Check ``experimental_assign_to_logical_device(tensor, logical_device_id)`` in advance."""
    if not 0 <= logical_device_id < logical_devices:
        raise ValueError(
            f"logical device {logical_device_id} does not exist: each replica has "
            f"{logical_devices} logical device(s), numbered 0 to {logical_devices - 1}"
        )
    return logical_device_id


def sharding_annotations(concrete_function) -> list[dict]:
    """The ``XlaSharding`` ops in a traced function's graph (notebook 07_model_parallelism): how
    ``experimental_split_to_logical_devices`` and friends tell XLA to spread a tensor, as
    ``kind`` (``"split"``, ``"replicated"`` or ``"one device"``), tile grid and devices."""
    op_sharding = _tf.xla_op_sharding()
    kinds = {
        op_sharding.OTHER: "split",
        op_sharding.REPLICATED: "replicated",
        op_sharding.MAXIMAL: "one device",
    }
    found = []
    for op in concrete_function.graph.get_operations():
        if op.type != "XlaSharding":
            continue
        sharding = op_sharding()
        sharding.ParseFromString(op.get_attr("_XlaSharding"))
        found.append(
            {
                "op": op.name,
                "kind": kinds.get(sharding.type, str(sharding.type)),
                "tiles": list(sharding.tile_assignment_dimensions),
                "devices": list(sharding.tile_assignment_devices),
            }
        )
    return found
