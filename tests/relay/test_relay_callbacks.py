"""The callback contract, field by field, against a fake relay that behaves as the real handler.

The fake (tests/support/fake_relay.py) is a real HTTP server on 127.0.0.1 with the relay's
state machine keyed by delivery, repository, run, attempt and job name, its rate limit, its
nightly path, and HUD behind it (2 MB, job_name and check_run_id required, UpdateItem). A PR
run and a nightly of two backends, one of them sharded, go through `ootci relay` as
subprocesses; the verdicts, the detail and the pace are checked on their own.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from ootci.runner import relay
from ootci.runner.models import Outcome, RunRecord, StageResult, Status, TorchInfo
from ootci.runner.models import TestResult as Result  # not "Test*": pytest would collect it
from ootci.runner.records import record_files
from ootci.runner.relay import detail, verdict
from ootci.runner.relay.results import FAILED, PASSED, SKIPPED, Job, jobs_of, totals
from tests.support.fake_relay import AUDIENCE, REPOSITORY, FakeRelay

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "relay"
RUN_ID = "19283746501"
STARTED = dt.datetime(2026, 11, 23, 3, 17, tzinfo=dt.UTC)
TORCH_COMMIT = "5e1f0c2a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f"
EVENT = FIXTURES / "synchronize-gated.json"


def envelope() -> dict:
    return json.loads(EVENT.read_text())["client_payload"]


@pytest.fixture
def fake(httpserver):
    return FakeRelay(httpserver, dispatched={envelope()["delivery_id"]})


def actions_env(tmp_path: Path, fake: FakeRelay, **extra: str) -> dict[str, str]:
    return {"GITHUB_ACTIONS": "true", "GITHUB_RUN_ID": RUN_ID, "GITHUB_RUN_ATTEMPT": "1",
            "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": REPOSITORY,
            "GITHUB_WORKFLOW": "ootci nightly", "GITHUB_JOB": "relay",
            "GITHUB_STEP_SUMMARY": str(tmp_path / "step-summary.md"),
            "OOTCI_RELAY_BACKOFF": "0.01", "OOTCI_RELAY_TIMEOUT": "5", **fake.env(), **extra}


def ootci_relay(*args, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("GITHUB_", "ACTIONS_", "OOTCI_RELAY", "OOTCI_PR_", "OOTCI_CHECK", "OOTCI_REGISTRY"))}
    return subprocess.run([sys.executable, "-m", "ootci.runner", "relay", *map(str, args)], capture_output=True,
                          text=True, env={**clean, **env}, timeout=120)


# -- run records --------------------------------------------------------------------

MIXED = {Outcome.passed: 6, Outcome.failed: 2, Outcome.error: 1, Outcome.xfailed: 2, Outcome.upstream: 2,
         Outcome.flaky: 1, Outcome.fixed: 1, Outcome.skipped: 3, Outcome.xpassed: 1, Outcome.crashed: 1,
         Outcome.timeout: 1}
"""a run with every outcome ootci records"""


def results_of(backend: str, outcomes: dict[Outcome, int], prefix: str = "") -> list[Result]:
    return [Result(id=f"test_{backend}{prefix}.py::Test{o.value.title()}::test_{i}", suite="integration", outcome=o,
                   message=f"{o.value} #{i}" if not o.ok or o is Outcome.upstream else "",
                   log_tail=f"Traceback ...\nAssertionError: {o.value} {i}\n" if not o.ok else "")
            for o, n in outcomes.items() for i in range(n)]


def record(backend: str, tests: list[Result], *, run_id: str | None = None, shard: str | None = None,
           trigger: str = "pr", git_version: str | None = TORCH_COMMIT, version: str = "2.14.0.dev20261122+cpu",
           status: Status | None = None, stages: list[StageResult] | None = None) -> RunRecord:
    failing = any(not t.outcome.ok for t in tests)
    status = status or (Status.failed if failing else Status.passed)
    return RunRecord(run_id=run_id or f"{backend}-{shard or 'all'}".replace("/", "of"), backend=backend,
                     device=backend, trigger=trigger, pr=167123 if trigger == "pr" else None,
                     torch=TorchInfo(spec="nightly", version=version, git_version=git_version),
                     started_at=STARTED, finished_at=STARTED + dt.timedelta(minutes=42), status=status, tests=tests,
                     shard=shard, shard_group="gh-1" if shard else None,
                     stages=stages or [StageResult(name="integration", status=status)])


def write(root: Path, *records: RunRecord) -> Path:
    for r in records:
        run_dir = root / r.run_id
        run_dir.mkdir(parents=True)
        record_files.write(run_dir, r)
    return root


def two_backends(root: Path, trigger: str, legs: tuple[int, ...] = (1, 2, 3)) -> dict[str, int]:
    """openreg with every outcome; `sharded` in three legs (those of `legs` left records). The
    number of tests each backend's records hold."""
    openreg = results_of("openreg", MIXED)
    shards = {k: results_of("sharded", {Outcome.passed: 4, Outcome.failed: 1, Outcome.skipped: 1}, f"_{k}")
              for k in (1, 2, 3)}
    write(root, record("openreg", openreg, trigger=trigger),
          *(record("sharded", shards[k], shard=f"{k}/3", trigger=trigger) for k in legs))
    return {"openreg": len(openreg), "sharded": sum(len(shards[k]) for k in legs)}


