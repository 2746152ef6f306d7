"""The workflows as others run them, under act: PyTorch's relay dispatching to pytorch-pr.yml
and a vendor's repository (pr.yml, backend.yml at a SHA, bisect.yml), and collect.yml reading
a running nightly from a GitHub API served locally. See test_workflows_act.py for how act runs.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ootci.runner.models import Status
from tests.support import act_cases, real_wheels
from tests.support.act_cases import (
    ACT_OPS,
    BACKEND,
    REPO,
    TORCH,
    act_dir,
    act_marks,
    assert_every_remote_action_had_a_stand_in,
    cache_entries,
    cache_requests,
    data_branch_exists,
    data_branch_files,
    merge_artifact,
    needs_openreg,
    records_under,
)
from tests.support.act_harness import as_act_reads, as_called_from_elsewhere, data_remote, run_act
from tests.support.cli import ootci
from tests.support.fake_github import REPOSITORY, TOKEN, FakeGitHub, run_artifact
from tests.support.fixture_backends import write_openreg_manifest

# The fixture from tests/support/act_cases.py, which the tests below take by name.
act_setup = act_cases.act_setup

pytestmark = act_marks

RELAY_FIXTURES = REPO / "tests" / "fixtures" / "relay"


def relay_dispatch(workdir: Path, root: Path, tmp_path: Path, fixture: str, *, env: dict[str, str],
                   variables: dict[str, str] | None = None):
    """pytorch-pr.yml started by PyTorch's relay: repository_dispatch with the fixture event."""
    ootci_act_dir = act_dir(tmp_path, "out")
    return run_act(workdir, "repository_dispatch", ".github/workflows/pytorch-pr.yml",
                   env={**env, "OOTCI_ACT_DIR": str(ootci_act_dir)}, inputs={}, log=tmp_path / "act.log",
                   stubs=root / "stubs", event_payload=RELAY_FIXTURES / fixture, variables=variables), ootci_act_dir


def test_pytorch_pr_refuses_a_relay_payload_whose_number_is_not_a_number(act_setup, tmp_path):
    """The relay's payload is untrusted: it reaches ootci through the event file and stops there."""
    workdir, root, env = act_setup
    result, out = relay_dispatch(workdir, root, tmp_path, "hostile-number.json", env=env)

    assert result.returncode != 0
    assert "ootci: " in result.output and "pull_request.number" in result.output
    assert "::set-output:: matrix=" not in result.output and "::set-output:: action=" not in result.output
    assert "Run Main ./actions/get-torch" not in result.output and "relay-report" not in result.output
    assert not (out / "artifacts").exists()


@pytest.mark.parametrize("fixture, planned, why", [
    ("synchronize-ungated.json", "ignore", "nothing to run: no ciflow/oot label, and the default for unlabelled PRs "
                                           "is none"),
    ("closed.json", "cancel", "PR #167123 was closed"),
])
def test_pytorch_pr_starts_no_backend_for_an_unlabelled_or_closed_pr(act_setup, tmp_path, fixture, planned, why):
    workdir, root, env = act_setup
    result, out = relay_dispatch(workdir, root, tmp_path, fixture, env=env)

    assert result.returncode == 0, result.output[-6000:]
    assert f"::set-output:: action={planned}" in result.output
    assert "Run Main ./actions/get-torch" not in result.output and "relay-report" not in result.output
    assert f"ootci relay plan: {planned}: {why}" in result.output
    assert not (out / "artifacts").exists()


