"""`workflow.triage_verdict`: why a job failed, from ootci's own classes (pytorch/test-infra#8803).

The relay's validator (`utils/triage_verdict.py` of #8803) drops the whole verdict on any
structural fault (a wrong type, an unknown category or confidence, a `schema_version` other
than 1, a `log_url` that is not http(s)) and caps fields that are too long; it never refuses
the callback for it. ootci checks its own verdict by the same rules before sending it, and
sends none rather than one the relay would drop. Advisory only: it changes no conclusion.

- `infra`: the device or the runner failed: a job or a shard that left no record, a run cut
  short, torch that could not be had;
- `backend`: a failure of the backend's own (not on CPU), new against the nightly (high), or
  one the nightly had too (medium), or a stage of the backend's that failed with no test to
  show for it (medium);
- `upstream`: every failure fails on CPU too;
- `flake`: every failure passed on retry;
- `unknown`: none of these says it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ootci.runner.models import NOVELTY, Outcome, Status
from ootci.runner.relay.results import Job

CATEGORIES = ("upstream", "backend", "infra", "flake", "unknown")
CONFIDENCES = ("high", "medium", "low")
SUMMARY_CHARS = 500
EVIDENCE = 5
EXCERPT_CHARS = 300
_INFRA_STAGES = ("torch",)


def _verdict(category: str, confidence: str, summary: str, evidence: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schema_version": 1, "category": category, "confidence": confidence,
            "summary": summary[:SUMMARY_CHARS], "evidence": evidence[:EVIDENCE]}


def triage(job: Job, failing_in_nightly: Collection[str] = (), log_url: str | None = None) -> dict[str, Any] | None:
    """The verdict of one job, or None for a job with nothing to explain."""

    def evidence(tests: list[str]) -> list[dict[str, Any]]:
        found = []
        messages = {t.id: t.message for t in job.tests}
        for test in tests[:EVIDENCE]:
            item: dict[str, Any] = {"job": job.name, "test": test, "excerpt": " ".join(
                (messages.get(test) or "").split())[:EXCERPT_CHARS]}
            if log_url:
                item["log_url"] = log_url
            found.append(item)
        return found

    if job.lost:
        return _verdict("infra", "high", f"{job.name}: " + "; ".join(job.lost[:3]), [])
    gone = next((r for r in job.records if r.status is Status.missing), None)
    if gone is not None:  # its job left nothing: the record says so (ootci history fill-missing)
        return _verdict("infra", "high", f"{job.name}: {gone.missing_reason}"[:SUMMARY_CHARS], [])
    cut_short = [r.interrupted for r in job.records if r.interrupted]
    if cut_short:
        return _verdict("infra", "medium", f"{job.name}: the run was cut short ({cut_short[0]})", [])
    for record in job.records:
        stage = next((s for s in record.stages if s.name in _INFRA_STAGES and not s.status.ok), None)
        if stage is not None:
            cause = stage.root_cause.summary if stage.root_cause else stage.summary
            return _verdict("infra", "medium", f"{job.name}: torch could not be had: {cause}"[:SUMMARY_CHARS], [])

    outcomes = job.outcomes()
    mine = sorted(t for t, o in outcomes.items() if NOVELTY.get(o) == "new")
    new = [t for t in mine if t not in failing_in_nightly]
    upstream = sorted(t for t, o in outcomes.items() if o is Outcome.upstream)
    flaky = sorted(t for t, o in outcomes.items() if o is Outcome.flaky)
    if new:
        against = "against the nightly" if failing_in_nightly else "not among its expected failures"
        return _verdict("backend", "high", f"{job.name}: {len(new)} test(s) fail on the device only, new {against}",
                        evidence(new))
    if mine:
        return _verdict("backend", "medium", f"{job.name}: {len(mine)} test(s) fail on the device only, as in the "
                        "nightly", evidence(mine))
    problem = next((p for r in job.records if (p := r.first_problem())), "")
    if any(not r.status.ok and r.status is not Status.blocked for r in job.records) and not upstream:
        return _verdict("backend", "medium", f"{job.name}: {problem}" if problem else f"{job.name} failed", [])
    if upstream:
        return _verdict("upstream", "high", f"{job.name}: every failure ({len(upstream)}) fails on CPU too",
                        evidence(upstream))
    if flaky:
        return _verdict("flake", "high", f"{job.name}: every failure ({len(flaky)}) passed on retry", evidence(flaky))
    if job.conclusion != "success":
        return _verdict("unknown", "low", f"{job.name}: {problem or 'failed'}", [])
    return None


# -- the relay's validator, as #8803 states it -------------------------------------------


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _http(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(("http://", "https://"))


def accepted(verdict: Any) -> bool:
    """Whether the relay's validator keeps this verdict (True) or drops it whole (False)."""
    if not isinstance(verdict, dict):
        return False
    version = verdict.get("schema_version")
    if isinstance(version, bool) or version != 1:
        return False
    if verdict.get("category") not in CATEGORIES or verdict.get("confidence") not in CONFIDENCES:
        return False
    if "summary" in verdict and not _text(verdict["summary"]):
        return False
    suspected = verdict.get("suspected_upstream")
    if suspected is not None:
        if not isinstance(suspected, dict):
            return False
        pr = suspected.get("pr")
        if pr is not None and (isinstance(pr, bool) or not isinstance(pr, int)):
            return False
        if any(k in suspected and not _text(suspected[k]) for k in ("commit", "reason")):
            return False
    evidence = verdict.get("evidence", [])
    if not isinstance(evidence, list):
        return False
    for item in evidence:
        if not isinstance(item, dict):
            return False
        if any(k in item and not _text(item[k]) for k in ("job", "test", "excerpt")):
            return False
        if "log_url" in item and not _http(item["log_url"]):
            return False
    return True


def checked(verdict: dict[str, Any] | None) -> dict[str, Any] | None:
    """The verdict if the relay would keep it, else None: never a verdict the relay would drop."""
    return verdict if verdict is not None and accepted(verdict) else None
