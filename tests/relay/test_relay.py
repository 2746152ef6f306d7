"""`ootci relay plan` and `ootci relay report` against PyTorch's cross-repository CI relay.

The dispatches are GitHub pull_request webhooks in the relay's envelope
(tests/fixtures/relay/). The relay's callback is played by a real HTTP server on
127.0.0.1 that behaves as pytorch/test-infra's callback Lambda does
(aws/lambda/cross_repo_ci_relay: callback/lambda_function.py, callback/callback_handler.py,
utils/redis_helper.py, utils/jwt_helper.py): an OIDC bearer token for the audience
`pytorch-cross-repo-ci-relay`, the required fields, a dispatch on record for the
delivery id, and the state machine dispatched -> in_progress -> completed, each once.
The same server hands out the OIDC tokens, as a runner's ACTIONS_ID_TOKEN_REQUEST_URL does.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ootci.runner import relay
from ootci.runner.commands.registry import matrix_entries
from ootci.runner.core.errors import RelayError, UsageError
from ootci.runner.core.http import Retry
from ootci.runner.manifests import registry
from ootci.runner.manifests.manifest import Manifest
from ootci.runner.models import Outcome, RunRecord, StageResult, Status, TorchInfo
from ootci.runner.models import TestResult as Result  # not "Test*": pytest would collect it
from ootci.runner.records import record_files
from ootci.runner.relay import results as relay_results
from tests.support.fake_relay import AUDIENCE, FakeRelay

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "relay"
RUN_ID = "19283746501"
HEAD = "7c3f1e2b9a5d40e8b6f1c2d3e4a5b6c7d8e9f0a1"
HOSTILE = ("$(", "`", "evil", "pwned", "rm -rf", "::set-output", "::error::", "::warning::", "::add-mask::",
           "reboot", "${IFS}")


@pytest.fixture(autouse=True)
def bundled_registry(monkeypatch):
    monkeypatch.delenv("OOTCI_REGISTRY", raising=False)
    monkeypatch.delenv("OOTCI_PR_DEFAULT", raising=False)
    monkeypatch.delenv("OOTCI_PR_LABEL", raising=False)


def fixture_event(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def envelope_of(name: str) -> dict:
    event = fixture_event(name)
    return event.get("client_payload", event)


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# -- the relay ---------------------------------------------------------------------


def actions_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """What a job of ootci's repository sees on GitHub Actions."""
    return {
        "GITHUB_ACTIONS": "true", "GITHUB_RUN_ID": RUN_ID, "GITHUB_RUN_ATTEMPT": "1",
        "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "ootci/ootci",
        "GITHUB_WORKFLOW": "ootci PyTorch PR", "GITHUB_JOB": "plan",
        "GITHUB_STEP_SUMMARY": str(tmp_path / "step-summary.md"), "GITHUB_OUTPUT": str(tmp_path / "github-output"),
        "OOTCI_RELAY_BACKOFF": "0.01", "OOTCI_RELAY_TIMEOUT": "5",
        **extra,
    }


def ootci_relay(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("GITHUB_", "ACTIONS_", "OOTCI_RELAY", "OOTCI_PR_", "OOTCI_CHECK", "OOTCI_REGISTRY"))}
    return subprocess.run([sys.executable, "-m", "ootci.runner", "relay", *map(str, args)], capture_output=True,
                          text=True, env={**clean, **env}, timeout=120)


@pytest.fixture
def relay_server(httpserver):
    return FakeRelay(httpserver, dispatched={envelope_of(n)["delivery_id"] for n in
                                             ("opened.json", "synchronize-gated.json", "hostile-strings.json")})


# -- run records -------------------------------------------------------------------

STARTED = dt.datetime(2026, 11, 23, 9, 0, tzinfo=dt.UTC)


def write_run(root: Path, run_id: str, *, backend: str = "openreg", trigger: str = "pr", pr: int | None = 167123,
              failing: tuple[str, ...] = (), passing: int = 3, started: dt.datetime = STARTED,
              bench: dict[str, float] | None = None, counter: str = "callgrind") -> Path:
    tests = [Result(id=f"smoke::test_ok.py::test_{i}", suite="smoke", outcome=Outcome.passed) for i in range(passing)]
    tests += [Result(id=t, suite="integration", outcome=Outcome.failed, message="AssertionError") for t in failing]
    status = Status.failed if failing else Status.passed
    record = RunRecord(run_id=run_id, backend=backend, device="openreg", trigger=trigger, pr=pr,
                       torch=TorchInfo(spec="pr:167123", version="2.14.0a0+git7c3f1e2"), started_at=started,
                       status=status, tests=tests,
                       stages=[StageResult(name="smoke", status=Status.passed),
                               StageResult(name="integration", status=status,
                                           summary=f"{len(failing)} tests failed" if failing else "")]
                       + ([StageResult(name="bench", status=Status.passed, data={"counter": counter, "measurements": {
                           # bench: device instructions per call, beside a CPU count of 10,000
                           k: {"counts": {"device": {"per_call": v}, "cpu": {"per_call": 10_000.0},
                                          "ratio": v / 10_000}} for k, v in bench.items()}})]
                          if bench else []))
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    record_files.write(run_dir, record)
    return run_dir


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))
            if p.is_file()}


