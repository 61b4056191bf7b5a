"""helpers.quiet: what TensorFlow's Python logging shows in a notebook (every setup cell)."""

from __future__ import annotations

JUPYTER_LIKE = """
import logging, sys
sys.ps1 = ">>> "  # defined in Jupyter's kernel: TensorFlow then logs to stdout
from helpers import quiet
quiet.quiet_tensorflow(import_now=True)
import tensorflow as tf
logging.warning("a library logged through the root logger")  # which gives root a stderr handler
"""


def test_a_tensorflow_warning_shows_once_on_stderr(run_python):
    proc = run_python(JUPYTER_LIKE + "tf.get_logger().warning('shown once')\n")
    assert proc.stdout.count("shown once") == 0, proc.stdout
    assert proc.stderr.count("shown once") == 1, proc.stderr


def test_an_object_freed_after_the_output_closed_logs_no_traceback(run_python, tmp_path):
    # A checkpoint restored under the wrong name keeps unrestored values until the interpreter
    # shuts down; by then a kernel's output stream is closed, as the StringIO is here.
    proc = run_python(
        JUPYTER_LIKE
        + f"""
import io
model = tf.Module()
model.v = tf.Variable(1.0)
path = tf.train.Checkpoint(model=model).write(r"{tmp_path / "ckpt"}")
other = tf.Module()
other.v = tf.Variable(2.0)
status = tf.train.Checkpoint(net=other).restore(path)  # "net": nothing matches; kept alive
closed = io.StringIO()
closed.close()
for handler in tf.get_logger().handlers:
    handler.setStream(closed)
"""
    )
    assert "Logging error" not in proc.stderr, proc.stderr[-3000:]
