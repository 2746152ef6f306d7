"""PyTorch's cross-repository CI relay, from ootci's side: what a dispatch asks for, and the report back.

The relay (pytorch/test-infra, `aws/lambda/cross_repo_ci_relay`) forwards PyTorch
pull-request webhooks for the actions `opened`, `reopened`, `synchronize` and `closed`
to every allow-listed repository as a `repository_dispatch` whose event type is the
webhook's (`pull_request`) and whose `client_payload` is an envelope
`{event_type, delivery_id, payload}`, `payload` being the raw webhook. A repository
listed at L2 or above reports back by POSTing that envelope, unchanged, plus a
`workflow` object to the relay's callback URL, with a GitHub Actions OIDC token whose
audience is `pytorch-cross-repo-ci-relay`.

The relay keeps one state per reporting job and refuses what does not follow
`dispatched -> in_progress -> completed`: a `completed` without an `in_progress`
before it, a second `in_progress` and a second `completed` are all HTTP 400. So every
report is sent exactly once, and a retry is only made when the relay cannot have
recorded the first try or said it failed (a timeout, a 5xx, a 429).

Everything in the envelope comes from outside: the PR number, the SHAs, the delivery
id and the labels are validated before they are used, and nothing else of it (title,
branch, body) is ever read.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from ootci.runner.core.errors import RelayError, UsageError
from ootci.runner.core.http import GaveUp, Retry, Tried, excerpt, send
from ootci.runner.manifests.manifest import Manifest
from ootci.runner.models import COMMIT_SHA, DELIVERY_ID, Outcome, RunRecord
from ootci.runner.performance import baseline as perf_baseline
from ootci.runner.records import record_files

AUDIENCE = "pytorch-cross-repo-ci-relay"
"""The audience the relay verifies OIDC tokens for (utils/jwt_helper.py, AUDIENCE)."""

EVENT_TYPE = "pull_request"
RUN_ACTIONS = frozenset({"opened", "reopened", "synchronize"})
CANCEL_ACTIONS = frozenset({"closed"})

GATE_LABEL = "ciflow/oot"
"""On a PyTorch PR: run every backend that takes pull requests; `ciflow/oot/<backend>` runs one."""
LABEL_ENV = "OOTCI_PR_LABEL"
"""Another gate label, e.g. the relay's own `ciflow/crcr/<device>` of an L3 listing."""
DEFAULT_ENV = "OOTCI_PR_DEFAULT"
"""What an unlabelled PR runs: `none`, or the name of one backend (e.g. `openreg`)."""
CALLBACK_URL_ENV = "OOTCI_RELAY_CALLBACK_URL"

STATUSES = ("in_progress", "completed")
CONCLUSIONS = ("success", "failure", "cancelled")

TEST_RESULTS_LIMIT = 16_000
"""Bytes of `workflow.test_results` at most: lists are cut until the summary fits."""

