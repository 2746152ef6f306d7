"""A run's records as the relay's jobs: one job per backend, its totals and `test_results`.

A backend is one job (its own check run on the PR, its own HUD row): its one record, or the
legs of a sharded run put together, or the merge of those legs. A leg that left no record is a
lost shard, and a job the workflow opened that left no record at all is lost as a whole: both
are reported, as failures of the runner, never left for the relay's sweeper.

HUD keeps of `test_results` only `passed`, `failed`, `skipped` and `total`. Every outcome
ootci records counts in one of them, so they add up to every test of the record: `upstream`
(failed on the device and on CPU) and known failures (`xfailed`) failed on the device and
count as failed, `flaky` and `fixed` passed in the end. ootci's own breakdown (the page's
counts by outcome, new against known) rides along under other keys.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ootci.runner.models import COMMIT_SHA, NOVELTY, Outcome, RunRecord, Status, TestResult, worst_of
from ootci.runner.performance import baseline as perf_baseline
from ootci.runner.records import record_files

PASSED = frozenset({Outcome.passed, Outcome.flaky, Outcome.fixed})
SKIPPED = frozenset({Outcome.skipped})
FAILED = frozenset(set(Outcome) - PASSED - SKIPPED)
"""failed, error, crashed, timeout, xpassed, and the known (xfailed) and upstream failures"""

_SHA = re.compile(COMMIT_SHA)
LOST = "left no record: it never started, was cancelled, lost its runner or failed before ootci ran"


def read_records(directory: Path, *, with_tests: bool = False) -> tuple[list[RunRecord], int]:
    """(the record of every run under directory that loads, how many did not). Reads only; a
    bisection's step runs are left out, as every reader of runs does (find_runs)."""
    found = record_files.find_runs(directory) if directory.is_dir() else []
    records: list[RunRecord] = []
    for run_dir, header in found:
        if header is None:
            continue
        if with_tests and header.tests_file:
            try:
                header = record_files.read(run_dir / record_files.RECORD_NAME)
            except (OSError, ValueError):
                continue
        records.append(header)
    return records, len(found) - len(records)


@dataclass
class Job:
    """One backend's part of a run, as the relay sees it."""

    name: str
    records: list[RunRecord] = field(default_factory=list)
    """its record, or the records of the legs of a sharded run"""
    lost: list[str] = field(default_factory=list)
    """what left no record: a shard, or the whole job"""

    @property
    def tests(self) -> list[TestResult]:
        return [t for r in self.records for t in r.tests]

    def counts(self) -> dict[Outcome, int]:
        total: dict[Outcome, int] = {}
        for record in self.records:
            counts = record.test_counts or (record_files.tally(record.tests)[0] if record.tests else {})
            for outcome, n in counts.items():
                total[outcome] = total.get(outcome, 0) + n
        return total

    def outcomes(self) -> dict[str, Outcome]:
        """Every test that did not plainly pass, with its outcome (from the tests, else the headers)."""
        found: dict[str, Outcome] = {}
        for record in self.records:
            notable = record.notable_tests if not record.tests else record_files.tally(record.tests)[1]
            found.update(notable)
        return found

    @property
    def status(self) -> Status:
        statuses = [r.status for r in self.records] + ([Status.missing] if self.lost else [])
        return worst_of(statuses) if statuses else Status.missing

    @property
    def started_at(self) -> dt.datetime | None:
        return min((r.started_at for r in self.records), default=None)

    @property
    def finished_at(self) -> dt.datetime | None:
        ends = [r.finished_at for r in self.records]
        return max(e for e in ends if e is not None) if ends and all(ends) else None

    @property
    def conclusion(self) -> str:
        return "success" if self.records and not self.lost and all(r.status.ok for r in self.records) else "failure"


def _lost_legs(record: RunRecord) -> list[str]:
    """The legs a merged record says left nothing (runner/suite_runs/shards.py keeps them per stage)."""
    for stage in record.stages:
        legs = stage.data.get("shards") if isinstance(stage.data, dict) else None
        if isinstance(legs, list):
            return [f"shard {leg.get('shard')} {LOST}" for leg in legs
                    if isinstance(leg, dict) and leg.get("status") == Status.missing.value]
    return []


def jobs_of(records: Iterable[RunRecord], expected: Iterable[str] = ()) -> list[Job]:
    """One job per backend, in name order, then the expected ones that left nothing.

    Of a backend's records the newest whole one (unsharded, or a merge of its legs) stands for
    it; without one, its newest group of legs does, each leg that is not there named lost."""
    whole: dict[str, RunRecord] = {}
    legs: dict[str, dict[str, dict[int, RunRecord]]] = {}
    sizes: dict[tuple[str, str], int] = {}
    for record in records:
        if record.shard:
            k, n = (int(x) for x in record.shard.split("/"))
            group = record.shard_group or ""
            held = legs.setdefault(record.backend, {}).setdefault(group, {}).get(k)
            if held is None or record.started_at > held.started_at:
                legs[record.backend][group][k] = record
            sizes[(record.backend, group)] = n
        else:
            held_whole = whole.get(record.backend)
            if held_whole is None or record.started_at > held_whole.started_at:
                whole[record.backend] = record
    jobs: dict[str, Job] = {}
    for backend, record in whole.items():
        jobs[backend] = Job(name=backend, records=[record], lost=_lost_legs(record))
    for backend, groups in legs.items():
        if backend in jobs:
            continue
        group, parts = max(groups.items(), key=lambda kv: max(r.started_at for r in kv[1].values()))
        n = sizes[(backend, group)]
        jobs[backend] = Job(name=backend, records=[parts[k] for k in sorted(parts)],
                            lost=[f"shard {k}/{n} {LOST}" for k in range(1, n + 1) if k not in parts])
    ordered = [jobs[name] for name in sorted(jobs)]
    for name in expected:
        if name not in jobs:
            jobs[name] = Job(name=name, lost=[f"the {name} job {LOST}"])
            ordered.append(jobs[name])
    return ordered