# -- the numbers --------------------------------------------------------------------


def test_every_outcome_counts_in_exactly_one_of_hud_numbers():
    assert PASSED | FAILED | SKIPPED == set(Outcome) and not (PASSED & FAILED or PASSED & SKIPPED or FAILED & SKIPPED)
    counts = dict(MIXED)
    numbers = totals(counts)
    assert numbers["total"] == sum(MIXED.values()) == numbers["passed"] + numbers["failed"] + numbers["skipped"]
    # upstream (fails on CPU too) and the known failures (xfailed) failed on the device: counted as failed.
    assert numbers == {"passed": 8, "failed": 10, "skipped": 3, "total": 21}


# -- a PR run of two backends, one sharded ------------------------------------------


def test_a_pr_run_of_two_backends_reports_each_as_its_own_job(tmp_path, fake):
    records = tmp_path / "records"
    held = two_backends(records, "pr")
    env = actions_env(tmp_path, fake, GITHUB_WORKFLOW="ootci PyTorch PR")

    started = ootci_relay("report", EVENT, "--status", "in_progress", "--jobs", "openreg,sharded", env=env)
    done = ootci_relay("report", EVENT, "--status", "completed", "--records", records, "--jobs", "openreg,sharded",
                       "--page-url", "https://ootci.github.io/ootci/prs/167123.html", env=env)

    assert started.returncode == 0 and done.returncode == 0, started.stderr + done.stderr
    assert fake.accepted == fake.received
    assert [(b["workflow"]["status"], b["workflow"]["job_name"]) for b in fake.received] == [
        ("in_progress", "openreg"), ("in_progress", "sharded"), ("completed", "openreg"), ("completed", "sharded")]
    # One check run per backend (each created anew per callback), one HUD row per backend.
    assert sorted(set(fake.check_runs)) == [f"crcr/{REPOSITORY}/ootci PyTorch PR/{b}" for b in ("openreg", "sharded")]
    rows = {row["job_name"]: row for row in fake.hud.values()}
    assert set(rows) == {"openreg", "sharded"}
    for backend, row in rows.items():
        assert row["status"] == "completed" and row["conclusion"] == "failure"
        assert row["total_tests"] == held[backend] == row["passed_tests"] + row["failed_tests"] + row["skipped_tests"]
        assert row["artifact_url"] == "https://ootci.github.io/ootci/prs/167123.html"
        assert row["started_at"]  # the in_progress's
    completed = {b["workflow"]["job_name"]: b["workflow"] for b in fake.received[2:]}
    detail_ids = [e["name"] for e in completed["openreg"]["failed_tests_detail"]]
    # The backend's own failures first, then the known ones, what fails on CPU too, and what passed on retry;
    # within each, one example of each cause first ("failed #0" and "failed #1" are one cause, numbers masked).
    assert [e["outcome"] for e in completed["openreg"]["failed_tests_detail"]] == \
        ["failed", "error", "xpassed", "crashed", "timeout", "failed", "xfailed", "xfailed", "upstream", "upstream",
         "flaky"]
    assert detail_ids[0] == "test_openreg.py::TestFailed::test_0"
    assert completed["openreg"]["test_results"]["counts"] == {o.value: n for o, n in sorted(
        MIXED.items(), key=lambda kv: kv[0].value)}  # the page's numbers
    assert len(completed["sharded"]["failed_tests_detail"]) == 3
    assert completed["sharded"]["triage_verdict"]["category"] == "backend"