# Always used with fullmatch: with re.match, a `$` would let a trailing newline through.
_DELIVERY_ID = re.compile(DELIVERY_ID)
_SHA = re.compile(COMMIT_SHA)
_PR_NUMBER = re.compile(r"[0-9]{1,8}")
_WORD = re.compile(r"[a-z_]{1,64}")
_BACKEND_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_RUN_ID = re.compile(r"[0-9]{1,20}")
_CHECK_RUN_ID = re.compile(r"[A-Za-z0-9-]{1,64}")
_JOB_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9/_.:-]{0,49}")
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def _shown(value: Any, limit: int = 60) -> str:
    """A value from outside, quoted for a one-line message: repr escapes newlines and quotes."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- the dispatch ------------------------------------------------------------------


@dataclass(frozen=True)
class Dispatch:
    """What one relay dispatch says, validated. `envelope` is kept exactly as received."""

    envelope: dict[str, Any]
    event_type: str
    delivery_id: str
    action: str | None = None
    pr: int | None = None
    head_sha: str | None = None
    base_sha: str | None = None
    labels: tuple[str, ...] = ()


def load_envelope(path: Path) -> tuple[dict[str, Any], str]:
    """The envelope in a JSON file, and the prefix naming where it was in it.

    `$GITHUB_EVENT_PATH` of a `repository_dispatch` holds the envelope under
    `client_payload`; a file holding the envelope itself is read as it is.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RelayError(f"relay event {path}: cannot read: {exc.strerror}") from None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RelayError(f"relay event {path}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RelayError(f"relay event {path}: expected a JSON object, got {type(data).__name__}")
    if "client_payload" in data:
        envelope, where = data["client_payload"], "client_payload."
        if not isinstance(envelope, dict):
            raise RelayError(f"relay event {path}: field 'client_payload': expected the relay's envelope "
                             f"(an object), got {_shown(envelope)}")
        return envelope, where
    return data, ""


def read_event(path: Path) -> Dispatch:
    envelope, where = load_envelope(path)
    return parse(envelope, where=where, source=str(path))


def parse(envelope: dict[str, Any], *, where: str = "", source: str | None = None) -> Dispatch:
    """Validate an envelope; a bad field is one RelayError naming it (`where` prefixes its path)."""

    def fail(path: str, expected: str, value: Any = None, *, missing: bool = False) -> RelayError:
        got = "missing" if missing else f"got {_shown(value)}"
        prefix = f"relay event {source}" if source else "relay event"
        return RelayError(f"{prefix}: field '{where}{path}': expected {expected}, {got}")

    def get(obj: Any, path: str, expected: str) -> Any:
        node = obj
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                raise fail(path, expected, missing=True)
            node = node[part]
        return node

    def text(obj: Any, path: str, pattern: re.Pattern[str], expected: str) -> str:
        value = get(obj, path, expected)
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise fail(path, expected, value)
        return value

    event_type = text(envelope, "event_type", _WORD, "a webhook event name such as 'pull_request'")
    delivery_id = text(envelope, "delivery_id", _DELIVERY_ID, "a delivery id (1-64 letters, digits, '-')")
    payload = get(envelope, "payload", "the webhook payload (an object)")
    if not isinstance(payload, dict):
        raise fail("payload", "the webhook payload (an object)", payload)
    if event_type != EVENT_TYPE:
        return Dispatch(envelope=envelope, event_type=event_type, delivery_id=delivery_id)

    action = text(envelope, "payload.action", _WORD, "a pull_request action such as 'opened'")
    number = get(envelope, "payload.pull_request.number", "a PR number (1-8 digits)")
    if isinstance(number, bool) or not isinstance(number, (int, str)) or not _PR_NUMBER.fullmatch(str(number)) \
            or int(number) == 0:
        raise fail("payload.pull_request.number", "a PR number (1-8 digits)", number)
    head = text(envelope, "payload.pull_request.head.sha", _SHA, "a commit SHA (40 lowercase hex digits)")
    base = text(envelope, "payload.pull_request.base.sha", _SHA, "a commit SHA (40 lowercase hex digits)")
    raw_labels = get(envelope, "payload.pull_request.labels", "a list of labels")
    if not isinstance(raw_labels, list):
        raise fail("payload.pull_request.labels", "a list of labels", raw_labels)
    labels = []
    for i, label in enumerate(raw_labels):
        if not isinstance(label, dict) or not isinstance(label.get("name"), str):
            raise fail(f"payload.pull_request.labels.{i}", "a label (an object with a string 'name')", label)
        labels.append(label["name"])
    return Dispatch(envelope=envelope, event_type=event_type, delivery_id=delivery_id, action=action,
                    pr=int(number), head_sha=head, base_sha=base, labels=tuple(labels))


# -- the plan ----------------------------------------------------------------------


@dataclass
class Plan:
    """What a dispatch starts: `run` the backends, `cancel` (the PR was closed) or `ignore`."""

    action: str
    reason: str
    event_type: str
    delivery_id: str
    pr: int | None = None
    head_sha: str | None = None
    base_sha: str | None = None
    backends: list[str] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "pr": self.pr, "head_sha": self.head_sha, "base_sha": self.base_sha,
                "delivery_id": self.delivery_id, "event_type": self.event_type, "backends": self.backends,
                "left_out": self.left_out, "reason": self.reason}


