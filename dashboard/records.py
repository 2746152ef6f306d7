"""Finding RunRecord files and reducing each to the summary the index keeps.

A record is read once, when it is new or changed; the index then answers every
history question from these summaries. Only record.json is read then: a run's
tests.json is read for a run page, or for a digest of the few runs that need one.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

from pydantic import TypeAdapter, ValidationError
from typing_extensions import Required, TypedDict  # noqa: UP035 - pydantic takes TypedDict from here before 3.12

from ootci.dashboard import upstream
from ootci.runner.models import BisectRecord, Outcome, RunRecord
from ootci.runner.performance import series
from ootci.runner.records import packed_tests, record_files

RECORD_NAME = record_files.RECORD_NAME
BISECT_NAME = record_files.BISECT_NAME
FAILING = frozenset(o.value for o in Outcome if not o.ok)
# Outcomes a person wants to see by name in history: everything but a plain pass or skip.
NOTABLE = frozenset(o.value for o in Outcome) - {"passed", "skipped"}


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
                if not os.path.exists(os.path.join(entry.path, BISECT_NAME)):
                    stack.append(entry.path)  # a bisection's step runs are not runs of the history
                continue
            found.append(FoundFile(candidate[root_len:].replace(os.sep, "/"), st.st_mtime_ns, st.st_size))
    if (data_dir / RECORD_NAME).is_file():  # the data dir is itself one run directory
        st = (data_dir / RECORD_NAME).stat()
        found.append(FoundFile(RECORD_NAME, st.st_mtime_ns, st.st_size))
    found.sort(key=lambda f: f.rel)
    return found


def latest_bisections(data_dir: Path) -> dict[str, tuple[BisectRecord, str]]:
    """Each backend's newest bisection (`<dir>/bisect.json`, one or two levels under data_dir),
    with its directory relative to data_dir. One that does not load is left out."""
    newest: dict[str, tuple[BisectRecord, str]] = {}
    for path in sorted([*data_dir.glob(f"*/{BISECT_NAME}"), *data_dir.glob(f"*/*/{BISECT_NAME}")]):
        try:
            bisection = BisectRecord.model_validate_json(path.read_bytes())
        except (OSError, ValueError):
            continue
        held = newest.get(bisection.backend)
        if held is None or bisection.started_at > held[0].started_at:
            newest[bisection.backend] = (bisection, path.parent.relative_to(data_dir).as_posix())
    return newest


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
class Digest:
    """What the index keeps from a run's test list besides the header's counts and notable tests.

    Read from tests.json only for the runs that need it (the latest ones, and any run
    that gets a page), so a build never reads the test lists of a year of history.
    """

    testset: str | None  # runner.records.record_files.ids_hash of the ids (None: the tests could not be read)
    ids: list[str] | None  # the ids, when this process has not sent this testset before
    ops: bytes | None = b""  # zlib JSON {op: {"ok": [dtypes], "bad": [...], "skip": [...]}}; None: not worked out
    xfail: dict[str, str] = field(default_factory=dict)  # xfailed/xpassed test id -> reason (message)
    # The upstream suite's counts per file (dashboard.upstream.file_summaries); None: not worked out.
    upstream: dict[str, dict] | None = None


# What is remembered of a run whose tests could not be read: no ops, and the test set that
# record.json names (set_digest keeps it), so later pages do not try, and warn, again.
NO_TESTS = Digest(testset=None, ids=None, ops=b"")


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
    pr_head_sha: str | None  # the PR's head commit a `pr` run tested (40 hex; the model checks)
    started_at: str
    finished_at: str | None
    status: str
    torch_spec: str
    torch_version: str | None
    torch_git: str | None
    command: str
    duration_s: float
    pass_rate: float | None
    # The index's JSON columns, encoded here: in a cold build this runs in the worker processes.
    stages_json: str
    counts_json: str
    notable_zjson: bytes  # zlib JSON {test id: outcome} of every test that did not plainly pass
    problems_json: str
    testset: str | None  # ids hash from the header or the digest (None: a record without one)
    digest: Digest | None  # None: not read yet (the tests live in tests.json)
    bench_json: str | None = None  # {"series": [[measurement, metric, method, value, noisy, gated]]}, else None
    upstream_json: str | None = None  # dashboard.upstream.stage_info of an upstream stage, else None


# Neither a pass nor a failure of the backend: a skip, and an upstream test that fails on CPU too.
NOT_JUDGED = frozenset({"skipped", "upstream"})


def pass_rate(counts: dict[str, int]) -> float | None:
    """(passed + xfailed + flaky + fixed) / tests that were judged (neither skipped nor failing on
    CPU too); None when none were."""
    ran = sum(n for o, n in counts.items() if o not in NOT_JUDGED)
    if not ran:
        return None
    return sum(n for o, n in counts.items() if o not in NOT_JUDGED and o not in FAILING) / ran


# --- the tests of one run -------------------------------------------------------------
# A run page or a digest reads a run's 2,000-odd tests. Validating them into TestResult
# models costs ~6 ms a run; into plain dicts, against the same field types, ~2 ms.

if TYPE_CHECKING:  # a Literal spelled from the enum is pydantic's to read, not mypy's
    OutcomeName = str
else:
    OutcomeName = Literal[tuple(o.value for o in Outcome)]


# runner.models.TestResult as a dict (tests/dashboard/test_dashboard_build.py keeps the two alike).
# Spelled as a call (ruff's UP013 would make it a class): under `from __future__ import annotations`
# the class syntax would leave Required[...] as strings that TypedDict does not see.
TestRow = TypedDict("TestRow", {  # noqa: UP013
    "id": Required[str], "suite": Required[str], "outcome": Required[OutcomeName], "duration_s": float,
    "message": str, "log_tail": str, "attempts": int, "op": str | None, "dtype": str | None,
}, total=False)


class _TestsDoc(TypedDict):
    run_id: str
    tests: list[TestRow]


_TESTS = TypeAdapter(_TestsDoc)


def load_tests(record_path: Path, record: RunRecord) -> list[TestRow]:
    """The run's tests as dicts, from tests.json or inline; BadRecord names the file and field."""
    source = record_files.tests_path(record_path, record)
    if source is None:
        if record.tests_pruned_at is not None:
            raise BadRecord(f"{record_path.parent}: test list removed by `ootci history prune` on "
                            f"{record.tests_pruned_at:%Y-%m-%d} (the counts above are the run's)")
        return _inline_rows(record)
    if source.name == packed_tests.RESULTS_NAME:
        try:
            return record_files.packed_rows(record_path, record)  # type: ignore[return-value]
        except OSError as exc:
            raise BadRecord(f"{exc.filename or source}: cannot read: {exc.strerror}") from None
        except packed_tests.PackError as exc:
            raise BadRecord(f"{source}: {exc}") from None
    try:
        doc = _TESTS.validate_json(record_files.read_tests_bytes(source))
    except OSError as exc:
        raise BadRecord(f"{source}: cannot read: {exc.strerror}") from None
    except ValidationError as exc:
        raise BadRecord(describe_error(source, exc)) from None
    except ValueError as exc:  # a .gz that does not decompress
        raise BadRecord(f"{source}: {exc}") from None
    if doc["run_id"] != record.run_id:
        raise BadRecord(f"{source}: field run_id: belongs to run {doc['run_id']!r}, not {record.run_id!r}")
    return doc["tests"]