def test_a_lost_shard_and_a_job_that_left_nothing_are_closed_as_infra(tmp_path, fake):
    records = tmp_path / "records"
    two_backends(records, "pr", legs=(1, 3))
    env = actions_env(tmp_path, fake)
    assert ootci_relay("report", EVENT, "--status", "in_progress", "--jobs", "openreg,sharded,ghost",
                       env=env).returncode == 0
    done = ootci_relay("report", EVENT, "--status", "completed", "--records", records, "--jobs",
                       "openreg,sharded,ghost", env=env)
    assert done.returncode == 0, done.stderr
    assert fake.accepted == fake.received and len(fake.received) == 6  # nothing left for the sweeper
    completed = {b["workflow"]["job_name"]: b["workflow"] for b in fake.received[3:]}
    for name in ("sharded", "ghost"):
        assert completed[name]["conclusion"] == "failure"
        assert (completed[name]["triage_verdict"]["category"], completed[name]["triage_verdict"]["confidence"]) == \
            ("infra", "high")
    assert completed["sharded"]["test_results"]["lost"] == [f"shard 2/3 {relay.results.LOST}"]
    assert completed["ghost"]["test_results"]["total"] == 0


def test_a_rerun_of_the_reporting_job_opens_each_job_of_its_attempt_first(tmp_path, fake):
    records = tmp_path / "records"
    two_backends(records, "pr")
    env = actions_env(tmp_path, fake, GITHUB_RUN_ATTEMPT="2")
    done = ootci_relay("report", EVENT, "--status", "completed", "--records", records, "--jobs", "openreg,sharded",
                       "--in-progress-first", env=env)
    assert done.returncode == 0, done.stderr
    assert fake.accepted == fake.received
    assert [(b["workflow"]["status"], b["workflow"]["job_name"]) for b in fake.received] == [
        ("in_progress", "openreg"), ("completed", "openreg"), ("in_progress", "sharded"), ("completed", "sharded")]
    # Opened late, the in_progress carries when the backend's run began.
    assert fake.received[0]["workflow"]["started_at"] == "2026-11-23T03:17:00Z"


# -- a nightly -----------------------------------------------------------------------


def test_a_nightly_reports_one_completed_per_backend_under_the_torch_commit(tmp_path, fake):
    records = tmp_path / "records"
    held = two_backends(records, "nightly")
    write(records, record("local", results_of("local", {Outcome.passed: 2}), trigger="nightly", git_version="Unknown",
                          version="2.14.0a0+gitunknown"))
    env = actions_env(tmp_path, fake)
    write(records, record("stranger", results_of("stranger", {Outcome.passed: 1}), trigger="nightly"))
    matrix = json.dumps({"include": [{"name": n} for n in ("openreg", "sharded", "local")]})
    done = ootci_relay("nightly", records, "--all", "--page-url", "https://ootci.github.io/ootci/", "--trigger",
                       "nightly", "--matrix", matrix, env=env)
    assert done.returncode == 0, done.stderr
    assert fake.accepted == fake.received and len(fake.received) == 2
    for body in fake.received:
        assert body["event_type"] == "nightly" and body["delivery_id"] == TORCH_COMMIT
        assert body["payload"] == {"repository": {"full_name": "pytorch/pytorch"}, "head_sha": TORCH_COMMIT}
        report = body["workflow"]
        assert report["status"] == "completed"
        assert (report["started_at"], report["completed_at"]) == ("2026-11-23T03:17:00Z", "2026-11-23T03:59:00Z")
        assert report["test_results"]["total"] == held[report["job_name"]]
        assert report["artifact_url"] == f"https://ootci.github.io/ootci/backends/{report['job_name']}.html"
    assert fake.check_runs == []  # a nightly creates none
    assert {row["pytorch_head_sha"] for row in fake.hud.values()} == {TORCH_COMMIT}
    assert all(row["started_at"] for row in fake.hud.values())
    assert "ootci relay: stranger: run stranger-all not reported: this run's matrix has no such backend" in done.stdout
    # The local build names no commit: nothing is sent for it, and one line says why.
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("ootci relay: local:")]
    assert line.startswith("ootci relay: local: not reported: torch 2.14.0a0+gitunknown names no pytorch/pytorch "
                           "commit")


