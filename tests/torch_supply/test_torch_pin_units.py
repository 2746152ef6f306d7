"""The pieces that keep the torch under test untouchable, each on its own: wheel
metadata, requirement conflicts, the undefined-symbol hint, expected failures
scoped to torch versions, the reproduce command and the matrix's pinned backends.

The end-to-end behaviour (real pip, real environments) is in test_torch_pin.py and
test_torch_releases.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ootci.runner.commands.registry import left_out, matrix_entries
from ootci.runner.core import rootcause
from ootci.runner.manifests.manifest import ExpectedFailure
from ootci.runner.manifests.registry import resolve
from ootci.runner.models import SUITES, Outcome, TorchInfo, reproduce_command
from ootci.runner.models import TestResult as Result
from ootci.runner.suite_runs import classify
from ootci.runner.torch_supply import torch_pin, wheel_metadata

UNDER_TEST = torch_pin.TorchUnderTest(version="2.14.0+cu130", dist_version="2.14.0",
                                      git_version="08187d9e0fba026dc8217405802ab5381dc88d90",
                                      location="/layers/a/site-packages/torch")


def make_wheel(tmp_path: Path, name: str, version: str, requires: list[str],
               torch_build: dict | None = None) -> Path:
    """A minimal but valid wheel file with the given metadata."""
    wheel = tmp_path / f"{name}-{version}-py3-none-any.whl"
    dist_info = f"{name}-{version}.dist-info"
    metadata = "Metadata-Version: 2.1\n" + f"Name: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{name}/__init__.py", "")
        zf.writestr(f"{dist_info}/METADATA", metadata)
        zf.writestr(f"{dist_info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        if torch_build is not None:
            zf.writestr(f"{dist_info}/torch_build.json", json.dumps(torch_build))
        zf.writestr(f"{dist_info}/RECORD", "")
    return wheel


def test_wheel_metadata_reads_requirements_and_build_torch(tmp_path):
    wheel = make_wheel(tmp_path, "torch_openreg", "0.1.0", ["torch>=2.13", 'pytest; extra == "test"'],
                       {"version": "2.13.0+cpu", "git_version": "cf30153c4c131c8164ee7798e5022d810682e2cb"})
    meta = wheel_metadata.read(wheel)
    assert (meta.name, meta.version) == ("torch_openreg", "0.1.0")
    assert [str(r) for r in meta.torch_requirements()] == ["torch>=2.13"]
    build = meta.build_torch()
    assert build.version == "2.13.0+cpu" and build.git_version.startswith("cf30153c")
    assert "torch_build.json" in build.how


def test_an_exact_pin_is_a_build_torch_and_a_range_is_not(tmp_path):
    npu = wheel_metadata.read(make_wheel(tmp_path, "torch_npu", "2.13.0", ["torch==2.13.0.*", "numpy"]))
    assert npu.build_torch().version == "2.13.0"
    ranged = wheel_metadata.read(make_wheel(tmp_path, "torch_foo", "1.0", ["torch>=2.13"]))
    assert ranged.build_torch() is None


def test_not_a_wheel_is_a_bad_wheel(tmp_path):
    bogus = tmp_path / "x-1.0-py3-none-any.whl"
    bogus.write_text("not a zip")
    with pytest.raises(wheel_metadata.BadWheel, match="x-1.0-py3-none-any.whl"):
        wheel_metadata.read(bogus)


def test_wheel_conflict_names_the_requirement_and_the_torch_under_test(tmp_path):
    pinned = wheel_metadata.read(make_wheel(tmp_path, "torch_openreg", "0.1.0", ["torch==2.13.0"]))
    assert torch_pin.wheel_conflict(pinned, UNDER_TEST) == (
        "torch_openreg 0.1.0 requires torch==2.13.0; the torch under test is 2.14.0+cu130")
    loose = wheel_metadata.read(make_wheel(tmp_path, "torch_loose", "0.1.0", ["torch>=2.13"]))
    assert torch_pin.wheel_conflict(loose, UNDER_TEST) is None


def test_prebuilt_pin_message(tmp_path):
    npu = wheel_metadata.read(make_wheel(tmp_path, "torch_npu", "2.13.0", ["torch==2.13.0.*"]))
    assert torch_pin.pinned_elsewhere(npu, UNDER_TEST) == "pinned to torch 2.13.0, torch under test is 2.14.0+cu130"
    same = torch_pin.TorchUnderTest("2.13.0+cpu", "2.13.0+cpu", None, "/x/torch")
    assert torch_pin.pinned_elsewhere(npu, same) is None  # ==2.13.0.* admits 2.13.0+cpu


def test_resolution_problem_names_both_torches():
    shadow = torch_pin.TorchUnderTest("2.13.0+cpu", "2.13.0+cpu", "cf30153c4c131c8164ee7798e5022d810682e2cb",
                                      "/envs/e/site-packages/torch")
    problem = torch_pin.resolution_problem(UNDER_TEST, shadow)
    assert "/envs/e/site-packages/torch" in problem and UNDER_TEST.location in problem
    assert "2.13.0+cpu" in problem and "2.14.0+cu130" in problem
    assert torch_pin.resolution_problem(UNDER_TEST, UNDER_TEST) is None


def test_constraint_pins_the_version_pip_sees(tmp_path):
    path = torch_pin.write_constraint(tmp_path, UNDER_TEST)
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    assert lines == ["torch==2.14.0"]  # not 2.14.0+cu130: the index knows the wheel as 2.14.0


@pytest.mark.parametrize("build, expected", [
    (None, "nothing records which torch"),
    (wheel_metadata.BuildTorch("2.13.0+cpu", "cf30153c4c131c8164ee7798e5022d810682e2cb", "torch_build.json"),
     "built against torch 2.13.0+cpu (cf30153c4c13) (torch_build.json), but the torch under test is 2.14.0+cu130"),
    (wheel_metadata.BuildTorch("2.14.0+cu130", UNDER_TEST.git_version, "torch_build.json"),
     "built against this very torch"),
    (wheel_metadata.BuildTorch("2.14.0", None, "its requirement torch==2.14.0"), "built against this very torch"),
    (wheel_metadata.BuildTorch("2.13.0", None, "its requirement torch==2.13.0.*"), "but the torch under test is"),
])
def test_undefined_symbol_hint_says_a_torch_mismatch_only_when_it_is_one(build, expected):
    hint = rootcause.undefined_symbol_hint(build, UNDER_TEST.version, UNDER_TEST.git_version)
    assert expected in hint
    if build is not None and build.matches(UNDER_TEST.version, UNDER_TEST.git_version):
        assert "rebuild" not in hint


def test_expected_failures_scoped_to_torch_versions(tmp_path):
    manifest = resolve("openreg").model_copy(update={"expected_failures": [
        ExpectedFailure(test="integration::test_a", reason="fixed in 2.15", torch="<2.15"),
        ExpectedFailure(test="integration::test_b", reason="every torch"),
    ]})
    failed = Result(id="test_a", suite="integration", outcome=Outcome.failed)
    older = classify.expected_failure(manifest, "integration", "test_a", "2.14.0+cu130")
    assert classify.apply_expected(failed, older).outcome is Outcome.xfailed
    assert classify.expected_failure(manifest, "integration", "test_a", "2.15.0+cu132") is None
    assert classify.expected_failure(manifest, "integration", "test_a", None) is not None  # unknown torch: all apply
    # An entry for other torch versions is not reported as matching nothing.
    results = [Result(id="test_b", suite="integration", outcome=Outcome.failed)]
    problems = classify.unmatched_expected_failures(manifest, results, ["integration"], "2.15.0")
    assert problems == []
    assert len(classify.unmatched_expected_failures(manifest, results, ["integration"], "2.14.0")) == 1


def test_a_bad_torch_specifier_is_refused():
    with pytest.raises(ValueError, match="version specifier"):
        ExpectedFailure(test="x", reason="y", torch="2.15 or later")


@pytest.mark.parametrize("torch, suites, expected", [
    (TorchInfo(spec="nightly", version="2.16.0.dev20261122+cpu", dist_version="2.16.0.dev20261122+cpu",
               index_url="https://download.pytorch.org/whl/nightly/cpu"), SUITES,
     "ootci run openreg --torch 2.16.0.dev20261122+cpu --index-url https://download.pytorch.org/whl/nightly/cpu"),
    (TorchInfo(spec="/tmp/runner/torch-2.14.0-cp311-cp311-manylinux_2_28_x86_64.whl", version="2.14.0+cu130",
               dist_version="2.14.0"), ("smoke",), "ootci run openreg --torch 2.14.0 --suites smoke"),
    (TorchInfo(spec="/tmp/w/torch-2.16.0a0+git0123abc-cp311-cp311-linux_x86_64.whl", version="2.16.0a0+git0123abc",
               git_version="0123abc" + "0" * 33, dist_version="2.16.0a0+git0123abc"), (),
     f"ootci run openreg --torch git:0123abc{'0' * 33} --suites none"),
    (TorchInfo(spec="pr:12345", version="2.16.0a0+gitfeed", git_version="feed" * 10), SUITES,
     f"ootci run openreg --torch git:{'feed' * 10}"),
    (TorchInfo(spec="installed", source="/home/me/venv/bin/python", version="2.13.0+cpu"), SUITES,
     "ootci run openreg --python /home/me/venv/bin/python"),
    (TorchInfo(spec="nightly"), SUITES, "ootci run openreg --torch nightly"),
    # A release's CPU build from this machine's wheel directory: elsewhere it is on PyTorch's CPU index.
    (TorchInfo(spec="2.13.0", version="2.13.0+cpu", dist_version="2.13.0+cpu", source="torch==2.13.0"),
     SUITES, "ootci run openreg --torch 2.13.0+cpu --index-url https://download.pytorch.org/whl/cpu"),
    (TorchInfo(spec="2.14.0", version="2.14.0+cu130", dist_version="2.14.0+cu130"), ("smoke",),
     "ootci run openreg --torch 2.14.0+cu130 --index-url https://download.pytorch.org/whl/cu130 --suites smoke"),
    (TorchInfo(spec="2.14.0", version="2.14.0+rocm6.4", dist_version="2.14.0+rocm6.4"), SUITES,
     "ootci run openreg --torch 2.14.0+rocm6.4 --index-url https://download.pytorch.org/whl/rocm6.4"),
    (TorchInfo(spec="2.14.0", version="2.14.0+mybuild", dist_version="2.14.0+mybuild"), SUITES,
     "ootci run openreg --torch 2.14.0+mybuild"),  # no index known for a local build
])
def test_reproduce_command_names_the_torch_as_resolved(torch, suites, expected):
    assert reproduce_command("openreg", torch, suites) == expected


def test_matrix_leaves_out_prebuilt_backends_pinned_to_another_torch():
    npu = resolve("ascend-npu")
    assert npu.pinned_torch == "2.13.0"
    assert left_out(npu, "2.14.0") == "pinned to torch 2.13.0, torch under test is 2.14.0"
    assert left_out(npu, "nightly") is not None
    assert left_out(npu, "2.13.0") is None and left_out(npu, None) is None
    assert left_out(resolve("openreg"), "2.14.0") is None  # built against whatever torch is under test
    names = [e["name"] for e in matrix_entries([npu, resolve("openreg")], "2.14.0")]
    assert names == ["openreg"]


def _env_with_a_torch(root: Path, files: dict[str, str]) -> Path:
    """A venv whose site-packages holds a `torch` package made of `files` (no real torch)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    [site] = root.glob("lib/python3*/site-packages")
    for name, text in files.items():
        (site / "torch" / name).parent.mkdir(parents=True, exist_ok=True)
        (site / "torch" / name).write_text(text)
    return root / "bin" / "python"


