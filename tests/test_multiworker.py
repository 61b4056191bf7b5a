"""helpers.multiworker: worker processes on loopback, always stopped, and real multi-worker training.

Most tests launch tiny Python workers (no TensorFlow) to check the process handling quickly; the
last ones check what a worker reports: its final weights, the numbers of the examples it read,
and the reference script's main() on two workers (notebook 09_scaling_out_to_pods runs it for real).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import multiworker as M
from helpers import plots

ROOT = Path(__file__).resolve().parent.parent

# A worker that records its pid and TF_CONFIG index, then sleeps: used to check clean-up.
SLEEPER = (
    "import json, os, pathlib, sys, time; import helpers._programs.worker as w; w._die_with_parent(); "
    "i = json.loads(os.environ['TF_CONFIG'])['task']['index']; "
    "pathlib.Path(sys.argv[1]).joinpath(f'net{i}').write_text(os.readlink('/proc/self/ns/net')); "
    "pathlib.Path(sys.argv[1]).joinpath(f'pid{i}').write_text(str(os.getpid())); "
    "time.sleep(float(sys.argv[2]))"
)


alive = M.process_alive


def pids_in(directory: Path, count: int) -> list[int]:
    return [int((directory / f"pid{i}").read_text()) for i in range(count)]


def processes_in_network(namespace: str) -> list[int]:
    """Our processes whose network namespace is ``namespace`` (e.g. ``net:[4026532]``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "ns" / "net") == namespace:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def wait_for(condition, seconds: float = 60.0) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass (a bound, not a speed check)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def test_process_alive_sees_running_exited_and_reaped_processes():
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    assert alive(proc.pid)
    proc.stdin.close()
    assert wait_for(lambda: not alive(proc.pid))  # a zombie until reaped: counts as gone
    proc.wait()
    assert not alive(proc.pid)
    assert alive(os.getpid())


def test_free_ports_are_distinct_and_bindable():
    ports = M.free_ports(3)
    assert len(set(ports)) == 3
    M.ensure_ports_free(ports)
    with pytest.raises(ValueError):
        M.free_ports(0)


def test_a_taken_port_is_named_in_the_error():
    with socket.socket() as busy:
        busy.bind((M.LOOPBACK, 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(M.PortInUseError, match=f"port {port} on 127.0.0.1 is already in use"):
            M.ensure_ports_free([M.free_ports(1)[0], port])


def test_a_port_taken_on_another_interface_counts_as_taken():
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))  # what TensorFlow's server does
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(M.PortInUseError, match=f"port {port} on"):
            M.ensure_ports_free([port])


def test_duplicate_ports_are_refused():
    port = M.free_ports(1)[0]
    with pytest.raises(ValueError, match="distinct"):
        M.ensure_ports_free([port, port])


def test_tf_config_describes_a_loopback_cluster():
    config = M.tf_config([1111, 2222], 1)
    assert config == {
        "cluster": {"worker": ["127.0.0.1:1111", "127.0.0.1:2222"]},
        "task": {"type": "worker", "index": 1},
    }
    with pytest.raises(ValueError, match="outside a cluster of 2"):
        M.tf_config([1111, 2222], 2)


def test_worker_env_keeps_workers_off_accelerators(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "stale")
    monkeypatch.setenv("SOMETHING", "x")
    env = M.worker_env([1111, 2222], 0, {"SOMETHING": None, "EXTRA": "1"})
    assert json.loads(env["TF_CONFIG"]) == M.tf_config([1111, 2222], 0)
    assert env["TPU_LOAD_LIBRARY"] == "0" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env[M.PARENT_PID_ENV] == str(os.getpid())
    assert "SOMETHING" not in env and env["EXTRA"] == "1"
    assert str(ROOT) in env["PYTHONPATH"].split(os.pathsep)


def test_run_workers_passes_each_its_own_config(tmp_path):
    code = (
        "import json, os, sys; c = json.loads(os.environ['TF_CONFIG']); "
        "print('index', c['task']['index'], 'of', len(c['cluster']['worker']), 'arg', sys.argv[1])"
    )
    runs = M.run_workers(["-c", code, "{index}"], 3, workdir=tmp_path, timeout=60)
    assert [r.returncode for r in runs] == [0, 0, 0]
    for run in runs:
        assert f"index {run.index} of 3 arg {run.index}" in run.log()
        assert not alive(run.pid)