def default_choice(given: str | None, manifests: list[Manifest]) -> str:
    """The backend an unlabelled PR runs (`none` for nothing): the option, else $OOTCI_PR_DEFAULT."""
    choice = (given if given is not None else os.environ.get(DEFAULT_ENV, "")).strip() or "none"
    names = [m.name for m in manifests]
    if choice != "none" and choice not in names:
        source = "--default" if given is not None else f"${DEFAULT_ENV}"
        raise UsageError(f"{source}: expected 'none' or a registered backend ({', '.join(names)}), "
                         f"got {_shown(choice)}")
    return choice


def gate_label(given: str | None) -> str:
    """The gate label: the option, else $OOTCI_PR_LABEL, else ciflow/oot."""
    label = (given if given is not None else os.environ.get(LABEL_ENV, "")).strip() or GATE_LABEL
    if not _LABEL.fullmatch(label) or label.endswith("/"):
        source = "--label" if given is not None else f"${LABEL_ENV}"
        raise UsageError(f"{source}: expected a label such as {GATE_LABEL!r} (letters, digits, '/', '_', '.', "
                         f"':', '-'), got {_shown(label)}")
    return label


def select(labels: Iterable[str], manifests: list[Manifest], default: str,
           gate: str = GATE_LABEL) -> tuple[list[str], dict[str, str], str]:
    """(backends to run, {backend: why it does not run}, how they were chosen) for a PR's labels.

    Labels are compared as strings, never interpreted: `gate` (ciflow/oot) selects every
    backend that takes pull requests, `<gate>/<name>` that backend; without either, `default`.
    """
    gates = {m.name: m.pull_request_gate() for m in manifests}
    labels = list(labels)
    prefix = gate + "/"
    named = list(dict.fromkeys(label[len(prefix):] for label in labels if label.startswith(prefix)))
    known = [n for n in named if n in gates]
    # A label naming no backend is reported only when it could be a backend's name at all.
    unknown = [n for n in named if n not in gates and _BACKEND_NAME.fullmatch(n)]
    if gate in labels:
        asked, how = list(gates), f"label {gate}"
    elif known:
        asked, how = known, "label " + ", ".join(prefix + n for n in known)
    elif default != "none":
        asked, how = [default], f"no {gate} label: the default for unlabelled PRs is {default}"
    else:
        asked, how = [], f"no {gate} label, and the default for unlabelled PRs is none"
    chosen = [n for n in asked if gates[n] is None]
    left_out = {n: why for n in asked if (why := gates[n]) is not None}
    for name in unknown:
        left_out[name] = f"label {prefix}{name}: no backend of that name is registered"
    return chosen, left_out, how


def plan(dispatch: Dispatch, manifests: list[Manifest], default: str = "none", gate: str = GATE_LABEL) -> Plan:
    base: dict[str, Any] = dict(event_type=dispatch.event_type, delivery_id=dispatch.delivery_id, pr=dispatch.pr,
                                head_sha=dispatch.head_sha, base_sha=dispatch.base_sha)
    if dispatch.event_type != EVENT_TYPE:
        return Plan(action="ignore", reason=f"event {dispatch.event_type!r} is not a pull request", **base)
    if dispatch.action in CANCEL_ACTIONS:
        return Plan(action="cancel", reason=f"PR #{dispatch.pr} was {dispatch.action}: runs of it stop, "
                    "nothing new starts", **base)
    if dispatch.action not in RUN_ACTIONS:
        return Plan(action="ignore", reason=f"pull_request action {dispatch.action!r} starts nothing "
                    f"(only {', '.join(sorted(RUN_ACTIONS))} do)", **base)
    chosen, left_out, how = select(dispatch.labels, manifests, default, gate)
    if not chosen:
        return Plan(action="ignore", reason=f"nothing to run: {how}", left_out=left_out, **base)
    return Plan(action="run", reason=how, backends=chosen, left_out=left_out, **base)


# -- the report --------------------------------------------------------------------