def test_the_torch_an_install_left_is_read_without_importing_it(tmp_path):
    """The install stage's check asks where `import torch` would load from and what its
    version.py says: a torch whose import fails still answers, so nothing was imported."""
    from ootci.runner.torch_supply import envs

    python = _env_with_a_torch(tmp_path / "venv", {
        "__init__.py": "raise ImportError('importing torch is what this check must not pay for')\n",
        "version.py": "__version__ = '2.14.0+cu130'\ngit_version = '" + "a" * 40 + "'\n"})
    found = envs.torch_found(python)
    [site] = (tmp_path / "venv").glob("lib/python3*/site-packages")
    assert found == {"version": "2.14.0+cu130", "git_version": "a" * 40, "dist_version": None,
                     "location": os.path.realpath(site / "torch")}


def test_verify_names_the_torch_under_test_without_importing_it(tmp_path):
    """`ootci verify --python` asks which torch it checks a build against the same way: a torch
    whose import fails is still named (the plain_import check says why it fails)."""
    from ootci.runner.verification import verify

    python = _env_with_a_torch(tmp_path / "venv", {
        "__init__.py": "raise ImportError('not imported for its name')\n",
        "version.py": "__version__ = '2.14.0+cu130'\ngit_version = '" + "c" * 40 + "'\n"})
    assert verify._ask_torch(python) == ("2.14.0+cu130", "c" * 40)


