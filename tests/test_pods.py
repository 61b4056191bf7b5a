"""tpucheck.pods: a pod slice's hosts, and the commands that launch the reference script on it."""

from __future__ import annotations

import pytest

from tpucheck import pods
from tpucheck import topology as T


def launch(**changes):
    settings = dict(
        name="my-pod",
        zone="us-central2-b",
        accelerator_type="v4-32",
        bucket="my-bucket",
        project="my-project",
        tf_version="2.16.0",
    )
    return pods.PodLaunch(**{**settings, **changes})


@pytest.mark.parametrize(
    "accelerator_type, chips, per_host, hosts, replicas",
    [
        ("v4-8", 4, 4, 1, 4),
        ("v4-32", 16, 4, 4, 16),  # the name counts TensorCores: 2 per chip, one device per chip
        ("v5litepod-8", 8, 8, 1, 8),  # one VM of 8 chips
        ("v5litepod-16", 16, 4, 4, 16),
        ("v5litepod-32", 32, 4, 8, 32),  # multi-host v5e: VMs of 4 chips
        ("v5p-32", 16, 4, 4, 16),
        ("v3-32", 16, 4, 4, 32),  # two TensorFlow devices per v3 chip
    ],
)
def test_hosts_and_replicas_of_each_slice(accelerator_type, chips, per_host, hosts, replicas):
    spec = pods.slice_hosts(accelerator_type)
    assert (spec.chips, spec.chips_per_host, spec.hosts, spec.replicas) == (
        chips,
        per_host,
        hosts,
        replicas,
    )
    assert pods.hosts(accelerator_type) == hosts
    assert pods.chips_per_host(accelerator_type) == per_host
    assert spec.source.startswith("https://cloud.google.com/tpu/docs/")


def test_the_v3_slice_agrees_with_the_topology_lesson():
    spec = T.slice_spec("v3-32")
    assert pods.hosts("v3-32") == spec.num_hosts
    assert pods.slice_hosts("v3-32").replicas == spec.num_cores


@pytest.mark.parametrize("bad", ["v6e-32", "v4-33", "v5litepod-24", "tpu-32", "v4"])
def test_an_unknown_or_impossible_type_is_refused(bad):
    with pytest.raises(ValueError):
        pods.slice_hosts(bad)


def test_the_runtime_version_follows_googles_naming_rule():
    assert pods.runtime_version("2.16.0") == "tpu-vm-tf-2.16.0-pod-pjrt"
    assert pods.runtime_version("2.17.1", multi_host=False) == "tpu-vm-tf-2.17.1-pjrt"
    for bad in ("2.16", "2.14.1", "v2.16.0"):
        with pytest.raises(ValueError):
            pods.runtime_version(bad)


def test_a_one_host_slice_gets_the_runtime_without_pod():
    assert launch(accelerator_type="v4-8").runtime == "tpu-vm-tf-2.16.0-pjrt"
    assert launch().runtime == "tpu-vm-tf-2.16.0-pod-pjrt"


def test_the_steps_create_prepare_every_worker_and_run_on_worker_0_only():
    steps = launch().steps()
    text = launch().script()
    create = next(
        c for commands in steps.values() for c in commands if "queued-resources create" in c
    )
    for flag in (
        "--node-id=my-pod",
        "--zone=us-central2-b",
        "--accelerator-type=v4-32",
        "--runtime-version=tpu-vm-tf-2.16.0-pod-pjrt",
        "--service-account=$SA",
        "--spot",
    ):
        assert flag in create
    assert "--spot" not in launch(spot=False).script()
    prepare = [c for commands in steps.values() for c in commands if "--worker=all" in c]
    assert any("tpu-vm scp train_tpu.py my-pod:~/" in c for c in prepare)
    assert any("import tensorflow" in c for c in prepare)
    runs = [c for commands in steps.values() for c in commands if "python3 train_tpu.py" in c]
    writes = [c for c in runs if "--prepare" in c]  # a pod's hosts never write them while training
    assert len(writes) == 1 and "--data-dir gs://my-bucket/" in writes[0]
    assert all("--worker=0 " in c for c in runs)
    runs = [c for c in runs if c not in writes]
    assert len(runs) == 2
    assert all("export TPU_NAME=my-pod TPU_LOAD_LIBRARY=0;" in c for c in runs)
    assert "--require-checkpoint" not in runs[0] and runs[1].endswith('--require-checkpoint"')
    assert "roles/storage.objectAdmin" in text and "--location=us-central2" in text
    assert text.count("queued-resources delete my-pod") == 2  # after a preemption, and at the end
    assert text.startswith("# Unverified on hardware") and "\n# 1. " in text
    assert text.endswith("\n")


def test_the_scripts_command_line_takes_the_bucket_folders():
    train_tpu = pytest.importorskip("train_tpu")
    args = train_tpu.parse_args(launch().script_args(resume=True))
    assert args.data_dir == "gs://my-bucket/fashion_mnist_tfrecords"
    assert args.ckpt_dir == "gs://my-bucket/run1"
    assert args.require_checkpoint


@pytest.mark.parametrize(
    "field, value",
    [
        ("name", "My Pod"),
        ("name", "pod;rm"),
        ("bucket", "gs://my-bucket"),
        ("zone", "us-central2"),
        ("project", "p"),
        ("run", "run 1"),
        ("accelerator_type", "v6e-32"),
        ("tf_version", "2.14.1"),
    ],
)
def test_settings_that_would_break_the_commands_are_refused(field, value):
    with pytest.raises(ValueError, match=value.replace(".", r"\.").replace(";", ";")):
        launch(**{field: value})
