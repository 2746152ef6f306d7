"""`ootci history collect`: a workflow's recent artifacts, taken from GitHub's REST API as each job finishes.

GitHub is played by a real HTTP server (tests/support/fake_github.py): paginated lists, the
`created` filter, bearer tokens, and downloads redirected to a storage host of their own.
The command runs as the real `ootci` console script.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest
import requests

from ootci.runner.core.errors import GitHubError
from ootci.runner.core.http import Retry
from ootci.runner.history import github_artifacts
from tests.support import fake_github
from tests.support.cli import ootci
from tests.support.fake_github import REPOSITORY, STORAGE_HOST, TOKEN, FakeGitHub, zipped

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def github(httpserver) -> FakeGitHub:
    return FakeGitHub(httpserver)


def run_artifact(run_id: str, backend: str = "openreg") -> bytes:
    return fake_github.run_artifact(run_id, backend, NOW - dt.timedelta(hours=8))


def collect(github: FakeGitHub, into: Path, *extra: str, env: dict[str, str] | None = None):
    return ootci("history", "collect", "--workflow", "nightly.yml", "--since", "36", "--into", str(into),
                 "--now", NOW.isoformat(), "--backoff", "0", *extra, env={**github.env(), **(env or {})})


def a_night(github: FakeGitHub) -> None:
    """Tonight's nightly still runs (one backend queued), last night's is done, and one run is
    older than the window. Five runs and three artifacts per run span several pages."""
    github.add_run(301, NOW - dt.timedelta(hours=2), status="in_progress")
    github.add_artifact(301, 3011, "ootci-run-openreg-1", run_artifact("openreg-20261122T0317Z-aaaaaa"))
    github.add_run(300, NOW - dt.timedelta(hours=26))
    github.add_artifact(300, 3001, "ootci-run-openreg-1", run_artifact("openreg-20261121T0317Z-bbbbbb"))
    github.add_artifact(300, 3002, "torch-wheel-1", b"not a record")  # another prefix: never downloaded
    github.add_artifact(300, 3003, "ootci-run-gaudi-hpu-1", run_artifact("gaudi-hpu-20261121T0317Z-cccccc",
                                                                          "gaudi-hpu"))
    github.add_artifact(300, 3004, "ootci-run-ascend-npu-1", b"gone", expired=True)
    github.add_run(299, NOW - dt.timedelta(hours=30))
    github.add_artifact(299, 2991, "ootci-run-openreg-2", run_artifact("openreg-20261121T0000Z-dddddd"))
    github.add_run(250, NOW - dt.timedelta(hours=50))  # before the window
    github.add_artifact(250, 2501, "ootci-run-openreg-1", run_artifact("openreg-20261120T0317Z-eeeeee"))


def test_collect_takes_each_new_record_once_across_pages_and_a_second_collect_downloads_nothing(github, tmp_path):
    a_night(github)
    into, history = tmp_path / "collected", tmp_path / "history"
    history.mkdir()

    result = collect(github, into, "--history", str(history))

    assert result.returncode == 0, result.stderr
    assert sorted(github.downloads()) == [2991, 3001, 3003, 3011]
    assert sorted(p.name for p in into.iterdir()) == ["2991", "3001", "3003", "3011"]  # no zip left behind
    assert (into / "3011" / "openreg-20261122T0317Z-aaaaaa" / "record.json").is_file()
    assert (into / "3003" / "gaudi-hpu-20261121T0317Z-cccccc" / "logs" / "build.log").read_text() == "built\n"
    assert "expired before it was collected: ootci-run-ascend-npu-1 (3004)" in result.stdout
    assert ("nightly.yml: 3 run(s) in the last 36 h; 0 not read; 4 artifact(s) collected into "
            f"{into}, 0 collected before, 1 expired, 0 refused, 0 failed") in result.stdout
    # The window went to GitHub as its `created` filter; every list was paged through.
    runs_asked = [r for r in github.api_requests if r.path.endswith("/runs")]
    assert runs_asked[0].args["created"] == ">=2026-11-21T00:00:00Z"
    assert [r.args.get("page") for r in runs_asked] == [None, "2"]
    assert [r.args.get("page") for r in github.api_requests if "/runs/300/artifacts" in r.path] == [None, "2"]
    # Each artifact is marked in the history, with its run.
    marker = json.loads((history / "collected" / "2026-11-22" / "3011.json").read_text())
    assert marker == {"artifact": "ootci-run-openreg-1", "workflow_run": 301,
                      "run_created_at": "2026-11-22T10:00:00Z", "outcome": "collected"}

    # Into the same directory, or (as on the next scheduled run) a fresh one beside the same history.
    again = collect(github, into)
    fresh = collect(github, tmp_path / "fresh", "--history", str(history))

    assert again.returncode == 0 and fresh.returncode == 0, again.stderr + fresh.stderr
    assert sorted(github.downloads()) == [2991, 3001, 3003, 3011]
    assert "0 artifact(s) collected" in again.stdout and "4 collected before" in again.stdout
    assert "0 artifact(s) collected" in fresh.stdout and "4 collected before" in fresh.stdout
    assert list((tmp_path / "fresh").iterdir()) == []


@pytest.mark.parametrize("forged, why", [
    ({"event": "pull_request", "head_branch": "patch-1", "head_repository": "mallory/ootci"},
     "its event is pull_request (only schedule and workflow_dispatch runs are read)"),
    ({"event": "schedule", "head_repository": "mallory/ootci"}, "its code came from mallory/ootci, not ootci/ootci"),
    ({"event": "workflow_dispatch", "head_branch": "try-this"},
     "it ran branch try-this, not the default branch main"),
    ({"event": "push"}, "its event is push (only schedule and workflow_dispatch runs are read)"),
    ({"event": "schedule", "path": ".github/workflows/other.yml"},
     "it ran .github/workflows/other.yml, not .github/workflows/nightly.yml"),
])
def test_a_forged_nightly_record_from_a_run_that_is_no_night_of_the_default_branch_is_never_read(
        github, tmp_path, forged, why):
    """Issue 54, critical: a fork's PR that edits nightly.yml (`on: pull_request`) gets its own copy run,
    whose token can upload `ootci-run-*` artifacts holding records marked `trigger: nightly`. The
    collector listed every run of the file and took them. Now a run is read only when a trusted event
    started it, of this repository's own code, on its default branch, running the workflow file itself;
    anything else is named and its artifacts are never downloaded. The real night beside it still lands."""
    github.add_run(301, NOW - dt.timedelta(hours=2))
    github.add_artifact(301, 3011, "ootci-run-openreg-1", run_artifact("openreg-20261122T0317Z-aaaaaa"))
    github.add_run(302, NOW - dt.timedelta(hours=1), **forged)
    github.add_artifact(302, 3021, "ootci-run-openreg-1", fake_github.run_artifact(
        "openreg-20261122T1100Z-ffffff", "openreg", NOW - dt.timedelta(hours=1), trigger="nightly"))
    into, history = tmp_path / "collected", tmp_path / "history"
    history.mkdir()

    result = collect(github, into, "--history", str(history))

    assert result.returncode == 0, result.stderr
    assert f"ootci: history collect: not read: run 302: {why}" in result.stdout.splitlines()
    assert github.downloads() == [3011]
    assert not any("/runs/302/" in r.path for r in github.api_requests)
    assert [p.name for p in into.iterdir()] == ["3011"]
    assert "2 run(s) in the last 36 h; 1 not read; 1 artifact(s) collected" in result.stdout


def test_the_default_branch_is_the_repositorys_unless_given(github, tmp_path):
    github.add_run(301, NOW - dt.timedelta(hours=2), head_branch="release")
    github.add_artifact(301, 3011, "ootci-run-openreg-1", run_artifact("openreg-20261122T0317Z-aaaaaa"))
    assert "run 301: it ran branch release, not the default branch main" in collect(github, tmp_path / "a").stdout
    given = collect(github, tmp_path / "b", "--branch", "release")
    assert given.returncode == 0 and github.downloads() == [3011], given.stdout + given.stderr


@pytest.mark.parametrize("name, backend, why", [
    ("ootci-run-gaudi-hpu-1", "openreg",
     "it holds a record of backend 'openreg', and its name is not that backend's"),
    ("ootci-run-openreg-1", "gaudi-hpu",
     "it holds a record of backend 'gaudi-hpu', and its name is not that backend's"),
])
def test_an_artifact_holding_another_backends_record_is_refused_and_the_real_one_still_lands(
        github, tmp_path, name, backend, why):
    """Issue 54, high: in the nightly, vendor A's code (its build, its tests) can upload artifacts into the
    run under any name. An artifact is taken only when every record in it is of the backend its name
    says (even where the job of the name's backend said it uploaded it): the other artifacts of the run
    are still collected."""
    github.add_run(301, NOW - dt.timedelta(hours=2))
    named_for = name.removeprefix("ootci-run-").removesuffix("-1")
    github.add_artifact(301, 3011, name, run_artifact("x-20261122T0317Z-ffffff", backend),
                        said_by=f"backend ({named_for}) / {named_for}")
    github.add_artifact(301, 3012, "ootci-run-openreg-2", run_artifact("openreg-20261122T0317Z-aaaaaa"))
    into, history = tmp_path / "collected", tmp_path / "history"
    history.mkdir()

    result = collect(github, into, "--history", str(history))

    assert result.returncode == 0, result.stderr
    assert f"ootci: history collect: refused {name} (3011): {why}" in result.stdout.splitlines()
    assert [p.name for p in into.iterdir()] == ["3012"]
    marker = json.loads((history / "collected" / "2026-11-22" / "3011.json").read_text())
    assert marker["outcome"] == f"refused: {why}"


def test_an_artifact_no_job_of_its_backend_said_it_uploaded_is_refused_and_the_real_record_lands(github, tmp_path):
    """Issue 54, high: vendor A's code knows vendor B's artifact name and can upload it first, with a
    well-formed record of B. Each job says what it uploaded in its own annotations (`ootci history
    attest`: the name and digest), which no other job can write; the collector takes an artifact only
    when a job of the backend its name says named that artifact with that digest. A's artifact under
    B's name is refused without being downloaded (only A's job said it); one whose digest is not the
    one B's job said is refused too; B's real record, uploaded under another name when its own was
    taken, lands."""
    github.add_run(301, NOW - dt.timedelta(hours=2))
    forged = fake_github.run_artifact("gaudi-hpu-20261122T0317Z-ffffff", "gaudi-hpu", NOW, trigger="nightly")
    github.add_artifact(301, 3011, "ootci-run-gaudi-hpu-1", forged, said_by="backend (openreg) / openreg")
    github.add_artifact(301, 3012, "ootci-run-gaudi-hpu-1-taken", run_artifact("gaudi-hpu-20261122T0317Z-aaaaaa",
                                                                              "gaudi-hpu"))
    # B's job said a name and a digest; the artifact of that name listed has other bytes.
    other = fake_github.run_artifact("gaudi-hpu-20261122T0317Z-eeeeee", "gaudi-hpu", NOW, trigger="nightly")
    github.add_artifact(301, 3013, "ootci-run-gaudi-hpu-2", other, said_by=None)
    github.say(301, "backend (gaudi-hpu) / gaudi-hpu", "ootci-run-gaudi-hpu-2", "sha256:" + "0" * 64)
    into, history = tmp_path / "collected", tmp_path / "history"
    history.mkdir()

    result = collect(github, into, "--history", str(history))

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert ("ootci: history collect: refused ootci-run-gaudi-hpu-1 (3011): no job of its backend said it uploaded "
            "it (only backend (openreg) / openreg did, and its name is not that backend's)") in lines
    assert any(line.startswith("ootci: history collect: refused ootci-run-gaudi-hpu-2 (3013): its digest sha256:")
               and "is not the one job 'backend (gaudi-hpu) / gaudi-hpu' said it uploaded (sha256:000" in line
               for line in lines)
    assert github.downloads() == [3012]
    assert [p.name for p in into.iterdir()] == ["3012"]
    assert (into / "3012" / "gaudi-hpu-20261122T0317Z-aaaaaa" / "record.json").is_file()


def test_a_nightlys_publish_takes_only_the_attested_artifacts_of_its_own_run(github, tmp_path):
    """Issue 54, high: the nightly's publish reads its own run (`--run $GITHUB_RUN_ID`) through the same
    checks, where download-artifact took every `ootci-run-*` any job uploaded. Vendor A's code took B's
    name first (B's own upload then fell back to a name of its own, publish-results) and uploaded a record
    of B under it; an earlier attempt's artifact counts as the run's; another run is never read. The run
    itself is not questioned (a run by hand of a branch is still the job's own), and no ledger is kept."""
    github.add_run(401, NOW - dt.timedelta(hours=1), event="workflow_dispatch", head_branch="try-this")
    github.add_artifact(401, 4011, "ootci-run-gaudi-hpu-1",
                        run_artifact("gaudi-hpu-20261122T0317Z-ffffff", "gaudi-hpu"),
                        said_by="backend (openreg) / openreg")
    github.add_artifact(401, 4012, "ootci-run-gaudi-hpu-1-taken-0f3a9c",
                        run_artifact("gaudi-hpu-20261122T0317Z-aaaaaa", "gaudi-hpu"))
    github.add_artifact(401, 4013, "ootci-run-openreg-1", run_artifact("openreg-20261122T0317Z-bbbbbb"))
    github.add_artifact(401, 4014, "ootci-run-openreg-2", run_artifact("openreg-20261122T0517Z-cccccc"))
    github.add_run(402, NOW - dt.timedelta(minutes=30))
    github.add_artifact(402, 4021, "ootci-run-openreg-1", run_artifact("openreg-20261122T0400Z-dddddd"))
    into = tmp_path / "records"

    result = ootci("history", "collect", "--run", "401", "--into", str(into), "--backoff", "0", env=github.env())

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert ("ootci: history collect: refused ootci-run-gaudi-hpu-1 (4011): no job of its backend said it uploaded "
            "it (only backend (openreg) / openreg did, and its name is not that backend's)") in lines
    assert lines[-1] == (f"ootci: history collect: run 401; 3 artifact(s) collected into {into}, 0 collected before, "
                         "0 expired, 1 refused, 0 failed")
    assert sorted(github.downloads()) == [4012, 4013, 4014]
    assert sorted(p.name for p in into.iterdir()) == ["4012", "4013", "4014"]
    assert not any("/workflows/" in r.path for r in github.api_requests)  # no run list: only run 401's
    assert (into / "4012" / "gaudi-hpu-20261122T0317Z-aaaaaa" / "record.json").is_file()
    # A second publish of the run (a re-run's, on a runner that kept the folder) downloads nothing again.
    again = ootci("history", "collect", "--run", "401", "--into", str(into), "--backoff", "0", env=github.env())
    assert again.returncode == 0 and "0 artifact(s) collected" in again.stdout and "3 collected before" in again.stdout
    assert sorted(github.downloads()) == [4012, 4013, 4014]


def test_a_merged_record_is_refused_when_a_shard_of_its_backend_was_uploaded_by_another_job(github, tmp_path):
    """Issue 54, high, the shards: a sharded backend's merge job downloads its shards by name, without the
    annotations that say who uploaded them. Vendor A (gaudi-hpu) took the name of openreg's shard 1 first,
    with a forged shard inside; openreg's shard 1 went up under a name of its own, and the merge took A's.
    The collector refuses openreg's merged record, naming the squatted shard. openreg-plan's shards (whose
    names begin like openreg's) were all uploaded by its own jobs: its merged record is taken."""
    started = NOW - dt.timedelta(hours=8)
    github.add_run(501, NOW - dt.timedelta(hours=1))
    github.add_artifact(501, 5011, "ootci-run-openreg-1",
                        fake_github.run_artifact("openreg-20261122T0317Z-merged", "openreg", started,
                                                 shard_group="gh-501-openreg"),
                        said_by="backend (openreg) / openreg (merge of 2 shards)")
    github.add_artifact(501, 5012, "ootci-shard-openreg-1-1",
                        fake_github.run_artifact("openreg-20261122T0317Z-forged", "openreg", started, shard="1/2",
                                                 shard_group="gh-501-openreg"),
                        said_by="backend (gaudi-hpu) / gaudi-hpu")
    for artifact_id, name, k in ((5013, "ootci-shard-openreg-1-1-taken-0f3a9c5d11e2b7a4", 1),
                                 (5014, "ootci-shard-openreg-2-1", 2)):
        github.add_artifact(501, artifact_id, name,
                            fake_github.run_artifact(f"openreg-20261122T0317Z-shard{k}", "openreg", started,
                                                     shard=f"{k}/2", shard_group="gh-501-openreg"),
                            said_by=f"backend (openreg) / openreg (shard {k}/2)")
    github.add_artifact(501, 5015, "ootci-run-openreg-plan-1",
                        fake_github.run_artifact("openreg-plan-20261122T0317Z-merged", "openreg-plan", started,
                                                 shard_group="gh-501-openreg-plan"),
                        said_by="backend (openreg-plan) / openreg-plan (merge of 1 shards)")
    github.add_artifact(501, 5016, "ootci-shard-openreg-plan-1-1",
                        fake_github.run_artifact("openreg-plan-20261122T0317Z-shard1", "openreg-plan", started,
                                                 shard="1/1", shard_group="gh-501-openreg-plan"),
                        said_by="backend (openreg-plan) / openreg-plan (shard 1/1)")
    into = tmp_path / "records"

    result = ootci("history", "collect", "--run", "501", "--into", str(into), "--backoff", "0", env=github.env())

    assert result.returncode == 0, result.stderr
    assert ("ootci: history collect: refused ootci-run-openreg-1 (5011): it is merged from shards, and the run's "
            "shard artifact ootci-shard-openreg-1-1 (5012) is none of its backend's: no job of its backend said it "
            "uploaded it (only backend (gaudi-hpu) / gaudi-hpu did, and its name is not that backend's)"
            ) in result.stdout.splitlines()
    assert sorted(p.name for p in into.iterdir()) == ["5015"]
    assert (into / "5015" / "openreg-plan-20261122T0317Z-merged" / "record.json").is_file()
    assert not set(github.downloads()) & {5012, 5013, 5014, 5016}  # a shard is never collected itself


@pytest.mark.parametrize("args,message", [
    (["--run", "401", "--since", "36"],
     "history collect: --run takes one run, not a window (--since) or a ledger (--history)"),
    (["--run", "0"], "--run: expected a workflow run's id, got 0"),
])
def test_run_with_a_window_or_no_run_is_one_line(github, tmp_path, args, message):
    result = ootci("history", "collect", *args, "--into", str(tmp_path / "r"), env=github.env())
    assert (result.returncode, result.stderr) == (2, f"ootci: {message}\n")
    assert github.api_requests == []


def test_what_was_collected_merges_into_the_history(github, tmp_path):
    a_night(github)
    into, history = tmp_path / "collected", tmp_path / "history"
    assert collect(github, into).returncode == 0

    merged = ootci("history", "merge", str(into), "--into", str(history / "runs"), "--missing-ok")

    assert merged.returncode == 0, merged.stderr
    assert "4 added" in merged.stdout
    assert sorted(p.name for p in (history / "runs").iterdir() if not p.name.startswith(".")) == [
        "gaudi-hpu-20261121T0317Z-cccccc", "openreg-20261121T0000Z-dddddd",
        "openreg-20261121T0317Z-bbbbbb", "openreg-20261122T0317Z-aaaaaa"]


def test_the_token_goes_to_the_api_and_never_to_the_storage_host(github, tmp_path):
    """The artifact's URL answers 302 with a signed URL on another host: requests drops the
    Authorization header when a redirect leaves the host, so the token stays with the API."""
    github.add_run(301, NOW - dt.timedelta(hours=2))
    github.add_artifact(301, 3011, "ootci-run-openreg-1", run_artifact("openreg-20261122T0317Z-aaaaaa"))

    result = collect(github, tmp_path / "collected")

    assert result.returncode == 0, result.stderr
    assert github.api_requests and all(r.headers.get("Authorization") == f"Bearer {TOKEN}"
                                       for r in github.api_requests)
    assert [r.host.split(":")[0] for r in github.api_requests] == ["127.0.0.1"] * len(github.api_requests)
    [hit] = github.storage_hits
    assert hit.host == STORAGE_HOST and hit.authorization is None


def test_a_download_url_off_the_api_gets_no_request_at_all(github, tmp_path):
    """An artifact whose download URL is not on the API's own host: the token would go there."""
    artifact = github_artifacts.Artifact(id=7, name="ootci-run-x-1", expired=False, run_id=1,
                                         download_url=f"http://{STORAGE_HOST}:{github.server.port}/storage/7.zip")
    client = github_artifacts.GitHub(REPOSITORY, api_url=github.api_url, token=TOKEN)

    with pytest.raises(GitHubError, match="its download URL is not on"):
        client.download(artifact, tmp_path / "7.zip")
    assert github.storage_hits == [] and not (tmp_path / "7.zip").exists()


def test_an_archive_with_a_parent_member_is_refused_whole_and_not_downloaded_again(github, tmp_path):
    github.add_run(301, NOW - dt.timedelta(hours=2))
    github.add_artifact(301, 3011, "ootci-run-evil-1", zipped({"run/record.json": "{}", "../escaped.txt": "owned"}),
                        said_by="backend (evil) / evil")
    github.add_artifact(301, 3012, "ootci-run-openreg-1", run_artifact("openreg-20261122T0317Z-aaaaaa"))
    work = tmp_path / "work"
    into, history = work / "collected", work / "history"
    history.mkdir(parents=True)

    result = collect(github, into, "--history", str(history))

    assert result.returncode == 0, result.stderr  # one bad artifact holds up no other
    assert ("refused ootci-run-evil-1 (3011): member '../escaped.txt' has a '..' component") in result.stdout
    assert not list(tmp_path.rglob("escaped.txt"))
    assert sorted(p.name for p in into.iterdir()) == ["3012"]  # nothing of it, not even its safe member
    marker = history / "collected" / "2026-11-22" / "3011.json"
    assert json.loads(marker.read_text())["outcome"].startswith("refused: member")
    # An artifact never changes: it is not fetched again to be refused again.
    assert collect(github, into, "--history", str(history)).returncode == 0
    assert sorted(github.downloads()) == [3011, 3012]


@pytest.mark.parametrize("name,why", [
    ("../x", "a '..' component"),
    ("run/../../x", "a '..' component"),
    ("run\\..\\..\\x", "a '..' component"),
    ("/etc/cron.d/x", "an absolute path"),
    ("C:/Windows/x", "an absolute path"),
])
def test_extract_refuses_any_member_that_could_leave_the_directory(tmp_path, name, why):
    archive = tmp_path / "a.zip"
    archive.write_bytes(zipped({"run/record.json": "{}", name: "owned"}))

    with pytest.raises(github_artifacts.RefusedArchive, match=why):
        github_artifacts.extract(archive, tmp_path / "into")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zip"]


def test_extract_refuses_what_is_no_zip(tmp_path):
    archive = tmp_path / "a.zip"
    archive.write_bytes(b"<html>Not a zip</html>")
    with pytest.raises(github_artifacts.RefusedArchive, match="not a zip archive"):
        github_artifacts.extract(archive, tmp_path / "into")
    assert not (tmp_path / "into").exists()


def test_5xx_429_a_rate_limit_to_wait_for_and_a_broken_connection_are_retried(github, tmp_path):
    github.add_run(301, NOW - dt.timedelta(hours=2))
    github.add_artifact(301, 3011, "ootci-run-openreg-1", run_artifact("openreg-20261122T0317Z-aaaaaa"))
    github.fail(r"/workflows/nightly\.yml/runs$", 502, 429)
    github.fail(r"/runs/301/artifacts$", 403)  # a secondary rate limit: 403 with Retry-After
    github.fail(r"/storage/", 503)

    result = collect(github, tmp_path / "collected")

    assert result.returncode == 0, result.stderr
    assert "1 artifact(s) collected" in result.stdout
    assert github.downloads() == [3011, 3011]
    assert len([r for r in github.api_requests if r.path.endswith("/runs")]) == 3


def test_a_connection_that_breaks_is_retried_then_reported_in_one_line(tmp_path):
    sleeps = []
    client = github_artifacts.GitHub(REPOSITORY, api_url="http://127.0.0.1:9", token=TOKEN,
                                     retry=Retry(attempts=3, backoff_s=1.5, timeout_s=2), sleep=sleeps.append)
    with pytest.raises(GitHubError) as raised:
        client.workflow_runs("nightly.yml", NOW)
    assert raised.value.message == ("runs of nightly.yml: gave up after 3 attempt(s); "
                                    "last: connection failed (ConnectionError)")
    assert sleeps == [1.5, 3.0]


@pytest.mark.parametrize("status,hint", [
    (401, "the token was refused ($GITHUB_TOKEN)"),
    (404, "no such repository, workflow, run or artifact, or the token cannot see it"),
])
def test_a_refusal_is_one_line_exit_12_without_the_token(github, tmp_path, status, hint):
    github.fail(r"/workflows/nightly\.yml/runs$", status)

    result = collect(github, tmp_path / "collected")

    assert result.returncode == 13
    assert result.stderr == f"ootci: runs of nightly.yml: HTTP {status}: {hint}: injected {status}\n"
    assert TOKEN not in result.stdout + result.stderr


def test_a_failed_download_leaves_that_artifact_for_the_next_collect_and_takes_the_others(github, tmp_path):
    github.add_run(301, NOW - dt.timedelta(hours=2))
    github.add_artifact(301, 3011, "ootci-run-openreg-1", run_artifact("openreg-20261122T0317Z-aaaaaa"))
    github.add_artifact(301, 3012, "ootci-run-gaudi-hpu-1", run_artifact("gaudi-hpu-20261122T0317Z-bbbbbb",
                                                                          "gaudi-hpu"))
    github.fail(r"/storage/3011\.zip", 500, 500)
    into, history, output = tmp_path / "collected", tmp_path / "history", tmp_path / "github_output"
    history.mkdir()

    result = collect(github, into, "--history", str(history), "--attempts", "2",
                     env={"GITHUB_OUTPUT": str(output)})

    assert result.returncode == 13
    assert result.stderr.startswith("ootci: history collect: 1 listing(s) or download(s) failed, the next collect "
                                    "tries them again; first: download of artifact ootci-run-openreg-1 (3011): "
                                    "gave up after 2 attempt(s); last: HTTP 500")
    assert sorted(p.name for p in into.iterdir()) == ["3012"]
    assert sorted(p.name for p in (history / "collected" / "2026-11-22").iterdir()) == ["3012.json"]
    assert output.read_text() == "collected=1\n"

    assert collect(github, into, "--history", str(history)).returncode == 0
    assert sorted(p.name for p in into.iterdir()) == ["3011", "3012"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
                          check=True, capture_output=True, text=True).stdout


def test_markers_committed_but_not_checked_out_still_count(github, tmp_path):
    """A partial pull checks out only the runs: the markers are read from git's trees."""
    github.add_run(301, NOW - dt.timedelta(hours=2))
    github.add_artifact(301, 3011, "ootci-run-openreg-1", run_artifact("openreg-20261122T0317Z-aaaaaa"))
    github.add_artifact(301, 3012, "ootci-run-gaudi-hpu-1", run_artifact("gaudi-hpu-20261122T0317Z-bbbbbb",
                                                                          "gaudi-hpu"))
    history = tmp_path / "history"
    history.mkdir()
    assert collect(github, tmp_path / "first", "--history", str(history)).returncode == 0
    (history / "runs").mkdir()
    (history / "runs" / "README").write_text("runs\n")
    git(history, "init", "-q", "-b", "ootci-data")
    git(history, "add", "-A")
    git(history, "commit", "-q", "-m", "records and markers")
    git(history, "sparse-checkout", "set", "--no-cone", "/runs/")
    assert not (history / "collected").exists()
    git(history, "rm", "-q", "--sparse", "collected/2026-11-22/3012.json")  # as if never collected
    git(history, "commit", "-q", "-m", "forget one")

    result = collect(github, tmp_path / "second", "--history", str(history))

    assert result.returncode == 0, result.stderr
    assert "1 artifact(s) collected" in result.stdout and "1 collected before" in result.stdout
    assert sorted(github.downloads()) == [3011, 3012, 3012]


def test_the_window_spans_the_days_whose_markers_can_name_a_listed_artifact():
    from ootci.runner.history.collect import window_days
    assert window_days(NOW - dt.timedelta(hours=36), NOW) == ["2026-11-21", "2026-11-22"]
    assert window_days(NOW - dt.timedelta(hours=60), NOW) == ["2026-11-20", "2026-11-21", "2026-11-22"]
    assert window_days(NOW - dt.timedelta(hours=1), NOW) == ["2026-11-22"]


@pytest.mark.parametrize("args,env,message", [
    (["--repo", "not a repo"], {}, "--repo: expected OWNER/NAME, got 'not a repo'"),
    (["--since", "0"], {}, "--since: expected a number of hours above 0, got 0"),
    (["--history", "/nonexistent/history"], {},
     "--history: /nonexistent/history is not a directory (`ootci history pull` it first)"),
    ([], {"GITHUB_API_URL": "http://api.example.com"},
     "$GITHUB_API_URL: expected an https:// URL (http:// only on this machine), got 'http://api.example.com'"),
])
def test_bad_usage_is_one_line_and_exit_2(github, tmp_path, args, env, message):
    result = collect(github, tmp_path / "collected", *args, env=env)
    assert result.returncode == 2
    assert result.stderr == f"ootci: {message}\n"
    assert github.api_requests == []


def test_requests_drops_the_authorization_header_on_a_redirect_to_another_host(github):
    """What the collector relies on, shown on requests itself: same host keeps it, another drops it."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {TOKEN}"
    github.add_run(1, NOW)
    github.add_artifact(1, 5, "ootci-run-openreg-1", b"zip")

    answer = session.get(f"{github.api_url}/repos/{REPOSITORY}/actions/artifacts/5/zip", timeout=10)

    assert answer.status_code == 200 and answer.content == b"zip"
    assert [r.status_code for r in answer.history] == [302]
    assert github.storage_hits[0].authorization is None


def test_a_spent_rate_limit_says_until_when_and_is_not_waited_for(httpserver):
    httpserver.expect_request(f"/repos/{REPOSITORY}/actions/workflows/nightly.yml/runs").respond_with_json(
        {"message": "API rate limit exceeded for installation."}, status=403,
        headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(NOW.timestamp()))})
    client = github_artifacts.GitHub(REPOSITORY, api_url=httpserver.url_for("").rstrip("/"), token=TOKEN,
                                     sleep=lambda s: pytest.fail("a spent rate limit is not retried"))
    with pytest.raises(GitHubError) as raised:
        client.workflow_runs("nightly.yml", NOW)
    assert raised.value.message == ("runs of nightly.yml: HTTP 403: the API rate limit is spent until 12:00:00Z: "
                                    "API rate limit exceeded for installation.")


def test_attest_says_the_artifact_and_its_digest_as_a_notice_of_the_job(tmp_path):
    """What publish-results runs after the upload: the notice the collector reads back (`claims`)."""
    digest = "0fde654d4c6e659b45783a725dc92f1bfb0baa6c2de64b34e814dc206ff4aaaf"
    said = ootci("history", "attest", "ootci-run-openreg-1", digest)
    assert said.returncode == 0, said.stderr
    assert said.stdout == f"::notice title=ootci artifact::ootci-run-openreg-1 sha256:{digest}\n"
    # Under the unforeseen name, because another job took the name first: a warning names the one taken.
    taken = ootci("history", "attest", "ootci-run-openreg-1-taken-0123456789abcdef", digest,
                  "--instead-of", "ootci-run-openreg-1")
    assert taken.returncode == 0, taken.stderr
    assert taken.stdout.splitlines() == [
        "::warning title=ootci artifact name taken::ootci-run-openreg-1 was uploaded by another job of this run "
        "before this one: this job's records are ootci-run-openreg-1-taken-0123456789abcdef, and that one is "
        "refused by every reader",
        f"::notice title=ootci artifact::ootci-run-openreg-1-taken-0123456789abcdef sha256:{digest}"]
    for bad, field in ((["ootci-run-x", "abc"], "digest"), (["bad name::x", digest], "artifact")):
        refused = ootci("history", "attest", *bad)
        assert refused.returncode == 2 and refused.stderr.startswith(f"ootci: {field}: expected")