# -- reading a dispatch ------------------------------------------------------------


def test_a_dispatch_event_file_and_a_bare_envelope_read_alike(tmp_path):
    event = fixture_event("opened.json")
    from_event = relay.read_event(FIXTURES / "opened.json")
    from_envelope = relay.read_event(write_json(tmp_path / "envelope.json", event["client_payload"]))
    assert from_event == from_envelope
    assert from_event.envelope == event["client_payload"]
    assert (from_event.event_type, from_event.action, from_event.pr) == ("pull_request", "opened", 167123)
    assert from_event.head_sha == HEAD
    assert from_event.base_sha == "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"
    assert from_event.delivery_id == "3f2a9c10-c8b1-11f0-8e4d-6b1f0c7a2e55"
    assert from_event.labels == ("open source",)
    # GitHub's dispatch limit is 65 KB of client_payload: a real webhook fits, as the relay requires.
    assert len(json.dumps(event["client_payload"], separators=(",", ":"))) < 65_000


def _set(path: str, value):
    def mutate(envelope: dict) -> None:
        *parents, last = path.split(".")
        node = envelope
        for part in parents:
            node = node[part]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value
    return mutate


@pytest.mark.parametrize("mutate, field", [
    (_set("payload.pull_request.number", "12a"), "payload.pull_request.number"),
    (_set("payload.pull_request.number", "7; $(id)\n::set-output name=pr::1"), "payload.pull_request.number"),
    (_set("payload.pull_request.number", True), "payload.pull_request.number"),
    (_set("payload.pull_request.number", 0), "payload.pull_request.number"),
    (_set("payload.pull_request.number", 123456789), "payload.pull_request.number"),
    (_set("payload.pull_request.number", 12.5), "payload.pull_request.number"),
    (_set("payload.pull_request.number", KeyError), "payload.pull_request.number"),
    (_set("payload.pull_request.head.sha", HEAD.upper()), "payload.pull_request.head.sha"),
    (_set("payload.pull_request.head.sha", "7c3f1e2"), "payload.pull_request.head.sha"),
    # A trailing newline is what `$` lets through with re.match; it would end a $GITHUB_OUTPUT line.
    (_set("payload.pull_request.head.sha", HEAD + "\n"), "payload.pull_request.head.sha"),
    (_set("payload.pull_request.number", "167123\n"), "payload.pull_request.number"),
    (_set("delivery_id", "3f2a9c10-c8b1-11f0-8e4d-6b1f0c7a2e55\n"), "delivery_id"),
    (_set("payload.pull_request.base.sha", "$(id)" * 8), "payload.pull_request.base.sha"),
    (_set("delivery_id", "3f2a9c10\n::error::x"), "delivery_id"),
    (_set("delivery_id", "d" * 65), "delivery_id"),
    (_set("delivery_id", 42), "delivery_id"),
    (_set("event_type", "pull request"), "event_type"),
    (_set("payload", "not an object"), "payload"),
    (_set("payload.action", "opened\n"), "payload.action"),
    (_set("payload.pull_request.labels", "ciflow/oot"), "payload.pull_request.labels"),
    (_set("payload.pull_request.labels", [{"name": 7}]), "payload.pull_request.labels.0"),
])
def test_a_bad_field_is_one_line_naming_it(tmp_path, mutate, field):
    event = fixture_event("opened.json")
    mutate(event["client_payload"])
    path = write_json(tmp_path / "event.json", event)
    with pytest.raises(RelayError) as caught:
        relay.read_event(path)
    message = caught.value.message
    assert f"field 'client_payload.{field}'" in message
    assert "\n" not in message and "\r" not in message
    assert caught.value.exit_code == 11


