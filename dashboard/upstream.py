"""The upstream suite on the dashboard: where PyTorch's test files came from, and what each file did.

Two halves, read at different times. What the record's `upstream` stage says (record.json: the
commit the files came from, whether it is the torch's own, why the stage did not run) is read with
the header and kept in the index with the run (`stage_info`). The per-file counts (passed, the
backend's failures, fails on CPU too, skipped by reason) need the tests: runner/records/upstream_files.py
works them out, and the index keeps them with the run's digest (`file_summaries`). `section` joins
the two for the run page, the backend page and the JSON API, so that every place says the same,
and none shows results of another commit's files without saying so.

A record is untrusted input: the stage's data is a free-form dict, so every field is read for
its type and a wrong one is treated as absent, never as a reason to stop the build.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any, NamedTuple

from ootci.runner.models import Outcome, RunRecord
from ootci.runner.records import upstream_files

STAGE = upstream_files.SUITE
"""the stage that runs the suite, and the suite its tests name"""
NOT_OWN = "These files are not from the torch's own commit"
"""the banner's words, wherever results of another commit's files are shown"""
COUNTS = ("tests", "passed", "failed", "known", "upstream", "fixed", "skipped")
"""the per-file numbers, in the order the table shows them"""
_SOURCE = ("origin", "commit", "torch_commit", "repository", "ref", "test_dir")


def stage_info(record: RunRecord) -> dict[str, Any] | None:
    """What the record's upstream stage says of its files (JSON-ready), or None without the stage."""
    stage = record.stage(STAGE)
    if stage is None:
        return None
    data = _mapping(stage.data.get(STAGE))
    tests = _mapping(data.get("tests"))
    files = {}
    for name, value in _mapping(data.get("files")).items():
        entry = _mapping(value)
        files[str(name)] = {"status": _text(entry.get("status")), "duration_s": _number(entry.get("duration_s")),
                            "tests": _count(entry.get("tests"))}
    not_run = _text(data.get("not_run"))
    if not not_run and not tests:
        # The stage stopped before it had any files: a torch without a commit, a fetch that failed,
        # a dry run, no suite selected. Its own words say why.
        not_run = (stage.root_cause.summary if stage.root_cause else "") or stage.summary or stage.status.value
    return {
        "status": stage.status.value,
        "describe": _text(data.get("describe")),
        **{key: _text(tests.get(key)) or None for key in _SOURCE},
        "changed": tests.get("changed") is True,
        "own_commit": own_commit(tests) if tests else None,
        "not_run": not_run or None,
        "files_selected": [f for f in data.get("files_selected") or [] if isinstance(f, str)]
        if isinstance(data.get("files_selected"), list) else [],
        "files": files,
    }


def own_commit(tests: Mapping[str, Any]) -> bool:
    """Are the files the torch's own? As the record says, else as runner.torch_supply.torch_tests
    decides it: fetched or a source build's tree are; a given folder only at the torch's commit,
    unchanged."""
    said = tests.get("own_commit")
    if isinstance(said, bool):
        return said
    if tests.get("origin") != "given":
        return True
    commit, torch = tests.get("commit"), tests.get("torch_commit")
    return bool(commit and torch and commit == torch and tests.get("changed") is not True)


class _Row(NamedTuple):
    id: str
    suite: str
    outcome: Outcome
    message: str


def file_summaries(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """file -> its counts, for the upstream tests among a run's tests (dashboard.records.TestRow
    dicts, or anything with their keys); {} when the run has none."""
    tests = []
    for row in rows:
        if row.get("suite") != STAGE:
            continue
        try:
            outcome = Outcome(row.get("outcome"))
        except ValueError:
            continue
        # Already validated as a TestRow: a plain row, not a model (a run has up to 100,000).
        tests.append(_Row(str(row.get("id")), STAGE, outcome, row.get("message") or ""))
    return {name: _counts(summary) for name, summary in upstream_files.summarize(tests).items()}


def _counts(summary: upstream_files.FileSummary) -> dict[str, Any]:
    found = asdict(summary)
    del found["name"]
    return found


def section(info: dict[str, Any] | None, files: dict[str, dict[str, Any]] | None) -> dict[str, Any] | None:
    """The upstream section of a run: where the files came from, one row per file, and the totals.

    info: stage_info of the run (None: no upstream stage, no section). files: file_summaries of
    its tests, None when they are not at hand (a pruned record, a run a partial pull did not
    fetch): then each row has only what the stage recorded, and `counts_known` is False."""
    if info is None:
        return None
    by_stage = info.get("files") or {}
    names = sorted(set(by_stage) | set(files or {}))
    rows = []
    for name in names:
        recorded = by_stage.get(name, {})
        row: dict[str, Any] = {"file": name, "status": recorded.get("status"), "duration_s": recorded.get("duration_s")}
        if files is None:
            row.update({key: None for key in COUNTS})
            row.update(tests=recorded.get("tests"), skipped_by_reason={}, collection_error=None)
        else:
            row.update(files.get(name) or _counts(upstream_files.FileSummary(name)))
        rows.append(row)
    totals: dict[str, Any] | None = None
    if files is not None:
        totals = {key: sum(r[key] for r in rows) for key in COUNTS}
        reasons: dict[str, int] = {}
        for r in rows:
            for reason, n in r["skipped_by_reason"].items():
                reasons[reason] = reasons.get(reason, 0) + n
        totals["skipped_by_reason"] = dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        totals["collection_errors"] = sum(1 for r in rows if r["collection_error"])
    shown = {key: value for key, value in info.items() if key != "files"}
    return {**shown, "files": rows, "counts_known": files is not None, "totals": totals}


def other_commit(info: dict[str, Any] | None) -> str | None:
    """The warning for results of files that are not the torch's own commit, else None."""
    if not info or info.get("own_commit") is not False:
        return None
    return f"{NOT_OWN}: {info.get('describe') or 'the record does not say which'}"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
