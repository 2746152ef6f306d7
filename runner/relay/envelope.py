"""The body of a callback: the dispatch envelope unchanged (or a nightly's own), plus `workflow`.

The fields and their meaning are those of the relay's own reporter
(pytorch/test-infra `.github/actions/cross-repo-ci-relay-callback/report_callback.py`):
`schema_version`, `status`, `conclusion`, `name`, `url`, `run_id`, `run_attempt`,
`job_name`, `check_run_id`, `started_at`, `completed_at`, and optionally `test_results`,
`artifact_url`, `failed_tests_detail` (test-infra#8607) and `triage_verdict` (#8803).

The relay keys its state by delivery, repository, run, attempt and job name, and names the
PR's check run `crcr/<repo>/<workflow>/<job_name>`: one job name per backend makes each
backend its own check run and HUD row. HUD keys its row by workflow name, job name and
`check_run_id`, and refuses a body without `job_name` or `check_run_id`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ootci.runner.core.errors import RelayError, UsageError
from ootci.runner.models import COMMIT_SHA
from ootci.runner.relay.dispatch import shown

STATUSES = ("in_progress", "completed")
CONCLUSIONS = ("success", "failure", "cancelled")
NIGHTLY_EVENT_TYPES = ("nightly", "periodic")
"""RFC-0056: results of a run against a pytorch/pytorch commit that no PR dispatched."""
UPSTREAM_REPOSITORY = "pytorch/pytorch"

_RUN_ID = re.compile(r"[0-9]{1,20}")
_CHECK_RUN_ID = re.compile(r"[A-Za-z0-9-]{1,64}")
JOB_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
_SHA = re.compile(COMMIT_SHA)


def _need(value: str | None, what: str, pattern: re.Pattern[str] | None, expected: str) -> str:
    value = (value or "").strip()
    if not value:
        raise RelayError(f"{what} is not set: run on GitHub Actions or pass it")
    if pattern is not None and not pattern.fullmatch(value):
        raise RelayError(f"{what}: expected {expected}, got {shown(value)}")
    return value


def job_name(value: str, what: str = "job name") -> str:
    """A job name checked: it becomes part of the check run's name on the PR."""
    return _need(value, what, JOB_NAME, "1-100 letters, digits, '_', '.', '-'")


@dataclass(frozen=True)
class Workflow:
    """Who reports: the run and job the relay files the callback under.

    The `in_progress` and the `completed` of one job must carry the same delivery, run_id,
    run_attempt and job_name, even when two jobs of the workflow send them.
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
        reporter does (HUD needs one; the relay keys nothing by it)."""
        env = os.environ if env is None else env
        run_id = _need(env.get("GITHUB_RUN_ID"), "$GITHUB_RUN_ID", _RUN_ID, "digits")
        attempt = _need(env.get("GITHUB_RUN_ATTEMPT") or "1", "$GITHUB_RUN_ATTEMPT", _RUN_ID, "digits")
        server = _need(env.get("GITHUB_SERVER_URL"), "$GITHUB_SERVER_URL", None, "")
        repository = _need(env.get("GITHUB_REPOSITORY"), "$GITHUB_REPOSITORY",
                           re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+"), "owner/name")
        workflow_name = _need(name or env.get("GITHUB_WORKFLOW"), "the workflow name ($GITHUB_WORKFLOW)",
                              re.compile(r"[^\x00-\x1f\x7f]{1,200}"), "one line of at most 200 characters")
        job = _need(job_name or env.get("OOTCI_RELAY_JOB_NAME") or env.get("GITHUB_JOB"),
                    "the job name (--job-name, $OOTCI_RELAY_JOB_NAME or $GITHUB_JOB)", JOB_NAME,
                    "1-100 letters, digits, '_', '.', '-'")
        check = _need(check_run_id or env.get("OOTCI_CHECK_RUN_ID") or f"{run_id}-{attempt}",
                      "the check run id (--check-run-id or $OOTCI_CHECK_RUN_ID)", _CHECK_RUN_ID,
                      "1-64 letters, digits, '-'")
        return cls(name=workflow_name, url=f"{server.rstrip('/')}/{repository}/actions/runs/{run_id}",
                   run_id=run_id, run_attempt=attempt, job_name=job, check_run_id=check)

    def for_job(self, name: str) -> Workflow:
        """The same run, reporting as job `name` (a backend: its own check run and HUD row)."""
        return dataclasses.replace(self, job_name=job_name(name))


_TORCH_SPEC = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_:/@=-]{0,99}")