@dataclass(frozen=True)
class Workflow:
    """Who reports: the run and job the relay files the callback under.

    The relay keys its state by check_run_id (and, in newer versions, by run_id,
    run_attempt and job_name): the `in_progress` and the `completed` of one report must
    carry the same four values, even when two jobs send them.
    """

    name: str
    url: str
    run_id: str
    run_attempt: str
    job_name: str
    check_run_id: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, name: str | None = None,
                 job_name: str | None = None, check_run_id: str | None = None) -> Workflow:
        """GitHub's variables; check_run_id defaults to `<run_id>-<run_attempt>`, as the relay's own
        reporter does, which every job of one attempt shares."""
        env = os.environ if env is None else env

        def need(value: str | None, what: str, pattern: re.Pattern[str] | None, expected: str) -> str:
            value = (value or "").strip()
            if not value:
                raise RelayError(f"{what} is not set: run on GitHub Actions or pass it")
            if pattern is not None and not pattern.fullmatch(value):
                raise RelayError(f"{what}: expected {expected}, got {_shown(value)}")
            return value

        run_id = need(env.get("GITHUB_RUN_ID"), "$GITHUB_RUN_ID", _RUN_ID, "digits")
        attempt = need(env.get("GITHUB_RUN_ATTEMPT") or "1", "$GITHUB_RUN_ATTEMPT", _RUN_ID, "digits")
        server = need(env.get("GITHUB_SERVER_URL"), "$GITHUB_SERVER_URL", None, "")
        repository = need(env.get("GITHUB_REPOSITORY"), "$GITHUB_REPOSITORY",
                          re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+"), "owner/name")
        workflow_name = need(name or env.get("GITHUB_WORKFLOW"), "the workflow name ($GITHUB_WORKFLOW)",
                             re.compile(r"[^\x00-\x1f\x7f]{1,200}"), "one line of at most 200 characters")
        job = need(job_name or env.get("OOTCI_RELAY_JOB_NAME") or env.get("GITHUB_JOB"),
                   "the job name (--job-name, $OOTCI_RELAY_JOB_NAME or $GITHUB_JOB)", _JOB_NAME,
                   "1-100 letters, digits, '_', '.', '-'")
        check = need(check_run_id or env.get("OOTCI_CHECK_RUN_ID") or f"{run_id}-{attempt}",
                     "the check run id (--check-run-id or $OOTCI_CHECK_RUN_ID)", _CHECK_RUN_ID,
                     "1-64 letters, digits, '-'")
        return cls(name=workflow_name, url=f"{server.rstrip('/')}/{repository}/actions/runs/{run_id}",
                   run_id=run_id, run_attempt=attempt, job_name=job, check_run_id=check)


_TORCH_SPEC = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_:/@=-]{0,99}")


def torch_instead(spec: str | None) -> str | None:
    """The torch that stands in for a PR's build (OOTCI_PR_TORCH), checked: it goes into the
    check's name on the PyTorch PR and into test_results."""
    spec = (spec or "").strip()
    if not spec:
        return None
    if not _TORCH_SPEC.fullmatch(spec):
        raise UsageError(f"--torch-instead: expected a torch spec (at most 100 of letters, digits and .+_:/@=-), "
                         f"got {_shown(spec)}")
    return spec


def not_the_prs_torch(workflow: Workflow, spec: str) -> Workflow:
    """The same reporter, its name saying which torch ran: the check on the PR must never pass a
    released torch off as the PR's build. Both reports of a run carry it (the relay pairs them by
    run, attempt and job, not by name)."""
    suffix = f" (torch {spec}, not the PR's build)"
    return dataclasses.replace(workflow, name=workflow.name[: 200 - len(suffix)] + suffix)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def callback_body(envelope: dict[str, Any], status: str, conclusion: str | None, workflow: Workflow, *,
                  test_results: dict[str, Any] | None = None, now: str | None = None) -> dict[str, Any]:
    """The envelope exactly as received, plus `workflow` (the fields of the relay's own reporter)."""
    if status not in STATUSES:
        raise UsageError(f"--status: expected one of {', '.join(STATUSES)}, got {_shown(status)}")
    if status == "completed" and conclusion not in CONCLUSIONS:
        raise UsageError(f"--conclusion: a completed report needs one of {', '.join(CONCLUSIONS)}, "
                         f"got {_shown(conclusion)}")
    if status == "in_progress" and conclusion is not None:
        raise UsageError("--conclusion: only a completed report has one")
    stamp = now or _now()
    report: dict[str, Any] = {
        "schema_version": "1",
        "status": status,
        "conclusion": conclusion,
        "name": workflow.name,
        "url": workflow.url,
        "run_id": workflow.run_id,
        "run_attempt": workflow.run_attempt,
        "job_name": workflow.job_name,
        "check_run_id": workflow.check_run_id,
        "started_at": stamp if status == "in_progress" else None,
        "completed_at": stamp if status == "completed" else None,
    }
    if test_results is not None:
        report["test_results"] = test_results
    return {**envelope, "workflow": report}


