"""tpucheck.failures: every error text users posted maps to its fix, as they posted it.

The texts are quoted from the threads each row cites (trimmed to whole lines).
"""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tpucheck import failures

POSTED = {
    "tensorflow-without-tpu": [
        # googlecolab/colabtools#5203 (Colab, TF from the TPU guide)
        "InvalidArgumentError: No OpKernel was registered to support Op 'ConfigureDistributedTPU' "
        "used by {{node ConfigureDistributedTPU}} with these attrs: [compilation_failure_closes_chips=false]\n"
        "Registered devices: [CPU]\nRegistered kernels:\n  <no registered kernels>\n"
        "\t [[ConfigureDistributedTPU]] [Op:__inference__tpu_init_fn_4]",
        # tensorflow/tensorflow#89797 and #96203 show the same lines; older reports:
        "Registered devices: [CPU, XLA_CPU]",
    ],
    "libtpu-mismatch": [
        # Kaggle/docker-python#1499
        "external/local_xla/xla/stream_executor/tpu/tpu_platform_interface.cc:78] No TPU platform "
        "found. Platform manager status: OK",
        "pjrt_c_api_helpers.cc:258] Unexpected error status Unexpected PJRT_Plugin_Attributes_Args "
        "size: expected 32, got 24. The plugin is likely built with a later version than the "
        "framework. This plugin is built with PJRT API version 0.75.",
        # google/flax#4122
        "XlaRuntimeError: INVALID_ARGUMENT: Mismatched PJRT plugin PJRT API version (0.47) and "
        "framework PJRT API version 0.54).",
    ],
    "tpu-held-elsewhere": [
        # jax-ml/jax#22070
        "Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by process with "
        "pid 176028. Not attempting to load libtpu.so in this process.",
        # googlecolab/colabtools#4567, tensorflow/tensorflow#51476: TensorFlow after JAX
        "UnauthenticatedError: ioctl failed",
    ],
    "libtpu-pin-conflict": [
        # googlecolab/colabtools#5209
        "ERROR: Cannot install tensorflow-tpu==2.16.1, tensorflow-tpu==2.16.2, tensorflow-tpu==2.17.0, "
        "tensorflow-tpu==2.17.1 and tensorflow-tpu==2.18.0 because these package versions have "
        "conflicting dependencies.\n\nThe conflict is caused by:\n"
        "    tensorflow-tpu 2.18.0 depends on libtpu==2.18.0\n"
        "    tensorflow-tpu 2.16.1 depends on libtpu==2.16.0rc0",
    ],
    "jax-lost-libtpu": [
        # jax-ml/jax#29989
        "UserWarning: cloud_tpu_init failed: AttributeError(\"module 'libtpu' has no attribute "
        "'get_library_path'\")\n This a JAX bug; please report an issue at "
        "https://github.com/jax-ml/jax/issues",
    ],
    "bare-tpu-resolver": [
        # googlecolab/colabtools#4637, tensorflow/tensorflow#70827
        "ValueError: Please provide a TPU Name to connect to.",
    ],
}


@pytest.mark.parametrize(
    "key, text", [(key, text) for key, texts in POSTED.items() for text in texts]
)
def test_each_posted_text_is_recognised_as_its_failure(key, text):
    assert failures.recognise(text).key == key
    sentence = failures.explain(text)
    assert "Fix:" in sentence and failures.recognise(text).sources[0] in sentence


def test_every_row_has_posted_texts_and_sources():
    assert {f.key for f in failures.FAILURES} == set(POSTED)
    for failure in failures.FAILURES:
        assert failure.sources and all("#" in s for s in failure.sources)


def test_an_unrelated_error_is_not_explained():
    assert failures.recognise("ValueError: shapes (3,) and (4,) not aligned") is None
    assert failures.explain(RuntimeError("out of memory")) is None


def test_a_pip_conflict_names_the_package_that_conflicts():
    sentence = failures.explain(POSTED["libtpu-pin-conflict"][0])
    assert "the conflict: libtpu==2.18.0" in sentence


def test_the_table_shows_every_failure_readably():
    table = failures.markdown_table()
    assert table.count("\n") == len(failures.FAILURES) + 1
    assert "`No TPU platform found`" in table and "`depends on libtpu==`" in table


def test_a_library_that_already_holds_the_tpu_is_found_without_starting_anything(tmp_path):
    empty = tmp_path / "fd"
    empty.mkdir()
    assert failures._tpu_owner_in_process({}, empty) is None
    jax_cpu = {"jax._src.xla_bridge": SimpleNamespace(_backends={"cpu": object()})}
    assert failures._tpu_owner_in_process(jax_cpu, empty) is None
    jax_tpu = {"jax._src.xla_bridge": SimpleNamespace(_backends={"tpu": object()})}
    assert failures._tpu_owner_in_process(jax_tpu, empty) == "JAX"
    xla = SimpleNamespace(_XLAC=SimpleNamespace(_xla_runtime_is_initialized=lambda: True))
    assert failures._tpu_owner_in_process({"torch_xla": xla}, empty) == "torch_xla"
    os.symlink("/dev/vfio/0", empty / "7")  # what an open v5e device looks like
    assert "this process" in failures._tpu_owner_in_process({}, empty)


@pytest.mark.parametrize(
    "version, problem",
    [
        ("3.5.0", "scale the loss"),
        ("3.7.0", "NaN"),
        ("3.9.2", "NaN"),
        ("3.10.0", None),
        ("3.13.2", None),
        ("2.15.0", None),
    ],
)
def test_keras_releases_with_the_multi_replica_bugs_are_refused(version, problem):
    found = failures.keras_distribution_problem(version)
    assert (found is None) if problem is None else (problem in found and "3.10" in found)


def test_the_conditions_a_report_records():
    clean = failures.conditions_seen(
        [], hints=[], tensorflow="tensorflow", keras="3.15.1", modules={}
    )
    assert clean == []
    kaggle = failures.conditions_seen(
        [POSTED["tpu-held-elsewhere"][1]],
        hints=["ISTPUVM=1"],
        tensorflow="tensorflow-cpu",
        keras="3.9.2",
        modules={},
    )
    assert kaggle == ["tensorflow-without-tpu", "tpu-held-elsewhere", "keras-multi-replica-bugs"]
    nothing = failures.conditions_seen([], hints=["/dev/vfio/0"], tensorflow=None, modules={})
    assert nothing == ["tensorflow-without-tpu"]


def test_the_explain_command_reads_a_pasted_error():
    def explain(*args, stdin=""):
        return subprocess.run(
            [sys.executable, "-m", "tpucheck", "explain", *args],
            input=stdin, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    posted = explain(stdin=POSTED["bare-tpu-resolver"][0])
    assert posted.returncode == 0 and "TPUClusterResolver(tpu='local')" in posted.stdout
    assert "googlecolab/colabtools#4637" in posted.stdout
    unknown = explain("KeyError:", "'loss'")
    assert unknown.returncode == 1 and "No known TPU failure" in unknown.stdout
    table = explain("--table")
    assert table.returncode == 0 and table.stdout.strip() == failures.markdown_table()