@pytest.mark.parametrize("content, words", [
    ("{not json", "not JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"client_payload": "x"}', "field 'client_payload'"),
])
def test_an_event_file_that_is_no_envelope_is_one_line(tmp_path, content, words):
    path = tmp_path / "event.json"
    path.write_text(content)
    with pytest.raises(RelayError, match=words):
        relay.read_event(path)


def test_the_hostile_number_is_refused_in_one_line_before_anything_is_written(tmp_path):
    env = actions_env(tmp_path)
    result = ootci_relay("plan", FIXTURES / "hostile-number.json", "--github-output", env=env)
    assert result.returncode == 11
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ootci: relay event ")
    assert "field 'client_payload.payload.pull_request.number': expected a PR number (1-8 digits)" in lines[0]
    assert not (tmp_path / "github-output").exists()


# -- what a dispatch starts --------------------------------------------------------


def manifests() -> list[Manifest]:
    return registry.load_all()


def takes_prs() -> list[str]:
    return [m.name for m in manifests() if m.pull_request_gate() is None]


def test_the_default_rule_leaves_out_prebuilt_backends_pinned_to_one_torch():
    by_name = {m.name: m for m in manifests()}
    assert by_name["openreg"].pull_request_gate() is None
    assert "torch-npu==2.13.0 is pinned to one torch" in by_name["ascend-npu"].pull_request_gate()
    assert by_name["ascend-npu"].ci.pull_requests is None  # the default leaves it out: nothing to set
    assert by_name["gaudi-hpu"].ci.pull_requests is False  # unpinned, in its container with its own torch
    base = {"name": "x", "device": "x", "distribution": "x", "import_name": "x", "entry_point": "x = x:y"}
    pinned = {**base, "source": {"requirement": "x==1.0"}, "build": {"recipe": "prebuilt"}}
    assert Manifest.model_validate(pinned).pull_request_gate() is not None
    assert Manifest.model_validate({**pinned, "ci": {"pull_requests": True}}).pull_request_gate() is None
    assert Manifest.model_validate({**pinned, "source": {"requirement": "x>=1.0"}}).pull_request_gate() is None
    assert Manifest.model_validate({**base, "source": {"path": "."}}).pull_request_gate() is None
    assert Manifest.model_validate({**base, "source": {"path": "."}, "ci": {"pull_requests": False}}) \
        .pull_request_gate() == "[ci] pull_requests = false in its manifest"


@pytest.mark.parametrize("name, default, action, backends", [
    ("opened.json", "none", "ignore", []),
    ("opened.json", "openreg", "run", ["openreg"]),
    ("synchronize-gated.json", "none", "run", None),  # None: every backend that takes PRs
    ("synchronize-ungated.json", "none", "ignore", []),
    ("synchronize-ungated.json", "openreg", "run", ["openreg"]),
    ("closed.json", "openreg", "cancel", []),
])
def test_each_dispatch_plans_what_its_action_and_labels_say(name, default, action, backends):
    dispatch = relay.read_event(FIXTURES / name)
    plan = relay.plan(dispatch, manifests(), default)
    assert plan.action == action, plan.reason
    assert plan.backends == (takes_prs() if backends is None else backends)
    assert (plan.pr, plan.delivery_id, plan.head_sha) == (167123, dispatch.delivery_id, dispatch.head_sha)


def test_the_gate_label_runs_every_backend_that_takes_prs_and_says_why_the_others_do_not():
    plan = relay.plan(relay.read_event(FIXTURES / "synchronize-gated.json"), manifests())
    assert plan.reason == "label ciflow/oot"
    gated = {m.name: m.pull_request_gate() for m in manifests() if m.pull_request_gate()}
    assert plan.left_out == gated
    assert set(gated) >= {"ascend-npu", "gaudi-hpu"}


def test_an_unlabelled_pr_with_no_default_starts_nothing_and_says_so():
    plan = relay.plan(relay.read_event(FIXTURES / "synchronize-ungated.json"), manifests(), "none")
    assert plan.reason == "nothing to run: no ciflow/oot label, and the default for unlabelled PRs is none"


def _with(name: str, *, labels=None, action=None, event_type=None) -> relay.Dispatch:
    envelope = copy.deepcopy(envelope_of(name))
    if labels is not None:
        envelope["payload"]["pull_request"]["labels"] = [{"name": label} for label in labels]
    if action is not None:
        envelope["payload"]["action"] = action
    if event_type is not None:
        envelope["event_type"] = event_type
    return relay.parse(envelope)


@pytest.mark.parametrize("labels, backends, left_out", [
    (["ciflow/oot/openreg"], ["openreg"], []),
    (["ciflow/oot/openreg", "ciflow/oot/openreg", "ciflow/oot"], None, None),
    (["ciflow/oot/ascend-npu"], [], ["ascend-npu"]),
    (["ciflow/oot/ascend-npu", "ciflow/oot/openreg"], ["openreg"], ["ascend-npu"]),
    (["ciflow/oot/no-such-backend"], [], ["no-such-backend"]),
    # Literal strings, nothing else: case, spaces, prefixes and patterns do not count.
    (["CIFLOW/OOT", "ciflow/oot ", " ciflow/oot", "ciflow/ootx", "ciflow/oot/", "ciflow/oot/*",
      "ciflow/oot/OpenReg", "ciflow/oot/openreg\n", "ciflow/oot/$(id)", "ciflow/crcr/openreg"], [], []),
])
def test_labels_are_matched_literally(labels, backends, left_out):
    plan = relay.plan(_with("opened.json", labels=labels), manifests(), "none")
    assert plan.backends == (takes_prs() if backends is None else backends)
    assert list(plan.left_out) == ([m.name for m in manifests() if m.pull_request_gate()]
                                   if left_out is None else left_out)
    assert plan.action == ("run" if plan.backends else "ignore")


def test_the_gate_label_is_configuration(monkeypatch):
    # Listed at L3 under device "oot", the relay's own label ciflow/crcr/oot can be the gate too.
    monkeypatch.setenv("OOTCI_PR_LABEL", "ciflow/crcr/oot")
    gate = relay.gate_label(None)
    assert gate == "ciflow/crcr/oot"
    assert relay.plan(_with("opened.json", labels=["ciflow/crcr/oot"]), manifests(), "none", gate).backends == \
        takes_prs()
    assert relay.plan(_with("opened.json", labels=["ciflow/crcr/oot/openreg"]), manifests(), "none", gate) \
        .backends == ["openreg"]
    assert relay.plan(_with("opened.json", labels=["ciflow/oot"]), manifests(), "none", gate).action == "ignore"
    for bad in ("ciflow/oot/", "ciflow oot", "ciflow\noot", "$(id)"):
        with pytest.raises(UsageError, match="--label: expected a label"):
            relay.gate_label(bad)


@pytest.mark.parametrize("action, planned", [
    ("opened", "run"), ("reopened", "run"), ("synchronize", "run"), ("closed", "cancel"),
    ("edited", "ignore"), ("labeled", "ignore"), ("ready_for_review", "ignore"), ("assigned", "ignore"),
])
def test_the_pr_action_decides_between_run_cancel_and_ignore(action, planned):
    plan = relay.plan(_with("synchronize-gated.json", action=action), manifests(), "openreg")
    assert plan.action == planned
    if planned != "run":
        assert plan.backends == []
    if planned == "ignore":
        assert plan.reason == (f"pull_request action {action!r} starts nothing "
                               "(only opened, reopened, synchronize do)")


def test_an_event_that_is_no_pull_request_is_ignored():
    plan = relay.plan(_with("opened.json", event_type="push"), manifests(), "openreg")
    assert (plan.action, plan.reason, plan.pr) == ("ignore", "event 'push' is not a pull request", None)


def test_the_default_for_unlabelled_prs_is_validated():
    assert relay.default_choice(None, manifests()) == "none"
    assert relay.default_choice("openreg", manifests()) == "openreg"
    with pytest.raises(UsageError, match="--default: expected 'none' or a registered backend"):
        relay.default_choice("nope", manifests())


def test_plan_writes_the_job_outputs_and_the_matrix_of_ootci_matrix(tmp_path):
    env = actions_env(tmp_path)
    result = ootci_relay("plan", FIXTURES / "synchronize-gated.json", "--github-output", env=env)
    assert result.returncode == 0, result.stderr
    outputs = dict(line.split("=", 1) for line in (tmp_path / "github-output").read_text().splitlines())
    assert outputs.pop("matrix") == json.dumps(
        {"include": matrix_entries([registry.resolve(n) for n in takes_prs()], None)}, separators=(",", ":"))
    assert outputs == {"action": "run", "pr": "167123", "head_sha": HEAD,
                       "base_sha": "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678",
                       "delivery_id": "8b1d2e30-c8b4-11f0-9a1c-2f5e7d3b4a61", "jobs": ",".join(takes_prs())}
    printed = json.loads(result.stdout)
    assert printed["action"] == "run" and printed["backends"] == takes_prs() == printed["jobs"]
    assert "ootci relay plan: ascend-npu left out: prebuilt torch-npu==2.13.0" in result.stderr


def test_the_default_comes_from_the_environment_and_a_closed_pr_runs_nothing(tmp_path):
    env = actions_env(tmp_path, OOTCI_PR_DEFAULT="openreg")
    result = ootci_relay("plan", FIXTURES / "opened.json", "--github-output", env=env)
    assert result.returncode == 0, result.stderr
    assert "action=run\n" in (tmp_path / "github-output").read_text()
    (tmp_path / "github-output").unlink()
    result = ootci_relay("plan", FIXTURES / "closed.json", "--github-output", env=env)
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "github-output").read_text()
    assert "action=cancel\n" in text and 'matrix={"include":[]}\n' in text
    result = ootci_relay("plan", FIXTURES / "opened.json", "--default", "no-such-backend", env=env)
    assert result.returncode == 2 and result.stderr.startswith("ootci: --default: expected 'none'")


