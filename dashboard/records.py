"""Finding RunRecord files and reducing each to the summary the index keeps.

A record is read once, when it is new or changed; the index then answers every
history question from these summaries. Only a run page needs the whole record again.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from runner.models import Outcome, RunRecord

RECORD_NAME = "record.json"
FAILING = frozenset(o.value for o in Outcome if not o.ok)
# Outcomes a person wants to see by name in history: everything but a plain pass or skip.
NOTABLE = frozenset(o.value for o in Outcome) - {"passed", "skipped"}
_VALUE = {o: o.value for o in Outcome}


class BadRecord(Exception):
    """A record that cannot be used; the message names the file and the field."""


@dataclass
class FoundFile:
    rel: str  # path of record.json relative to the data dir, with '/'
    mtime_ns: int
    size: int


def discover(data_dir: Path) -> list[FoundFile]:
    """Every record.json under data_dir; a run directory's subfolders are not entered."""
    found: list[FoundFile] = []
    stack = [str(data_dir)]
    root_len = len(str(data_dir)) + 1
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                continue
            # Most directories are run directories: one stat answers for them, no listing.
            candidate = os.path.join(entry.path, RECORD_NAME)
            try:
                st = os.stat(candidate)
            except OSError:
                stack.append(entry.path)
                continue
            found.append(FoundFile(candidate[root_len:].replace(os.sep, "/"), st.st_mtime_ns, st.st_size))
    if (data_dir / RECORD_NAME).is_file():  # the data dir is itself one run directory
        st = (data_dir / RECORD_NAME).stat()
        found.append(FoundFile(RECORD_NAME, st.st_mtime_ns, st.st_size))
    found.sort(key=lambda f: f.rel)
    return found


def load(path: Path) -> RunRecord:
    """The record at path, or BadRecord naming the file and the offending field."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadRecord(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return RunRecord.model_validate_json(raw)
    except ValidationError as exc:
        raise BadRecord(describe_error(path, exc)) from None


def describe_error(path: Path, exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    if err["type"] == "json_invalid":
        return f"{path}: not valid JSON (truncated?): {err['msg'].removeprefix('Invalid JSON: ')}"
    where = ".".join(str(p) for p in err["loc"]) or "(record)"
    value = err.get("input")
    shown = "" if err["type"] == "missing" else f" (got {json.dumps(value, default=str)[:80]})"
    more = f" and {exc.error_count() - 1} more" if exc.error_count() > 1 else ""
    return f"{path}: field {where}: {err['msg']}{shown}{more}"


@dataclass
class RunSummary:
    """What the index stores about one run: enough for every page but the run page."""

    rel: str
    mtime_ns: int
    size: int
    run_id: str
    backend: str
    device: str
    trigger: str
    pr: int | None
    started_at: str
    finished_at: str | None
    status: str
    torch_spec: str
    torch_version: str | None
    torch_git: str | None
    command: str
    duration_s: float
    stages: list[dict]
    counts: dict[str, int]
    notable: dict[str, str]  # test id -> outcome, for every test that did not plainly pass
    testset: str  # hash of the sorted test ids: runs with the same tests share one row
    testset_ids: list[str] | None = None  # only filled the first time a worker meets a testset
    ops: bytes = b""  # zlib JSON {op: {"ok": [dtypes], "bad": [...], "skip": [...]}}
    problems: list[str] = field(default_factory=list)
    xfail: dict[str, str] = field(default_factory=dict)  # xfailed/xpassed test id -> reason (message)

    @property
    def pass_rate(self) -> float | None:
        ran = sum(n for o, n in self.counts.items() if o != "skipped")
        if not ran:
            return None
        ok = sum(n for o, n in self.counts.items() if o != "skipped" and o not in FAILING)
        return ok / ran


def summarize(record: RunRecord, found: FoundFile, seen_testsets: set[str] | None = None) -> RunSummary:
    counts: dict[str, int] = {}
    notable: dict[str, str] = {}
    xfail: dict[str, str] = {}
    ops: dict[str, dict[str, list[str]]] = {}
    value = _VALUE
    for t in record.tests:
        o = value[t.outcome]
        counts[o] = counts.get(o, 0) + 1
        if o != "passed":
            if o in NOTABLE:
                notable[t.id] = o
            if o == "xfailed" or o == "xpassed":
                xfail[t.id] = t.message[:300]
        if t.op is not None and t.suite == "integration":
            group = "ok" if o == "passed" else ("skip" if o == "skipped" else ("bad" if o in FAILING else "ok"))
            by_op = ops.get(t.op)
            if by_op is None:
                by_op = ops[t.op] = {}
            by_op.setdefault(group, []).append(t.dtype or "")
    ids = sorted({t.id for t in record.tests})
    testset = hashlib.blake2b("\n".join(ids).encode(), digest_size=12).hexdigest()
    first_time = seen_testsets is None or testset not in seen_testsets
    if seen_testsets is not None:
        seen_testsets.add(testset)
    duration = (record.finished_at - record.started_at).total_seconds() if record.finished_at else \
        sum(s.duration_s for s in record.stages)
    stages = [{
        "name": s.name, "status": s.status.value, "duration_s": round(s.duration_s, 3),
        "summary": s.summary, "counts": s.counts,
        "cause": s.root_cause.summary if s.root_cause else None,
        "hint": s.root_cause.hint if s.root_cause else None,
    } for s in record.stages]
    return RunSummary(
        rel=found.rel, mtime_ns=found.mtime_ns, size=found.size, run_id=record.run_id,
        backend=record.backend, device=record.device, trigger=record.trigger, pr=record.pr,
        started_at=_iso(record.started_at), finished_at=_iso(record.finished_at) if record.finished_at else None,
        status=record.status.value, torch_spec=record.torch.spec, torch_version=record.torch.version,
        torch_git=record.torch.git_version, command=record.command, duration_s=round(max(duration, 0.0), 3),
        stages=stages, counts=counts, notable=notable, testset=testset,
        testset_ids=ids if first_time else None,
        ops=zlib.compress(json.dumps(ops, separators=(",", ":")).encode()) if ops else b"",
        problems=list(record.problems), xfail=xfail,
    )


def _iso(moment) -> str:
    # One sortable spelling for every timestamp the index compares.
    if moment.tzinfo is not None:
        moment = moment.astimezone(_UTC).replace(tzinfo=None)
    return moment.isoformat(timespec="seconds") + "Z"


_UTC = dt.timezone.utc

# Testsets this worker process already sent to the index; reset per build (pool initializer).
_worker_seen: set[str] = set()


def reset_worker() -> None:
    _worker_seen.clear()


def summarize_file(data_dir: str, found: FoundFile) -> RunSummary | str:
    """Worker entry point: a summary, or the one-line reason the record was skipped."""
    try:
        record = load(Path(data_dir) / found.rel)
    except BadRecord as exc:
        return str(exc)
    return summarize(record, found, _worker_seen)
