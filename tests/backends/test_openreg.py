"""The bundled OpenReg backend, tested in an environment that has torch.

The orchestrator environment has no torch, so a session fixture builds a venv
under .cache/ over the shared torch layer (rebuilt only when the backend's sources
change), installs backends/openreg into it, and runs the target-side suite once
(backends/openreg/tests). Each target test id becomes one test
here that asserts its outcome.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ootci.runner.torch_supply.envs import cache_root
from ootci.runner.stages.build import with_ccache
from tests.support import target_pytest
from tests.support.init_fixtures import UNITY_PARTS, unity_unit

REPO = Path(__file__).resolve().parents[2]
BACKEND = REPO / "backends" / "openreg"
TARGET_TESTS = BACKEND / "tests"

TARGET_IDS = target_pytest.discover(TARGET_TESTS)
pytestmark = pytest.mark.slow  # builds OpenReg into a venv of its own and runs its tests there


@pytest.fixture(scope="session")
def target_results(torch_layer, tmp_path_factory):
    # What gets installed; editing the target tests needs no rebuild.
    stamp = target_pytest.sources_hash(
        BACKEND / "csrc", BACKEND / "torch_openreg", BACKEND / "setup.py", BACKEND / "pyproject.toml"
    )
    build_env = with_ccache({**os.environ, "MAX_JOBS": os.environ.get("MAX_JOBS", "2"),
                             "PATH": f"{torch_layer.python.parent}{os.pathsep}{os.environ['PATH']}"}, cache_root(),
                            BACKEND)
    python = target_pytest.ensure_layered_env(
        REPO / ".cache" / "openreg-env", torch_layer,
        [["--no-build-isolation", "--no-deps", "--force-reinstall", str(BACKEND)]], stamp, env=build_env,
    )
    junit = tmp_path_factory.mktemp("openreg") / "junit.xml"
    proc = target_pytest.run(python, TARGET_TESTS, junit, cwd=REPO, extra=["-n", "2"])
    if not junit.exists():
        pytest.fail(f"target suite did not run:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return target_pytest.parse_junit(junit)


@pytest.mark.parametrize("test_id", TARGET_IDS)
def test_target(target_results, test_id):
    outcome = target_results.get(test_id, target_pytest.Outcome("missing", "not in the JUnit report"))
    if outcome.status == "skipped":
        pytest.skip(outcome.message)
    assert outcome.status == "passed", f"{test_id} {outcome.status}:\n{outcome.message}"


def test_cibuildwheel_accepts_config():
    cibw = shutil.which("cibuildwheel") or str(Path(sys.executable).parent / "cibuildwheel")
    if not Path(cibw).exists():
        pytest.skip("cibuildwheel is not installed in this environment (add it to the dev deps)")
    proc = subprocess.run(
        [cibw, "--print-build-identifiers", "--platform", "linux", str(BACKEND)],
        capture_output=True, text=True, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["cp311-manylinux_x86_64", "cp312-manylinux_x86_64"]


def test_packaging_is_tied_to_no_single_torch():
    """No runtime pin (the ABI is recorded in the wheel instead), and cibuildwheel builds and
    tests against the torch named by OPENREG_TORCH_VERSION, not a version written here."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((BACKEND / "pyproject.toml").read_text())
    torch_reqs = [Requirement(r) for r in project["project"]["dependencies"] if r.startswith("torch")]
    assert torch_reqs and all(not any(s.operator in ("==", "===", "~=") for s in r.specifier) for r in torch_reqs)
    cibw = project["tool"]["cibuildwheel"]
    assert "OPENREG_TORCH_VERSION" in cibw["environment-pass"]
    for key in ("before-build", "before-test"):
        assert '"torch==$OPENREG_TORCH_VERSION"' in cibw[key]
        assert "torch==2" not in cibw[key]
    assert "torch_build.json" in (BACKEND / "setup.py").read_text()


# Records, in the file named by OPENREG_TORCH_IMPORTED, that a process imported torch (the
# interpreter's "import" audit event; importlib.util.find_spec does not raise it).
IMPORT_WATCH = '''
import os, sys

def watch(event, args):
    if event == "import" and args[0] == "torch":
        with open(os.environ["OPENREG_TORCH_IMPORTED"], "a") as f:
            f.write(f"{os.getpid()}\\n")

sys.addaudithook(watch)
'''


def test_metadata_is_prepared_without_importing_torch_and_names_the_torch_it_sees(torch_layer, layer_torch,
                                                                               tmp_path):
    """pip asks for the metadata in a process of its own before the build: that process reads
    torch's version from torch/version.py rather than spend most of its time importing torch."""
    from pyproject_hooks import BuildBackendHookCaller, default_subprocess_runner

    watch = tmp_path / "watch"
    watch.mkdir()
    (watch / "sitecustomize.py").write_text(IMPORT_WATCH)
    imported = tmp_path / "imported"
    env = {"PYTHONPATH": str(watch), "OPENREG_TORCH_IMPORTED": str(imported)}
    # The watch itself: a plain `import torch` in the same layer is seen.
    subprocess.run([str(torch_layer.python), "-c", "import torch"], env={**os.environ, **env}, check=True)
    assert imported.read_text().count("\n") == 1
    imported.unlink()

    source = tmp_path / "openreg"
    shutil.copytree(BACKEND, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))

    def runner(cmd, cwd=None, extra_environ=None):
        default_subprocess_runner(cmd, cwd=cwd, extra_environ={**(extra_environ or {}), **env})

    hooks = BuildBackendHookCaller(str(source), "setuptools.build_meta", python_executable=str(torch_layer.python),
                                   runner=runner)
    metadata = tmp_path / "metadata"
    metadata.mkdir()
    dist_info = metadata / hooks.prepare_metadata_for_build_wheel(str(metadata))
    assert not imported.exists(), "the metadata hook imported torch"
    egg_info = next(metadata.glob("*.egg-info"))
    recorded = json.loads((egg_info / "torch_build.json").read_text())
    assert recorded == {"version": layer_torch["version"], "git_version": layer_torch["git_version"]}
    assert (dist_info / "METADATA").read_text().startswith("Metadata-Version")
    # The units it generated are the ones the init fixtures' setup.py write (tests/onboarding/test_init.py).
    for part in UNITY_PARTS:
        assert (source / "build" / "unity" / f"{part}.cpp").read_text() == unity_unit(source, part)