def test_hostile_titles_branches_and_labels_never_reach_any_output(tmp_path):
    env = actions_env(tmp_path)
    result = ootci_relay("plan", FIXTURES / "hostile-strings.json", "--github-output", env=env)
    assert result.returncode == 0, result.stderr
    written = (tmp_path / "github-output").read_text()
    lines = written.splitlines()
    assert [line.split("=", 1)[0] for line in lines] == ["action", "pr", "head_sha", "base_sha", "delivery_id",
                                                         "matrix", "jobs"]
    assert lines[0] == "action=run" and lines[1] == "pr=167123"
    for text in (written, result.stdout, result.stderr):
        for fragment in HOSTILE:
            assert fragment not in text
    assert json.loads(result.stdout)["backends"] == ["openreg"]  # from the one literal ciflow/oot/openreg


# -- test results ------------------------------------------------------------------


def test_test_results_count_failures_new_since_the_latest_nightly(tmp_path):
    runs, history = tmp_path / "runs", tmp_path / "history"
    write_run(runs, "openreg-pr", failing=("integration::test_a", "integration::test_new"))
    write_run(history, "openreg-n1", trigger="nightly", pr=None, failing=("integration::test_new",),
              started=STARTED - dt.timedelta(days=2))
    write_run(history, "openreg-n2", trigger="nightly", pr=None, failing=("integration::test_a",),
              started=STARTED - dt.timedelta(days=1))
    write_run(history, "openreg-other-pr", trigger="pr", pr=5, failing=(), started=STARTED - dt.timedelta(hours=1))
    records, rejected = relay.read_records(runs)
    nightly = relay.latest_nightlies(relay.read_records(history)[0])["openreg"]
    [job] = relay.jobs_of(records)
    results = relay_results.test_results(job, nightly=nightly, page_url="https://ootci.github.io/ootci/#pr-167123")
    assert rejected == 0 and nightly.run_id == "openreg-n2"
    assert {k: results[k] for k in ("passed", "failed", "skipped", "total", "conclusion")} == \
        {"passed": 3, "failed": 2, "skipped": 0, "total": 5, "conclusion": "failure"}
    assert (results["baseline"], results["new_failures"], results["new"]) == ("openreg-n2", 1, 2)
    assert results["problem"] == "integration: 2 tests failed"
    assert results["page_url"] == "https://ootci.github.io/ootci/#pr-167123"