@needs_openreg
@pytest.mark.usefixtures("openreg_compiled")  # builds a copy of OpenReg: a ccache hit
def test_a_vendor_repository_runs_a_gated_pr_through_pr_yml_and_reports_exactly_once_each(act_setup, httpserver,
                                                                                          tmp_path):
    """A vendor's repository, dispatched to by PyTorch's relay, calls
    ootci/ootci/.github/workflows/pr.yml@<sha> with examples/vendor-pytorch-pr.yml and its own
    manifest. The relay's real payload (synchronize, label ciflow/oot) runs the backend with 2.13.0
    standing in for the PR's torch build (OOTCI_PR_TORCH), and a local server that plays the relay
    with its state machine (it refuses a repeated in_progress, a completed first, an unknown
    delivery and a wrong audience) gets exactly in_progress then completed, each accepted."""
    from tests.support.fake_relay import FakeRelay

    _, root, env = act_setup
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    ootci_copy = as_called_from_elsewhere(REPO, tmp_path / "ootci", sha)
    vendor = vendor_repository(act_dir(tmp_path, "torch-acme"), sha)
    event = json.loads((RELAY_FIXTURES / "synchronize-gated.json").read_text())
    relay = FakeRelay(httpserver, dispatched={event["client_payload"]["delivery_id"]})
    token_env = {k: v for k, v in relay.env().items() if k.startswith("ACTIONS_")}
    ootci_act_dir = act_dir(tmp_path, "out")

    result = run_act(vendor, "repository_dispatch", ".github/workflows/ootci-pytorch-pr.yml",
                     env={**env, **token_env, "OOTCI_ACT_DIR": str(ootci_act_dir), "OOTCI_OPS": ACT_OPS}, inputs={},
                     log=tmp_path / "act.log", stubs=tmp_path / "stubs", ootci=ootci_copy,
                     event_payload=RELAY_FIXTURES / "synchronize-gated.json",
                     variables={"OOTCI_PR_TORCH": TORCH,
                                "OOTCI_RELAY_CALLBACK_URL": relay.env()["OOTCI_RELAY_CALLBACK_URL"]})

    assert result.returncode == 0, result.output[-8000:]
    assert_every_remote_action_had_a_stand_in(result.output)
    [artifact] = list((ootci_act_dir / "artifacts").iterdir())
    [record] = records_under(artifact)
    assert (record.backend, record.trigger, record.pr, record.status) == ("acme-openreg", "pr", 167123, Status.passed)
    assert record.torch.spec == TORCH  # the record names the torch that ran
    pull_request = event["client_payload"]["payload"]["pull_request"]
    assert record.pr_head_sha == pull_request["head"]["sha"]
    assert record.relay_delivery_id == event["client_payload"]["delivery_id"]
    # Exactly two reports, both accepted: nothing the relay refused (a second in_progress) was sent.
    assert [b["workflow"]["status"] for b in relay.received] == ["in_progress", "completed"]
    assert relay.accepted == relay.received
    assert relay.accepted[1]["workflow"]["conclusion"] == "success"
    for body in relay.accepted:  # the envelope, unchanged, beside the workflow object
        assert {k: v for k, v in body.items() if k != "workflow"} == event["client_payload"]
        # The stand-in torch is never silent: the check's name on the PR says which torch ran.
        assert body["workflow"]["name"].endswith(f"(torch {TORCH}, not the PR's build)")
        assert body["workflow"]["test_results"]["torch_instead_of_pr"] == TORCH
    assert all(auth.startswith("Bearer jwt.pytorch-cross-repo-ci-relay.") for auth in relay.auth)
    assert "acme-openreg" in json.dumps(relay.accepted[1]["workflow"]["test_results"])
    assert not data_branch_exists(ootci_act_dir / "data.git"), "a vendor's PR run publishes nothing to a data branch"
    assert cache_entries(ootci_act_dir) == {}, "a PR run (untrusted code) saves nothing to the cache"
    # It restores (read-only) exactly the key a trusted run's layer job saves, never by a prefix (issue 54),
    # and never only looks up.
    [asked] = cache_requests(ootci_act_dir)
    assert asked["key"].startswith("ootci-main-") and not asked["lookup-only"]
    assert asked["restore-keys"] == []


VENDOR_TESTS = ("conftest.py", "test_device.py", "test_ops.py")