def _inline_rows(record: RunRecord) -> list[TestRow]:
    # A TestResult dumped is a TestRow (tests/dashboard/test_dashboard_build.py keeps the two alike).
    return cast(list[TestRow], [t.model_dump(mode="json") for t in record.tests])


REASON_CHARS = 300  # of an expected failure's message, on the backend page


def brief(text: str, limit: int = REASON_CHARS) -> str:
    """text on one line, cut at a word boundary with an ellipsis when longer than limit."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:(") + "…"


def digest(tests: list[TestRow], seen_testsets: set[str] | None = None, ids_hash: str | None = None,
           with_ops: bool = True) -> Digest:
    """The digest of a run's tests. ids_hash: the fingerprint record.json gives, trusted
    (and the ids not collected again) when this process already sent that set. with_ops:
    work out the OpInfo results per op (a third of the work, and only the coverage page
    of the latest runs needs them)."""
    xfail: dict[str, str] = {}
    ops: dict[str, dict[str, list[str]]] = {}
    upstream_tests = []
    for t in tests:
        o = t["outcome"]
        if o == "xfailed" or o == "xpassed":
            xfail[t["id"]] = brief(t.get("message", ""))
        if t["suite"] == upstream.STAGE:
            upstream_tests.append(t)
        if not with_ops:
            continue
        op = t.get("op")
        if op is not None and t["suite"] == "integration":
            group = "skip" if o == "skipped" else ("bad" if o in FAILING else "ok")
            by_op = ops.get(op)
            if by_op is None:
                by_op = ops[op] = {}
            by_op.setdefault(group, []).append(t.get("dtype") or "")
    zipped = _zip_ops(ops) if with_ops else None
    files = upstream.file_summaries(upstream_tests)
    if ids_hash is not None and seen_testsets is not None and ids_hash in seen_testsets:
        return Digest(testset=ids_hash, ids=None, xfail=xfail, ops=zipped, upstream=files)
    ids = sorted({t["id"] for t in tests})
    testset = record_files.ids_hash(ids)
    first_time = seen_testsets is None or testset not in seen_testsets
    if seen_testsets is not None:
        seen_testsets.add(testset)
    return Digest(testset=testset, ids=ids if first_time else None, xfail=xfail, ops=zipped, upstream=files)


def testset_digest(record_path: Path) -> Digest | None:
    """What the history's shared test set tells of a run whose results are not at hand (a partial
    pull fetches only each backend's newest runs): which tests it ran, no ops, no reasons. None
    when the record or its set cannot be read."""
    try:
        record = load(record_path)
        if record.tests_file != packed_tests.RESULTS_NAME or not record.test_ids_hash:
            return None
        rows = packed_tests.loads(packed_tests.testset_path(record_path.parent, record.test_ids_hash).read_bytes())
        return Digest(testset=record.test_ids_hash, ids=[row[0] for row in rows], ops=b"")
    except (BadRecord, OSError, packed_tests.PackError, TypeError, IndexError):
        return None


def _zip_ops(ops: dict) -> bytes:
    return zlib.compress(json.dumps(ops, separators=(",", ":")).encode()) if ops else b""


def summarize(record: RunRecord, found: FoundFile, seen_testsets: set[str] | None = None) -> RunSummary:
    run_digest: Digest | None = None  # tests.json is read later, if a page needs it
    if record.tests_pruned_at is not None:
        run_digest = NO_TESTS  # nothing to read later: the header is all there is
    elif record.tests_file is None:
        # Inline tests (records from before tests.json) or none at all: everything is at
        # hand, and the header record.json would have had is worked out from them.
        run_digest = digest(_inline_rows(record), seen_testsets)
        record = record_files.header(record)
    counts = {o.value: n for o, n in record.test_counts.items()}
    notable = {t: o.value for t, o in record.notable_tests.items() if o.value in NOTABLE}
    testset = run_digest.testset if run_digest is not None else record.test_ids_hash
    duration = (record.finished_at - record.started_at).total_seconds() if record.finished_at else \
        sum(s.duration_s for s in record.stages)
    stages = [{
        "name": s.name, "status": s.status.value, "duration_s": round(s.duration_s, 3),
        "summary": s.summary, "counts": s.counts,
        "cause": s.root_cause.summary if s.root_cause else None,
        "hint": s.root_cause.hint if s.root_cause else None,
        **({"causes": stage_causes(s)} if s.causes else {}),
    } for s in record.stages]
    return RunSummary(
        rel=found.rel, mtime_ns=found.mtime_ns, size=found.size, run_id=record.run_id,
        backend=record.backend, device=record.device, trigger=record.trigger, pr=record.pr,
        pr_head_sha=record.pr_head_sha,
        started_at=_iso(record.started_at), finished_at=_iso(record.finished_at) if record.finished_at else None,
        status=record.status.value, torch_spec=record.torch.spec, torch_version=record.torch.version,
        torch_git=record.torch.git_version, command=record.reproduce(), duration_s=round(max(duration, 0.0), 3),
        pass_rate=pass_rate(counts), stages_json=_compact(stages), counts_json=_compact(counts),
        notable_zjson=zlib.compress(_compact(notable).encode(), 1), problems_json=_compact(record.problems),
        testset=testset, digest=run_digest, bench_json=_bench(record), upstream_json=_upstream(record),
    )


CAUSES_KEPT = 50
"""causes of a stage the index keeps (largest first within new, changed, known, upstream); the run
page shows them all"""


def stage_causes(stage) -> list[dict]:
    """A stage's causes as the index keeps them: enough for the backend and index pages and for
    each cause's first night (dashboard/analysis.py)."""
    return [{"text": c.text, "novelty": c.novelty, "count": c.count, "example": c.tests[0] if c.tests else None,
             "ops": c.ops[:5], "n_ops": len(c.ops), "dtypes": c.dtypes[:6], "n_dtypes": len(c.dtypes),
             **({"was": c.was} if c.was else {})} for c in stage.causes[:CAUSES_KEPT]]