@dataclass
class Delivery:
    """What the relay made of a report: `answer` is its `status` (in_progress, completed,
    ignored, duplicate), or `already recorded` when a retry found the first try had landed."""

    http_status: int
    answer: str
    attempts: int
    detail: str = ""

    @property
    def ignored(self) -> bool:
        return self.answer == "ignored"


def _send(http: requests.Session, method: str, url: str, what: str, retry: Retry, sleep: Callable[[float], None],
          secret: str, **kwargs) -> Tried[requests.Response]:
    """The first answer that is not worth retrying, with the attempts made and whether an earlier
    try may have landed (http.send); after the last attempt a RelayError says what happened."""
    try:
        return send(http, method, url, retry=retry, sleep=sleep, secret=secret, allow_redirects=False, **kwargs)
    except GaveUp as exc:
        raise RelayError(f"{what}: {exc}") from None
    except requests.RequestException as exc:  # not the network: a URL or a header requests refuses
        raise RelayError(f"{what}: request failed ({type(exc).__name__})") from None


def _check_url(url: str, what: str) -> str:
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname in _LOOPBACK:
        return url
    raise RelayError(f"{what}: expected an https:// URL (http:// only on this machine), got {_shown(url)}")


def id_token(audience: str = AUDIENCE, *, env: Mapping[str, str] | None = None, retry: Retry = Retry(),
             session: requests.Session | None = None, sleep: Callable[[float], None] = time.sleep) -> str:
    """A GitHub Actions OIDC token for `audience` (the job needs `permissions: id-token: write`)."""
    env = os.environ if env is None else env
    url = env.get("ACTIONS_ID_TOKEN_REQUEST_URL", "")
    request_token = env.get("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "")
    if not url or not request_token:
        missing = "ACTIONS_ID_TOKEN_REQUEST_URL" if not url else "ACTIONS_ID_TOKEN_REQUEST_TOKEN"
        raise RelayError(f"cannot get an OIDC token: ${missing} is not set "
                         "(the job needs `permissions: id-token: write`)")
    _check_url(url, "$ACTIONS_ID_TOKEN_REQUEST_URL")
    http = session or requests.Session()
    full = f"{url}{'&' if '?' in url else '?'}audience={requests.utils.quote(audience, safe='')}"
    response = _send(http, "GET", full, "OIDC token", retry, sleep, request_token,
                     headers={"Authorization": f"Bearer {request_token}"}).value
    if response.status_code != 200:
        raise RelayError(f"OIDC token: HTTP {response.status_code}: {excerpt(response, request_token)}")
    try:
        value = response.json().get("value")
    except (ValueError, AttributeError):
        value = None
    if not isinstance(value, str) or not value:
        raise RelayError("OIDC token: the answer has no 'value'")
    return value


_HINTS = {
    400: "the relay refused the body",
    401: f"the relay refused the OIDC token: its audience must be {AUDIENCE!r} and the repository "
         "must be one the relay knows",
    403: "the relay does not accept reports from this repository",
    404: "no callback endpoint at this URL (the relay's is <function URL>/github/callback)",
    405: "no callback endpoint at this URL (the relay's is <function URL>/github/callback)",
}


def _rejection(response: requests.Response, token: str) -> str:
    detail = excerpt(response, token)
    hint = _HINTS.get(response.status_code, "the relay refused the report")
    if "state transition" in detail:
        hint = ("the relay's state machine refused it: in_progress must come first and once, completed once, "
                "both with the same check_run_id, run_id, run_attempt and job_name")
    elif "no matching dispatch" in detail:
        hint = "the relay dispatched nothing with this delivery_id to this repository"
    elif 300 <= response.status_code < 400:
        hint = "the callback URL redirects: give the final URL"
    return f"HTTP {response.status_code}: {hint}: {detail or '(no body)'}"


def post(url: str, body: dict[str, Any], token: str, *, retry: Retry = Retry(),
         session: requests.Session | None = None, sleep: Callable[[float], None] = time.sleep) -> Delivery:
    """POST one callback body. A refusal raises RelayError with the relay's status and body, except
    the one refusal that means the report is there: a state the relay already holds, after a try
    that got no clear answer (timed out, 5xx) and so may have been recorded."""
    _check_url(url, "callback URL")
    http = session or requests.Session()
    data = json.dumps(body, separators=(",", ":")).encode("utf-8")
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    sent = _send(http, "POST", url, "relay callback", retry, sleep, token, data=data, headers=headers)
    response, attempts = sent.value, sent.attempts
    if 200 <= response.status_code < 300:
        try:
            answer = response.json().get("status", "")
        except (ValueError, AttributeError):
            answer = ""
        return Delivery(http_status=response.status_code, answer=str(answer)[:40] or "accepted", attempts=attempts)
    detail = _rejection(response, token)
    if response.status_code == 400 and "state transition" in detail and sent.may_have_landed:
        # The relay refuses the same state twice: the try that got no clear answer was recorded.
        # Said in the log all the same, with the relay's own words.
        return Delivery(http_status=400, answer="already recorded", attempts=attempts,
                        detail=f"an earlier attempt that got no clear answer had been recorded "
                               f"(the retry got {detail})")
    raise RelayError(f"relay callback: {detail}")


def report(envelope: dict[str, Any], status: str, conclusion: str | None = None, *, url: str,
           workflow: Workflow, test_results: dict[str, Any] | None = None, audience: str = AUDIENCE,
           in_progress_first: bool = False, env: Mapping[str, str] | None = None, retry: Retry = Retry(),
           session: requests.Session | None = None, sleep: Callable[[float], None] = time.sleep) -> Delivery:
    """Send one report to the relay; RelayError says why it did not arrive.

    `in_progress_first` (completed only): send `in_progress` before; only for an attempt that no
    `in_progress` opened (a re-run of the reporting job alone). The relay refuses a second
    `in_progress` (and at L3 touches the PR's check run first), so the caller decides, never a guess:
    a refusal of it fails the report like any other.
    """
    body = callback_body(envelope, status, conclusion, workflow, test_results=test_results)
    _check_url(url, "callback URL")
    http = session or requests.Session()
    token = id_token(audience, env=env, retry=retry, session=http, sleep=sleep)
    if in_progress_first and status == "completed":
        opening = callback_body(envelope, "in_progress", None, workflow)
        post(url, opening, token, retry=retry, session=http, sleep=sleep)
    return post(url, body, token, retry=retry, session=http, sleep=sleep)


# -- test results ------------------------------------------------------------------

_FAILING = frozenset(o for o in Outcome if not o.ok)
_PASSED = frozenset({Outcome.passed, Outcome.flaky, Outcome.fixed})
_SKIPPED = frozenset({Outcome.skipped, Outcome.xfailed})


def read_records(directory: Path) -> tuple[list[RunRecord], int]:
    """(the record of every run under directory that loads, how many did not). Reads only; tests
    stay on disk. A bisection's step runs are left out, as every reader of runs does (find_runs)."""
    found = record_files.find_runs(directory) if directory.is_dir() else []
    records = [record for _, record in found if record is not None]
    return records, len(found) - len(records)


def _failing(record: RunRecord) -> dict[str, Outcome]:
    notable = record.notable_tests
    if not notable and record.tests:  # a record from before record.json carried its notable tests
        notable = record_files.tally(record.tests)[1]
    return {test: outcome for test, outcome in notable.items() if outcome in _FAILING}


def _counts(record: RunRecord) -> dict[Outcome, int]:
    return record.test_counts or (record_files.tally(record.tests)[0] if record.tests else {})


def _latest(records: Iterable[RunRecord]) -> dict[str, RunRecord]:
    latest: dict[str, RunRecord] = {}
    for record in records:
        held = latest.get(record.backend)
        if held is None or record.started_at > held.started_at:
            latest[record.backend] = record
    return latest


def conclusion_of(records: list[RunRecord]) -> str:
    """success when there are runs and every one passed (or was skipped), else failure."""
    return "success" if records and all(r.status.ok for r in records) else "failure"


def summarize(records: list[RunRecord], *, page_url: str | None = None, baseline: list[RunRecord] | None = None,
              left_out: Mapping[str, str] | None = None, rejected: int = 0,
              limit: int = TEST_RESULTS_LIMIT) -> dict[str, Any]:
    """`workflow.test_results`: per backend its status, counts and failing tests, and which of those
    are new against the latest nightly of the same backend in `baseline`; at most `limit` bytes."""
    nightly = _latest(r for r in (baseline or []) if r.trigger == "nightly")
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    backends = []
    for backend, record in sorted(_latest(records).items()):
        counts = _counts(record)
        totals["passed"] += sum(n for o, n in counts.items() if o in _PASSED)
        totals["skipped"] += sum(n for o, n in counts.items() if o in _SKIPPED)
        totals["failed"] += sum(n for o, n in counts.items() if o in _FAILING)
        failing = sorted(_failing(record))
        entry: dict[str, Any] = {
            "backend": backend, "status": record.status.value, "run_id": record.run_id,
            "torch": record.torch.version or record.torch.spec,
            "counts": {o.value: n for o, n in sorted(counts.items(), key=lambda kv: kv[0].value)},
            "problem": " ".join(record.first_problem().split())[:300],
            "failing": len(failing), "failing_tests": failing,
        }
        if backend in nightly:
            known = set(_failing(nightly[backend]))
            new = [t for t in failing if t not in known]
            entry.update(baseline=nightly[backend].run_id, new_failures=len(new), new_failing_tests=new)
        else:
            entry.update(baseline=None, new_failures=None, new_failing_tests=None)
        # The bench measurements this run made slower than the backend's recent nightlies (None:
        # no bench in this run, or too few nightlies with one to judge by).
        slower = perf_baseline.compare(record, baseline) if baseline is not None else None
        entry["slower_than_nightly"] = None if slower is None else [s.to_json() for s in slower]
        backends.append(entry)
    summary: dict[str, Any] = {"schema": "ootci/1", **totals, "conclusion": conclusion_of(records),
                               "page_url": page_url, "backends": backends}
    if left_out:
        summary["left_out"] = dict(left_out)
    if rejected:
        summary["unreadable_records"] = rejected
    return fit(summary, limit)


def _size(data: Any) -> int:
    return len(json.dumps(data, separators=(",", ":")).encode("utf-8"))


def _capped(summary: dict[str, Any], cap: int) -> dict[str, Any]:
    """A copy with at most `cap` test ids per list, each at most 200 characters."""
    cut = json.loads(json.dumps(summary))
    for entry in cut["backends"]:
        for key in ("failing_tests", "new_failing_tests"):
            tests = entry.get(key)
            if isinstance(tests, list):
                if len(tests) > cap or any(len(t) > 200 for t in tests):
                    cut["truncated"] = True
                entry[key] = [t[:200] for t in tests[:cap]]
    return cut


def fit(summary: dict[str, Any], limit: int = TEST_RESULTS_LIMIT) -> dict[str, Any]:
    """The summary cut until it is at most `limit` bytes: test lists first, then per-backend detail."""
    for cap in (20, 10, 5, 0):
        cut = _capped(summary, cap)
        if _size(cut) <= limit:
            return cut
    keep = ("backend", "status", "run_id", "failing", "new_failures", "slower_than_nightly")
    cut["backends"] = [{k: e.get(k) for k in keep} for e in cut["backends"]]
    cut.pop("left_out", None)
    cut["truncated"] = True
    if _size(cut) <= limit:
        return cut
    # Too many backends for any detail: the totals and the page say the rest.
    whole = {k: summary[k] for k in ("schema", "passed", "failed", "skipped", "conclusion", "page_url")}
    return {**whole, "backends_count": len(summary["backends"]), "truncated": True}

