"""helpers.quiet: TensorFlow's start-up and log lines stay out of a fresh process's stderr."""

from __future__ import annotations


def test_a_fresh_process_imports_and_runs_the_simulated_tpu_quietly(run_python):
    # No TF_CPP_MIN_LOG_LEVEL from the test's environment: quiet_tensorflow() must set it.
    proc = run_python(
        """
        import logging, os
        from helpers import quiet
        dropped = quiet.quiet_tensorflow(import_now=True)
        assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "2"
        assert logging.getLogger("tensorflow").level == logging.WARNING
        import helpers, tensorflow as tf
        s = helpers.connect(8)
        per_replica = s.run(tf.function(lambda: tf.constant(1.0)))
        assert float(s.reduce("SUM", per_replica, axis=None)) == 8.0
        print("dropped", len(dropped))
        """,
        env={"TF_CPP_MIN_LOG_LEVEL": None, "PYTHONWARNINGS": None},
    )
    assert proc.stderr.strip() == "", proc.stderr
    assert "dropped" in proc.stdout
