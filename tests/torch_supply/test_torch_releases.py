"""The whole pipeline on every real torch release this machine can install.

2.13.0 is the local CPU wheel; 2.14.0 and 2.15.0 come from the package registry
as CUDA builds that run on the CPU. Each is installed once into a cached torch
layer under $OOTCI_CACHE (never into the orchestrator's venv). On each, OpenReg is
built against that torch, installed, verified and tested; then the ways a torch
mismatch shows up are provoked for real: a wheel built against another release,
a build whose ABI differs without a version guard, a backend pinned to 2.13.0, and
a nightly served by a local package index.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from ootci.runner.models import BisectRecord, RunRecord, Status, Verdict, variant_index
from ootci.runner.torch_supply import envs, torch_pin
from ootci.runner.verification.verify import ABI_HINT
from tests.support import real_wheels
from tests.support.cli import ootci
from tests.support.fixture_backends import write_openreg_manifest
from tests.support.records import only_record
from tests.support.shared_runs import shared_run

REPO = Path(__file__).resolve().parents[2]
OPENREG = REPO / "backends" / "openreg"
RELEASES = ("2.13.0", "2.14.0", "2.15.0")
pytestmark = pytest.mark.slow


def stage_status(record: RunRecord) -> dict[str, Status]:
    return {s.name: s.status for s in record.stages}


CUDA_LAYER_BYTES = 6_000_000_000
"""room a CUDA release's torch layer takes (measured: 5.5 GB each for 2.14.0 and 2.15.0)"""


def layer_cached(version: str) -> bool:
    """True when ootci's cache already holds a finished torch layer installed as torch==version."""
    for marker in (envs.cache_root() / "torch").glob(f"*/{envs.READY_MARKER}"):
        try:
            if f"torch=={version}" in json.loads(marker.read_text()).get("install_args", []):
                return True
        except (OSError, ValueError):
            continue
    return False


