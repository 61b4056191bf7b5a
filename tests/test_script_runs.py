"""helpers.script_runs: a lesson's "Your script" runs train_tpu.main on the lesson's strategy."""

import pytest

from helpers import script_runs


def test_the_shared_data_folder_is_outside_the_repository():
    import tempfile
    from pathlib import Path

    assert Path(script_runs.DATA_DIR).parent == Path(tempfile.gettempdir())


@pytest.mark.slow  # every lesson's "Your script" runs it on every stack too (08's resumes)
def test_a_run_prints_its_command_and_lines_and_returns_the_done_numbers(run_python, tmp_path):
    proc = run_python(
        f"""
        import train_tpu
        from helpers.script_runs import ScriptFailed, run_script

        strategy = train_tpu.connect(2)
        run = run_script(strategy, "--epochs", "1", "--per-replica-batch", "64",
                         "--train-examples", "1024", "--test-examples", "300",
                         "--no-bf16", data_dir="{tmp_path}/data")
        print("RESULT", run.steps, run.test_images, 0 <= run.test_accuracy <= 1, len(run.lines))
        try:
            run_script(strategy, "--require-checkpoint", data_dir="{tmp_path}/data")
        except ScriptFailed as err:
            print("FAILED", err)
        """,
        timeout=600,
    )
    out = proc.stdout
    assert "$ python -m train_tpu --epochs 1 --per-replica-batch 64" in out
    assert "RESULT 8 300 True" in out  # 1024 // (64 x 2) steps; every one of 300 test images
    assert "FAILED train_tpu: No checkpoint in" in out