def vendor_repository(dest: Path, ootci_sha: str) -> Path:
    """A backend vendor's repository, not ootci: its package directory at the repository root
    (as torch_npu has it: OpenReg's sources, so it really builds), its own tests/, the
    manifest `ci/backend.toml`, the README's one-job caller and the PR caller of
    examples/vendor-pytorch-pr.yml, both pinned to `ootci_sha`."""
    openreg = REPO / "backends" / "openreg"
    for name in ("setup.py", "pyproject.toml", "MANIFEST.in", "README.md"):
        shutil.copy2(openreg / name, dest / name)
    for name in ("csrc", "torch_openreg"):
        shutil.copytree(openreg / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (dest / "tests").mkdir()
    for name in VENDOR_TESTS:
        shutil.copy2(openreg / "tests" / name, dest / "tests" / name)
    manifest = (openreg / "backend.toml").read_text()
    manifest = manifest.replace('name = "openreg"', 'name = "acme-openreg"', 1)
    manifest = manifest.replace('path = "."', 'path = ".."', 1)
    write_openreg_manifest(dest / "ci" / "backend.toml",
                           manifest + '\n[[suites.vendor]]\nname = "own"\npath = "tests"\n')
    caller = (REPO / "examples" / "vendor-workflow.yml").read_text()
    (dest / ".github" / "workflows").mkdir(parents=True)
    (dest / ".github" / "workflows" / "ootci.yml").write_text(
        as_act_reads(re.sub(r"backend\.yml@[0-9a-f]{40}", f"backend.yml@{ootci_sha}", caller)))
    pr_caller = (REPO / "examples" / "vendor-pytorch-pr.yml").read_text()
    (dest / ".github" / "workflows" / "ootci-pytorch-pr.yml").write_text(
        as_act_reads(re.sub(r"pr\.yml@[0-9a-f]{40}", f"pr.yml@{ootci_sha}", pr_caller)))
    git = ["git", "-C", str(dest), "-c", "user.name=vendor", "-c", "user.email=vendor@example.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "remote", "add", "origin", "https://github.com/acme/torch-acme.git"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a vendor backend"], check=True)
    return dest


@needs_openreg
@pytest.mark.usefixtures("openreg_compiled")  # builds a copy of OpenReg: a ccache hit
def test_a_vendor_repository_calls_backend_yml_at_a_sha_as_the_readme_shows(act_setup, httpserver, tmp_path):
    """The vendor path on GitHub: another repository's workflow calls
    ootci/ootci/.github/workflows/backend.yml@<sha>, so every `$/` inside ootci means
    ootci/ootci/...@<sha>. torch is the default, nightly, from a local index."""
    _, root, env = act_setup
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    ootci_copy = as_called_from_elsewhere(REPO, tmp_path / "ootci", sha)
    assert f"uses: ootci/ootci/actions/setup@{sha}" in (ootci_copy.root / ".github/workflows/backend.yml").read_text()
    vendor = vendor_repository(act_dir(tmp_path, "torch-acme"), sha)
    index, _, _ = real_wheels.serve_nightly_index(httpserver)
    ootci_act_dir = act_dir(tmp_path, "out")

    # The vendor's nightly: its cron fires (act's schedule event), so the run is a nightly.
    result = run_act(vendor, "schedule", ".github/workflows/ootci.yml",
                     env={**env, "OOTCI_ACT_DIR": str(ootci_act_dir), "OOTCI_TORCH_INDEX": index,
                          "OOTCI_OPS": ACT_OPS},
                     inputs={}, log=tmp_path / "act.log", stubs=tmp_path / "stubs", ootci=ootci_copy,
                     labels=("ubuntu-latest", "self-hosted", "my-accelerator"))

    assert result.returncode == 0, result.output[-8000:]
    assert_every_remote_action_had_a_stand_in(result.output)
    [artifact] = list((ootci_act_dir / "artifacts").iterdir())
    [record] = records_under(artifact)
    assert record.backend == "acme-openreg" and record.status is Status.passed, record.model_dump_json()[-3000:]
    assert record.trigger == "nightly"
    assert record.torch.spec == "nightly" and record.torch.version == real_wheels.NIGHTLY
    stages = {s.name: s.status for s in record.stages}
    assert all(stages[s] is Status.passed for s in ("build", "install", "autoload", "smoke", "integration")), stages
    compared = [t for t in record.tests if t.suite == "integration"]  # $OOTCI_OPS reached the job's ootci
    assert 0 < len(compared) < 1000, len(compared)
    autoload = record.stage("autoload")
    assert {c.name: c.status for c in autoload.checks}["import_cost"] is Status.passed
    # The vendor's own tests ran against the installed wheel, from the vendor's checkout.
    own = [t for t in record.tests if t.suite == "own"]
    assert own and all(t.outcome.value in ("passed", "skipped") for t in own)
    assert record.command == f"ootci run ci/backend.toml --torch {real_wheels.NIGHTLY} --index-url {index}"


@needs_openreg
@pytest.mark.usefixtures("openreg_compiled")  # builds a copy of OpenReg: a ccache hit
def test_bisect_workflow_names_the_first_bad_backend_commit_for_a_vendor(act_setup, tmp_path):
    """bisect.yml under act runs the backend-axis case: a vendor repository calls
    ootci/ootci/.github/workflows/bisect.yml@<sha> with examples/vendor-bisect.yml, its
    manifest building from a git history of eight OpenReg commits; the fifth is the first
    bad one, the third does not build."""
    from ootci.runner.models import BisectRecord
    from tests.support import bisect_repo

    _, root, env = act_setup
    history, commits = bisect_repo.make(tmp_path)
    manifest = bisect_repo.manifest(tmp_path, history)
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    ootci_copy = as_called_from_elsewhere(REPO, tmp_path / "ootci", sha)
    vendor = act_dir(tmp_path, "torch-acme")
    write_openreg_manifest(vendor / "ci" / "backend.toml", manifest.read_text())
    (vendor / ".github" / "workflows").mkdir(parents=True)
    (vendor / ".github" / "workflows" / "bisect.yml").write_text(
        re.sub(r"bisect\.yml@[0-9a-f]{40}", f"bisect.yml@{sha}", (REPO / "examples" / "vendor-bisect.yml").read_text()))
    git = ["git", "-C", str(vendor), "-c", "user.name=vendor", "-c", "user.email=vendor@example.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "ootci bisect by hand"], check=True)
    ootci_act_dir = act_dir(tmp_path, "out")

    # max-steps is bisect.yml's default, 8.
    result = run_act(vendor, "workflow_dispatch", ".github/workflows/bisect.yml",
                     env={**env, "OOTCI_ACT_DIR": str(ootci_act_dir)},
                     inputs={"good": commits[0], "bad": "main", "axis": "backend", "torch": TORCH, "suites": "smoke"},
                     log=tmp_path / "act.log", stubs=tmp_path / "stubs", ootci=ootci_copy,
                     labels=("ubuntu-latest", "self-hosted", "my-accelerator"))

    assert result.returncode == 0, result.output[-8000:]
    assert_every_remote_action_had_a_stand_in(result.output)
    [artifact] = list((ootci_act_dir / "artifacts").iterdir())
    assert re.fullmatch(r"ootci-bisect-ci-backend\.toml-\d+-1", artifact.name), artifact.name
    [path] = list(artifact.glob("*/bisect.json"))
    bisection = BisectRecord.model_validate_json(path.read_bytes())
    assert bisection.backend == "openreg-history" and bisection.state == "finished", bisection.error
    outcome = bisection.result
    assert outcome is not None and outcome.kind == "found", outcome
    [walk] = [r for r in bisection.rounds if r.result is outcome]
    assert walk.axis == "backend" and walk.torch == TORCH
    assert walk.candidates[outcome.first_bad].commit == commits[bisect_repo.FIRST_BAD - 1]
    assert walk.candidates[outcome.last_good].commit == commits[bisect_repo.FIRST_BAD - 2]
    assert bisection.steps_taken() <= 8
    # The commit that does not build was skipped, not blamed.
    skipped = {walk.candidates[s.candidate].commit for s in walk.steps if s.verdict.value == "skip"}
    assert skipped <= {commits[bisect_repo.BUILD_BROKEN - 1]}
    # The steps' runs travel with the record.
    assert all((path.parent / "steps" / s.run_id / "record.json").is_file() for s in walk.steps if s.run_id)
    # The verdict, in the log (the CLI's line) and as an annotation (from bisect.json, as in the job summary).
    verdict = f"openreg-history broke at openreg-history@{commits[bisect_repo.FIRST_BAD - 1][:10]}"
    assert f"ootci bisect: {verdict}" in result.output
    assert f"::notice title=ootci bisect found::{outcome.summary}" in result.output
    assert f"**found**: ` {outcome.summary} `" in result.output  # act echoes the job summary
    assert "::set-output:: result=found" in result.output
    assert outcome.summary.startswith(verdict)
    assert not data_branch_exists(ootci_act_dir / "data.git"), "bisect.yml only reads: nothing goes to the data branch"


def test_collect_workflow_takes_a_running_nightlys_records_to_the_data_branch_and_the_page(act_setup, httpserver,
                                                                                         tmp_path):
    """collect.yml against a local stand-in for GitHub's API (GITHUB_API_URL) and a local bare
    repository as the data branch's remote: tonight's nightly is still running (a backend is
    queued), and the record its finished job uploaded reaches the data branch and the page. The
    artifact the history marks as collected already is not downloaded again."""
    workdir, root, env = act_setup
    ootci_act_dir = act_dir(root, "collect")
    now = dt.datetime.now(dt.UTC)
    github = FakeGitHub(httpserver)
    github.add_run(501, now - dt.timedelta(hours=1), status="in_progress")
    tonight = f"{BACKEND}-{now:%Y%m%dT%H%M%SZ}-aaaaaa"
    github.add_artifact(501, 5011, f"ootci-run-{BACKEND}-1", run_artifact(tonight, BACKEND, now))
    # Issue 54: a fork's PR that edits nightly.yml runs its own copy, whose artifacts hold a "nightly" record.
    github.add_run(502, now - dt.timedelta(minutes=30), event="pull_request", head_branch="patch-1",
                   head_repository="mallory/ootci")
    forged = f"{BACKEND}-{now:%Y%m%dT%H%M%SZ}-ffffff"
    github.add_artifact(502, 5021, f"ootci-run-{BACKEND}-1", run_artifact(forged, BACKEND, now, trigger="nightly"))
    github.add_run(500, now - dt.timedelta(hours=25))
    last_night = f"{BACKEND}-{now - dt.timedelta(days=1):%Y%m%dT%H%M%SZ}-bbbbbb"
    github.add_artifact(500, 5001, f"ootci-run-{BACKEND}-1", run_artifact(last_night, BACKEND,
                                                                          now - dt.timedelta(days=1)))
    # The data branch has last night's run already, marked as collected.
    data = data_remote(ootci_act_dir)
    seed = tmp_path / "seed"
    assert ootci("history", "pull", str(seed / "history"), "--remote", str(data)).returncode == 0
    merge_artifact(github.blobs[5001], seed / "artifact", seed / "history" / "runs")
    marker = seed / "history" / "collected" / f"{now - dt.timedelta(hours=25):%Y-%m-%d}" / "5001.json"
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps({
        "artifact": f"ootci-run-{BACKEND}-1", "workflow_run": 500,
        "run_created_at": f"{now - dt.timedelta(hours=25):%Y-%m-%dT%H:%M:%SZ}", "outcome": "collected"}))
    pushed = ootci("history", "push", str(seed / "history"), "--remote", str(data))
    assert pushed.returncode == 0, pushed.stderr

    result = run_act(workdir, "workflow_dispatch", ".github/workflows/collect.yml",
                     env={**env, "OOTCI_ACT_DIR": str(ootci_act_dir), "GITHUB_API_URL": github.api_url,
                          "GITHUB_REPOSITORY": REPOSITORY},
                     secrets={"GITHUB_TOKEN": TOKEN}, inputs={}, log=tmp_path / "act.log", stubs=root / "stubs")

    assert result.returncode == 0, result.output[-6000:]
    assert_every_remote_action_had_a_stand_in(result.output)
    assert github.downloads() == [5011]  # never the forged run's
    assert "not read: run 502: its event is pull_request" in result.output
    assert not any(forged in f for f in data_branch_files(data))
    assert all(r.headers.get("Authorization") == f"Bearer {TOKEN}" for r in github.api_requests)
    assert "1 artifact(s) collected" in result.output and "1 collected before" in result.output
    assert {f"runs/{tonight}/record.json", f"runs/{last_night}/record.json",
            marker.relative_to(seed / "history").as_posix(),
            f"collected/{now - dt.timedelta(hours=1):%Y-%m-%d}/5011.json"} <= data_branch_files(data)
    # The page was built from the branch's tip after the push: both nights are on it.
    pages = "".join(p.read_text(errors="replace") for p in (ootci_act_dir / "site").rglob("*.html"))
    pages += "".join(p.read_text(errors="replace") for p in (ootci_act_dir / "site").rglob("*.json"))
    assert tonight in pages and last_night in pages
    # Pages gets it: the deploy job deployed the site the collect job uploaded.
    assert any("collect/deploy" in line and "Job succeeded" in line for line in result.output.splitlines())
    assert "Deployed github-pages-collect-" in result.output