def totals(counts: dict[Outcome, int]) -> dict[str, int]:
    """HUD's four numbers: every outcome in exactly one of passed, failed and skipped."""
    passed = sum(n for o, n in counts.items() if o in PASSED)
    failed = sum(n for o, n in counts.items() if o in FAILED)
    skipped = sum(n for o, n in counts.items() if o in SKIPPED)
    return {"passed": passed, "failed": failed, "skipped": skipped, "total": passed + failed + skipped}


def latest_nightlies(baseline: Iterable[RunRecord]) -> dict[str, RunRecord]:
    latest: dict[str, RunRecord] = {}
    for record in baseline:
        if record.trigger != "nightly":
            continue
        held = latest.get(record.backend)
        if held is None or record.started_at > held.started_at:
            latest[record.backend] = record
    return latest


def failing_in(record: RunRecord | None) -> set[str]:
    """The tests a record has failing as the backend's own (new against its expected failures)."""
    if record is None:
        return set()
    outcomes = record.notable_tests or (record_files.tally(record.tests)[1] if record.tests else {})
    return {t for t, o in outcomes.items() if NOVELTY.get(o) == "new"}


def test_results(job: Job, *, nightly: RunRecord | None = None, baseline: list[RunRecord] | None = None,
                 page_url: str | None = None) -> dict[str, Any]:
    """`workflow.test_results` of one job: HUD's four numbers, and ootci's breakdown beside them."""
    counts = job.counts()
    outcomes = job.outcomes()
    novelty: dict[str, int] = {"new": 0, "known": 0, "upstream": 0, "fixed": 0}
    for outcome in outcomes.values():
        kind = NOVELTY.get(outcome)
        if kind:
            novelty[kind] += 1
    results: dict[str, Any] = {
        **totals(counts), "schema": "ootci/1", "backend": job.name, "status": job.status.value,
        "conclusion": job.conclusion,
        "counts": {o.value: n for o, n in sorted(counts.items(), key=lambda kv: kv[0].value)},
        **novelty, "flaky": counts.get(Outcome.flaky, 0),
        "run_ids": [r.run_id for r in job.records],
        "torch": next((r.torch.version or r.torch.spec for r in job.records), None),
        "problem": next((" ".join(p.split())[:300] for r in job.records if (p := r.first_problem())), ""),
        "page_url": page_url,
    }
    if job.lost:
        results["lost"] = job.lost[:20]
    if nightly is not None:
        known = failing_in(nightly)
        results["baseline"] = nightly.run_id
        results["new_failures"] = sum(1 for t, o in outcomes.items() if NOVELTY.get(o) == "new" and t not in known)
    if baseline is not None and len(job.records) == 1:
        # The bench measurements this run made slower than the backend's recent nightlies (None:
        # no bench in this run, or too few nightlies with one to judge by).
        slower = perf_baseline.compare(job.records[0], baseline)
        results["slower_than_nightly"] = None if slower is None else [s.to_json() for s in slower]
    return results


def tested_commit(record: RunRecord, resolve_release: Callable[[str], str | None] | None = None) -> \
        tuple[str | None, str]:
    """(the pytorch/pytorch commit the record's torch was built from, how it is known), or
    (None, why none can be named). A nightly's and a source build's torch says it
    (torch.version.git_version); a release that says none is its `v<version>` tag, as the
    upstream suite fetched it or as `resolve_release` resolves it."""
    torch = record.torch
    if torch.git_version and _SHA.fullmatch(torch.git_version):
        return torch.git_version, "torch.version.git_version"
    upstream = record.stage("upstream")
    fetched = (upstream.data.get("upstream") or {}).get("tests") if upstream and isinstance(upstream.data, dict) \
        else None
    if isinstance(fetched, dict) and isinstance(fetched.get("commit"), str) and _SHA.fullmatch(fetched["commit"]) \
            and str(fetched.get("ref", "")).startswith("v") and fetched.get("origin") == "fetched":
        return fetched["commit"], f"the tag {fetched['ref']}, as the upstream suite fetched it"
    if resolve_release is not None and torch.version:
        commit = resolve_release(torch.version)
        if commit and _SHA.fullmatch(commit):
            return commit, f"the release tag of {torch.version}"
    said = torch.git_version or "none"
    return None, (f"torch {torch.version or torch.spec} names no pytorch/pytorch commit (git_version {said}) "
                  "and is no release whose tag resolves: a local build")
