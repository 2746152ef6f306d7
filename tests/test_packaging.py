"""ootci as an installed tool: the wheel, in a fresh venv, used outside any checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ootci.runner import cli
from ootci.runner.manifests import registry

REPO = Path(__file__).resolve().parent.parent


def _run(argv, *, cwd, env=None, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel release.yml publishes: built from the sdist, as `python -m build` does.
    release.yml hands its own in through OOTCI_DIST (a directory with one wheel)."""
    if os.environ.get("OOTCI_DIST"):
        out = Path(os.environ["OOTCI_DIST"])
    else:
        out = tmp_path_factory.mktemp("dist")
        built = _run([sys.executable, "-m", "build", "--outdir", out, REPO], cwd=REPO)
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
        assert len(list(out.glob("ootci-*.tar.gz"))) == 1
    (path,) = out.glob("ootci-*.whl")
    return path


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> dict:
    """A fresh venv with the wheel (and its declared dependencies only) and a directory far
    from the checkout to run it in."""
    venv = tmp_path_factory.mktemp("user") / "venv"
    assert _run([sys.executable, "-m", "venv", venv], cwd=venv.parent).returncode == 0
    done = _run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel],
                cwd=venv.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", registry.ENV, "VIRTUAL_ENV"}}
    return {"ootci": venv / "bin" / "ootci", "python": venv / "bin" / "python", "cwd": elsewhere, "env": env}


def test_the_wheel_installs_one_top_level_package(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        top = next(n for n in names if n.endswith("top_level.txt"))
        assert z.read(top).decode().split() == ["ootci"]
        build = json.loads(z.read("ootci/runner/_build.json"))
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"ootci"}
    # The registry, its schema, and OpenReg's sources, but no build products of the checkout.
    assert {"ootci/backends/openreg/backend.toml", "ootci/backends/ascend-npu/backend.toml",
            "ootci/backends/backend.schema.json", "ootci/backends/openreg/setup.py",
            "ootci/backends/openreg/csrc/runtime/Generator.cpp",
            "ootci/runner/suites/smoke/pytest.ini", "ootci/dashboard/templates/run.html.j2",
            *(f"ootci/runner/probes/{probe}" for probe in ("entry_points.py", "autoload_on.py", "autoload_off.py",
                                                            "imports.py", "_probe.py"))} <= set(names)
    assert not [n for n in names if "/build/" in n or n.endswith((".so", ".pyc"))]
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert build["commit"] == head


def test_list_and_show_work_outside_the_checkout(installed):
    listed = _run([installed["ootci"], "list", "--json"], cwd=installed["cwd"], env=installed["env"])
    assert listed.returncode == 0, listed.stderr
    assert {b["name"] for b in json.loads(listed.stdout)} >= {"openreg", "ascend-npu", "gaudi-hpu"}
    shown = _run([installed["ootci"], "show", "openreg", "--json"], cwd=installed["cwd"], env=installed["env"])
    assert shown.returncode == 0, shown.stderr
    manifest = Path(json.loads(shown.stdout)["manifest"])
    assert manifest.is_relative_to(installed["python"].parent.parent) and "site-packages" in manifest.parts
    # Nothing named runner or dashboard is importable at the top level of the user's venv.
    probe = _run([installed["python"], "-c", "import importlib.util as u; print(u.find_spec('runner'), "
                  "u.find_spec('dashboard'))"], cwd=installed["cwd"], env=installed["env"])
    assert probe.stdout.split() == ["None", "None"]


def test_an_organisations_registry_is_added(installed, tmp_path):
    org = tmp_path / "org"
    (org / "acme").mkdir(parents=True)
    (org / "acme" / "backend.toml").write_text((REPO / "backends/ascend-npu/backend.toml").read_text()
                                               .replace('name = "ascend-npu"', 'name = "acme"'))
    by_flag = _run([installed["ootci"], "list", "--registry", org], cwd=installed["cwd"], env=installed["env"])
    assert by_flag.returncode == 0, by_flag.stderr
    by_env = _run([installed["ootci"], "list"], cwd=installed["cwd"],
                  env=dict(installed["env"], OOTCI_REGISTRY=str(org)))
    for out in (by_flag.stdout, by_env.stdout):
        assert [line.split()[0] for line in out.splitlines()] == ["acme", "ascend-npu", "gaudi-hpu", "openreg"]
    (org / "openreg").mkdir()
    (org / "openreg" / "backend.toml").write_text((REPO / "backends/openreg/backend.toml").read_text())
    clash = _run([installed["ootci"], "list", "--registry", org], cwd=installed["cwd"], env=installed["env"])
    assert clash.returncode != 0 and "backend 'openreg' is registered twice" in clash.stderr
    assert "Traceback" not in clash.stderr