def test_a_torch_without_a_readable_version_is_imported_after_all(tmp_path):
    """No __version__ in version.py (a package that only calls itself torch): torch_found falls back
    to importing it, as torch_info does, and says what the import says."""
    from ootci.runner.torch_supply import envs

    python = _env_with_a_torch(tmp_path / "venv", {"__init__.py": "__version__ = '0.0.1'\nfrom . import version\n",
                                                   "version.py": "git_version = '" + "f" * 40 + "'\n"})
    found = envs.torch_found(python)
    assert (found["version"], found["git_version"]) == ("0.0.1", "f" * 40)


def test_a_layer_is_byte_compiled_but_the_test_suites_packages_ship(tmp_path, monkeypatch):
    """What _build_layer leaves after pip's --no-compile install: byte-code for every module but the
    shipped tests, written whatever PYTHONDONTWRITEBYTECODE says, and a layer that itself lives
    under a directory named tests still compiled."""
    from ootci.runner.torch_supply import envs

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = envs.create_venv(tmp_path / "tests" / "layer", with_pip=False)
    sources = ["torch/__init__.py", "torch/testing/_internal/common.py", "sympy/core/tests/test_add.py",
               "numpy/_core/tests/__init__.py", "tests/__init__.py", "py2/legacy.py"]
    for name in sources:
        (env.site_packages / name).parent.mkdir(parents=True, exist_ok=True)
        (env.site_packages / name).write_text("print 'python 2'\n" if name.startswith("py2") else "X = 1\n")
    done = envs.byte_compile(env, log=tmp_path / "log", timeout=120)
    assert done.returncode == 1, done.output_tail  # the Python 2 file, left as pip leaves it
    compiled = {str(pyc.parent.parent.relative_to(env.site_packages) / pyc.name.split(".")[0]) + ".py"
                for pyc in env.site_packages.rglob("__pycache__/*.pyc")}
    assert compiled == {"torch/__init__.py", "torch/testing/_internal/common.py"}
