"""One worker of notebook 09_scaling_out_to_pods's local cluster: run only in a child process.

``python -m helpers._programs.worker --out PREFIX --script ARGS...`` runs :func:`train_worker`;
``--hold-network`` instead keeps a private network namespace alive for the workers to join
(the parent side: :mod:`helpers.multiworker`).
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

__all__ = ["example_numbers", "train_worker"]


def train_worker(out: str, script_args: Sequence[str]) -> None:
    """The program every worker runs (``python -m helpers._programs.worker``); notebook 09_scaling_out_to_pods prints it.

    Each worker is one host of the cluster ``TF_CONFIG`` names: it runs the reference script's
    ``main(script_args)`` unchanged under ``MultiWorkerMirroredStrategy``, so it reads its own
    files and applies the all-reduced update. Then it rebuilds its (seeded) pipeline to number
    the examples it trained on, and writes ``PREFIX.json`` and ``PREFIX.npz`` (final weights).
    """
    import tensorflow as tf

    import train_tpu

    tf.config.threading.set_intra_op_parallelism_threads(1)  # N workers share this machine
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG, waits for all
    run = train_tpu.main(list(script_args), strategy=strategy)

    args, data, contexts = train_tpu.parse_args(list(script_args)), train_tpu.FashionMNIST(), []
    strategy.distribute_datasets_from_function(
        lambda c: contexts.append(c) or tf.data.Dataset.range(1)
    )
    ctx = contexts[0]  # this worker's InputContext, as main() got it
    args.data_dir = args.data_dir or f"{data.NAME}_tfrecords"  # main()'s default
    files = sorted(tf.io.gfile.glob(f"{args.data_dir}/train-*-of-*.tfrecord"))
    batch = ctx.get_per_replica_batch_size(run.global_batch)
    kw = dict(seed=args.seed, take=run.examples, uint8=args.uint8)
    batches = train_tpu.train_dataset(args.data_dir, ctx, batch, data, run.steps, args.epochs, **kw)
    model = train_tpu.keras.models.load_model(f"{args.ckpt_dir}/model.keras", compile=False)
    np.savez(f"{out}.npz", **{f"w{i}": w for i, w in enumerate(model.get_weights())})
    report = {
        "task_id": int(strategy.cluster_resolver.task_id),
        "replicas_in_sync": int(strategy.num_replicas_in_sync),
        "devices": list(strategy.extended.worker_devices),
        "input_pipeline_id": int(ctx.input_pipeline_id),
        "num_input_pipelines": int(ctx.num_input_pipelines),
        "files": [
            os.path.basename(f) for f in files[ctx.input_pipeline_id :: ctx.num_input_pipelines]
        ],
        "example_ids": example_numbers(batches, args.data_dir, ctx, args.uint8),
        "losses": [epoch["loss"] for epoch in run.history],
        "test_accuracy": float(run.test_accuracy),
        "global_batch": int(run.global_batch),
        "steps": int(run.steps),
        "epochs": int(args.epochs),
        "examples": int(run.examples),
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_text(json.dumps(report))


def example_numbers(batches, data_dir: str, ctx, uint8: bool = False) -> list[int]:
    """The numbers of the training examples in ``batches``, in order, found by their pixels in
    this host's records (read and parsed by the script; ``uint8``: its --uint8). The script deals
    the examples to its SHARDS files in turn and reads this host's files (every ``hosts``-th) in
    turn, so its i-th record is example ``i // files * SHARDS + host + i % files * hosts``.
    """
    import train_tpu

    data, hosts, host = train_tpu.FashionMNIST(), ctx.num_input_pipelines, ctx.input_pipeline_id
    files = train_tpu.SHARDS // hosts
    read = [x.tobytes() for xs, *_ in batches for x in xs.numpy()]
    wanted = dict.fromkeys(read)  # numbers are looked up for these only: a small dictionary
    records = train_tpu.read_records(data_dir, "train", ctx).batch(1024)
    parsed = records.map(lambda r: train_tpu.parse(r, data, uint8))
    for i, x in enumerate(x for xs, _ in parsed for x in xs.numpy()):
        if (key := x.tobytes()) in wanted:
            wanted[key] = i // files * train_tpu.SHARDS + host + i % files * hosts
    return [wanted[x] for x in read]


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
    parser.add_argument("--out", help="path prefix for <out>.json and <out>.npz")
    parser.add_argument(
        "--script", nargs=argparse.REMAINDER, help="train_tpu.py's arguments for its main()"
    )
    args = parser.parse_args(argv)
    processes.default_sigint()
    if args.hold_network:
        return _hold_network()
    if args.script is None or not args.out:
        parser.error("--out and --script are required")
    _die_with_parent()
    # TensorFlow's TFLite converter imports JAX when it is installed (Colab's image, this
    # collection's main stack): about 110 MB per worker that it never uses.
    sys.modules.setdefault("jax", None)
    train_worker(args.out, args.script)


if __name__ == "__main__":
    main()
