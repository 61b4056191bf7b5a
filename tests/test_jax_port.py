"""helpers.jax_port: Keras 3 on JAX (notebook 12_keras3_on_jax).

The pure functions are tested here; everything that needs Keras on the JAX backend runs in a
fresh process that sets the backend first, as the notebook does, and checks that TensorFlow was
never imported there.
"""

from __future__ import annotations

import json

import pytest

from helpers import jax_port

NO_ACCELERATOR = {"env": {}, "dev": "/nonexistent"}


def test_configure_selects_jax_and_simulates_devices_on_a_cpu():
    env = {"XLA_FLAGS": "--xla_cpu_foo=1 --xla_force_host_platform_device_count=2"}
    wanted = jax_port.configure(8, env=env, modules={}, dev="/nonexistent")
    assert env["KERAS_BACKEND"] == "jax" and wanted["KERAS_BACKEND"] == "jax"
    assert env["XLA_FLAGS"] == "--xla_cpu_foo=1 --xla_force_host_platform_device_count=8"
    assert env["PJRT_NPROC"] == wanted["PJRT_NPROC"] == str(jax_port.thread_pool_size(8))
    # A re-run cell: Keras and JAX already imported with these settings is fine.
    assert jax_port.configure(8, env=env, modules={"keras": 1, "jax": 1}, dev="/nonexistent")


def test_thread_pool_size_leaves_a_thread_beyond_two_per_device():
    assert jax_port.thread_pool_size(8, cores=2) == 17  # jaxlib alone: max(2, 8) = 8
    assert jax_port.thread_pool_size(1, cores=2) == 3
    assert jax_port.thread_pool_size(8, cores=64) == 64  # never fewer than jaxlib's own
    assert jax_port.thread_pool_size(8) >= 17
    with pytest.raises(ValueError):
        jax_port.thread_pool_size(0)


def test_donation_is_safe_from_the_first_jaxlib_checked_right():
    assert not jax_port.donation_is_safe("0.7.2")  # the kaggle and colab stacks
    assert jax_port.donation_is_safe("0.10.2")  # the main stack
    assert jax_port.donation_is_safe("1.0.0rc1")
    assert not jax_port.donation_is_safe("0.9.0.dev20260101")


def test_configure_keeps_a_pool_size_the_user_chose():
    env = {"PJRT_NPROC": "32"}
    assert "PJRT_NPROC" not in jax_port.configure(8, env=env, modules={}, dev="/nonexistent")
    assert env["PJRT_NPROC"] == "32"


def test_configure_leaves_devices_alone_with_one_device_or_an_accelerator(tmp_path):
    env = {}
    assert "XLA_FLAGS" not in jax_port.configure(1, env=env, modules={}, dev="/nonexistent")
    assert "XLA_FLAGS" not in env and "PJRT_NPROC" not in env
    tpu_env = {"ISTPUVM": "1"}
    assert "XLA_FLAGS" not in jax_port.configure(8, env=tpu_env, modules={}, dev=tmp_path)
    assert "PJRT_NPROC" not in tpu_env
    (tmp_path / "nvidia0").touch()
    assert jax_port._accelerator_hints({}, tmp_path) == [str(tmp_path / "nvidia0")]
    assert "XLA_FLAGS" not in jax_port.configure(8, env={}, modules={}, dev=tmp_path)


def test_configure_refuses_tensorflow_and_a_backend_fixed_too_early():
    with pytest.raises(jax_port.RestartKernel, match="TensorFlow is already imported"):
        jax_port.configure(8, env={}, modules={"tensorflow": 1}, dev="/nonexistent")
    env = {"KERAS_BACKEND": "tensorflow"}
    with pytest.raises(jax_port.RestartKernel, match="keras is already imported"):
        jax_port.configure(8, env=env, modules={"keras": 1}, dev="/nonexistent")
    assert env == {"KERAS_BACKEND": "tensorflow"}  # nothing changed
    with pytest.raises(jax_port.RestartKernel, match="jax is already imported"):
        jax_port.configure(8, env={"KERAS_BACKEND": "jax"}, modules={"jax": 1}, dev="/x")
    for bad in (0, True, 2.0):
        with pytest.raises(ValueError):
            jax_port.configure(bad, env={}, modules={}, dev="/nonexistent")


def test_mesh_shape():
    assert jax_port.mesh_shape(8, 4) == (2, 4)
    assert jax_port.mesh_shape(8, 8) == (1, 8)
    assert jax_port.mesh_shape(6, 4) == (6, 1)  # 4 does not divide 6: no model axis
    assert jax_port.mesh_shape(1) == (1, 1)
    with pytest.raises(ValueError):
        jax_port.mesh_shape(0)


@pytest.mark.slow
def test_the_equivalence_verdict_catches_a_2_percent_learning_rate_change(run_python):
    """Notebook 12_keras3_on_jax asserts, on every stack, that 8 devices and one agree, sharded or
    not. The verdict it asserts is not vacuous: the same batches from the same weights with a 2%
    larger learning rate must fail it (one device each: the verdict, not the devices, is tested)."""
    proc = run_python(
        """
        import json, sys
        from helpers import jax_port
        jax_port.configure(1)
        import jax, keras
        import numpy as np
        from helpers import loops, models

        rng = np.random.default_rng(0)  # any images will do: the verdict is what is tested
        x, y = rng.random((256, 8, 8, 1), dtype=np.float32), rng.integers(0, 10, 256)
        make = lambda: models.build_classifier((8, 8, 1), hidden=256, l2=1e-4)
        one = keras.distribution.DataParallel(devices=jax.devices()[:1])
        args = (one, make, x, y, 64)
        start, a, loss_a, names = jax_port.train_same_batches(*args, steps=2)
        _, b, loss_b, _ = jax_port.train_same_batches(
            *args, steps=2, weights=start, learning_rate=0.102
        )
        verdict = loops.compare_runs((1, 1), 2, names, start, (b, a), (loss_b, loss_a), 1e-3)
        print(json.dumps({"ok": verdict.ok, "tensorflow": "tensorflow" in sys.modules}))
        """,
        env={"KERAS_BACKEND": None, "XLA_FLAGS": None},
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["tensorflow"] is False, "TensorFlow was imported in the JAX process"
    assert out["ok"] is False, "a 2% learning-rate change must exceed the tolerance"


def test_placement_names_the_spec_and_the_devices():
    class Sharded:
        sharding = type("S", (), {"device_set": {1, 2}, "spec": "P('batch')"})()

    class OneDevice:
        sharding = type("S", (), {"device_set": {1}})()

    assert jax_port.placement(Sharded()) == "P('batch') on 2 device(s)"
    assert jax_port.placement(OneDevice()) == "on 1 device(s)"