def test_a_nightly_reports_only_the_backends_whose_manifest_opts_in(tmp_path, fake):
    records = write(tmp_path / "records", record("openreg", results_of("openreg", {Outcome.passed: 1}),
                                                 trigger="nightly"))
    done = ootci_relay("nightly", records, env=actions_env(tmp_path, fake))
    assert done.returncode == 0, done.stderr
    assert fake.received == []
    assert "ootci relay: openreg: not reported: its manifest does not say [ci] relay = true" in done.stdout


def test_a_release_without_a_commit_is_reported_under_its_tag(tmp_path):
    fetched = StageResult(name="upstream", status=Status.passed, data={"upstream": {"tests": {
        "origin": "fetched", "ref": "v2.13.0", "commit": TORCH_COMMIT}}})
    release = record("openreg", [], git_version=None, version="2.13.0+cpu", stages=[fetched])
    assert relay.tested_commit(release) == (TORCH_COMMIT, "the tag v2.13.0, as the upstream suite fetched it")
    bare = record("openreg", [], git_version=None, version="2.13.0")
    assert relay.tested_commit(bare, lambda version: "a" * 40 if version == "2.13.0" else None)[0] == "a" * 40
    assert relay.tested_commit(bare, lambda version: None)[0] is None


# -- the fake relay is the real one ------------------------------------------------------


def post(fake: FakeRelay, body: dict, token: str = f"jwt.{AUDIENCE}.1") -> requests.Response:
    return requests.post(fake.env()["OOTCI_RELAY_CALLBACK_URL"], data=json.dumps(body),
                         headers={"Authorization": f"Bearer {token}"}, timeout=10)


def body_of(status: str = "in_progress", **workflow) -> dict:
    report = {"schema_version": "1", "status": status, "conclusion": "success" if status == "completed" else None,
              "name": "ootci PyTorch PR", "url": "https://github.com/x", "run_id": RUN_ID, "run_attempt": "1",
              "job_name": "openreg", "check_run_id": "1-1", **workflow}
    return {**envelope(), "workflow": {k: v for k, v in report.items() if v is not ...}}


@pytest.mark.parametrize("missing", ["delivery_id", "status", "run_id", "name"])
def test_the_fake_refuses_a_body_without_a_field_the_handler_needs(fake, missing):
    body = body_of(**({missing: ...} if missing != "delivery_id" else {}))
    if missing == "delivery_id":
        del body["delivery_id"]
    answer = post(fake, body)
    assert answer.status_code == 400 and answer.json()["detail"].startswith("callback body missing required field")


@pytest.mark.parametrize("missing", ["job_name", "check_run_id"])
def test_hud_refuses_a_body_without_job_name_or_check_run_id(fake, missing):
    answer = post(fake, body_of(**{missing: ...}))
    assert answer.status_code == 400 and answer.json()["detail"].startswith("HUD rejected callback: HTTP 400")


def test_the_state_is_keyed_by_job_name_not_check_run_id_and_nightlies_must_be_completed(fake):
    assert post(fake, body_of("in_progress", check_run_id="111")).status_code == 200
    assert post(fake, body_of("completed", check_run_id="222")).status_code == 200  # same job, other check run id
    assert post(fake, body_of("completed", check_run_id="333")).status_code == 400  # completed twice
    assert post(fake, body_of("completed", job_name="other")).status_code == 400  # never opened
    nightly = {**relay.nightly_envelope(TORCH_COMMIT), "workflow": body_of("in_progress")["workflow"]}
    answer = post(fake, nightly)
    assert answer.status_code == 400 and "must have status 'completed'" in answer.json()["detail"]