NIGHTLY_COUNTS = [(18_400, 1.1e8), (18_410, 1.1001e8), (18_395, 1.1e8), (18_405, 1.0999e8), (18_400, 1.1e8)]
"""(add_tiny, matmul) device instructions per call of five nightlies: a count's few hundredths of a per cent"""


@pytest.mark.parametrize("pr_counts, slower", [
    ({"add_tiny": 18_952, "matmul": 1.1e8}, [("add_tiny", "count"), ("add_tiny", "count_ratio")]),  # 3 % more
    ({"add_tiny": 18_600, "matmul": 1.0e8}, []),  # 1 % more: below 2 %; or fewer
])
def test_a_pr_runs_count_is_slower_when_it_steps_above_the_nightlies(tmp_path, pr_counts, slower):
    """One PR run is enough: a count is all but deterministic, judged as the nightly judges a step."""
    runs, history = tmp_path / "runs", tmp_path / "history"
    write_run(runs, "openreg-pr", bench=pr_counts)
    for day, (tiny, matmul) in enumerate(NIGHTLY_COUNTS):
        write_run(history, f"openreg-n{day}", trigger="nightly", pr=None, bench={"add_tiny": tiny, "matmul": matmul},
                  started=STARTED - dt.timedelta(days=5 - day))
    # A nightly after the PR run, and another backend's, are no baseline for it.
    write_run(history, "openreg-later", trigger="nightly", pr=None, bench={"add_tiny": 9e4, "matmul": 9e8},
              started=STARTED + dt.timedelta(hours=1))
    write_run(history, "other-n", backend="other", trigger="nightly", pr=None, bench={"add_tiny": 9e4},
              started=STARTED - dt.timedelta(days=1))
    baseline = relay.read_records(history)[0]
    [entry] = [relay_results.test_results(j, baseline=baseline) for j in relay.jobs_of(relay.read_records(runs)[0])]
    assert [(s["measurement"], s["metric"]) for s in entry["slower_than_nightly"]] == slower
    for found in entry["slower_than_nightly"]:
        assert found["nightlies"] == 5 and found["method"] == "callgrind"
    if slower:
        count = entry["slower_than_nightly"][0]
        assert (count["value"], count["nightly_median"], count["nightly_max"]) == (18_952, 18_400, 18_410)
        assert count["relative"] == round(18_952 / 18_400 - 1, 4)


def test_without_bench_or_a_nightly_counted_alike_nothing_is_said_of_speed(tmp_path):
    runs, history = tmp_path / "runs", tmp_path / "history"
    write_run(runs, "openreg-pr", bench={"add_tiny": 9e4})
    write_run(runs, "plain-pr", backend="plain")
    for day in range(2):  # counted by another counter: another series, no baseline
        write_run(history, f"openreg-n{day}", trigger="nightly", pr=None, bench={"add_tiny": 18_400},
                  started=STARTED - dt.timedelta(days=day + 1), counter="perf_event")
    baseline = relay.read_records(history)[0]
    jobs = relay.jobs_of(relay.read_records(runs)[0])
    assert {j.name: relay_results.test_results(j, baseline=baseline)["slower_than_nightly"] for j in jobs} == \
        {"openreg": None, "plain": None}
    assert "slower_than_nightly" not in relay_results.test_results(jobs[0])  # no history given at all


def test_the_step_runs_of_a_bisection_are_not_runs_of_the_pr(tmp_path):
    runs = tmp_path / "runs"
    write_run(runs, "openreg-pr", failing=("integration::test_a",))
    bisection = runs / "bisect-openreg-1"
    bisection.mkdir()
    (bisection / record_files.BISECT_NAME).write_text("{}")  # only its place matters to the finders
    write_run(bisection / "steps", "openreg-step-1", failing=("integration::test_b",))
    (runs / "broken").mkdir()
    (runs / "broken" / record_files.RECORD_NAME).write_text("{not json")
    records, rejected = relay.read_records(runs)
    assert [r.run_id for r in records] == ["openreg-pr"] and rejected == 1
    assert [d.name for d, _ in record_files.find_runs(runs)] == ["broken", "openreg-pr"]

def test_retries_back_off_exponentially_up_to_a_cap():
    retry = Retry(backoff_s=2, max_delay_s=20)
    assert [retry.delay(n) for n in (1, 2, 3, 4, 5)] == [2, 4, 8, 16, 20]
    assert retry.delay(1, retry_after="7") == 7


# -- reporting back ----------------------------------------------------------------

WORKFLOW_KEYS = {"schema_version", "status", "conclusion", "name", "url", "run_id", "run_attempt", "job_name",
                 "check_run_id", "started_at", "completed_at"}