@pytest.mark.slow
def test_run_openreg_from_the_installed_wheel(installed, tmp_path):
    """OpenReg is built from the copy the wheel carries, copied out of site-packages first."""
    env = dict(installed["env"], OOTCI_CACHE=os.environ["OOTCI_CACHE"])
    run = _run([installed["ootci"], "run", "openreg", "--torch", "2.13.0", "--suites", "none",
                "--out", tmp_path / "runs"], cwd=installed["cwd"], env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (record_file,) = (tmp_path / "runs").glob("*/record.json")
    record = json.loads(record_file.read_text())
    stages = {s["name"]: s["status"] for s in record["stages"]}
    assert stages["build"] == stages["install"] == stages["autoload"] == "passed", stages
    bundled = next(installed["python"].parent.parent.glob("lib/python*/site-packages/ootci/backends/openreg"))
    assert not (bundled / "build").exists() and not list(bundled.glob("*.egg-info"))
    # The dashboard's templates come with the package.
    site = _run([installed["ootci"], "dashboard", "build", "--data", tmp_path / "runs", "--out", tmp_path / "site"],
                cwd=installed["cwd"], env=env)
    assert site.returncode == 0, site.stderr[-3000:]
    assert record["run_id"] in (tmp_path / "site" / "index.html").read_text() or \
        any(record["run_id"] in p.read_text() for p in (tmp_path / "site").rglob("*.html"))


def test_a_plain_install_builds_the_performance_section_and_says_what_to_install(installed, tmp_path):
    """Without the perf extra (a plain `pip install ootci` has no numpy): records with bench stages
    make a site whose charts are drawn and whose counts are judged, and one line names the extra."""
    import datetime as dt

    from ootci.runner.models import RunRecord, StageResult, Status, TorchInfo
    from ootci.runner.records import record_files

    no_numpy = _run([installed["python"], "-c", "import numpy"], cwd=installed["cwd"], env=installed["env"])
    assert no_numpy.returncode != 0 and "No module named 'numpy'" in no_numpy.stderr
    started = dt.datetime(2026, 11, 1, 3, 17, tzinfo=dt.UTC)
    for day in range(6):
        device = 18_400 * (1.03 if day == 5 else 1.0)
        bench = StageResult(name="bench", status=Status.passed, data={
            "counter": "callgrind", "timing": "events", "time_gated": True, "measurements": {"add_tiny": {
                "counts": {"device": {"per_call": device}, "cpu": {"per_call": 9_000.0}, "ratio": device / 9_000},
                "device": {"median": 4e-6 * (1 + day / 100), "rsd": 0.01}, "cpu": {"median": 2e-6},
                "ratio": 2.0, "timing": "events", "noisy": False}}})
        record = RunRecord(run_id=f"openreg-{started + dt.timedelta(days=day):%Y%m%dT%H%M%SZ}-{day:06x}",
                           backend="openreg", device="openreg", trigger="nightly",
                           torch=TorchInfo(spec="nightly", version="2.14.0"), status=Status.passed,
                           started_at=started + dt.timedelta(days=day), stages=[bench])
        record_files.write(tmp_path / "runs" / record.run_id, record)
    site = _run([installed["ootci"], "dashboard", "build", "--data", tmp_path / "runs", "--out", tmp_path / "site"],
                cwd=installed["cwd"], env=installed["env"])
    assert site.returncode == 0 and "Traceback" not in site.stderr, site.stderr[-3000:]
    page = (tmp_path / "site" / "backends" / "openreg.html").read_text()
    assert page.count('<svg class="perf"') == 3 and page.count('<line class="change open"') == 2
    assert 'id="perf-missing-extra"' in page and "pip install 'ootci[perf]'" in page


def test_an_empty_registry_is_said_out_loud(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(registry, "BUNDLED", tmp_path)
    monkeypatch.delenv(registry.ENV, raising=False)
    assert cli.main(["list"]) == 1
    assert f"no backends registered (searched {tmp_path})" in capsys.readouterr().err
    assert cli.main(["run", "openreg", "--torch", "2.13.0"]) != 0
    assert f"the registry is empty (searched {tmp_path})" in capsys.readouterr().err


def test_registry_flag_rejects_a_missing_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(registry.ENV, raising=False)
    assert cli.main(["list", "--registry", str(tmp_path / "nope")]) != 0
    assert f"--registry {tmp_path / 'nope'}: not a directory" in capsys.readouterr().err
