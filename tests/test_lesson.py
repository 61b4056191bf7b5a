"""helpers.lesson: what every setup cell runs once the helpers are installed."""

from __future__ import annotations

import importlib.metadata
import json

import pytest

from helpers import lesson


class _Dist:
    def __init__(self, direct_url):
        self.text = None if direct_url is None else json.dumps(direct_url)

    def read_text(self, name):
        return self.text


@pytest.mark.parametrize(
    "direct_url, source",
    [
        (None, None),  # no record: not installed by pip from a URL
        ({"url": "file:///work/main", "dir_info": {"editable": True}}, None),  # a clone
        (
            {
                "url": "https://x",
                "vcs_info": {
                    "vcs": "git",
                    "requested_revision": "main",
                    "commit_id": "1a2b3c4d5e6f",
                },
            },
            "main @ 1a2b3c4",
        ),
    ],
)
def test_where_the_helpers_came_from(monkeypatch, direct_url, source):
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: _Dist(direct_url))
    assert lesson.install_source() == source


def test_a_branch_install_is_said_and_another_release_refused(monkeypatch):
    version = lesson.helpers.__version__
    monkeypatch.setattr(lesson, "install_source", lambda: "main @ 1a2b3c4")
    assert "installed from main @ 1a2b3c4, not from the release tag v" in lesson._check_release(
        f"v{version}"
    )
    monkeypatch.setattr(lesson, "install_source", lambda: f"v{version} @ 1a2b3c4")
    assert lesson._check_release(f"v{version}") == version
    with pytest.raises(lesson.ForeignHelpers, match=f"found version {version}"):
        lesson._check_release("v9.9.9")


def test_the_one_line_names_the_hardware_or_its_simulation():
    assert lesson._hardware(["ISTPUVM=1"], 8).startswith("TPU hardware found (ISTPUVM=1)")
    assert "8 CPU devices, a simulated TPU" in lesson._hardware([], 8)
    assert "one CPU device (one replica, like a v5e-1)" in lesson._hardware([], 1)
    assert lesson._hardware([], None) == "no TPU found"


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="backend"):
        lesson.start(f"v{lesson.helpers.__version__}", backend="torch")


def test_without_a_tpu_tensorflow_returns_freed_cpu_memory(tmp_path):
    # oneDNN's own CPU allocator never gives back what it frees; lessons run within 2 GiB only
    # with the system allocator, which start() selects before TensorFlow starts.
    import subprocess
    import sys

    from helpers import processes

    code = (
        "import os\nfrom helpers import lesson\n"
        f"lesson.start('v{lesson.helpers.__version__}', 2)\n"
        f"print(os.environ.get({lesson.ONEDNN_SYSTEM_ALLOCATOR!r}))"
    )
    env = processes.child_env({lesson.ONEDNN_SYSTEM_ALLOCATOR: None, "ISTPUVM": None})
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines()[-1] == "1"


def test_a_learners_train_tpu_in_the_working_directory_does_not_replace_the_collections(tmp_path):
    # Colab's /content: the learner's edited copy sits where Python imports from first.
    import subprocess
    import sys
    from pathlib import Path

    from helpers import processes

    (tmp_path / "train_tpu.py").write_text("raise SystemExit('the edited copy was imported')\n")
    ours = Path(lesson.helpers.__file__).resolve().parent.parent / "train_tpu.py"
    code = (
        "import sys; sys.path.insert(0, '')\nfrom helpers import lesson\n"
        f"lesson.start('v{lesson.helpers.__version__}', 2)\n"
        "import train_tpu\nprint(train_tpu.__file__)\n"
        "from helpers.strategy import connect  # a helper that imports it too\n"
        "connect(2)\n"
        "print(sys.modules['train_tpu'] is train_tpu)"
    )
    env = processes.child_env({"ISTPUVM": None, "PYTHONPATH": str(ours.parent)})
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert f"Your {tmp_path / 'train_tpu.py'} is not what the lessons import" in lines[0]
    assert lines[-2:] == [str(ours), "True"]


def test_a_kernel_that_already_imported_another_copy_is_told_to_restart(monkeypatch, tmp_path):
    import sys
    import types

    other = types.ModuleType("train_tpu")
    other.__file__ = str(tmp_path / "train_tpu.py")
    monkeypatch.setitem(sys.modules, "train_tpu", other)
    with pytest.raises(lesson.ShadowedScript, match="restart the kernel"):
        lesson.use_collections_script(tmp_path)


def test_freeing_finished_models_lets_their_traced_step_go():
    # A tf.custom_gradient traced into a graph (each all-reduce of a multi-replica step is one)
    # stays registered for good, holding what its function captured: freed, the weights go.
    import gc
    import weakref

    import tensorflow as tf

    def traced_once():
        weights = tf.Variable(tf.ones([256, 256]))

        @tf.custom_gradient
        def scaled(x):
            return x * weights, lambda dy, variables=None: (dy * weights, [dy * x])

        tf.function(scaled).get_concrete_function(tf.TensorSpec([256, 256]))
        return weakref.ref(weights)

    weights = traced_once()
    gc.collect()
    assert weights() is not None, "the registry no longer holds traced steps: drop the helper"
    assert lesson.free_finished_models() >= 1
    assert weights() is None
