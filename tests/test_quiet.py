"""helpers.quiet: what TensorFlow's Python logging shows in a notebook (every setup cell).

Both checks read one fresh process that sets up as a notebook kernel does (TensorFlow costs
seconds to import, so one process serves both)."""

from __future__ import annotations

import pytest
from conftest import _run_python

from helpers import processes

pytestmark = pytest.mark.stacks  # also run on the kaggle and colab stacks (make test)

JUPYTER_LIKE = """
import logging, sys
sys.ps1 = ">>> "  # defined in Jupyter's kernel: TensorFlow then logs to stdout
from helpers import quiet
quiet.quiet_tensorflow(import_now=True)
import tensorflow as tf
logging.warning("a library logged through the root logger")  # which gives root a stderr handler
tf.get_logger().warning('shown once')
"""

# In a kernel, objects freed while the interpreter shuts down (a checkpoint with unrestored
# values) log through TensorFlow's logger after the kernel's output is closed. A plain process
# frees them in another order, so the test logs at exit itself, to a closed stream: registered
# before the setup's own exit hook, it runs after it, as those late messages do.
LOG_AFTER_CLOSE = """
import atexit, io, logging
closed = io.StringIO()
closed.close()
def log_after_close():
    for handler in logging.getLogger("tensorflow").handlers:
        handler.setStream(closed)
    logging.getLogger("tensorflow").warning("logged at exit")
atexit.register(log_after_close)
"""


@pytest.fixture(scope="module")
def kernel_like():
    return _run_python(LOG_AFTER_CLOSE + JUPYTER_LIKE)


def test_a_tensorflow_warning_shows_once_on_stderr(kernel_like):
    assert kernel_like.stdout.count("shown once") == 0, kernel_like.stdout
    assert kernel_like.stderr.count("shown once") == 1, kernel_like.stderr


def test_a_message_logged_after_the_output_closed_prints_no_traceback(kernel_like):
    assert "Logging error" not in kernel_like.stderr, kernel_like.stderr[-3000:]


def test_nothing_but_the_warning_reaches_stderr(kernel_like):
    # TensorFlow's start-up notices (the GPU probe, the oneDNN notice on CPUs that enable it) are
    # dropped at the import. Only TF 2.19/2.20 write absl lines later that nothing reaches.
    tolerate = processes.unsilenceable_logs_here()
    lines = [line for line in kernel_like.stderr.splitlines() if line.strip()]
    left = [line for line in lines if not (tolerate and processes.is_harmless_log(line))]
    expected = [
        "WARNING:root:a library logged through the root logger",
        "WARNING:tensorflow:shown once",
    ]
    assert left == expected, kernel_like.stderr[-3000:]
