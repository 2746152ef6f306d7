"""The --torch SPEC grammar, and the plans of the specs that need no network."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.tags import sys_tags

from ootci.runner.core.errors import TorchSpecError, TorchWheelNotFound, UsageError
from ootci.runner.torch_supply import torch_acquire, torchspec

REPO = Path(__file__).resolve().parents[2]
OOTCI = REPO / ".venv" / "bin" / "ootci"


def _our_tag() -> str:
    return str(next(iter(sys_tags())))


@pytest.mark.parametrize(
    ("raw", "kind", "value"),
    [
        ("installed", "installed", "installed"),
        ("nightly", "nightly", "nightly"),
        ("Nightly", "nightly", "nightly"),
        ("2.13.0", "version", "2.13.0"),
        ("2.13.0+cpu", "version", "2.13.0+cpu"),
        ("2.14.0.dev20261120", "version", "2.14.0.dev20261120"),
        ("git:main", "git", "main"),
        ("git:v2.13.0", "git", "v2.13.0"),
        ("git:release/2.13", "git", "release/2.13"),
        ("git:3f2a9c1", "git", "3f2a9c1"),
        ("pr:12345", "pr", "12345"),
        ("pr:#42", "pr", "42"),
        ("https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-linux_x86_64.whl", "url",
         "https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-linux_x86_64.whl"),
        ("http://127.0.0.1:8000/torch-2.13.0-py3-none-any.whl#sha256=abc", "url",
         "http://127.0.0.1:8000/torch-2.13.0-py3-none-any.whl#sha256=abc"),
    ],
)
def test_each_kind_parses(raw, kind, value):
    spec = torchspec.parse(raw)
    assert (spec.kind, spec.value, spec.raw) == (kind, value, raw)


def test_wheel_path_resolves_to_an_absolute_existing_file(tmp_path, monkeypatch):
    wheel = tmp_path / "torch-2.13.0-py3-none-any.whl"
    wheel.write_bytes(b"not really a zip")
    monkeypatch.chdir(tmp_path)
    spec = torchspec.parse("torch-2.13.0-py3-none-any.whl")
    assert spec.kind == "wheel"
    assert spec.path == wheel.resolve()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("nightyl", "unknown torch spec 'nightyl': expected installed, nightly, a version like 2.13.0, "
                    "a wheel path or URL, git:REF or pr:N (did you mean nightly?)"),
        ("instaled", "(did you mean installed?)"),
        ("pr123", "(did you mean pr:123?)"),
        ("PR#77", "(did you mean pr:77?)"),
        ("latest", "unknown torch spec 'latest'"),
        ("", "empty torch spec"),
        ("pr:abc", "pull request number must be a positive integer"),
        ("pr:0", "pull request number must be a positive integer"),
        ("git:", "names no git ref"),
        ("git:--upload-pack=evil", "is not a valid git branch, tag or commit"),
        ("git:a..b", "is not a valid git branch, tag or commit"),
        ("https://example.com/torch.tar.gz", "a URL must point at a .whl file"),
    ],
)
def test_typos_and_bad_values_get_one_clear_line(raw, expected):
    with pytest.raises(TorchSpecError) as info:
        torchspec.parse(raw)
    message = info.value.message
    assert expected in message
    assert "\n" not in message
    if raw == "latest":
        assert "did you mean" not in message


def test_missing_wheel_is_its_own_error_naming_the_path(tmp_path):
    missing = tmp_path / "dist" / "torch-2.13.0-cp311-cp311-linux_x86_64.whl"
    with pytest.raises(TorchWheelNotFound) as info:
        torchspec.parse(str(missing))
    assert info.value.message == f"torch wheel not found: {missing}"
    assert info.value.exit_code == TorchSpecError.exit_code


def test_a_wheel_of_another_distribution_is_refused(tmp_path):
    wheel = tmp_path / "numpy-2.0.0-py3-none-any.whl"
    wheel.write_bytes(b"x")
    with pytest.raises(TorchSpecError, match="a wheel of 'numpy', not of torch"):
        torchspec.parse(str(wheel))


def test_wheel_plan_is_keyed_by_content(tmp_path):
    wheel = tmp_path / f"torch-2.13.0+cpu-{_our_tag()}.whl"
    wheel.write_bytes(b"first build")
    plan = torch_acquire.plan(torchspec.parse(str(wheel)))
    assert plan.install_args == [str(wheel)]
    assert plan.version == "2.13.0+cpu"
    first_key = plan.key
    wheel.write_bytes(b"second build")
    assert torch_acquire.plan(torchspec.parse(str(wheel))).key != first_key
    assert first_key.startswith("sha256:")


def test_wheel_for_another_python_is_refused_before_pip(tmp_path):
    other = f"cp3{sys.version_info.minor + 1}"
    wheel = tmp_path / f"torch-2.13.0-{other}-{other}-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"x")
    with pytest.raises(TorchSpecError, match="cannot be installed on this interpreter.*Python tag cp3"):
        torch_acquire.plan(torchspec.parse(str(wheel)))


def test_version_plan_pins_torch_and_shares_the_fixture_layer_key(monkeypatch):
    monkeypatch.delenv("OOTCI_TORCH_INDEX", raising=False)
    plan = torch_acquire.plan(torchspec.parse("2.13.0"))
    assert plan.install_args == ["torch==2.13.0"]
    assert plan.key == "torch==2.13.0"
    with_index = torch_acquire.plan(torchspec.parse("2.13.0"), index_url="http://127.0.0.1:1/simple")
    assert with_index.install_args == ["--extra-index-url", "http://127.0.0.1:1/simple", "torch==2.13.0"]
    assert with_index.key != plan.key


def test_installed_needs_an_interpreter():
    with pytest.raises(UsageError, match="--python"):
        torch_acquire.plan(torchspec.parse("installed"))
    plan = torch_acquire.plan(torchspec.parse("installed"), python=sys.executable)
    assert plan.install_args == [] and not plan.needs_install
    assert plan.source == sys.executable


@pytest.mark.parametrize(("spec", "code", "text"), [
    ("nightyl", 5, "did you mean nightly?"),
    ("/nonexistent/torch-2.13.0-py3-none-any.whl", 5, "torch wheel not found: /nonexistent/"),
    ("installed", 2, "--python"),
])
def test_cli_reports_spec_errors_in_one_line(spec, code, text):
    result = subprocess.run([OOTCI, "torch", spec, "--dry-run"], capture_output=True, text=True, timeout=60)
    assert result.returncode == code
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ootci: ") and text in lines[0]


def test_out_places_a_pinned_version_downloaded_by_pip(tmp_path):
    """`ootci torch 9.9.0 --out dist/` asks pip for the wheel (here from a local directory only)."""
    import zipfile

    links = tmp_path / "links"
    links.mkdir()
    name = "torch-9.9.0-py3-none-any.whl"
    with zipfile.ZipFile(links / name, "w") as wheel:
        wheel.writestr("torch/__init__.py", "")
        wheel.writestr("torch-9.9.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: torch\nVersion: 9.9.0\n")
        wheel.writestr("torch-9.9.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr("torch-9.9.0.dist-info/RECORD", "")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(links), "PIP_CONFIG_FILE": "/dev/null",
            "OOTCI_CACHE": str(tmp_path / "cache")}
    dist = tmp_path / "dist"
    result = subprocess.run([OOTCI, "torch", "9.9.0", "--out", str(dist)], capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    assert (dist / name).read_bytes() == (links / name).read_bytes()
    assert f"wheel:   {dist / name}" in result.stdout

    missing = subprocess.run([OOTCI, "torch", "9.9.1", "--out", str(dist)], capture_output=True, text=True,
                             timeout=300, env=env)
    assert missing.returncode == 6
    assert missing.stderr.startswith("ootci: pip could not download torch==9.9.1: ")


@pytest.mark.slow
def test_installed_reports_the_torch_of_that_interpreter(torch_layer):
    result = subprocess.run([OOTCI, "torch", "installed", "--python", str(torch_layer.python), "--json"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["install_args"] == [] and plan["source"] == str(torch_layer.python)
    assert plan["version"].startswith("2.13.0")
    assert len(plan["commit"]) == 40 and int(plan["commit"], 16) >= 0


def test_run_refuses_a_version_the_index_does_not_have(tmp_path):
    """`ootci run openreg --torch 9.9.9`: one line naming the versions pip's index has, exit 5,
    nothing under --out (pip sees only a directory of two empty torch wheels here)."""
    links = tmp_path / "links"
    links.mkdir()
    for version in ("2.13.0", "2.14.0"):
        (links / f"torch-{version}-py3-none-any.whl").write_bytes(b"")  # listed by name, never installed
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(links), "PIP_CONFIG_FILE": os.devnull,
            "OOTCI_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "out"
    result = subprocess.run([OOTCI, "run", "openreg", "--torch", "9.9.9", "--out", str(out)], capture_output=True,
                            text=True, timeout=120, env=env)
    assert result.returncode == 5, result.stderr
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "ootci: --torch 9.9.9: pip's package index has no torch 9.9.9; it has 2.14.0, 2.13.0"]
    assert not out.exists() and not (tmp_path / "cache").exists()
    # A version the index had is remembered: the next run of it asks pip nothing, even when
    # the index no longer lists it (here: its wheel is gone from the directory).
    dry_run = [OOTCI, "run", "openreg", "--torch", "2.14.0", "--dry-run", "--out", str(out)]
    assert subprocess.run(dry_run, capture_output=True, text=True, timeout=120, env=env).returncode == 0
    assert [p.read_text().split() for p in (tmp_path / "cache" / "torch-versions").iterdir()] == [["2.14.0", "2.13.0"]]
    (links / "torch-2.14.0-py3-none-any.whl").unlink()
    again = subprocess.run(dry_run, capture_output=True, text=True, timeout=120, env=env)
    assert again.returncode == 0, again.stderr
    other = subprocess.run([*dry_run[:4], "2.15.0", *dry_run[5:]], capture_output=True, text=True, timeout=120, env=env)
    assert other.returncode == 5 and "has no torch 2.15.0; it has 2.13.0" in other.stderr


def test_a_ready_layer_says_its_torch_without_starting_an_interpreter(torch_layer, layer_torch, monkeypatch, tmp_path):
    """The torch stage reads a layer's torch from its ready marker: every run over the layer would
    otherwise start an interpreter to `import torch` and ask. A layer from an older ootci (a CI cache)
    is asked once, and its marker keeps the answer."""
    from ootci.runner.torch_supply import envs

    assert envs.layer_torch_info(torch_layer) == layer_torch  # asked at most once, here
    assert json.loads(torch_layer.ready_marker.read_text())["torch"] == layer_torch

    def no_probe(*args, **kwargs):
        raise AssertionError("a ready layer's torch was asked again")

    monkeypatch.setattr(envs, "torch_info", no_probe)
    assert envs.layer_torch_info(torch_layer) == layer_torch
    older = envs.Env(tmp_path / "older-layer")
    older.root.mkdir()
    older.ready_marker.write_text(json.dumps({"install_args": ["torch==2.13.0"], "packages": []}))
    monkeypatch.setattr(envs, "torch_info", lambda python, **kwargs: {**layer_torch, "asked": str(python)})
    assert envs.layer_torch_info(older)["asked"] == str(older.python)
    assert json.loads(older.ready_marker.read_text()) == {"install_args": ["torch==2.13.0"], "packages": [],
                                                           "torch": {**layer_torch, "asked": str(older.python)}}
    monkeypatch.setattr(envs, "torch_info", no_probe)
    assert envs.layer_torch_info(older)["asked"] == str(older.python)