def test_in_progress_then_completed_reach_the_relay_exactly_as_it_expects(tmp_path, relay_server):
    records = tmp_path / "records"
    write_run(records, "openreg-pr-1", failing=("integration::test_opinfo.py::test_compare_cpu[add-float32]",))
    before = snapshot(records)
    env = {**actions_env(tmp_path), **relay_server.env()}
    event = FIXTURES / "synchronize-gated.json"

    started = ootci_relay("report", event, "--status", "in_progress", "--jobs", "openreg", env=env)
    done = ootci_relay("report", event, "--status", "completed", "--records", records, "--jobs", "openreg",
                       "--page-url", "https://ootci.github.io/ootci/#pr-167123", env={**env, "GITHUB_JOB": "publish"})

    assert started.returncode == 0, started.stderr
    assert done.returncode == 0, done.stderr
    assert [b["workflow"]["status"] for b in relay_server.received] == ["in_progress", "completed"]
    assert relay_server.accepted == relay_server.received
    envelope = envelope_of("synchronize-gated.json")
    for body in relay_server.accepted:
        assert {k: v for k, v in body.items() if k != "workflow"} == envelope  # the envelope, unchanged
        assert list(body)[: len(envelope)] == list(envelope)
    first, last = (b["workflow"] for b in relay_server.accepted)
    assert set(first) == WORKFLOW_KEYS
    assert set(last) == WORKFLOW_KEYS | {"test_results", "artifact_url", "failed_tests_detail", "triage_verdict"}
    # The job is the backend: its own check run on the PR, whichever job of the workflow sends it.
    same = {"schema_version": "1", "name": "ootci PyTorch PR",
            "url": f"https://github.com/ootci/ootci/actions/runs/{RUN_ID}", "run_id": RUN_ID, "run_attempt": "1",
            "job_name": "openreg", "check_run_id": f"{RUN_ID}-1"}
    assert {k: first[k] for k in same} == same == {k: last[k] for k in same}
    assert (first["conclusion"], first["completed_at"], last["conclusion"], last["started_at"]) == \
        (None, None, "failure", None)  # HUD keeps the in_progress's start
    results = last["test_results"]
    assert {k: results[k] for k in ("passed", "failed", "skipped", "total", "conclusion", "backend")} == \
        {"passed": 3, "failed": 1, "skipped": 0, "total": 4, "conclusion": "failure", "backend": "openreg"}
    assert last["artifact_url"] == "https://ootci.github.io/ootci/#pr-167123"
    [failure] = last["failed_tests_detail"]
    assert failure == {"name": "integration::test_opinfo.py::test_compare_cpu[add-float32]", "file": "integration",
                       "classname": "test_opinfo.py", "outcome": "failed", "message": "AssertionError",
                       "stacktrace": ""}
    assert (last["triage_verdict"]["category"], last["triage_verdict"]["confidence"]) == ("backend", "high")
    assert relay_server.check_runs == ["crcr/ootci/ootci/ootci PyTorch PR/openreg"] * 2
    [row] = relay_server.hud.values()
    assert (row["total_tests"], row["failed_tests"], row["started_at"]) == (4, 1, first["started_at"])
    # One OIDC token per report, for the relay's audience, asked for with the runner's request token.
    assert [r.args.get("audience") for r in relay_server.token_requests] == [AUDIENCE, AUDIENCE]
    assert all(r.args.get("api-version") == "2.0" for r in relay_server.token_requests)
    assert relay_server.auth == [f"Bearer jwt.{AUDIENCE}.1", f"Bearer jwt.{AUDIENCE}.2"]
    assert "jwt." not in started.stdout + started.stderr + done.stdout + done.stderr
    summary = (tmp_path / "step-summary.md").read_text()
    assert "reported in_progress for PR #167123 (job openreg)" in summary
    assert "reported completed (failure) for PR #167123 (job openreg)" in summary
    assert snapshot(records) == before


def test_a_completed_from_another_job_name_is_refused_by_the_state_machine(tmp_path, relay_server):
    env = {**actions_env(tmp_path), **relay_server.env()}
    event = FIXTURES / "opened.json"
    assert ootci_relay("report", event, "--status", "in_progress", env=env).returncode == 0
    done = ootci_relay("report", event, "--status", "completed", "--conclusion", "success",
                       env={**env, "GITHUB_JOB": "publish"})
    assert done.returncode == 11
    assert len(relay_server.received) == 2 and len(relay_server.accepted) == 1  # a 400 is not retried
    [line] = done.stderr.splitlines()
    assert line.startswith("ootci: relay callback: HTTP 400: the relay's state machine refused it:")
    assert "invalid state transition" in line
    assert done.stdout.startswith("::error title=ootci relay report::relay callback: HTTP 400")


