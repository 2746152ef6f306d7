"""The torch under test stays untouched, end to end with real pip on the 2.13.0 layer.

Each backend here is a variant of the pure-Python toy backend (tests/fixtures/
registry/toy) written into a temporary directory with the requirements a test
needs, run through the real `ootci run`.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ootci.runner.models import RunRecord, Status
from ootci.runner.torch_supply import envs, torch_pin
from tests.support.cli import ootci
from tests.support.records import only_record

TOY = Path(__file__).resolve().parents[1] / "fixtures" / "registry" / "toy"
pytestmark = pytest.mark.slow

PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"
dependencies = {dependencies!r}
{entry_point}
[tool.setuptools]
packages = ["{package}"]
"""
ENTRY_POINT = '[project.entry-points."torch.backends"]\ntorch_toy = "torch_toy:_autoload"\n'


def package(root: Path, name: str, dependencies: list[str], *, version: str = "0.1.0",
            backend: bool = True, extra_files: dict[str, str] | None = None) -> Path:
    """A source tree: the toy backend (backend=True) or a plain library named `name`."""
    root.mkdir(parents=True)
    if backend:
        shutil.copytree(TOY / "pkg" / "torch_toy", root / "torch_toy")
        pkg = "torch_toy"
    else:
        pkg = name.replace("-", "_")
        (root / pkg).mkdir()
        (root / pkg / "__init__.py").write_text("")
    for rel, text in (extra_files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    packages = pkg if not extra_files else pkg + '", "' + '", "'.join(
        sorted({Path(r).parts[0] for r in extra_files}))
    (root / "pyproject.toml").write_text(PYPROJECT.format(
        name=name, version=version, dependencies=dependencies, package=packages,
        entry_point=ENTRY_POINT if backend else ""))
    return root


def toy_manifest(tmp_path: Path, source: Path) -> Path:
    text = (TOY / "backend.toml").read_text().replace('path = "pkg"', f'path = "{source}"')
    path = tmp_path / "backend.toml"
    path.write_text(text)
    return path


def wheel_of(source: Path, out: Path, layer) -> Path:
    """Built with the torch layer's interpreter, which has setuptools (the orchestrator's need not)."""
    subprocess.run([str(layer.python), "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(source)], check=True, capture_output=True)
    return next(out.glob("*.whl"))


def find_links(*dirs: Path) -> dict[str, str]:
    """PIP_FIND_LINKS with dirs added to what the machine already has (its local torch wheel)."""
    return {"PIP_FIND_LINKS": " ".join([os.environ.get("PIP_FIND_LINKS", ""), *map(str, dirs)]).strip()}


def no_torch_in_any_environment_under_test():
    """The invariant: torch lives in layers only, never in an environment under test."""
    cache = Path(os.environ["OOTCI_CACHE"])
    return sorted(glob.glob(str(cache / "envs" / "*" / "lib" / "python3*" / "site-packages" / "torch-*.dist-info")))


def stages(record: RunRecord) -> dict[str, Status]:
    return {s.name: s.status for s in record.stages}


def test_a_backend_requiring_another_torch_fails_install_with_its_own_root_cause(layer_torch, tmp_path):
    source = package(tmp_path / "src", "torch_toy", ["torch==2.12.0"])
    out = tmp_path / "out"
    result = ootci("run", str(toy_manifest(tmp_path, source)), "--torch", "2.13.0", "--out", str(out))
    assert result.returncode == 1, result.stderr
    record = only_record(out)
    install = record.stage("install")
    assert install.status is Status.failed
    assert install.summary == ("torch_toy 0.1.0 requires torch==2.12.0; "
                               f"the torch under test is {layer_torch['version']}")
    assert install.root_cause.hint == torch_pin.PIN_HINT
    assert install.root_cause.culprit == "torch_toy"
    assert stages(record)["autoload"] is Status.blocked
    assert no_torch_in_any_environment_under_test() == []


def test_a_dependency_requiring_another_torch_is_named_from_pips_resolver(torch_layer, layer_torch, tmp_path):
    """The backend itself accepts any torch; a library it needs pins torch==2.12.0.
    pip, held to the torch under test by the constraint, refuses; the stage names the library."""
    links = tmp_path / "links"
    wheel_of(package(tmp_path / "helper", "ootci-pins-torch", ["torch==2.12.0"], version="1.0", backend=False), links,
             torch_layer)
    source = package(tmp_path / "src", "torch_toy", ["ootci-pins-torch"])
    out = tmp_path / "out"
    result = ootci("run", str(toy_manifest(tmp_path, source)), "--torch", "2.13.0", "--out", str(out),
                   env=find_links(links))
    record = only_record(out)
    install = record.stage("install")
    assert install.status is Status.failed, install.summary
    assert install.summary == (f"ootci-pins-torch 1.0 requires torch==2.12.0; "
                               f"the torch under test is {layer_torch['version']}")
    assert install.root_cause.hint == torch_pin.PIN_HINT
    log = (out / record.run_id / "logs" / "install.log").read_text()
    assert "-c" in log and torch_pin.CONSTRAINT_NAME in log  # pip was called with the constraint
    assert result.returncode == 1
    assert no_torch_in_any_environment_under_test() == []


def test_a_wheel_that_ships_its_own_torch_is_caught_after_install(torch_layer, layer_torch, tmp_path):
    """Nothing pip can be told stops a wheel that carries a `torch` package of its own.
    The check after the install finds `import torch` resolving to it, and names both paths."""
    fake_torch = {"torch/__init__.py": "__version__ = '0.0.1'\nfrom . import version\n",
                  "torch/version.py": "git_version = '" + "f" * 40 + "'\n"}
    source = package(tmp_path / "src", "torch_toy", [], extra_files=fake_torch)
    out = tmp_path / "out"
    ootci("run", str(toy_manifest(tmp_path, source)), "--torch", "2.13.0", "--out", str(out))
    record = only_record(out)
    install = record.stage("install")
    assert install.status is Status.failed
    layer_dir = os.path.realpath(torch_layer.site_packages / "torch")
    assert install.data["expected_torch"] == layer_dir
    shadow = install.data["actual_torch"]
    assert shadow.endswith("site-packages/torch") and "/envs/" in shadow
    assert shadow in install.summary and layer_dir in install.summary
    assert "torch 0.0.1" in install.summary and f"torch {layer_torch['version']}" in install.summary
    assert install.root_cause.hint == torch_pin.SHADOW_HINT
    assert stages(record)["autoload"] is Status.blocked


def test_python_env_keeps_its_torch_and_the_stage_says_what_it_installed(torch_layer, layer_torch, make_env, tmp_path):
    """`ootci run --python` installs into the user's own environment: with the torch pinned,
    and it lists what it installed. A backend that needs another torch changes nothing."""
    user_env = make_env(name="user-env")
    before = envs.torch_info(user_env.python)
    links = tmp_path / "links"
    wheel_of(package(tmp_path / "helper", "ootci-helper", [], version="1.0", backend=False), links, torch_layer)
    good = package(tmp_path / "good", "torch_toy", ["ootci-helper", "torch>=2.13"])
    out = tmp_path / "out"
    good_manifest = toy_manifest(tmp_path, good)
    result = ootci("run", str(good_manifest), "--python", str(user_env.python),
                   "--suites", "none", "--out", str(out), env=find_links(links))
    record = only_record(out)
    install = record.stage("install")
    assert install.status is Status.passed, install.summary
    assert sorted(install.data["installed"]) == ["ootci-helper 1.0", "torch_toy 0.1.0"]
    assert "ootci-helper 1.0" in install.summary and "torch_toy 0.1.0" in install.summary
    assert record.command == f"ootci run {good_manifest} --python {user_env.python} --suites none"
    assert result.returncode == 0, result.stderr

    (tmp_path / "pinned").mkdir()
    pinned = package(tmp_path / "pinned" / "src", "torch_toy", ["torch==2.12.0"], version="0.2.0")
    out2 = tmp_path / "out2"
    ootci("run", str(toy_manifest(tmp_path / "pinned", pinned)), "--python", str(user_env.python),
          "--suites", "none", "--out", str(out2))
    assert only_record(out2).stage("install").summary == (
        f"torch_toy 0.2.0 requires torch==2.12.0; the torch under test is {layer_torch['version']}")
    after = envs.torch_info(user_env.python)
    assert after == before
    assert not list(user_env.site_packages.glob("torch-*.dist-info"))