def test_a_failing_worker_stops_the_others(tmp_path):
    code = (
        "import sys, subprocess; i = int(sys.argv[1]); "
        f"exec({SLEEPER!r}) if i else (print('boom'), sys.exit(4))"
    )
    with pytest.raises(M.WorkerError, match="worker 0 exited with code 4") as caught:
        M.run_workers(["-c", code, "{index}", str(tmp_path), "600"], 2, workdir=tmp_path)
    assert "boom" in str(caught.value)
    assert len(caught.value.pids) == 2
    for pid in caught.value.pids:
        assert not alive(pid)


def test_timeout_stops_every_worker(tmp_path):
    with pytest.raises(M.WorkersTimedOut, match=r"worker\(s\) \[0, 1\] still running") as caught:
        M.run_workers(["-c", SLEEPER, str(tmp_path), "600"], 2, workdir=tmp_path, timeout=3)
    assert sorted(caught.value.pids) == sorted(pids_in(tmp_path, 2))
    for pid in caught.value.pids:
        assert not alive(pid)


def test_a_port_taken_before_the_start_raises_before_launching(tmp_path):
    with socket.socket() as busy:
        busy.bind((M.LOOPBACK, 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(M.PortInUseError):
            M.run_workers(["-c", "pass"], 2, ports=[port, M.free_ports(1)[0]], workdir=tmp_path)
    assert not list(tmp_path.glob("worker*.log"))  # nothing was started


def test_a_port_taken_while_starting_is_reported_as_such(tmp_path):
    code = "import sys; print('bind: Address already in use'); sys.exit(1)"
    with pytest.raises(M.PortInUseError, match="taken after it was checked"):
        M.run_workers(["-c", code], 1, workdir=tmp_path, timeout=60)


def test_wrong_arguments_are_refused():
    with pytest.raises(ValueError, match="need 2 ports"):
        M.run_workers(["-c", "pass"], 2, ports=[M.free_ports(1)[0]])
    with pytest.raises(ValueError, match="num_workers"):
        M.run_workers(["-c", "pass"], 0)
    with pytest.raises(ValueError, match="timeout"):
        M.run_workers(["-c", "pass"], 1, timeout=0)


def _parent_script(tmp_path: Path, sleep: float, isolate: bool) -> str:
    return textwrap.dedent(
        f"""
        from helpers import processes
        processes.default_sigint()  # as a kernel has it, even if this test run ignores SIGINT
        import helpers.multiworker as m
        m.run_workers(["-c", {SLEEPER!r}, {str(tmp_path)!r}, "{sleep}"], 2,
                      workdir={str(tmp_path)!r}, timeout=600, isolate={isolate})
        """
    )


def _needs(isolate: bool) -> None:
    if isolate and not M.isolation_available():
        pytest.skip("this system does not allow unprivileged network namespaces")


def _start_parent(tmp_path: Path, isolate: bool):
    parent = subprocess.Popen(
        [sys.executable, "-c", _parent_script(tmp_path, 600, isolate)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert wait_for(lambda: all((tmp_path / f"pid{i}").exists() for i in range(2))), (
        parent.communicate(timeout=60)[0] if parent.poll() is not None else "no pid files"
    )
    return parent


@pytest.mark.parametrize("isolate", [False, True])
def test_interrupting_the_parent_stops_the_workers(tmp_path, isolate):
    _needs(isolate)
    parent = _start_parent(tmp_path, isolate)
    try:
        parent.send_signal(signal.SIGINT)  # what the notebook's stop button sends the kernel
        output = parent.communicate(timeout=120)[0].decode()
    finally:
        parent.kill()
        parent.wait()
    assert "KeyboardInterrupt" in output
    for pid in pids_in(tmp_path, 2):
        assert not alive(pid)
    _check_network_released(tmp_path, isolate)


def _check_network_released(tmp_path: Path, isolate: bool) -> None:
    """Isolated runs: once the workers are gone, nothing may still hold their namespace."""
    namespace = (tmp_path / "net0").read_text()
    assert (namespace != os.readlink("/proc/self/ns/net")) is isolate
    if isolate:
        assert wait_for(lambda: not processes_in_network(namespace))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux")
@pytest.mark.parametrize("isolate", [False, True])
def test_workers_die_with_a_killed_parent(tmp_path, isolate):
    _needs(isolate)
    parent = _start_parent(tmp_path, isolate)
    parent.kill()  # SIGKILL: no clean-up code runs in the parent
    parent.wait()
    pids = pids_in(tmp_path, 2)
    assert wait_for(lambda: not any(alive(pid) for pid in pids))
    _check_network_released(tmp_path, isolate)


def _reach_code(port: int) -> str:
    return (
        "import socket, sys\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=5).close(); print('reached')\n"
        "except OSError as err:\n"
        "    print('unreachable', err)\n"
    )


@pytest.mark.parametrize("isolate", [False, True])
def test_isolated_workers_cannot_reach_this_machine(tmp_path, isolate):
    _needs(isolate)
    with socket.socket() as server:
        server.bind((M.LOOPBACK, 0))
        server.listen()
        port = server.getsockname()[1]
        (run,) = M.run_workers(
            ["-c", _reach_code(port)], 1, workdir=tmp_path, isolate=isolate, timeout=60
        )
    assert run.isolated is isolate
    assert ("unreachable" if isolate else "reached") in run.log()


def test_isolate_true_fails_clearly_when_unavailable(monkeypatch):
    monkeypatch.setattr(M, "isolation_available", lambda: False)
    with pytest.raises(RuntimeError, match="private network namespace"):
        M.run_workers(["-c", "pass"], 1, isolate=True)


def test_plot_run_marks_examples_read_twice():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    twice = M.WorkerOutcome(0, 2, [], 0, 2, [0, 1], [1.0], [])
    again = M.WorkerOutcome(1, 2, [], 1, 2, [1, 2], [1.0], [])
    fig = plots.plot_worker_run(M.LoopbackRun([twice, again], [], 0.0, False), examples=4)
    assert fig.axes[0].images[0].get_array()[2].tolist() == [0, 1, 0, 0]
    plt.close(fig)


def test_plot_run_shows_each_worker():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def outcome(task, ids, losses):
        return M.WorkerOutcome(task, 2, [], task, 2, ids, losses, [])

    run = M.LoopbackRun(
        [outcome(0, [0, 2, 4, 6], [2.0, 1.5]), outcome(1, [1, 3, 5, 7], [2.0, 1.5])],
        [],
        0.0,
        False,
    )
    fig = plots.plot_worker_run(run, examples=8)
    left, right = fig.axes
    marks = left.images[0].get_array()
    assert marks[0].tolist() == [1, 0, 1, 0, 1, 0, 1, 0]
    assert marks[1].tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    assert marks[2].sum() == 0  # nothing read twice
    assert [line.get_ydata().tolist() for line in right.lines] == [[2.0, 1.5], [2.0, 1.5]]
    plt.close(fig)
    # More examples than columns: neighbours share a column (here 2 a column, 1000 examples).
    run.workers[1].example_ids = [3, 999]
    grouped = plots.plot_worker_run(run, examples=1000, columns=500).axes[0].images[0].get_array()
    assert grouped.shape == (3, 500) and grouped[1].nonzero()[0].tolist() == [1, 499]
    assert grouped[0].nonzero()[0].tolist() == [0, 1, 2, 3] and grouped[2].tolist() == [0] * 500
    plt.close("all")


def test_outcome_reads_the_report_and_the_final_weights(tmp_path):
    report = {
        "task_id": 0,
        "replicas_in_sync": 2,
        "devices": [],
        "input_pipeline_id": 0,
        "num_input_pipelines": 2,
        "example_ids": [0, 2],
        "losses": [2.0, 1.5],
        "test_accuracy": 0.5,
        "global_batch": 4,
    }
    prefix = tmp_path / "worker0"
    prefix.with_suffix(".json").write_text(json.dumps(report))
    np.savez(prefix.with_suffix(".npz"), w0=np.full(3, 2.0), w1=np.zeros(1))
    outcome = M._load_outcome(prefix, M.WorkerRun(0, 1, 0, 1.0, tmp_path / "worker0.log"))
    assert [w.tolist() for w in outcome.weights] == [[2.0] * 3, [0.0]]
    assert outcome.losses == [2.0, 1.5] and outcome.test_accuracy == 0.5


class Numbered:
    """Fashion-MNIST's name and shape, each example's pixels its own number: found by pixels."""

    NAME, CLASSES, SHAPE, DTYPE = "fashion_mnist", [str(i) for i in range(10)], (28, 28, 1), "uint8"

    def __init__(self, count):
        self.count = count

    def examples(self):
        import train_tpu

        for i in range(self.count):
            yield f"train/{i}", train_tpu.split_of(f"train/{i}"), i
        for i in range(64):
            yield f"test/{i}", "test", self.count + i

    def read(self, i):
        pixels = np.frombuffer(i.to_bytes(2, "little") * 392, np.uint8).reshape(self.SHAPE)
        return pixels, i % 10


def test_example_numbers_follow_the_batches_read_twice_too(tmp_path):
    import tensorflow as tf

    import train_tpu
    from helpers._programs import worker

    data = Numbered(200)
    train_tpu.write_tfrecords(str(tmp_path), data)
    train = [i for name, split, i in data.examples() if split == "train"]  # in the written order
    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1)
    mine = [n for n in range(len(train)) if n % train_tpu.SHARDS % 2 == 1]  # files 1, 3, 5, 7
    wanted = [mine[3], mine[0], mine[3], mine[-1]]  # out of order, one read twice
    pixels = np.stack([data.read(train[n])[0] for n in wanted])
    batches = tf.data.Dataset.from_tensor_slices(pixels).batch(2)
    batches = batches.map(lambda x: (x, tf.zeros(tf.shape(x)[0], tf.int32)))
    assert worker.example_numbers(batches, str(tmp_path), ctx, uint8=True) == wanted
    as_floats = batches.map(lambda x, y: (tf.cast(x, tf.float32) / 255, y))  # as parse gives them
    assert worker.example_numbers(as_floats, str(tmp_path), ctx) == wanted


@pytest.mark.slow
@pytest.mark.parametrize("fit", [False, True], ids=["custom_loop", "fit"])
def test_the_script_on_two_workers_reads_disjoint_examples(tmp_path, fit):
    """The script's main() on a two-host cluster: each host reads its own examples, none twice,
    and both end with the same weights. --fit with tf-keras, as Google's pod tests run: Keras 3's
    fit averages its first batch with strategy.reduce, which this strategy refuses for a
    per-replica value (the family of tensorflow/tensorflow#72388, whose workaround is tf-keras)."""
    import train_tpu

    data = tmp_path / "data"
    train_tpu.write_tfrecords(str(data), Numbered(600))
    train = json.loads((data / "info.json").read_text())["classes"]["train"]
    epochs, per_replica = 2, 16
    script = ["--data-dir", str(data), "--ckpt-dir", "{workdir}/ckpt{index}", "--no-bf16"]
    script += ["--epochs", str(epochs), "--per-replica-batch", str(per_replica)]
    script += ["--fit"] * fit
    command = ["-m", M.WORKER_PROGRAM, "--out", "{workdir}/worker{index}", "--script", *script]
    env = {"TF_USE_LEGACY_KERAS": "1"} if fit else None
    runs = M.run_workers(command, 2, workdir=tmp_path / "work", timeout=300, env=env)
    first, second = (M._load_outcome(tmp_path / "work" / f"worker{r.index}", r) for r in runs)
    steps = sum(train) // (2 * per_replica)  # global batches per epoch, both workers together
    assert first.steps == steps and len(first.example_ids) == epochs * steps * per_replica
    assert not set(first.example_ids) & set(second.example_ids), "an example read twice"
    assert all(np.array_equal(a, b) for a, b in zip(first.weights, second.weights, strict=True))
    log = (tmp_path / "work" / "worker0.log").read_text()
    assert "2 replica(s)" in log and "epoch 2/2" in log


@pytest.mark.skipif(not hasattr(sys.flags, "safe_path"), reason="this Python has no PYTHONSAFEPATH")
def test_a_worker_imports_the_collections_script_not_an_edited_copy_in_the_working_directory(
    tmp_path,
):
    (tmp_path / "train_tpu.py").write_text("raise SystemExit('the edited copy was imported')\n")
    probe = "import train_tpu; print(train_tpu.__file__)"
    found = subprocess.run(
        [sys.executable, "-c", probe],
        env=M.worker_env([M.free_ports(1)[0]], 0),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode == 0, found.stderr[-500:]
    assert Path(found.stdout.strip()).parent != tmp_path
