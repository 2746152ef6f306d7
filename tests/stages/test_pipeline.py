"""`ootci run` end to end on small backends kept under tests/fixtures/registry.

Each test runs the real console script in a subprocess against the real torch
layer (cached), and checks the RunRecord it leaves behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ootci.runner.models import RunRecord, Status, variant_index
from tests.support.cli import OOTCI, ootci
from tests.support.records import only_record, records_under
from tests.support.sleepers import running, unique_sleep

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "registry"
pytestmark = pytest.mark.slow


def manifest(name: str) -> str:
    return str(FIXTURES / name / "backend.toml")


def stages(record: RunRecord) -> dict[str, Status]:
    return {s.name: s.status for s in record.stages}


@pytest.fixture(scope="module")
def toy_runs(torch_layer, tmp_path_factory):
    """Two runs of the toy backend: a cold one and an unchanged rerun."""
    first, second = tmp_path_factory.mktemp("first"), tmp_path_factory.mktemp("second")
    a = ootci("run", manifest("toy"), "--torch", "2.13.0", "--out", str(first))
    b = ootci("run", manifest("toy"), "--torch", "2.13.0", "--out", str(second))
    return a, only_record(first), first, b, only_record(second)


def test_run_writes_a_valid_record(toy_runs, layer_torch):
    result, record, out, _, _ = toy_runs
    assert result.returncode == 0, result.stderr
    assert record.backend == "toy" and record.device == "toy"
    assert record.status is Status.passed
    assert record.torch.version == layer_torch["version"]
    assert record.torch.git_version == layer_torch["git_version"] and len(record.torch.git_version) == 40
    assert record.torch.spec == "2.13.0"
    assert stages(record)["torch"] is Status.passed
    assert stages(record)["build"] is Status.passed
    assert stages(record)["install"] is Status.passed
    assert record.finished_at >= record.started_at
    # Not a registered name: the command names the manifest (relative to where ootci ran),
    # and the torch as resolved.
    toy = os.path.relpath(manifest("toy"))
    # A variant build (2.13.0+cpu from this machine's wheels) adds the PyTorch index it installs from elsewhere.
    index = variant_index(layer_torch["dist_version"])
    assert record.command == f"ootci run {toy} --torch {layer_torch['dist_version']}" + (
        f" --index-url {index}" if index else "")
    for stage in record.stages:
        if stage.log:
            assert (out / record.run_id / stage.log).is_file()
    assert "torch_toy 0.1.0" in record.stage("install").summary


def test_unchanged_rerun_reuses_wheel_and_environment(toy_runs):
    _, first, _, result, second = toy_runs
    assert result.returncode == 0
    assert first.stage("build").data["cache_hit"] is False or first.stage("build").data["wheels"]
    assert second.stage("build").data["cache_hit"] is True
    assert second.stage("build").data["wheels"] == first.stage("build").data["wheels"]
    assert second.stage("install").data["reused"] is True
    assert second.stage("torch").data["reused"] is True


def test_changed_source_is_rebuilt(torch_layer, tmp_path):
    package = tmp_path / "toy"
    package.mkdir()
    text = Path(manifest("toy")).read_text().replace('path = "pkg"', f'path = "{FIXTURES / "toy" / "pkg"}"')
    (package / "backend.toml").write_text(text)
    src_copy = tmp_path / "src"
    shutil.copytree(FIXTURES / "toy" / "pkg", src_copy, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    (package / "backend.toml").write_text(text.replace(str(FIXTURES / "toy" / "pkg"), str(src_copy)))
    (src_copy / "torch_toy" / "extra.py").write_text(f"STAMP = {time.time()!r}\n")
    result = ootci("run", str(package / "backend.toml"), "--torch", "2.13.0", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert only_record(tmp_path / "out").stage("build").data["cache_hit"] is False


def test_parallel_runs_of_one_backend_make_its_new_environment_once(torch_layer, tmp_path):
    """Two runs of the same new backend on one torch at once (one host's jobs sharing ootci's
    cache): the second waits for the first's environment and reuses it. Unlocked, both made the
    same venv at once, and one found the other's half-made directory."""
    source = tmp_path / "src"
    shutil.copytree(FIXTURES / "toy" / "pkg", source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    (source / "torch_toy" / "extra.py").write_text(f"STAMP = {time.time()!r}\n")  # a wheel, so an env, of its own
    path = tmp_path / "backend.toml"
    path.write_text(Path(manifest("toy")).read_text().replace('path = "pkg"', f'path = "{source}"'))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    procs = [subprocess.Popen([str(OOTCI), "run", str(path), "--torch", "2.13.0", "--out", str(tmp_path / name)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for name in ("a", "b")]
    ended = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], ended
    installs = [only_record(tmp_path / name).stage("install") for name in ("a", "b")]
    assert sorted(i.data["reused"] for i in installs) == [False, True], [i.summary for i in installs]
    assert installs[0].data["python"] == installs[1].data["python"]


def test_build_failure_blocks_later_stages(torch_layer, tmp_path):
    result = ootci("run", manifest("broken-build"), "--torch", "2.13.0", "--out", str(tmp_path))
    assert result.returncode == 1
    record = only_record(tmp_path)
    assert record.status is Status.failed
    build = record.stage("build")
    assert build.status is Status.failed
    assert build.root_cause.exception_type == "ValueError"
    assert "vendor SDK not found" in build.root_cause.summary
    assert "vendor SDK not found" in (tmp_path / record.run_id / build.log).read_text()
    assert stages(record)["install"] is Status.blocked
    assert "build" in record.stage("install").summary
    assert "root cause: ValueError: vendor SDK not found" in result.stderr


def _hang_build_copy(tmp_path: Path, build_timeout: int) -> tuple[Path, str]:
    """The hang-build fixture with a sleep nobody else on the machine runs, so
    pgrep finds only what this test started."""
    marker = unique_sleep()
    text = Path(manifest("hang-build")).read_text().replace("sleep 300", marker)
    text = text.replace("build = 3", f"build = {build_timeout}")
    path = tmp_path / "hang" / "backend.toml"
    path.parent.mkdir()
    path.write_text(text)
    return path, marker


def test_hanging_build_times_out_and_is_killed_with_its_children(torch_layer, tmp_path):
    path, marker = _hang_build_copy(tmp_path, 3)
    result = ootci("run", str(path), "--torch", "2.13.0", "--out", str(tmp_path / "out"))
    assert result.returncode == 1
    record = only_record(tmp_path / "out")
    build = record.stage("build")
    assert build.status is Status.timeout
    assert build.root_cause.timeout_s == 3
    assert "time limit" in build.root_cause.summary
    assert 3 <= build.duration_s < 30
    assert stages(record)["install"] is Status.blocked
    assert running(marker) == []


def test_crashing_build_is_classified_by_signal(torch_layer, tmp_path):
    result = ootci("run", manifest("segv-build"), "--torch", "2.13.0", "--out", str(tmp_path))
    assert result.returncode == 1
    build = only_record(tmp_path).stage("build")
    assert build.status is Status.crashed
    assert build.root_cause.signal == "SIGSEGV"


def test_sigterm_leaves_a_complete_record(torch_layer, tmp_path):
    path, marker = _hang_build_copy(tmp_path, 120)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    proc = subprocess.Popen([str(OOTCI), "run", str(path), "--torch", "2.13.0", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        logs = list(out.glob("*/logs/build.log"))
        if logs and "compiling" in logs[0].read_text():
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the build stage never started")
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    record = only_record(out)
    assert record.interrupted == "SIGTERM"
    assert record.finished_at is not None
    assert record.stage("build").status is Status.failed
    assert record.stage("build").root_cause.kind == "interrupted"
    assert record.stage("install").status is Status.blocked
    assert running(marker) == []


def test_github_actions_output(toy_runs, tmp_path):
    summary = tmp_path / "summary.md"
    result = ootci("run", manifest("broken-build"), "--torch", "2.13.0", "--out", str(tmp_path / "out"),
                   env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)})
    assert result.returncode == 1
    err = result.stderr
    assert "::group::ootci broken-build build" in err
    group = err.index("::group::ootci broken-build build")
    assert group < err.index("vendor SDK not found") < err.index("::endgroup::", group)
    assert "::error title=ootci broken-build build failed::ValueError: vendor SDK not found" in err
    text = summary.read_text()
    assert "### ootci: broken-build" in text
    assert "| build | ❌ failed |" in text
    assert "| install | ⛔ blocked |" in text


@pytest.mark.parametrize(
    "args, code, words",
    [
        (["nope"], 4, "unknown backend 'nope'"),
        (["--python", "/nonexistent/python"], 2, "--python: /nonexistent/python is not an interpreter"),
        (["--torch", "installed"], 2, "--torch installed needs --python"),
        (["--suites", "smoke,fuzz"], 2, "unknown suite 'fuzz'"),
        (["--pr-head-sha", "7c3f1e2$(reboot)"], 2, "--pr-head-sha: '7c3f1e2$(reboot)' is not 40 lowercase hexadecimal"),
        (["--delivery-id", "a b\n::error::x"], 2, "--delivery-id: 'a b\\n::error::x' is not 1-64 letters"),
        (["--torch", "nightyl"], 5, "unknown torch spec 'nightyl'"),
        (["--torch", "/nope/torch-2.13.0-cp311-cp311-linux_x86_64.whl"], 5, "torch wheel not found: /nope/"),
        (["--torch", "nightly", "--index-url", "http://127.0.0.1:9/simple"], 6,
         "cannot reach package index http://127.0.0.1:9/simple"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, code, words):
    out = tmp_path / "out"
    name = [] if args[0] == "nope" else [manifest("toy")]
    result = ootci("run", *name, *args, "--out", str(out))
    assert result.returncode == code, result.stderr
    assert words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    result = ootci("run", manifest("toy"), "--torch", "2.13.0", "--suites", "none", "--out", str(out), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "pip install torch==2.13.0" in result.stdout
    assert "build        run" in result.stdout
    assert not out.exists()


def test_out_must_be_a_directory(tmp_path):
    out = tmp_path / "file"
    out.write_text("")
    result = ootci("run", manifest("toy"), "--torch", "2.13.0", "--out", str(out))
    assert result.returncode == 8
    assert "is not a directory" in result.stderr


def test_record_json_is_the_shared_model(toy_runs):
    _, record, out, _, _ = toy_runs
    raw = json.loads((out / record.run_id / "record.json").read_text())
    assert raw["schema_version"] == 1
    assert RunRecord.model_validate(raw) == record
    assert records_under(out) == [record]


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def toy_git_repo(tmp_path) -> tuple[Path, str]:
    import shutil

    repo = tmp_path / "vendor-repo"
    shutil.copytree(FIXTURES / "toy" / "pkg", repo / "python", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    _git("init", "-q", "-b", "main", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "add", "-A", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "toy", cwd=repo)
    return repo, _git("rev-parse", "HEAD", cwd=repo)


def _git_manifest(tmp_path: Path, repo: Path, ref: str) -> Path:
    text = Path(manifest("toy")).read_text().replace('path = "pkg"',
                                                     f'git = "{repo}"\nref = "{ref}"\nsubdir = "python"')
    path = tmp_path / "git-toy" / "backend.toml"
    path.parent.mkdir()
    path.write_text(text)
    return path


def test_git_source_is_cloned_at_its_ref(torch_layer, tmp_path, toy_git_repo):
    repo, commit = toy_git_repo
    path = _git_manifest(tmp_path, repo, "main")
    result = ootci("run", str(path), "--torch", "2.13.0", "--out", str(tmp_path / "out"),
                   env={"OOTCI_CACHE": os.environ["OOTCI_CACHE"]})
    assert result.returncode == 0, result.stderr
    build = only_record(tmp_path / "out").stage("build")
    assert build.data["source"] == f"{commit}:python"


def test_git_source_with_unknown_ref_fails_naming_the_field(torch_layer, tmp_path, toy_git_repo):
    repo, _ = toy_git_repo
    path = _git_manifest(tmp_path, repo, "no-such-branch")
    result = ootci("run", str(path), "--torch", "2.13.0", "--out", str(tmp_path / "out"))
    assert result.returncode == 1
    build = only_record(tmp_path / "out").stage("build")
    assert build.status is Status.failed
    assert "field 'source.ref': no such ref 'no-such-branch'" in build.root_cause.summary


def test_build_requirements_stay_out_of_the_shared_torch_layer(torch_layer, tmp_path):
    text = Path(manifest("toy")).read_text().replace('path = "pkg"', f'path = "{FIXTURES / "toy" / "pkg"}"')
    text += '\n[build]\nextra_requirements = ["six==1.16.0"]\n'
    path = tmp_path / "with-reqs" / "backend.toml"
    path.parent.mkdir()
    path.write_text(text)
    result = ootci("run", str(path), "--torch", "2.13.0", "--suites", "none", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    record = only_record(tmp_path / "out")
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('six') else 3)"
    in_env = subprocess.run([record.stage("install").data["python"], "-c", probe])
    in_layer = subprocess.run([str(torch_layer.python), "-c", probe])
    assert in_env.returncode == 0, "the environment under test lacks the backend's requirement"
    assert in_layer.returncode == 3, "a backend's requirement leaked into the shared torch layer"


def test_suites_still_run_when_only_a_non_blocking_autoload_check_fails(torch_layer, tmp_path):
    """torch_circular imports torch before defining its hook: circular_import fails, but plain
    `import torch` and the device work, so the smoke suite still runs and reports."""
    out = tmp_path / "out"
    result = ootci("run", str(FIXTURES.parent / "backends" / "circular" / "backend.toml"), "--torch", "2.13.0",
                   "--suites", "smoke", "--out", str(out))
    record = only_record(out)
    autoload = record.stage("autoload")
    assert autoload.status is Status.failed
    failed = {c.name for c in autoload.checks if c.status is Status.failed}
    assert "circular_import" in failed and not failed & {"plain_import", "device", "tensor", "build_torch"}
    assert autoload.data["blocks_later_stages"] is False
    smoke = record.stage("smoke")
    assert smoke.status is not Status.blocked, smoke.summary
    assert smoke.counts, "the smoke suite reported no tests"
    # The record says which failure the suite ran despite.
    assert smoke.data["ran_despite"] == [f"autoload: {autoload.root_cause.summary}"]
    assert record.status is Status.failed and result.returncode == 1