def test_a_rerun_of_the_reporting_job_alone_opens_its_attempt_first(tmp_path, relay_server):
    env = {**actions_env(tmp_path, OOTCI_RELAY_JOB_NAME="ootci"), **relay_server.env()}
    event = FIXTURES / "opened.json"
    assert ootci_relay("report", event, "--status", "in_progress", env=env).returncode == 0
    done = ootci_relay("report", event, "--status", "completed", "--conclusion", "failure",
                       env={**env, "GITHUB_JOB": "publish"})
    assert done.returncode == 0, done.stderr
    # Attempt 2 re-runs only the reporting job: nothing opened that attempt, so it opens it itself.
    rerun = ootci_relay("report", event, "--status", "completed", "--conclusion", "success", "--in-progress-first",
                        env={**env, "GITHUB_JOB": "publish", "GITHUB_RUN_ATTEMPT": "2"})
    assert rerun.returncode == 0, rerun.stderr
    assert relay_server.received == relay_server.accepted  # nothing sent that the relay refused
    assert [(b["workflow"]["status"], b["workflow"]["run_attempt"], b["workflow"]["check_run_id"])
            for b in relay_server.accepted] == [("in_progress", "1", f"{RUN_ID}-1"), ("completed", "1", f"{RUN_ID}-1"),
                                                ("in_progress", "2", f"{RUN_ID}-2"), ("completed", "2", f"{RUN_ID}-2")]
    assert {b["workflow"]["job_name"] for b in relay_server.received} == {"ootci"}


def test_an_in_progress_first_the_relay_refuses_fails_the_report_and_says_what_the_relay_answered(tmp_path,
                                                                                                 relay_server):
    """The relay refuses a second in_progress (before any check run or HUD row): never
    sent on a guess, and a refusal is never taken as fine. The completed is then not sent."""
    env = {**actions_env(tmp_path, OOTCI_RELAY_JOB_NAME="ootci"), **relay_server.env()}
    event = FIXTURES / "opened.json"
    assert ootci_relay("report", event, "--status", "in_progress", env=env).returncode == 0
    done = ootci_relay("report", event, "--status", "completed", "--conclusion", "success", "--in-progress-first",
                       env=env)
    assert done.returncode == 11
    assert [b["workflow"]["status"] for b in relay_server.received] == ["in_progress", "in_progress"]
    assert [b["workflow"]["status"] for b in relay_server.accepted] == ["in_progress"]
    [line] = done.stderr.splitlines()
    assert line.startswith("ootci: relay callback: HTTP 400: the relay's state machine refused it:")
    assert "callback rejected: invalid state transition" in line  # the relay's own answer
    assert done.stdout.startswith("::error title=ootci relay report::relay callback: HTTP 400")


def test_a_report_under_a_stand_in_torch_says_which_torch_ran_instead_of_the_prs(tmp_path, relay_server):
    env = {**actions_env(tmp_path), **relay_server.env()}
    event = FIXTURES / "opened.json"
    started = ootci_relay("report", event, "--status", "in_progress", "--torch-instead", "2.13.0", env=env)
    done = ootci_relay("report", event, "--status", "completed", "--conclusion", "success",
                       "--torch-instead", "2.13.0", env=env)
    assert started.returncode == 0 and done.returncode == 0, started.stderr + done.stderr
    assert relay_server.accepted == relay_server.received and len(relay_server.accepted) == 2
    for body in relay_server.accepted:
        assert body["workflow"]["name"] == "ootci PyTorch PR (torch 2.13.0, not the PR's build)"
        assert body["workflow"]["test_results"]["torch_instead_of_pr"] == "2.13.0"
    assert "torch 2.13.0 ran, not the PR's build" in done.stdout
    hostile = ootci_relay("report", event, "--status", "in_progress", "--torch-instead", "2.13.0\n::error::x",
                          env={**env, "GITHUB_RUN_ATTEMPT": "2"})
    assert hostile.returncode != 0 and len(relay_server.received) == 2


def test_a_relay_answering_500_twice_still_gets_exactly_one_completed(tmp_path, relay_server):
    env = {**actions_env(tmp_path), **relay_server.env()}
    event = FIXTURES / "opened.json"
    assert ootci_relay("report", event, "--status", "in_progress", env=env).returncode == 0
    relay_server.answers = [500, 503]
    done = ootci_relay("report", event, "--status", "completed", "--conclusion", "success", env=env)
    assert done.returncode == 0, done.stderr
    assert [b["workflow"]["status"] for b in relay_server.received] == ["in_progress"] + ["completed"] * 3
    assert [b["workflow"]["status"] for b in relay_server.accepted] == ["in_progress", "completed"]
    assert "HTTP 200 completed after 3 attempts" in done.stdout


def test_a_5xx_then_already_recorded_is_a_warning_that_hud_may_lack_the_result(tmp_path, relay_server):
    """The relay records the state, then HUD fails and the relay answers 500 ("update was not
    saved"); the retry is refused as a repeated state. The relay has it, HUD does not: never success."""
    env = {**actions_env(tmp_path), **relay_server.env()}
    event = FIXTURES / "opened.json"
    assert ootci_relay("report", event, "--status", "in_progress", env=env).returncode == 0
    relay_server.answers = [("after", 500)]
    done = ootci_relay("report", event, "--status", "completed", "--conclusion", "failure", env=env)
    assert done.returncode == 0, done.stderr
    assert [b["workflow"]["status"] for b in relay_server.received] == ["in_progress", "completed", "completed"]
    assert list(relay_server.states.values()) == ["completed"]  # the relay recorded the first try
    [row] = relay_server.hud.values()
    assert row["status"] == "in_progress"  # HUD never got the completed
    [line] = done.stdout.splitlines()
    assert line.startswith("::warning title=ootci relay report::") and "already recorded" in line
    assert "HUD may not have this result" in line and "HTTP 500" in line
    assert "HUD may not have this result" in (tmp_path / "step-summary.md").read_text()


