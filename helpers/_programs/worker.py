"""One worker of notebook 09_scaling_out_to_pods's local cluster: run only in a child process.

``python -m helpers._programs.worker --data D.npz --out PREFIX ...`` joins the cluster that its
``TF_CONFIG`` names, trains with ``MultiWorkerMirroredStrategy`` (:func:`train_worker`, which
notebook 09_scaling_out_to_pods prints), and writes ``PREFIX.json`` (what it saw) and ``PREFIX.npz`` (its weights).
``--hold-network`` instead keeps a private network namespace alive for the workers to join. It
dies with the process that started it. The parent side is :mod:`helpers.multiworker`.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from helpers import loops, models, processes
from helpers.multiworker import PARENT_PID_ENV, worker_dataset

__all__ = ["train_worker"]

# TensorFlow, Keras and matplotlib are imported inside the functions that use them, so that
# `import helpers` works where TensorFlow is missing (a fresh Colab TPU runtime) and stays quick.


def train_worker(
    data: str,
    out: str,
    global_batch_size: int,
    steps: int,
    learning_rate: float,
    seed: int,
) -> None:
    """The program every worker runs (``python -m helpers._programs.worker``); notebook 09_scaling_out_to_pods prints it.

    The same code runs on every worker. ``TF_CONFIG`` tells each one who it is; the strategy
    connects them, gives every worker its own input pipeline, and all-reduces the gradients so
    all workers apply the same update.
    Taught in notebook 09.
    """
    started = time.monotonic()
    import keras
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)  # N workers share this machine
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG, waits for all
    task_id = strategy.cluster_resolver.task_id
    startup = time.monotonic() - started

    with np.load(data) as arrays:
        x, y = arrays["x"], arrays["y"]
    contexts = []

    def dataset_fn(context: tf.distribute.InputContext):
        contexts.append(context)  # called once per worker, with that worker's context
        return worker_dataset(x, y, context, global_batch_size, seed)

    dist_dataset = strategy.distribute_datasets_from_function(dataset_fn)

    with strategy.scope():
        model = models.build_classifier(x.shape[1:], seed=seed)
        optimizer = keras.optimizers.Adam(learning_rate)
    loops.build_optimizer(strategy, optimizer, model)  # slots before strategy.run (Keras 3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(images, labels, example_ids):
        with tf.GradientTape() as tape:
            per_example = loss_fn(labels, model(images, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))  # all-reduced
        return loss, example_ids

    @tf.function
    def train_step(iterator):
        loss, example_ids = strategy.run(replica_step, args=next(iterator))
        total = strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
        return total, strategy.experimental_local_results(example_ids)

    iterator = iter(dist_dataset)
    seen, losses = [], []
    for _ in range(steps):
        loss, local_ids = train_step(iterator)
        losses.append(float(loss))
        seen.extend(int(i) for part in local_ids for i in part.numpy())

    context = contexts[0]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    np.savez(f"{out}.npz", **{f"w{i}": v.numpy() for i, v in enumerate(model.weights)})
    report = {
        "task_id": int(task_id),
        "replicas_in_sync": int(strategy.num_replicas_in_sync),
        "devices": list(strategy.extended.worker_devices),
        "input_pipeline_id": int(context.input_pipeline_id),
        "num_input_pipelines": int(context.num_input_pipelines),
        "example_ids": seen,
        "losses": losses,
        "startup_seconds": round(startup, 2),
    }
    Path(f"{out}.json").write_text(json.dumps(report))


def _loopback_up() -> None:
    """Bring up ``lo`` in a fresh network namespace (it starts down): SIOCSIFFLAGS with IFF_UP."""

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, siocgifflags, request)[:18])[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))


def _hold_network() -> None:
    _die_with_parent()
    _loopback_up()
    print("ready", flush=True)
    sys.stdin.read()  # until the parent closes our stdin, or dies


def _die_with_parent() -> None:
    """Exit when the process that started this worker is gone (Linux: at once; else polling).

    A notebook kernel that is killed cannot run its clean-up code; this keeps its workers from
    living on, holding ports and CPU.
    """
    parent = int(os.environ.get(PARENT_PID_ENV, "0") or 0)
    if not parent:
        return
    if sys.platform.startswith("linux"):
        try:  # PR_SET_PDEATHSIG = 1: the kernel sends SIGKILL when the parent exits
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
        except (OSError, AttributeError):  # pragma: no cover - no prctl in this libc
            pass
    if os.getppid() != parent:  # the parent is already gone (or this was not started by it)
        os._exit(3)
    if not sys.platform.startswith("linux"):  # pragma: no cover - macOS and others

        def watch():
            while os.getppid() == parent:
                time.sleep(1)
            os._exit(3)

        threading.Thread(target=watch, daemon=True).start()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hold-network", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=".npz file with arrays x and y")
    parser.add_argument("--out", help="path prefix for <out>.json and <out>.npz")
    parser.add_argument("--global-batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    processes.default_sigint()
    if args.hold_network:
        return _hold_network()
    if not (args.data and args.out):
        parser.error("--data and --out are required")
    _die_with_parent()
    train_worker(
        args.data, args.out, args.global_batch_size, args.steps, args.learning_rate, args.seed
    )


if __name__ == "__main__":
    main()
