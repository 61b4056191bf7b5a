"""tpucheck as a package of its own: it never imports the lessons' ``helpers``, pip installs it,
``python -m tpucheck`` names its commands, and the TensorFlow internals it reads answer here."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the oldest Python (ruff's UP036 drops this with it)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for p in (ROOT / "tpucheck").rglob("*.py")
    if p.name != "__main__.py"
)


def test_no_module_of_tpucheck_imports_helpers():
    for path in (ROOT / "tpucheck").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.split(".")[0] == "helpers" for n in names), (path, names)


def test_importing_all_of_tpucheck_loads_neither_helpers_nor_tensorflow(tmp_path):
    code = f"""
    import importlib, sys
    for name in {MODULES!r}:
        importlib.import_module(name)
    print(sorted(m for m in sys.modules if m.split(".")[0] in ("helpers", "tensorflow", "keras")))
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_pip_installs_it_beside_the_helpers_and_the_script():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "tpucheck" in project["tool"]["setuptools"]["packages"]


def test_the_command_names_its_commands():
    done = subprocess.run(
        [sys.executable, "-m", "tpucheck"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    for command in ("selftest", "profile LOGDIR", "explain"):
        assert f"python -m tpucheck {command}" in done.stderr


@pytest.mark.stacks
def test_the_tensorflow_registries_tpucheck_reads_answer_here():
    tf = pytest.importorskip("tensorflow")
    from tpucheck import _tf

    assert _tf.is_stateful_op("RandomUniform") and not _tf.is_stateful_op("AddV2")
    assert _tf.is_stateful_op("NoSuchOpAnywhere")  # unknown ops count as stateful
    # XLA registers its kernels when it first compiles something, as the checked step does.
    tf.function(lambda x: tf.linalg.matmul(x, x), jit_compile=True)(tf.ones((2, 2)))
    assert _tf.has_xla_cpu_kernel("MatMul") is True
    assert _tf.has_xla_cpu_kernel("PyFunc") is False
    assert hasattr(_tf.xplane_proto(), "XSpace")
    assert "MatMul" in _tf.gradient_registry()  # the registry of gradient functions, by op

    def host_side(x):
        return x

    graph = (
        tf.function(lambda x: tf.py_function(host_side, [x], tf.float32))
        .get_concrete_function(tf.TensorSpec([], tf.float32))
        .graph.as_graph_def()
    )
    tokens = [n.attr["token"].s.decode() for n in graph.node if n.op == "EagerPyFunc"]
    callback = _tf.py_function_callback(tokens[0]) if tokens else None
    assert inspect.unwrap(getattr(callback, "_func", callback)).__name__ == "host_side"


@pytest.mark.stacks
def test_a_custom_gradient_traced_in_the_block_is_forgotten_after_it():
    tf = pytest.importorskip("tensorflow")
    from tpucheck import _tf

    @tf.custom_gradient
    def doubled(x):
        return 2 * x, lambda dy: 2 * dy

    def custom_gradients():
        return {n for n in _tf.gradient_registry() if n.startswith("CustomGradient-")}

    kept = custom_gradients()
    with _tf.forgetting_custom_gradients():
        tf.function(doubled).get_concrete_function(tf.TensorSpec([], tf.float32))
        assert len(custom_gradients() - kept) == 1  # traced into a graph: registered
    assert custom_gradients() == kept