def need_room_for(*versions: str) -> None:
    """Skip, naming what is missing, when installing these releases' layers would fill the disk."""
    to_install = [v for v in versions if v != real_wheels.RELEASE and not layer_cached(v)]
    cache = envs.cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(cache).free
    if to_install and free < CUDA_LAYER_BYTES * len(to_install):
        pytest.skip(f"torch {', '.join(to_install)}: a CUDA build's layer takes ~5.5 GB and only "
                    f"{free / 1e9:.1f} GB are free under {cache}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, RunRecord]:
    """`ootci run openreg --torch V`, smoke and integration, once per release (lazily; 2.13.0 is the
    session's shared run, which tests/suite_runs/test_shards.py compares its shards with)."""
    cache: dict[str, RunRecord] = {}

    def get(version: str) -> RunRecord:
        if version not in cache:
            need_room_for(version)
            run = shared_run(tmp_path_factory, "run", "openreg", "--torch", version)
            record = only_record(run.out)
            assert run.returncode == 0, f"{version}: {run.stdout[-3000:]}\n{run.stderr[-2000:]}"
            cache[version] = record
        return cache[version]

    return get


def test_a_machine_wide_pip_cap_on_torch_is_named_as_the_root_cause(tmp_path):
    """Some machines cap torch for every pip install (a global constraints file). The torch stage
    then fails, and its root cause is the line naming the cap, not pip's bare ResolutionImpossible."""
    cap = tmp_path / "constraints.txt"
    cap.write_text("torch<=2.12.0\n")
    out = tmp_path / "out"
    result = ootci("run", "openreg", "--torch", "2.13.0", "--suites", "none", "--out", str(out),
                   env={"PIP_CONSTRAINT": str(cap), "OOTCI_CACHE": str(tmp_path / "cache")}, timeout=600)
    record = only_record(out)
    assert result.returncode != 0 and record.stage("torch").status is Status.failed
    cause = record.stage("torch").root_cause.summary
    assert "(constraint) torch<=2.12.0" in cause, cause


# Newest first: this file is handed out at the start of the session, when the other workers wait
# for the 2.13.0 layer and then for OpenReg's first compile against it. A CUDA release's layer
# needs neither, so its install (about 70 s of CPU) fills the core they leave idle; 2.13.0 first
# made this worker wait with them (measured: about 1.2 of 2 cores busy for the first 80 s).
@pytest.mark.parametrize("version", RELEASES[::-1])
def test_openreg_is_green_on_every_release(runs, version):
    record = runs(version)
    assert record.status is Status.passed
    upstream = record.stage("upstream")
    others = {name: status for name, status in stage_status(record).items() if name != "upstream"}
    assert all(status is Status.passed for status in others.values()), others
    # PyTorch's own test files come from github.com at the torch's commit: without a network the
    # stage says so and is skipped (tests/suite_runs/test_upstream.py runs them from a local mirror).
    assert upstream.status is Status.passed or (
        upstream.status is Status.skipped and upstream.summary.startswith("not run: ")
        and "cannot be reached" in upstream.summary), upstream.summary
    # The record names the torch that ran, as its own interpreter reported it.
    assert Version(record.torch.version).public == version
    assert re.fullmatch(r"[0-9a-f]{40}", record.torch.git_version)
    index = variant_index(record.torch.dist_version)  # 2.13.0+cpu here: PyTorch's CPU index; 2.14.0: PyPI
    assert record.command == f"ootci run openreg --torch {record.torch.dist_version}" + (
        f" --index-url {index}" if index else "")
    # The environment's `import torch` was the layer's, and the wheel was built against it.
    layer = record.stage("torch").data["layer"]
    assert record.stage("install").data["torch_location"].startswith(layer)
    build_torch = record.stage("build").data["build_torch"]
    assert (build_torch["version"], build_torch["git_version"]) == (record.torch.version, record.torch.git_version)
    assert "torch_build.json" in build_torch["how"]
    autoload = {c.name: c for c in record.stage("autoload").checks}
    assert autoload["build_torch"].status is Status.passed
    smoke, integration = record.stage("smoke").counts, record.stage("integration").counts
    assert smoke.get("passed", 0) >= 50 and set(smoke) <= {"passed", "skipped"}
    assert integration.get("passed", 0) >= 3000 and set(integration) <= {"passed", "skipped", "xfailed"}


@pytest.mark.parametrize("version", RELEASES)
def test_openreg_generator_version_guard(runs, version, tmp_path):
    """csrc/runtime/Generator.cpp overrides GeneratorImpl::philox_state only where torch declares it (>= 2.14)."""
    record = runs(version)
    python = record.stage("install").data["python"]
    junit = tmp_path / "junit.xml"
    subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                    str(OPENREG / "tests" / "test_generator.py") + "::test_philox_state_names_the_generator"],
                   capture_output=True, text=True, cwd=tmp_path, timeout=300)
    text = junit.read_text()
    if Version(version) >= Version("2.14"):
        assert 'failures="0"' in text and 'errors="0"' in text and 'skipped="0"' in text, text
    else:
        assert 'skipped="1"' in text and "added in 2.14" in text, text


def prebuilt_manifest(tmp_path: Path, wheel: str) -> Path:
    """OpenReg's manifest, installing the given wheel as a prebuilt backend."""
    text = (OPENREG / "backend.toml").read_text()
    text = text.replace('[source]\npath = "."', f'[source]\nrequirement = "{wheel}"')
    text = text.replace('recipe = "pip-wheel"', 'recipe = "prebuilt"')
    return write_openreg_manifest(tmp_path / "backend.toml", text)


def test_a_wheel_built_against_2_13_loads_under_2_14_and_is_still_refused(runs, tmp_path):
    """PyTorch's C++ ABI is not stable across releases. The 2.13.0 build of OpenReg loads under
    2.14.0 (no symbol it needs is missing), so only the torch it records says it is the wrong build."""
    wheel = runs("2.13.0").stage("build").data["wheels"][0]
    out = tmp_path / "out"
    ootci("run", str(prebuilt_manifest(tmp_path, wheel)), "--torch", "2.14.0", "--suites", "none", "--out", str(out))
    record = only_record(out)
    autoload = record.stage("autoload")
    checks = {c.name: c for c in autoload.checks}
    assert checks["plain_import"].status is Status.passed
    assert autoload.status is Status.failed
    built, under = runs("2.13.0").torch, runs("2.14.0").torch
    assert autoload.root_cause.summary == (
        f"torch_openreg was built against torch {built.version} ({built.git_version[:12]}), "
        f"but the torch under test is {under.version} ({under.git_version[:12]})")
    assert autoload.root_cause.hint == ABI_HINT