def test_429_is_retried_and_a_4xx_is_not(tmp_path, relay_server):
    env = {**actions_env(tmp_path), **relay_server.env()}
    relay_server.answers = [429]
    result = ootci_relay("report", FIXTURES / "opened.json", "--status", "in_progress", env=env)
    assert result.returncode == 0, result.stderr
    assert len(relay_server.received) == 2 and len(relay_server.accepted) == 1

    result = ootci_relay("report", FIXTURES / "opened.json", "--status", "in_progress", "--audience", "wrong",
                         env={**env, "GITHUB_RUN_ATTEMPT": "2"})
    assert result.returncode == 11
    assert len(relay_server.received) == 3  # one try, no retry
    [line] = result.stderr.splitlines()
    assert line == ("ootci: relay callback: HTTP 401: the relay refused the OIDC token: its audience must be "
                    f"'{AUDIENCE}' and the repository must be one the relay knows: Invalid authorization token")


def test_a_delivery_the_relay_never_dispatched_is_refused_with_its_reason(tmp_path, relay_server):
    env = {**actions_env(tmp_path), **relay_server.env()}
    result = ootci_relay("report", FIXTURES / "closed.json", "--status", "in_progress", env=env)
    assert result.returncode == 11 and len(relay_server.received) == 1
    assert "HTTP 400: the relay dispatched nothing with this delivery_id to this repository: " \
           "callback rejected: no matching dispatch record" in result.stderr


def test_a_relay_below_l2_ignores_the_report_and_the_job_goes_on(tmp_path, relay_server):
    relay_server.level = "L1"
    env = {**actions_env(tmp_path), **relay_server.env()}
    result = ootci_relay("report", FIXTURES / "opened.json", "--status", "in_progress", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("::warning title=ootci relay report::ootci relay: the relay ignored")


@pytest.fixture
def silent_relay():
    """A port that takes connections and never answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/github/callback"
    sock.close()


def test_a_relay_that_never_answers_fails_the_command_only(tmp_path, relay_server, silent_relay):
    records = tmp_path / "records"
    write_run(records, "openreg-pr-1")
    before = snapshot(records)
    env = {**actions_env(tmp_path, OOTCI_RELAY_TIMEOUT="0.5"), **relay_server.env()}
    result = ootci_relay("report", FIXTURES / "opened.json", "--status", "completed", "--records", records,
                         "--url", silent_relay, "--attempts", "2", env=env)
    assert result.returncode == 11
    [line] = result.stderr.splitlines()
    assert line == "ootci: relay callback: gave up after 2 attempt(s); last: no answer within 0.5 s"
    assert result.stdout == ("::error title=ootci relay report::relay callback: gave up after 2 attempt(s); "
                             "last: no answer within 0.5 s\n")
    assert snapshot(records) == before

    with socket.socket() as probe:  # and a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/github/callback"
    result = ootci_relay("report", FIXTURES / "opened.json", "--status", "completed", "--records", records,
                         "--url", closed, "--attempts", "3", env=env)
    assert result.returncode == 11 and "gave up after 3 attempt(s); last: connection failed" in result.stderr
    assert snapshot(records) == before


def test_without_a_callback_url_nothing_is_sent_and_the_job_goes_on(tmp_path, httpserver):
    env = actions_env(tmp_path)
    result = ootci_relay("report", FIXTURES / "opened.json", "--status", "in_progress", env=env)
    assert result.returncode == 0, result.stderr
    line = "ootci relay: no callback URL (--url or $OOTCI_RELAY_CALLBACK_URL): the in_progress report was not sent"
    assert result.stdout == line + "\n"
    assert (tmp_path / "step-summary.md").read_text() == line + "\n\n"
    assert len(httpserver.log) == 0


def test_what_is_missing_is_said_in_one_line(tmp_path, relay_server):
    env = {**actions_env(tmp_path), **relay_server.env()}
    no_oidc = {k: v for k, v in env.items() if not k.startswith("ACTIONS_ID_TOKEN")}
    result = ootci_relay("report", FIXTURES / "opened.json", "--status", "in_progress", env=no_oidc)
    assert result.returncode == 11
    assert result.stderr == ("ootci: cannot get an OIDC token: $ACTIONS_ID_TOKEN_REQUEST_URL is not set "
                             "(the job needs `permissions: id-token: write`)\n")
    result = ootci_relay("report", FIXTURES / "opened.json", "--status", "completed", env=env)
    assert result.returncode == 2 and "needs --conclusion or --records" in result.stderr
    result = ootci_relay("report", FIXTURES / "opened.json", "--status", "in_progress",
                         "--url", "http://relay.example/github/callback", env=env)
    assert result.returncode == 11 and "expected an https:// URL" in result.stderr
    result = ootci_relay("report", FIXTURES / "hostile-number.json", "--status", "in_progress", env=env)
    assert result.returncode == 11 and "field 'client_payload.payload.pull_request.number'" in result.stderr
    assert relay_server.received == [] and relay_server.token_requests == []