def torch_instead(spec: str | None) -> str | None:
    """The torch that stands in for a PR's build (OOTCI_PR_TORCH), checked: it goes into the
    check's name on the PyTorch PR and into test_results."""
    spec = (spec or "").strip()
    if not spec:
        return None
    if not _TORCH_SPEC.fullmatch(spec):
        raise UsageError(f"--torch-instead: expected a torch spec (at most 100 of letters, digits and .+_:/@=-), "
                         f"got {shown(spec)}")
    return spec


def not_the_prs_torch(workflow: Workflow, spec: str) -> Workflow:
    """The same reporter, its name saying which torch ran: the check on the PR must never pass a
    released torch off as the PR's build. Both reports of a run carry it (the relay pairs them by
    run, attempt and job, not by name)."""
    suffix = f" (torch {spec}, not the PR's build)"
    return dataclasses.replace(workflow, name=workflow.name[: 200 - len(suffix)] + suffix)


def stamp(when: dt.datetime | None = None) -> str:
    """An ISO 8601 time in UTC, as the relay's reporter writes it (HUD stores it as given)."""
    when = when or dt.datetime.now(dt.UTC)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def nightly_envelope(commit: str, event_type: str = "nightly") -> dict[str, Any]:
    """The envelope of a result no dispatch asked for (RFC-0056): `delivery_id` is the
    pytorch/pytorch commit that was tested, and HUD files the row under it."""
    if event_type not in NIGHTLY_EVENT_TYPES:
        raise UsageError(f"--event-type: expected one of {', '.join(NIGHTLY_EVENT_TYPES)}, got {shown(event_type)}")
    if not _SHA.fullmatch(commit):
        raise RelayError(f"a nightly's delivery id must be a pytorch/pytorch commit (40 hex digits), "
                         f"got {shown(commit)}")
    return {"event_type": event_type, "delivery_id": commit,
            "payload": {"repository": {"full_name": UPSTREAM_REPOSITORY}, "head_sha": commit}}


@dataclass
class Extras:
    """What a completed callback carries besides its status: all optional."""

    test_results: dict[str, Any] | None = None
    artifact_url: str | None = None
    failed_tests_detail: list[dict[str, Any]] | None = None
    triage_verdict: dict[str, Any] | None = None
    started_at: str | None = None
    completed_at: str | None = None


def callback_body(envelope: dict[str, Any], status: str, conclusion: str | None, workflow: Workflow, *,
                  extras: Extras | None = None, now: str | None = None) -> dict[str, Any]:
    """The envelope exactly as received, plus `workflow`.

    `started_at` is the in_progress's time, or given (a completed callback that knows when its
    job began: a nightly, which sends nothing else, or a job whose in_progress was sent late);
    `completed_at` is the completed's time unless given."""
    extras = extras or Extras()
    if status not in STATUSES:
        raise UsageError(f"--status: expected one of {', '.join(STATUSES)}, got {shown(status)}")
    if status == "completed" and conclusion not in CONCLUSIONS:
        raise UsageError(f"--conclusion: a completed report needs one of {', '.join(CONCLUSIONS)}, "
                         f"got {shown(conclusion)}")
    if status == "in_progress" and conclusion is not None:
        raise UsageError("--conclusion: only a completed report has one")
    if envelope.get("event_type") in NIGHTLY_EVENT_TYPES and status != "completed":
        raise UsageError("a nightly report is completed only: the relay refuses anything else for it")
    at = now or stamp()
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
        "started_at": at if status == "in_progress" else extras.started_at,
        "completed_at": (extras.completed_at or at) if status == "completed" else None,
    }
    if status == "completed":
        optional = {"test_results": extras.test_results, "artifact_url": extras.artifact_url,
                    "failed_tests_detail": extras.failed_tests_detail, "triage_verdict": extras.triage_verdict}
        report.update({k: v for k, v in optional.items() if v is not None})
    elif extras.test_results is not None:  # an in_progress may say which torch runs
        report["test_results"] = extras.test_results
    return {**envelope, "workflow": report}