def test_hud_refuses_a_body_over_2_mb_and_the_relay_past_100_a_minute(fake):
    big = body_of("in_progress", test_results={"pad": "x" * (2 * 1024 * 1024)})
    answer = post(fake, big)
    assert answer.status_code == 413 and "HUD rejected callback: HTTP 413" in answer.json()["detail"]
    answers = [post(fake, body_of("in_progress", job_name=f"job-{i}")).status_code for i in range(100)]
    assert answers == [200] * 99 + [429]  # the 413 counted as the first of the minute


def test_the_pace_never_exceeds_100_callbacks_in_any_minute():
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    pacer = relay.Pacer(clock=lambda: now[0], sleep=sleep)
    sent = []
    for _ in range(250):
        pacer.wait()
        sent.append(now[0])
        now[0] += 0.01
    assert max(sum(1 for t in sent if start <= t < start + 60) for start in sent) == 100
    # A fake clock: 250 callbacks take the two minutes the limit asks for, and not much more.
    assert 118 < sum(slept) <= 120 and sent[-1] < 121.5


# -- the triage verdict --------------------------------------------------------------


def job_of(tests: list[Result], **kwargs) -> Job:
    [job] = jobs_of([record("openreg", tests, **kwargs)])
    return job


@pytest.mark.parametrize("outcomes, category, confidence", [
    ({Outcome.upstream: 3, Outcome.passed: 5}, "upstream", "high"),
    ({Outcome.failed: 1, Outcome.upstream: 2, Outcome.flaky: 1}, "backend", "high"),
    ({Outcome.flaky: 2, Outcome.passed: 5}, "flake", "high"),
])
def test_the_verdict_of_a_run_follows_ootci_classes(outcomes, category, confidence):
    found = verdict.triage(job_of(results_of("openreg", outcomes)), log_url="https://github.com/o/r/actions/runs/1")
    assert (found["category"], found["confidence"]) == (category, confidence)
    assert verdict.accepted(found)
    assert all(e["job"] == "openreg" and e["log_url"].startswith("https://") for e in found["evidence"])


def test_a_lost_shard_is_infra_and_a_failure_the_nightly_had_is_the_backends_with_less_confidence():
    legs = [record("openreg", results_of("openreg", {Outcome.failed: 1}, f"_{k}"), shard=f"{k}/2") for k in (1,)]
    [job] = jobs_of(legs)
    assert (verdict.triage(job)["category"], verdict.triage(job)["confidence"]) == ("infra", "high")
    old = job_of(results_of("openreg", {Outcome.failed: 1}))
    known = {t.id for t in old.tests}
    assert (verdict.triage(old, known)["category"], verdict.triage(old, known)["confidence"]) == ("backend", "medium")
    assert verdict.triage(job_of(results_of("openreg", {Outcome.passed: 3}))) is None
    missing = job_of([], status=Status.missing, stages=[StageResult(name="integration", status=Status.missing)])
    assert verdict.triage(missing)["category"] == "infra"


@pytest.mark.parametrize("change", [
    {"schema_version": True}, {"schema_version": "1"}, {"schema_version": 2}, {"category": "device"},
    {"confidence": "certain"}, {"summary": 7}, {"evidence": {"job": "x"}}, {"evidence": [{"log_url": "file:///x"}]},
    {"evidence": [{"test": 1}]}, {"suspected_upstream": {"pr": "12"}},
])
def test_the_validator_drops_what_the_relay_drops(change):
    good = verdict.triage(job_of(results_of("openreg", {Outcome.failed: 1})), log_url="https://x/1")
    assert verdict.accepted(good)
    bad = {**good, **change}
    assert not verdict.accepted(bad) and verdict.checked(bad) is None


# -- the detail ----------------------------------------------------------------------


def test_the_detail_puts_one_example_of_each_cause_first_within_its_group():
    tests = [Result(id=f"f.py::T::t{i}", suite="s", outcome=Outcome.failed, message=cause)
             for i, cause in enumerate(["A", "A", "A", "B", "A", "C"])]
    plain = [t.id for t in detail.ordered(tests)]
    by_cause = [t.id for t in detail.ordered(tests, cause_of=lambda t: t.message)]
    assert plain == [f"f.py::T::t{i}" for i in range(6)]
    assert by_cause == ["f.py::T::t0", "f.py::T::t3", "f.py::T::t5", "f.py::T::t1", "f.py::T::t2", "f.py::T::t4"]