def openreg_copy(tmp_path: Path, edit) -> Path:
    """A copy of OpenReg's sources with `edit(root)` applied; returns its backend.toml."""
    root = tmp_path / "openreg"
    shutil.copytree(OPENREG, root, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
    edit(root)
    return root / "backend.toml"


def without_philox_guard(root: Path) -> None:
    generator = root / "csrc" / "runtime" / "Generator.cpp"
    text = generator.read_text()
    start, end = text.index("#if OPENREG_TORCH_AT_LEAST(2, 14)"), text.index("#endif", text.index("philox_state: the"))
    generator.write_text(text[:start] + text[end + len("#endif"):])


def test_an_unguarded_build_fails_on_an_older_torch_with_the_undefined_symbol_and_the_true_hint(runs, tmp_path):
    """Without the version guard, a 2.15.0 build of OpenReg inherits GeneratorImpl::philox_state, a symbol
    torch 2.13.0 does not have: autoload fails on it, and the hint says why, naming both torches."""
    built = tmp_path / "built"
    ootci("run", str(openreg_copy(tmp_path, without_philox_guard)), "--torch", "2.15.0", "--suites", "none",
          "--out", str(built), timeout=1800)
    build = only_record(built)
    assert stage_status(build)["autoload"] is Status.passed, build.stage("autoload").summary
    wheel = build.stage("build").data["wheels"][0]
    out = tmp_path / "out"
    (tmp_path / "prebuilt").mkdir()
    ootci("run", str(prebuilt_manifest(tmp_path / "prebuilt", wheel)), "--torch", "2.13.0", "--suites", "none",
          "--out", str(out))
    record = only_record(out)
    autoload = record.stage("autoload")
    assert autoload.status is Status.failed
    cause = autoload.root_cause
    assert "undefined symbol: _ZN3c1013GeneratorImpl12philox_state" in cause.summary
    built, under = build.torch, runs("2.13.0").torch
    assert cause.hint.startswith(f"the backend was built against torch {built.version} ({built.git_version[:12]})")
    assert (f"but the torch under test is {under.version} ({under.git_version[:12]}): "
            "rebuild it against the torch under test") in cause.hint


def test_openreg_pinned_to_2_13_fails_install_under_2_14_and_never_shadows_it(runs, tmp_path):
    def pin(root: Path) -> None:
        pyproject = root / "pyproject.toml"
        pyproject.write_text(re.sub(r"^dependencies = .*$", 'dependencies = ["torch==2.13.0"]',
                                    pyproject.read_text(), flags=re.M))

    out = tmp_path / "out"
    result = ootci("run", str(openreg_copy(tmp_path, pin)), "--torch", "2.14.0", "--out", str(out), timeout=1800)
    record = only_record(out)
    assert result.returncode == 1
    install = record.stage("install")
    assert install.status is Status.failed
    assert install.summary == (f"torch_openreg 0.1.0 requires torch==2.13.0; "
                               f"the torch under test is {runs('2.14.0').torch.version}")
    assert install.root_cause.hint == torch_pin.PIN_HINT
    assert [stage_status(record)[s] for s in ("autoload", "smoke", "integration")] == [Status.blocked] * 3


def test_prebuilt_torch_npu_pinned_to_2_13_is_skipped_under_2_14(runs, tmp_path):
    """The registry's real torch-npu==2.13.0 requires torch==2.13.0.*: under 2.14.0 it is not
    installed at all (no second torch), and the run says so instead of failing."""
    out = tmp_path / "out"
    result = ootci("run", "ascend-npu", "--torch", "2.14.0", "--out", str(out))
    record = only_record(out)
    if record.stage("build").status is Status.failed:
        pytest.skip(f"torch-npu==2.13.0 could not be downloaded: {record.stage('build').summary}")
    assert result.returncode == 0, result.stderr
    assert record.status is Status.skipped
    assert record.stage("build").summary == (
        f"pinned to torch 2.13.0, torch under test is {runs('2.14.0').torch.version}")
    rest = [s for s in record.stages if s.name not in ("torch", "build")]
    assert rest and all(s.status is Status.skipped and s.summary == record.stage("build").summary for s in rest)


def test_nightly_from_a_local_index_picks_installs_and_runs_the_newest(runs, httpserver, tmp_path):
    """A PEP 503 index on a real HTTP server lists the real 2.13.0 CPU wheel, a nightly made of it
    (re-versioned 2.16.0.dev20261122, same binaries) and an older nightly whose file does not exist.
    `--torch nightly` must pick, download, install and run the newest."""
    index, release, nightly = real_wheels.serve_nightly_index(httpserver)

    out = tmp_path / "out"
    result = ootci("run", "openreg", "--torch", "nightly", "--index-url", index, "--suites", "smoke",
                   "--out", str(out), timeout=1800)
    record = only_record(out)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-2000:]}"
    assert record.torch.spec == "nightly"
    assert record.torch.version == real_wheels.NIGHTLY
    assert record.torch.git_version == runs("2.13.0").torch.git_version  # the same binaries as the release
    assert record.torch.source.endswith(f"/files/{nightly.name}")
    assert record.command == (f"ootci run openreg --torch 2.16.0.dev20261122+cpu --index-url {index} "
                              "--suites smoke")
    assert record.stage("smoke").counts.get("passed", 0) >= 50


