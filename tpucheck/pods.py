"""A Cloud TPU pod slice for the reference script: its hosts, and the gcloud commands that create
it, prepare every worker, run ``train_tpu.py`` and bring it back after a preemption (notebook
09_scaling_out_to_pods). **Unverified on hardware**: written from the pages :data:`SOURCES`
names. Each *host* is a *TPU VM*, which gcloud calls a *worker* and TensorFlow a *task*."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tpucheck.tpu_facts import generation_of

# The pages each fact comes from (read by this project; none checked on a TPU).
SOURCES = {
    "v3": (
        "https://cloud.google.com/tpu/docs/v3 (as in tpucheck.topology: a v3-8 is one host of "
        "2x2 chips, two TensorCores each)"
    ),
    "v4": (
        "https://cloud.google.com/tpu/docs/supported-tpu-configurations: v4-8 is 4 chips (2x2x1) "
        "on one host, v4-32 is 16 chips (2x2x4); the name counts TensorCores, 2 per chip "
        "(https://cloud.google.com/tpu/docs/v4)"
    ),
    "v5p": (
        "https://cloud.google.com/tpu/docs/supported-versions: v5p slice table, 2x2x1 is 8 cores, "
        "4 chips, 1 machine; 2x2x2 is 8 chips on 2 machines"
    ),
    "v5e": (
        "https://cloud.google.com/tpu/docs/v5e: each TPU VM of a v5e slice holds 1, 4 or 8 chips "
        "(ct5lp-hightpu-1t, -4t, -8t); read here as 8 for the single-host v5litepod-8 and 4 in a "
        "multi-host slice (the page's own table counts physical hosts of 8 chips: 4 for 32 "
        "chips); check with gcloud compute tpus tpu-vm describe (one network endpoint a worker)"
    ),
    "runtime": (
        "https://cloud.google.com/tpu/docs/runtimes: TensorFlow runtimes are named "
        "tpu-vm-tf-x.y.z[-pod][-pjrt], -pod for a multi-host slice; v6e, v5e and v5p take "
        "TensorFlow 2.15.0 and newer, e.g. tpu-vm-tf-2.16.0-pod-pjrt; v4 follows the v2/v3 rule, "
        "whose -pjrt names Google's pages also use (tpu-vm-tf-2.17.1-pjrt on a v3-8, "
        "https://cloud.google.com/tpu/docs/preemptible); Google's own pod tests run "
        "tpu-vm-tf-2.16.0-pod-pjrt (ml-auto-solutions, dags/vm_resource.py)"
    ),
    "queued": (
        "https://cloud.google.com/tpu/docs/queued-resources: a queued resource stays assigned "
        "until it is deleted or preempted; only Spot and preemptible TPUs are preempted"
    ),
    "ssh": (
        "https://cloud.google.com/tpu/docs/managing-tpus-tpu-vm: one TPU VM per host; "
        "--worker=N (from 0) or --worker=all with --command"
    ),
    "service account": (
        "https://cloud.google.com/tpu/docs/reference/rest/v2/projects.locations.nodes (Node."
        "serviceAccount: without one, the TPU VMs use the project's default compute service "
        "account); https://cloud.google.com/sdk/gcloud/reference/storage/buckets/"
        "add-iam-policy-binding"
    ),
    "launch": (
        "GoogleCloudPlatform/ml-auto-solutions, dags/solutions_team/configs/tensorflow/: on a "
        "pod the test runs on one worker (all_workers=not is_pod), with TPU_NAME and "
        "TPU_LOAD_LIBRARY=0"
    ),
}

# Chips per host (TPU VM) in a multi-host slice of any generation here; the accelerator type's
# number counts this many TensorCores per chip (v4-32: 16 chips; v5litepod-32: 32 chips).
_CHIPS_PER_HOST = 4
_CORES_IN_NAME = {"v3": 2, "v4": 2, "v5p": 2, "v5e": 1}
_SINGLE_HOST_MAX = {"v5e": 8}  # v5litepod-8 is one VM of 8 chips (ct5lp-hightpu-8t)
_SHAPES = {"v5e": {1, 4, 8, 16, 32, 64, 128, 256}}  # chips of the v5e page's 2D slice shapes
_TYPE = re.compile(r"^(v3|v4|v5p|v5litepod)-(\d+)$")


@dataclass(frozen=True)
class SliceHosts:
    """How a slice is split over hosts: chips, hosts, and TensorFlow replicas."""

    chips: int
    chips_per_host: int
    replicas_per_chip: int
    source: str

    @property
    def hosts(self) -> int:
        return self.chips // self.chips_per_host

    @property
    def replicas(self) -> int:
        """TensorFlow TPU devices: the replicas of ``TPUStrategy`` on the slice."""
        return self.chips * self.replicas_per_chip


def slice_hosts(accelerator_type: str) -> SliceHosts:
    """Chips, hosts and replicas of a v3, v4, v5p or v5e accelerator type (``"v5litepod-32"``)."""
    match = _TYPE.match(accelerator_type)
    if match is None:
        raise ValueError(
            f"{accelerator_type!r}: expected v3-N, v4-N, v5p-N or v5litepod-N "
            "(the accelerator types this table knows)"
        )
    generation = generation_of(accelerator_type)
    name, number = generation.name, int(match.group(2))
    if number % _CORES_IN_NAME[name]:
        raise ValueError(f"{accelerator_type!r}: the number must be even for {name}")
    chips = number // _CORES_IN_NAME[name]
    if name in _SHAPES and chips not in _SHAPES[name]:
        raise ValueError(f"{accelerator_type!r}: {name} slices have {sorted(_SHAPES[name])} chips")
    # A slice small enough for one VM has all its chips there.
    per_host = chips if chips <= _SINGLE_HOST_MAX.get(name, _CHIPS_PER_HOST) else _CHIPS_PER_HOST
    if chips % per_host:
        raise ValueError(f"{accelerator_type!r}: {chips} chips do not fill hosts of {per_host}")
    return SliceHosts(chips, per_host, generation.devices_per_chip, SOURCES[name])


def hosts(accelerator_type: str) -> int:
    """Hosts (TPU VMs, gcloud's workers) of the slice: ``hosts("v4-32") == 4``."""
    return slice_hosts(accelerator_type).hosts


def chips_per_host(accelerator_type: str) -> int:
    """TPU chips each host drives: 4 on a v4 or multi-host v5e slice."""
    return slice_hosts(accelerator_type).chips_per_host


def runtime_version(tf_version: str, multi_host: bool = True) -> str:
    """The TPU software version with this TensorFlow by ``SOURCES["runtime"]``'s naming rule
    (``tpu-vm-tf-2.16.0-pod-pjrt``); ``gcloud compute tpus tpu-vm versions list`` has the real."""
    parts = tf_version.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"{tf_version!r}: give TensorFlow's full version, e.g. 2.16.0")
    if tuple(int(p) for p in parts) < (2, 15, 0):
        raise ValueError(f"TensorFlow {tf_version}: the -pjrt runtimes start at 2.15.0")
    return f"tpu-vm-tf-{tf_version}{'-pod' if multi_host else ''}-pjrt"