def test_the_callbacks_detail_leads_with_one_example_of_each_failure_cause():
    """Issue 52: by default the detail is ordered by ootci's own cause signature (core.causes), so
    HUD's first rows are the different things broken, not 30 samples of the same one."""
    abs_ = [Result(id=f"test_ops.py::TestCommonOPENREG::test_abs_{i}", suite="upstream", outcome=Outcome.failed,
                   message=f"sample {i} (Tensor[{i + 2}, 3]): raised on openreg but not on CPU: "
                           "RuntimeError: Abs kernel only supports float type") for i in range(30)]
    conv = [Result(id=f"test_ops.py::TestCommonOPENREG::test_conv_{i}", suite="upstream", outcome=Outcome.failed,
                   message="NotImplementedError: Could not run 'aten::convolution_overrideable' with arguments "
                           f"from the 'openreg:{i % 2}' backend") for i in range(5)]
    [job] = jobs_of([record("openreg", abs_ + conv, trigger="nightly")])
    body = relay.completed(relay.nightly_envelope(TORCH_COMMIT), relay.Workflow(
        name="ootci nightly", url="https://github.com/o/r/actions/runs/1", run_id="1", run_attempt="1",
        job_name="relay", check_run_id="1-1"), job)
    names = [e["name"] for e in body["workflow"]["failed_tests_detail"]]
    assert names[:2] == [abs_[0].id, conv[0].id]
    assert sorted(names) == sorted(t.id for t in abs_ + conv)


def test_a_run_of_100000_tests_with_5000_failures_fits_in_2_mb_with_the_backends_new_failures_first():
    """The contract at scale: counted in bytes of the body as the relay forwards it."""
    tests = [Result(id=f"test_ops.py::TestCommonOPENREG::test_op_{i}", suite="upstream",
                    outcome=Outcome.passed) for i in range(95_000)]
    kinds = (Outcome.upstream, Outcome.xfailed, Outcome.flaky, Outcome.failed)
    tests += [Result(id=f"test_ops.py::TestCommonOPENREG::test_bad_{i}", suite="upstream", outcome=kinds[i % 4],
                     message="RuntimeError: " + "m" * 3000, log_tail="Traceback\n" + "s" * 9000)
              for i in range(5_000)]
    [job] = jobs_of([record("openreg", tests, trigger="nightly")])
    body = relay.completed(relay.nightly_envelope(TORCH_COMMIT), relay.Workflow(
        name="ootci nightly", url="https://github.com/o/r/actions/runs/1", run_id="1", run_attempt="1",
        job_name="relay", check_run_id="1-1"), job)
    size = len(json.dumps(body).encode())
    assert size <= relay.BODY_LIMIT - 16 * 1024
    entries = body["workflow"]["failed_tests_detail"]
    assert len(entries) == 1000 and body["workflow"]["test_results"]["failures"] == 5000
    assert [e["outcome"] for e in entries] == ["failed"] * 1000  # the backend's 1,250 come first
    assert all(len(e["message"]) <= 1024 and len(e["stacktrace"]) <= 4096 for e in entries)
    assert body["workflow"]["test_results"]["total"] == 100_000


def test_a_releases_tag_is_resolved_to_its_commit_in_pytorchs_repository(tmp_path, monkeypatch):
    from ootci.runner.commands.relay import resolve_release

    repo = tmp_path / "pytorch"
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "release"], check=True)
    subprocess.run([*git, "tag", "-a", "v2.13.0", "-m", "v2.13.0"], check=True)  # annotated: peeled to the commit
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    monkeypatch.setenv("OOTCI_TORCH_REPO", str(repo))
    assert resolve_release("2.13.0+cpu") == resolve_release("2.13.0") == commit
    assert resolve_release("2.14.0") is None  # no such tag
    assert resolve_release("2.14.0a0+gitunknown") is None  # no release: no tag to look for
