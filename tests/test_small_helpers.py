"""helpers.results, helpers.expected_errors, helpers.plots and helpers.models."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from helpers import expected_errors, models, plots, results


def test_record_prints_and_merges_into_the_results_file(monkeypatch, tmp_path, capsys):
    path = tmp_path / "r" / "01.json"
    monkeypatch.setenv(results.RESULTS_ENV, str(path))
    assert results.record(accuracy=np.float32(0.5), replicas=8) is None  # a cell shows the prints
    results.record(dataset="digits")
    assert json.loads(path.read_text()) == {
        "accuracy": 0.5,
        "replicas": 8,
        "dataset": "digits",
    }
    out = capsys.readouterr().out
    assert "accuracy: 0.5" in out and "replicas: 8" in out
    assert not list(path.parent.glob("*.tmp"))


def test_record_keeps_the_runs_counters(monkeypatch, tmp_path):
    monkeypatch.setenv(results.RESULTS_ENV, str(tmp_path / "r.json"))
    assert results.count("readiness_clean") == 1
    results.record(loss=1.0)
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved == {"_readiness_clean": 1, "loss": 1.0}


def test_record_without_runner_only_prints(monkeypatch, capsys):
    monkeypatch.delenv(results.RESULTS_ENV, raising=False)
    results.record(loss=1.25)
    assert capsys.readouterr().out == "loss: 1.25\n"


def test_count_adds_silently_to_the_results_file(monkeypatch, tmp_path, capsys):
    path = tmp_path / "02.json"
    monkeypatch.setenv(results.RESULTS_ENV, str(path))
    results.record(loss=1.5)
    assert results.count("checks") == 1
    assert results.count("checks") == 2
    assert json.loads(path.read_text()) == {"loss": 1.5, "_checks": 2}
    assert "checks" not in capsys.readouterr().out
    monkeypatch.delenv(results.RESULTS_ENV)
    assert results.count("checks") is None


def test_readiness_counts_only_clean_reports(monkeypatch, tmp_path):
    from tpucheck.readiness import Finding, NotReady, Report

    path = tmp_path / "03.json"
    monkeypatch.setenv(results.RESULTS_ENV, str(path))
    Report([], ["batch split"], [], {}).assert_clean()
    problem = Finding("batch-tiles", "error", "what", "where", "why", "fix")
    with pytest.raises(NotReady):
        Report([problem], ["batch split"], [], {}).assert_clean()
    assert json.loads(path.read_text()) == {"_readiness_clean": 1}


def test_record_rejects_nan():
    with pytest.raises(ValueError, match="not a finite number"):
        results.record(loss=math.nan)


def test_expect_error_passes_on_the_expected_error(capsys):
    with expected_errors.expect_error(ValueError, match="bad") as caught:
        raise ValueError("bad batch\ndetails")
    assert isinstance(caught[0], ValueError)
    assert "Raised, as expected: ValueError: bad batch" in capsys.readouterr().out


def test_expect_error_shows_the_line_that_matches_under_a_long_stack(capsys):
    stack = "\n".join(f'  File "x.py", line {i}, in f' for i in range(300))
    reason = "\x1b[1m(0) INVALID_ARGUMENT: You must feed a value for placeholder tensor 'p'\x1b[0m"
    with expected_errors.expect_error(RuntimeError, match="placeholder"):
        raise RuntimeError(f"Graph execution error:\n{stack}\n{reason}\nmore")
    assert capsys.readouterr().out.splitlines() == [
        "Raised, as expected: RuntimeError: Graph execution error:",
        "    (0) INVALID_ARGUMENT: You must feed a value for placeholder tensor 'p'",
        "    (301 more lines)",
    ]
    with expected_errors.expect_error(ValueError, match="scope"):
        raise ValueError("made outside the scope: <tf.Variable numpy=\narray([[0.1,\n 0.2]])>")
    assert capsys.readouterr().out.splitlines() == [
        "Raised, as expected: ValueError: made outside the scope: <tf.Variable numpy=",
        "    (2 more lines)",
    ]


def test_expect_error_fails_when_nothing_is_raised():
    with pytest.raises(expected_errors.ExpectedErrorMissing, match="expected ValueError"):
        with expected_errors.expect_error(ValueError):
            pass


def test_expect_error_fails_on_a_different_message_or_type():
    with pytest.raises(AssertionError, match="matching"):
        with expected_errors.expect_error(ValueError, match="batch"):
            raise ValueError("something else")
    with pytest.raises(KeyError):
        with expected_errors.expect_error(ValueError):
            raise KeyError("not the one")


def test_plot_history_draws_training_and_validation():
    import matplotlib

    matplotlib.use("Agg")
    logs = {"loss": [1.0, 0.5], "val_loss": [1.1, 0.7], "accuracy": [0.5, 0.8]}
    fig = plots.plot_history(logs)
    loss_ax, acc_ax = fig.axes
    assert len(loss_ax.lines) == 2 and len(acc_ax.lines) == 1
    with pytest.raises(ValueError, match="none of the metrics"):
        plots.plot_history({"mae": [1.0]})


def test_plot_bars_labels_ratios():
    import matplotlib

    matplotlib.use("Agg")
    fig = plots.plot_bars({"naive": 100.0, "fast": 300.0}, "examples/s", baseline="naive")
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert labels == ["100\n1.00x", "300\n3.00x"]
    with pytest.raises(ValueError):
        plots.plot_bars({}, "x")


def test_plot_step_shares_stacks_each_run():
    import matplotlib

    matplotlib.use("Agg")
    shares = {
        "naive": {"input": 0.5, "compute": 0.4, "other": 0.1},
        "fast": {"input": 0.05, "compute": 0.85, "other": 0.1},
    }
    fig = plots.plot_step_shares(shares, title="t")
    ax = fig.axes[0]
    assert len(ax.patches) == 6  # 2 runs x 3 parts
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["input", "compute", "other"]
    with pytest.raises(ValueError, match="nothing to plot"):
        plots.plot_step_shares({})


def test_classifier_outputs_float32_logits_and_is_reproducible():
    import keras

    a = models.build_classifier((8, 8, 1), seed=3)
    b = models.build_classifier((8, 8, 1), seed=3)
    x = np.random.default_rng(0).random((4, 8, 8, 1), dtype=np.float32)
    out = a(x)
    assert tuple(out.shape) == (4, 10)
    assert keras.backend.standardize_dtype(out.dtype) == "float32"
    for wa, wb in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_array_equal(wa, wb)
    assert a.get_layer("hidden").units % 128 == 0


def test_classifier_on_uint8_pixels_scales_them_in_the_model():
    pixels = np.random.default_rng(1).integers(0, 256, (4, 8, 8, 1)).astype(np.uint8)
    raw = models.build_classifier((8, 8, 1), seed=3, input_dtype="uint8")
    scaled = models.build_classifier((8, 8, 1), seed=3)
    assert raw.inputs[0].dtype == "uint8"
    np.testing.assert_allclose(raw(pixels), scaled(pixels.astype(np.float32) / 255), atol=1e-6)
    with pytest.raises(ValueError, match="input_dtype"):
        models.build_classifier((8, 8, 1), input_dtype="int32")


def test_expect_error_shortens_long_messages(capsys):
    with expected_errors.expect_error(RuntimeError):
        raise RuntimeError("\n".join(f"line {i}" for i in range(20)))
    out = capsys.readouterr().out
    assert "line 6" in out and "line 7" not in out and "(13 more lines)" in out


def test_bar_labels_use_the_tables_number_format_and_no_line_crosses_them():
    import matplotlib

    matplotlib.use("Agg")
    from helpers import plots

    assert [plots._format_measurement(v) for v in (10672.4, 218.4, 12.51, 0.3041)] == [
        "10,672",
        "218",
        "12.5",
        "0.304",
    ]
    values = {"naive": 3289.0, "cache": 6591.0, "vectorised": 10672.0, "close": 12500.0}
    line = 12800.0
    fig = plots.plot_bars(values, "examples/s", baseline="naive", reference=(line, "demand"))
    ax = fig.axes[0]
    fig.canvas.draw()
    to_data = ax.transData.inverted()
    labels = [t for t in ax.texts]
    assert [t.get_text().split("\n")[0] for t in labels] == ["3,289", "6,591", "10,672", "12,500"]
    for label in labels:
        box = label.get_window_extent()
        (_, low), (_, high) = to_data.transform([(box.x0, box.y0), (box.x1, box.y1)])
        assert not low <= line <= high, label.get_text()
        assert high <= ax.get_ylim()[1]


def test_plot_samples_titles_one_image_per_class():
    import matplotlib

    matplotlib.use("Agg")
    x = np.zeros((6, 28, 28, 1), "float32")
    fig = plots.plot_samples(x, np.array([2, 0, 2, 1, 0, 1]), ("a", "b", "c"))
    assert [ax.get_title() for ax in fig.axes] == ["0: a", "1: b", "2: c"]
    fig = plots.plot_samples(x, np.array([2, 0, 2, 1, 0, 1]), ("a", "b", "c"), count=2)
    assert len(fig.axes) == 2


def test_append_and_runs_on_keep_a_silent_list(monkeypatch, tmp_path, capsys):
    from helpers.blocks import runs_on

    monkeypatch.setenv(results.RESULTS_ENV, str(tmp_path / "r.json"))
    results.append("seen", 1)
    results.append("seen", [2, "x"])
    runs_on("CPU", "TPU and several replicas")  # outside IPython: this file's lines
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["_seen"] == [1, [2, "x"]]
    ((digest, line, places),) = saved["_blocks"]
    assert len(digest) == 16 and line > 1 and places == ["CPU", "TPU and several replicas"]
    assert capsys.readouterr().out == ""
