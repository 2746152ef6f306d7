"""The callbacks of a run: one per job, built whole and sent in order, within the relay's limits.

A PR run's jobs report `in_progress` when the run starts (the plan names them) and `completed`
when it ends; a job no `in_progress` of this attempt opened (a re-run of the reporting job
alone, a job the plan did not name) is opened right before its `completed`, since the relay
refuses a `completed` it has no `in_progress` for. A nightly's jobs report one `completed`
each (RFC-0056). Each completed body carries the job's `test_results`, `artifact_url`,
`failed_tests_detail` and `triage_verdict`, and stays under HUD's 2 MB, the envelope and the
relay's own additions included.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import requests

from ootci.runner.core import causes
from ootci.runner.core.http import Retry
from ootci.runner.models import RunRecord, TestResult
from ootci.runner.relay import detail, verdict
from ootci.runner.relay.client import AUDIENCE, Delivery, Pacer, id_token, post
from ootci.runner.relay.envelope import Extras, Workflow, callback_body, stamp
from ootci.runner.relay.results import Job, failing_in, test_results

BODY_LIMIT = 2 * 1024 * 1024
"""HUD's limit on what the relay forwards (crcrUtils.ts, MAX_PAYLOAD_BYTES)."""
RELAY_ADDS = 16 * 1024
"""Room for what the relay wraps around the body before HUD counts it (its trusted block)."""
TOKEN_AGE_S = 240.0
"""An OIDC token is asked for again after this long: GitHub's last a few minutes."""


@dataclass
class Callback:
    body: dict[str, Any]
    open_first: bool = False
    """send the job's in_progress right before this completed"""

    @property
    def job(self) -> str:
        return str(self.body["workflow"]["job_name"])


def completed(envelope: dict[str, Any], workflow: Workflow, job: Job, *, conclusion: str | None = None,
              nightly: RunRecord | None = None, baseline: list[RunRecord] | None = None,
              page_url: str | None = None, torch_instead: str | None = None,
              cause_of: Callable[[TestResult], str] | None = None, with_verdict: bool = True,
              limit: int = BODY_LIMIT) -> dict[str, Any]:
    """The completed body of one job, at most `limit` bytes as the relay forwards it."""
    reporter = workflow.for_job(job.name)
    known = failing_in(nightly)
    results = test_results(job, nightly=nightly, baseline=baseline, page_url=page_url)
    if torch_instead:
        results["torch_instead_of_pr"] = torch_instead
    log_url = next((r.ci_run_url for r in job.records if r.ci_run_url), None) or workflow.url
    extras = Extras(
        test_results=results, artifact_url=page_url or log_url,
        triage_verdict=verdict.checked(verdict.triage(job, known, log_url)) if with_verdict else None,
        started_at=stamp(job.started_at) if job.started_at else None,
        completed_at=stamp(job.finished_at) if job.finished_at else None)
    body = callback_body(envelope, "completed", conclusion or job.conclusion, reporter, extras=extras)
    budget = limit - RELAY_ADDS - detail.size(body) - len(', "failed_tests_detail": ')
    if cause_of is None:  # issue 52: one example of each cause first, the device's name masked in each
        device = job.records[0].device if job.records else None
        cause_of = functools.partial(causes.cause_of, device=device)
    entries, failures = detail.failed_tests_detail(job.tests, budget, failing_in_nightly=known, cause_of=cause_of)
    results["failures"] = failures
    results["failures_detailed"] = len(entries)
    body["workflow"]["failed_tests_detail"] = entries
    return body


def opening(body: dict[str, Any]) -> dict[str, Any]:
    """The in_progress of the job a completed body closes: the same run, attempt and job."""
    report = body["workflow"]
    return {**{k: v for k, v in body.items() if k != "workflow"},
            "workflow": {**{k: report[k] for k in ("schema_version", "name", "url", "run_id", "run_attempt",
                                                   "job_name", "check_run_id")},
                         "status": "in_progress", "conclusion": None,
                         "started_at": report.get("started_at") or stamp(), "completed_at": None}}


@dataclass
class Sender:
    """Posts callbacks with one OIDC token (asked for again when it is old), paced."""

    url: str
    audience: str = AUDIENCE
    env: Mapping[str, str] | None = None
    retry: Retry = Retry()
    session: requests.Session | None = None
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    pacer: Pacer | None = None

    def __post_init__(self) -> None:
        self.http = self.session or requests.Session()
        self.pacer = self.pacer or Pacer(clock=self.clock, sleep=self.sleep)
        self._token: tuple[str, float] | None = None

    def token(self) -> str:
        if self._token is None or self.clock() - self._token[1] > TOKEN_AGE_S:
            self._token = (id_token(self.audience, env=self.env, retry=self.retry, session=self.http,
                                    sleep=self.sleep), self.clock())
        return self._token[0]

    def post(self, body: dict[str, Any]) -> Delivery:
        return post(self.url, body, self.token(), retry=self.retry, session=self.http, sleep=self.sleep,
                    pacer=self.pacer)

    def send(self, callback: Callback) -> Delivery:
        if callback.open_first:
            self.post(opening(callback.body))
        return self.post(callback.body)


def plan_completed(bodies: list[dict[str, Any]], opened: Collection[str] | None) -> list[Callback]:
    """The completed callbacks, each opened first unless an in_progress of this attempt opened
    its job (`opened`; None: every job was opened). A job that was opened keeps the start its
    in_progress gave HUD: its completed says none, as the relay's own reporter's does."""
    callbacks = []
    for body in bodies:
        first = opened is not None and body["workflow"]["job_name"] not in opened
        if not first:
            body["workflow"]["started_at"] = None
        callbacks.append(Callback(body, open_first=first))
    return callbacks
