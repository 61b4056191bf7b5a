"""One worker of notebook 09_scaling_out_to_pods's local cluster: run only in a child process.

``python -m helpers._programs.worker --data-dir TFRECORDS --out PREFIX ...`` joins the cluster
that its ``TF_CONFIG`` names, trains the reference script's model with its pipeline and step
under ``MultiWorkerMirroredStrategy`` (:func:`train_worker`, which notebook 09_scaling_out_to_pods prints), and
writes ``PREFIX.json`` (what it read) and ``PREFIX.npz`` (its weights).
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

from helpers import processes
from helpers.multiworker import PARENT_PID_ENV

__all__ = ["fit_script_worker", "train_worker"]

# TensorFlow, Keras and matplotlib are imported inside the functions that use them, so that
# `import helpers` works where TensorFlow is missing (a fresh Colab TPU runtime) and stays quick.


def train_worker(
    data_dir: str,
    out: str,
    global_batch_size: int,
    steps: int,
    learning_rate: float,
    seed: int,
    examples: int | None = None,
) -> None:
    """The program every worker runs (``python -m helpers._programs.worker``); notebook 09_scaling_out_to_pods prints it.

    The same code runs on every worker: the reference script's pipeline, model and step.
    ``TF_CONFIG`` tells each worker who it is; the strategy connects them, calls the pipeline
    once per worker with that worker's InputContext, and all-reduces the gradients so all
    workers apply the same update. The model is the script's ``EXACT`` one (float32, as
    ``--no-bf16``), so that one device can later repeat the training up to float32 rounding.
    Taught in notebook 09.
    """
    started = time.monotonic()
    import tensorflow as tf

    from train_tpu import EXACT, build, host_files, make_train_step, many_steps, train_dataset

    tf.config.threading.set_intra_op_parallelism_threads(1)  # N workers share this machine
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG, waits for all
    startup = time.monotonic() - started
    contexts = []

    def dataset_fn(ctx: tf.distribute.InputContext):
        contexts.append(ctx)  # called once per worker, with that worker's context
        batch = ctx.get_per_replica_batch_size(global_batch_size)
        return train_dataset(data_dir, ctx, batch, steps, 1, seed=seed, examples=examples)

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    model, optimizer = build(strategy, learning_rate, **EXACT, seed=seed)
    train_steps = many_steps(strategy, make_train_step(model, optimizer, global_batch_size))
    one = tf.constant(1)  # one step per call, to see every step's (global batch's) loss
    losses = []
    for step in range(steps):
        losses.append(float(train_steps(iterator, one)))
        if strategy.cluster_resolver.task_id == 0:  # the weights after each step, to check it
            np.savez(f"{out}-step{step}.npz", *[v.numpy() for v in model.weights])

    ctx = contexts[0]
    local_batches = ctx.num_replicas_in_sync // ctx.num_input_pipelines  # per step, this worker
    np.savez(f"{out}.npz", **{f"w{i}": v.numpy() for i, v in enumerate(model.weights)})
    report = {
        "task_id": int(strategy.cluster_resolver.task_id),
        "replicas_in_sync": int(strategy.num_replicas_in_sync),
        "devices": list(strategy.extended.worker_devices),
        "input_pipeline_id": int(ctx.input_pipeline_id),
        "num_input_pipelines": int(ctx.num_input_pipelines),
        "files": [os.path.basename(f) for f in host_files(data_dir, "train", ctx)],
        "example_ids": _example_numbers(dataset_fn(ctx).take(steps * local_batches), data_dir, ctx),
        "losses": losses,
        "startup_seconds": round(startup, 2),
    }
    Path(f"{out}.json").write_text(json.dumps(report))


def fit_script_worker(out: str, script_args: Sequence[str]) -> None:
    """Run the reference script's ``main(script_args)`` on this worker: its ``--fit`` on a pod.

    The script builds its training data with ``distribute_datasets_from_function``, one
    pipeline per host; here each worker is a host. Every pipeline the script asks for is
    recorded, and ``PREFIX.json`` lists the training examples each one gave (found as
    :func:`train_worker` finds them), so a test can check that no two workers read the same one.
    Run it with tf-keras (``TF_USE_LEGACY_KERAS=1``): Keras 3's fit averages its first batch
    over the replicas with ``strategy.reduce``, which ``MultiWorkerMirroredStrategy`` refuses
    for a per-replica value ("Attempt to convert a value (PerReplica...)"; the family of
    tensorflow/tensorflow#72388, whose workaround is tf-keras too).
    """
    import tensorflow as tf

    import train_tpu

    tf.config.threading.set_intra_op_parallelism_threads(1)  # N workers share this machine
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG, waits for all
    calls = []
    script_dataset = train_tpu.train_dataset

    def recorded(data_dir, ctx, batch, steps_per_epoch, epochs, *more, **kw):
        calls.append((data_dir, ctx, batch, steps_per_epoch, epochs, more, kw))
        return script_dataset(data_dir, ctx, batch, steps_per_epoch, epochs, *more, **kw)

    train_tpu.train_dataset = recorded
    status = train_tpu.main(list(script_args), strategy=strategy)
    read = []
    for data_dir, ctx, batch, steps_per_epoch, epochs, more, kw in calls:
        local = ctx.num_replicas_in_sync // ctx.num_input_pipelines  # batches per step here
        batches = script_dataset(data_dir, ctx, batch, steps_per_epoch, epochs, *more, **kw)
        read.append(_example_numbers(batches.take(steps_per_epoch * epochs * local), data_dir, ctx))
    report = {"task_id": int(strategy.cluster_resolver.task_id), "status": status, "read": read}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_text(json.dumps(report))


def _example_numbers(batches, data_dir: str, ctx) -> list[int]:
    """The training-set numbers of the examples in ``batches``, in order, found by their pixels.

    The pipeline is seeded and deterministic, so a second pass over it gives the batches the
    worker trained on (the one-device replay of notebook 09_scaling_out_to_pods checks that: other batches would
    give other weights). An example's number is its position in the training files read in
    order, which is its row in the arrays they were written from; the files' example counts
    are in the info.json that ``write_tfrecords`` writes last.
    """
    import tensorflow as tf

    from train_tpu import host_files, parse_batch

    with tf.io.gfile.GFile(f"{data_dir}/info.json") as f:
        first = np.cumsum([0, *json.load(f)["train"]])  # the number of each file's first example
    read = [image.tobytes() for images, _ in batches for image in images.numpy()]
    wanted = dict.fromkeys(read)  # numbers are looked up for these only: a small dictionary
    for name in host_files(data_dir, "train", ctx):  # this worker's files only, a batch at a time
        start = int(first[int(os.path.basename(name).split("-")[1])])
        for images, _ in tf.data.TFRecordDataset(name).batch(1024).map(parse_batch):
            for image in images.numpy():
                if (key := image.tobytes()) in wanted:
                    wanted[key] = start
                start += 1
    return [wanted[image] for image in read]


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
    parser.add_argument("--data-dir", help="the TFRecord folder train_tpu.write_tfrecords wrote")
    parser.add_argument("--out", help="path prefix for <out>.json and <out>.npz")
    parser.add_argument("--global-batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--examples", type=int, help="training examples to use (default: all)")
    parser.add_argument(
        "--script", nargs=argparse.REMAINDER, help="run train_tpu.py's main with these arguments"
    )
    args = parser.parse_args(argv)
    processes.default_sigint()
    if args.hold_network:
        return _hold_network()
    if args.script is not None and args.out:
        _die_with_parent()
        sys.modules.setdefault("jax", None)
        return fit_script_worker(args.out, args.script)
    if not (args.data_dir and args.out):
        parser.error("--data-dir and --out are required")
    _die_with_parent()
    # TensorFlow's TFLite converter imports JAX when it is installed (Colab's image, this
    # collection's main stack): about 110 MB per worker that it never uses.
    sys.modules.setdefault("jax", None)
    train_worker(
        args.data_dir,
        args.out,
        args.global_batch_size,
        args.steps,
        args.learning_rate,
        args.seed,
        args.examples,
    )


if __name__ == "__main__":
    main()
