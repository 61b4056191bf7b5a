"""The simulated TPU: what the helpers add to a CPU so that TPU code runs as it would on a TPU.

The reference script's ``connect()`` makes the CPU's logical devices a ``MirroredStrategy``, so
the multi-replica code paths run for real. :func:`start` (run by ``helpers.lesson.start``) makes
an eager reduce follow ``TPUStrategy``'s (:func:`reduce_like_tpu`), drops distributed iterators
in a fraction of a second, not minutes (:func:`untuned_distributed_input`), and finds Debian's
Fashion-MNIST without a download (:func:`offline_fashion_mnist`). ``python -m helpers.simulation
SCRIPT [ARGS]`` runs a program so in a fresh process; ``--kill-at STEP [--phase PHASE]``
SIGKILLs it at a checkpoint save (:mod:`helpers.save_faults`), as a preemption would.
"""

from __future__ import annotations

import os
from pathlib import Path

# The self-test needs it too, so it lives in tpucheck's home of TensorFlow internals.
from tpucheck._tf import untuned_distributed_input

__all__ = ["offline_fashion_mnist", "reduce_like_tpu", "start", "untuned_distributed_input"]

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_FILES = (
    "train-labels-idx1-ubyte.gz",
    "train-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
)


def start() -> None:
    """Make this process's CPU a closer stand-in for a TPU (the three changes above)."""
    import tensorflow as tf

    offline_fashion_mnist()
    reduce_like_tpu(tf)
    untuned_distributed_input(tf)


def offline_fashion_mnist(source: Path = DEBIAN_FASHION_MNIST, home: Path | None = None) -> bool:
    """Link Debian's Fashion-MNIST files where ``keras.datasets.fashion_mnist.load_data()`` looks
    first (``~/.keras/datasets/fashion-mnist``, or under ``KERAS_HOME``), so that it needs no
    download; True when the files are there now. A file already there is left alone."""
    if not all((source / name).exists() for name in FASHION_MNIST_FILES):
        return False
    home = home or Path(os.environ.get("KERAS_HOME", Path.home() / ".keras"))
    folder = home / "datasets" / "fashion-mnist"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name in FASHION_MNIST_FILES:
            if not (folder / name).exists():
                (folder / name).symlink_to(source / name)
    except OSError:  # a read-only home: Keras will say it cannot download
        return False
    return True


def reduce_like_tpu(tf) -> None:
    """Make an eager ``strategy.reduce`` on a ``MirroredStrategy`` follow ``TPUExtended._reduce_to``.

    That one (TensorFlow 2.19 to 2.21) returns a value that is not one ``DistributedValues``
    (such as the ``(x, y)`` tuple Keras 3's ``fit`` averages) unchanged for MEAN, and sums one
    with ``add_n`` times ``1 / replicas``, a TypeError for integers; Mirrored's maps over tuples
    and casts integers, which would hide both. Inside a ``tf.function`` nothing changes.
    """
    from helpers.tf_internals import mirrored_reduce_parts

    extended, distributed_values, reduce_non_distributed_value = mirrored_reduce_parts()
    if getattr(extended._reduce_to, "like_tpu", False):
        return
    mirrored = extended._reduce_to

    def reduce_to(self, reduce_op, value, destinations, options):
        if tf.inside_function():
            return mirrored(self, reduce_op, value, destinations, options)
        if not isinstance(value, distributed_values):
            return reduce_non_distributed_value(
                reduce_op, value, destinations, self._num_replicas_in_sync
            )
        output = tf.math.add_n(list(value.values))
        if reduce_op == tf.distribute.ReduceOp.MEAN:
            output *= 1.0 / len(value.values)  # TypeError for integers, as on a TPU
        return output

    reduce_to.like_tpu = True
    extended._reduce_to = reduce_to


def main(argv: list[str] | None = None) -> None:
    """``python -m helpers.simulation [--kill-at STEP [--phase P]] SCRIPT [ARGS]``."""
    import argparse
    import runpy
    import sys

    parser = argparse.ArgumentParser(prog="python -m helpers.simulation")
    parser.add_argument("--kill-at", type=int, help="SIGKILL the run at the save of this step")
    parser.add_argument("--phase", default="before", help="'before' the save, or a phase of it")
    parser.add_argument("script", help="a path (train_tpu.py, examples/...) or a module name")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    start()
    if options.kill_at is not None:
        from helpers import save_faults

        save_faults.kill_at_save(options.kill_at, options.phase)
    sys.argv = [options.script, *options.args]
    if options.script.endswith(".py"):
        sys.path.insert(0, str(Path(options.script).resolve().parent))
        runpy.run_path(options.script, run_name="__main__")
    else:
        runpy.run_module(options.script, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
