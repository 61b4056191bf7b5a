"""tpucheck.routes: the install route for every platform and Python, and no pip call without one."""

from __future__ import annotations

import importlib.metadata

import pytest

from tpucheck import routes, runtime

# What each platform must get, Python by Python: the tensorflow-tpu release, or None for "no
# route". Written out by hand from the release facts so that a change to the tables shows here.
EXPECTED = {
    "3.10": "2.19.1",
    "3.11": "2.19.1",
    "3.12": "2.19.1",
    "3.13": "2.20.0",
    "3.14": None,
}
PLATFORMS = ("colab", "kaggle", "cloud-tpu-vm", "local", "ci")


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("python", sorted(EXPECTED))
def test_route_for_every_platform_and_python(platform, python):
    expected = EXPECTED[python]
    if expected is None:
        with pytest.raises(routes.NoRoute) as err:
            routes.choose_route(platform, python)
        message = str(err.value)
        assert f"Python {python}" in message and "Nothing was installed" in message
        assert "3.13" in message  # names the newest Python that works
        return
    route = routes.choose_route(platform, python)
    assert route.release.tensorflow == expected
    install = route.commands[-1]
    assert install.startswith(f"pip install tensorflow-tpu=={expected}")
    if expected == "2.20.0":
        # The wheel's libtpu~=0.0.14 would let pip take the newest libtpu: the route pins it.
        assert install.endswith(" libtpu==0.0.14")
        assert any("pinned" in note for note in route.notes)
    else:
        assert "libtpu" not in install  # 2.19.1 pins libtpu==0.0.10 itself
    assert route.verified_on_hardware is False  # nothing here was run on a TPU
    assert python in route.name and route.release.tensorflow in route.name


def test_only_kaggle_removes_its_cpu_build_first():
    kaggle = routes.choose_route("kaggle", "3.12")
    assert kaggle.commands[0] == "pip uninstall -y tensorflow tensorflow-cpu"
    assert len(kaggle.commands) == 2
    for platform in ("colab", "cloud-tpu-vm", "local"):
        assert len(routes.choose_route(platform, "3.12").commands) == 1


def test_hosted_platforms_install_automatically_and_name_their_restart():
    colab = routes.choose_route("colab", "3.13")
    assert colab.installs_automatically and colab.restart == "Runtime > Restart session"
    assert routes.choose_route("kaggle", "3.12").restart.startswith("Run > Restart")
    assert not routes.choose_route("cloud-tpu-vm", "3.11").installs_automatically
    assert not routes.choose_route("local", "3.11").installs_automatically


def test_todays_platform_pythons_have_a_route():
    for name, platform in routes.PLATFORMS.items():
        if platform.python[0].isdigit():
            assert routes.choose_route(name, platform.python).commands, name


def test_route_table_covers_every_pair():
    table = routes.route_table()
    assert len(table) == (len(routes.PLATFORMS) + 1) * len(routes.PYTHONS_CHECKED)
    shipped = {(r["platform"], r["python"]) for r in table if r["platform_ships_it"]}
    assert shipped == {("colab", "3.13"), ("kaggle", "3.12")}
    assert all(r["tensorflow"] is None for r in table if r["python"] == "3.14")


def test_every_fact_has_a_source():
    facts = [f for r in routes.RELEASES for f in r.facts]
    facts += [f for p in routes.PLATFORMS.values() for f in p.facts]
    assert facts and all(f.source for f in facts)
    assert all("unverified on hardware" in f.label() for f in facts if not f.verified_on_hardware)


def test_python_version_of_a_version_info():
    assert routes.python_version((3, 13, 0, "final", 0)) == "3.13"


def test_installed_route_is_remembered_per_interpreter(tmp_path):
    path = tmp_path / "route.json"
    assert routes.installed_route(path) is None
    route = routes.choose_route("colab", "3.13")
    routes.record_installed(route, path)
    assert routes.installed_route(path)["name"] == route.name
    path.write_text(path.read_text().replace('"python_executable"', '"other"'))
    assert routes.installed_route(path) is None


# --- the setup cell's decision (runtime.ensure_tensorflow) with the routes -------------------


def _fake(monkeypatch, *, platform, python, installed, hints=("ISTPUVM=1",)):
    monkeypatch.setattr(runtime, "detect_platform", lambda env=None: platform)
    monkeypatch.setattr(runtime, "tpu_hints", lambda env=None, dev="/dev": list(hints))
    monkeypatch.setattr(routes, "python_version", lambda version_info=None: python)
    monkeypatch.setattr(routes, "_record_path", lambda: None)

    def version(name):
        if name in installed:
            return installed[name]
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    ran: list[str] = []
    monkeypatch.setattr(runtime, "_pip", ran.append)
    recorded: list = []
    monkeypatch.setattr(routes, "record_installed", recorded.append)
    return ran, recorded