_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,60}[a-z0-9])?$")  # a TPU or queued resource name
_BUCKET = re.compile(r"^[a-z0-9][-_.a-z0-9]{1,61}[a-z0-9]$")
_ZONE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")  # us-central2-b
_PROJECT = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")


@dataclass(frozen=True)
class PodLaunch:
    """A run of ``train_tpu.py`` on a pod slice, as gcloud commands to copy (bash). ``bucket``
    holds the TFRecords and checkpoints (the hosts share no disk); ``spot``: cheaper, may be
    preempted; ``run``: the checkpoint folder a rerun resumes."""

    name: str
    zone: str
    accelerator_type: str
    bucket: str
    project: str
    tf_version: str
    spot: bool = True
    run: str = "run1"

    def __post_init__(self):
        for field, pattern, what in (
            ("name", _NAME, "lowercase letters, digits and hyphens, starting with a letter"),
            ("bucket", _BUCKET, "3 to 63 lowercase letters, digits, '-', '_' or '.'"),
            ("zone", _ZONE, "a zone such as us-central2-b"),
            ("project", _PROJECT, "a project ID: 6 to 30 lowercase letters, digits, hyphens"),
            ("run", _NAME, "lowercase letters, digits and hyphens, starting with a letter"),
        ):
            if not pattern.match(getattr(self, field)):
                raise ValueError(f"{field}={getattr(self, field)!r}: expected {what}")
        slice_hosts(self.accelerator_type)  # a type the table knows
        runtime_version(self.tf_version)

    @property
    def hosts(self) -> int:
        return hosts(self.accelerator_type)

    @property
    def runtime(self) -> str:
        return runtime_version(self.tf_version, multi_host=self.hosts > 1)

    @property
    def region(self) -> str:
        return self.zone.rsplit("-", 1)[0]

    @property
    def data_dir(self) -> str:
        return f"gs://{self.bucket}/fashion_mnist_tfrecords"

    @property
    def ckpt_dir(self) -> str:
        return f"gs://{self.bucket}/{self.run}"

    def script_args(self, resume: bool = False) -> list[str]:
        """The script's command line, both folders in the bucket; ``resume``: must not restart."""
        args = ["--data-dir", self.data_dir, "--ckpt-dir", self.ckpt_dir]
        return args + (["--require-checkpoint"] if resume else [])

    def _where(self) -> str:
        return f"--zone={self.zone} --project={self.project}"

    def _create(self) -> str:
        return (
            f"gcloud compute tpus queued-resources create {self.name} --node-id={self.name} "
            f"{self._where()} --accelerator-type={self.accelerator_type} "
            f"--runtime-version={self.runtime} --service-account=$SA "
            "--scopes=https://www.googleapis.com/auth/cloud-platform"
            + (" --spot" if self.spot else "")
        )

    def _on(self, worker: str, command: str) -> str:
        return (
            f"gcloud compute tpus tpu-vm ssh {self.name} {self._where()} --worker={worker} "
            f'--command="{command}"'
        )

    def _train(self, resume: bool) -> str:
        args = " ".join(self.script_args(resume))
        run = f"export TPU_NAME={self.name} TPU_LOAD_LIBRARY=0; python3 train_tpu.py {args}"
        return self._on("0", run)

    def steps(self) -> dict[str, tuple[str, ...]]:
        """The launch, in order: each step's title and its commands, run on your own machine."""
        wait = (
            f"gcloud compute tpus queued-resources describe {self.name} {self._where()} "
            "--format='value(state.state)'  # again until it prints ACTIVE"
        )
        versions = (
            "python3 -c 'import tensorflow as tf, keras; print(tf.__version__, keras.__version__)'"
        )
        copy = (
            f"gcloud compute tpus tpu-vm scp train_tpu.py {self.name}:~/ {self._where()} "
            "--worker=all"
        )
        delete = (
            f"gcloud compute tpus queued-resources delete {self.name} {self._where()} "
            "--force --quiet"
        )
        # On a pod the script refuses to write the TFRecords while training (no host may write
        # alone), so worker 0 writes them to the bucket first: --prepare stops before the TPU.
        prepare = self._on("0", f"python3 train_tpu.py --prepare --data-dir {self.data_dir}")
        return {
            "Settings: the service account the TPU VMs run as (the default compute one)": (
                f"PROJECT_NUMBER=$(gcloud projects describe {self.project} "
                "--format='value(projectNumber)')",
                "SA=${PROJECT_NUMBER}-compute@developer.gserviceaccount.com",
            ),
            "A bucket in the slice's region, which that account may read and write": (
                f"gcloud storage buckets create gs://{self.bucket} --project={self.project} "
                f"--location={self.region}",
                f"gcloud storage buckets add-iam-policy-binding gs://{self.bucket} "
                "--member=serviceAccount:$SA --role=roles/storage.objectAdmin",
            ),
            f"The slice: {self.accelerator_type}, {self.hosts} hosts, runtime {self.runtime}": (
                f"gcloud compute tpus tpu-vm versions list {self._where()}  # {self.runtime} listed?",
                self._create(),
                wait,
            ),
            "Every worker: the same TensorFlow, and the script": (self._on("all", versions), copy),
            "Train: worker 0 writes the TFRecords once, then runs the one program, the client": (
                prepare,
                self._train(False),
            ),
            "Preempted (the whole slice): delete it, create it again, resume from the bucket": (
                delete,
                self._create(),
                wait,
                copy,
                self._train(True),
            ),
            "Done: delete the slice (the bucket keeps the data and checkpoints)": (delete,),
        }

    def script(self) -> str:
        """All the steps as one bash text, numbered; copy a step's lines to your terminal."""
        lines = [
            "# Unverified on hardware: written from Google's Cloud TPU documentation",
            "# (tpucheck.pods.SOURCES); this project had no pod slice to run it on.",
            "",
        ]
        for number, (title, commands) in enumerate(self.steps().items(), 1):
            lines += [f"# {number}. {title}", *commands, ""]
        return "\n".join(lines).rstrip() + "\n"