ABI_PATCH = REPO / "tests" / "fixtures" / "abi_break" / "openreg.patch"


def with_dlpack_info(root: Path) -> None:
    """OpenReg plus an op that calls at::toDLPackNonOwning, whose signature 2.14 changed (see the patch's README)."""
    subprocess.run(["patch", "-p1", "--quiet", "-i", str(ABI_PATCH)], cwd=root, check=True, capture_output=True)


def test_bisecting_a_2_13_build_over_three_releases_names_2_14_and_the_undefined_symbol(tmp_path):
    """A real ABI break between two real releases: torch 2.14 no longer exports the two-argument
    at::toDLPackNonOwning. A prebuilt OpenReg wheel compiled against 2.13.0 is bisected over the three
    releases: the first bad torch is 2.14.0, and the cause is the symbol."""
    need_room_for(*RELEASES)
    built = tmp_path / "built"
    ootci("run", str(openreg_copy(tmp_path, with_dlpack_info)), "--torch", "2.13.0", "--suites", "none",
          "--out", str(built), timeout=1800)
    build = only_record(built)
    assert build.status is Status.passed, build.first_problem()
    (tmp_path / "prebuilt").mkdir()
    manifest = prebuilt_manifest(tmp_path / "prebuilt", build.stage("build").data["wheels"][0])
    out = tmp_path / "bisect"
    result = ootci("bisect", str(manifest), "--good", "2.13.0", "--bad", "2.15.0", "--versions",
                   ",".join(RELEASES), "--suites", "none", "--out", str(out), timeout=3000)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    (path,) = out.glob("*/bisect.json")
    record = BisectRecord.model_validate_json(path.read_text())
    assert record.predicate.stage == "autoload"
    (round_,) = record.rounds
    assert round_.axis == "torch" and [c.spec for c in round_.candidates] == list(RELEASES)
    verdict = round_.result
    assert verdict.kind == "found"
    assert (round_.candidates[verdict.last_good].spec, round_.candidates[verdict.first_bad].spec) == \
        ("2.13.0", "2.14.0")
    assert "undefined symbol: _ZN2at17toDLPackNonOwningERKNS_6TensorEP8DLTensor" in verdict.cause
    assert "openreg broke at torch 2.14.0, last good torch 2.13.0" in verdict.summary
    good_sha, bad_sha = (round_.candidates[i].commit for i in (verdict.last_good, verdict.first_bad))
    assert re.fullmatch(r"[0-9a-f]{40}", good_sha) and re.fullmatch(r"[0-9a-f]{40}", bad_sha)
    assert verdict.links["compare"] == f"https://github.com/pytorch/pytorch/compare/{good_sha}...{bad_sha}"
    # 2.14.0 judged bad, then judged once more at the boundary.
    assert [(round_.candidates[s.candidate].spec, s.verdict, s.rerun) for s in round_.steps] == [
        ("2.14.0", Verdict.bad, False), ("2.14.0", Verdict.bad, True)]