def _upstream(record: RunRecord) -> str | None:
    info = upstream.stage_info(record)
    return _compact(info) if info is not None else None


def _bench(record: RunRecord) -> str | None:
    """Each series value the run's bench stage recorded: [measurement, metric, method, value,
    too noisy to judge, gated] (dashboard/performance.py reads them)."""
    found = series.values(record)
    stage = record.stage(series.BENCH)
    note = stage.data.get("counter_note") if stage is not None else None
    return _compact({"series": [[name, metric, method, v.value, v.noisy, v.gated]
                                for (name, metric, method), v in found.items()],
                     **({"note": note} if isinstance(note, str) else {})}) if found else None


def _compact(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def _iso(moment) -> str:
    # One sortable spelling for every timestamp the index compares.
    if moment.tzinfo is not None:
        moment = moment.astimezone(_UTC).replace(tzinfo=None)
    return moment.isoformat(timespec="seconds") + "Z"


_UTC = dt.UTC

# Testsets this worker process already sent to the index; reset per build (pool initializer).
_worker_seen: set[str] = set()


def reset_worker() -> None:
    _worker_seen.clear()


def digest_in_worker(tests: list[TestRow], ids_hash: str | None = None, with_ops: bool = True) -> Digest:
    """digest() in a worker process: each testset's ids are sent once per build."""
    return digest(tests, _worker_seen, ids_hash, with_ops)


def summarize_file(data_dir: str, found: FoundFile) -> RunSummary | str:
    """Worker entry point: a summary, or the one-line reason the record was skipped."""
    try:
        record = load(Path(data_dir) / found.rel)
    except BadRecord as exc:
        return str(exc)
    return summarize(record, found, _worker_seen)