def test_colab_on_python_313_installs_the_pinned_pair(monkeypatch):
    ran, recorded = _fake(monkeypatch, platform="colab", python="3.13", installed={})
    with pytest.raises(runtime.RestartRequired, match="Runtime > Restart session"):
        runtime.ensure_tensorflow()
    assert ran == ["pip install tensorflow-tpu==2.20.0 libtpu==0.0.14"]
    assert [r.name for r in recorded] == ["colab/py3.13/tensorflow-tpu-2.20.0"]


def test_after_the_restart_the_pinned_pair_passes(monkeypatch):
    installed = {"tensorflow-tpu": "2.20.0", "libtpu": "0.0.14"}
    ran, _ = _fake(monkeypatch, platform="colab", python="3.13", installed=installed)
    support = runtime.ensure_tensorflow()
    assert support.usable is None and "unverified on hardware" in support.reason
    assert ran == []


def test_tensorflow_tpu_220_with_the_newest_libtpu_is_refused(monkeypatch):
    installed = {"tensorflow-tpu": "2.20.0", "libtpu": "0.0.52"}
    _fake(monkeypatch, platform="local", python="3.13", installed=installed)
    with pytest.raises(runtime.TPUUnusableError) as err:
        runtime.ensure_tensorflow()
    assert "No TPU platform found" in str(err.value)
    assert "pip install tensorflow-tpu==2.20.0 libtpu==0.0.14" in str(err.value)


def test_kaggle_on_python_312_removes_the_cpu_build_then_installs_219(monkeypatch):
    installed = {"tensorflow-cpu": "2.20.0", "libtpu": "0.0.17"}
    ran, _ = _fake(monkeypatch, platform="kaggle", python="3.12", installed=installed)
    with pytest.raises(runtime.RestartRequired, match="Restart & clear"):
        runtime.ensure_tensorflow()
    assert ran == [
        "pip uninstall -y tensorflow tensorflow-cpu",
        "pip install tensorflow-tpu==2.19.1",
    ]


@pytest.mark.parametrize("platform", ("colab", "kaggle", "local"))
def test_no_route_stops_with_one_message_and_no_pip_call(monkeypatch, platform):
    ran, recorded = _fake(monkeypatch, platform=platform, python="3.14", installed={})
    with pytest.raises(runtime.TPUUnusableError) as err:
        runtime.ensure_tensorflow()
    message = str(err.value)
    assert ran == [] and recorded == []
    assert "No TPU build of TensorFlow has a wheel for Python 3.14" in message
    assert "Keras 3 on the JAX backend" in message
    assert "pip install" not in message


def test_no_tpu_in_sight_needs_no_route(monkeypatch):
    ran, _ = _fake(
        monkeypatch, platform="local", python="3.14", installed={"tensorflow": "2.21.0"}, hints=()
    )
    assert runtime.ensure_tensorflow().usable is False
    assert ran == []


def test_a_failed_pip_install_says_what_to_do(monkeypatch):
    import subprocess

    # pip's own words when the runtime has no network: no known failure, so the general advice.
    offline = (
        "ERROR: Could not find a version that satisfies the requirement tensorflow-tpu==2.19.1"
    )
    done = subprocess.CompletedProcess([], 1, stdout=offline + "\n")
    monkeypatch.setattr(runtime.subprocess, "run", lambda *args, **kwargs: done)
    monkeypatch.setattr(runtime, "tpu_hints", lambda: ["ISTPUVM=1"])
    with pytest.raises(runtime.TPUUnusableError, match="Internet"):
        runtime._pip("pip install tensorflow-tpu==2.19.1")


def test_a_route_is_never_installed_where_no_tpu_is_in_sight(monkeypatch):
    # A TPU build's libtpu queries the cloud metadata service on a host without a TPU.
    def never(*args, **kwargs):
        raise AssertionError("pip must not run")

    monkeypatch.setattr(runtime.subprocess, "run", never)
    monkeypatch.setattr(runtime, "tpu_hints", lambda: [])
    with pytest.raises(runtime.TPUUnusableError, match="no TPU hardware is in sight"):
        runtime._pip("pip install tensorflow-tpu==2.19.1")


def test_colab_without_tensorflow_or_hints_is_told_the_route(monkeypatch):
    _fake(monkeypatch, platform="colab", python="3.13", installed={}, hints=())
    with pytest.raises(ModuleNotFoundError) as err:
        runtime.ensure_tensorflow()
    assert "tensorflow-tpu==2.20.0 libtpu==0.0.14" in str(err.value)
    assert "pip install tensorflow." in str(err.value)
