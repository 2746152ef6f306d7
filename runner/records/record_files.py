"""A RunRecord on disk: `record.json` for the run, `tests.json` beside it for its tests.

A run of a real backend has thousands of test results, and they are most of a record's
bytes (2,000 tests are ~330 KB of JSON). Most readers want the run, not every test: the
dashboard's history of 365 nights, `ootci summary`, `ootci history merge`. So
`record.json` carries the run with its per-outcome counts, a fingerprint of its test
ids and the tests that did not pass (`test_counts`, `test_ids_hash`, `notable_tests`),
a few kilobytes; `tests.json` carries every TestResult. Records written before the
split keep their tests inline and still load.

A big run's list is gzip'd, as `tests.json.gz`: 100,000 tests are about 17 MB of JSON and under
1 MB compressed, and a run's artifact must stay small. A list under COMPRESS_FROM bytes stays
plain JSON (a vendor reads it with any tool). `tests_file` names which; readers take either.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, TypeAdapter

from ootci.runner.core import atomic
from ootci.runner.models import SCHEMA_VERSION, Outcome, RunRecord, TestResult
from ootci.runner.records import packed_tests

RECORD_NAME = "record.json"
TESTS_NAME = "tests.json"
TESTS_GZ_NAME = "tests.json.gz"
COMPRESS_FROM = 1_000_000
"""bytes of JSON from which tests.json is written gzip'd (about 6,000 tests)"""
BISECT_NAME = "bisect.json"
"""a bisection's record (runner.bisection.bisect); the run directories of its steps lie below it"""
_QUIET = frozenset({Outcome.passed, Outcome.skipped})
_TEST_LIST = TypeAdapter(list[TestResult])


class TestsFile(BaseModel):
    """The contents of tests.json: the run it belongs to, and its tests."""

    model_config = ConfigDict(extra="ignore")
    schema_version: int = SCHEMA_VERSION
    run_id: str
    tests: list[TestResult]


def tally(tests: list[TestResult]) -> tuple[dict[Outcome, int], dict[str, Outcome]]:
    """(outcome -> count, test id -> outcome of each test that did not plainly pass)."""
    counts: dict[Outcome, int] = {}
    notable: dict[str, Outcome] = {}
    for t in tests:
        counts[t.outcome] = counts.get(t.outcome, 0) + 1
        if t.outcome not in _QUIET:
            notable[t.id] = t.outcome
    return counts, notable


def ids_hash(ids) -> str:
    """A fingerprint of a set of test ids: equal for runs that ran the same tests, in any order."""
    return hashlib.blake2b("\n".join(sorted(set(ids))).encode(), digest_size=12).hexdigest()


def header(record: RunRecord, tests_file: str = TESTS_NAME) -> RunRecord:
    """The record as record.json holds it: tests replaced by a summary and a pointer to tests_file."""
    counts, notable = tally(record.tests)
    return record.model_copy(update={
        "tests": [], "tests_file": tests_file if record.tests else None, "test_counts": counts,
        "test_ids_hash": ids_hash(t.id for t in record.tests) if record.tests else None, "notable_tests": notable,
    })


def write(run_dir: Path, record: RunRecord) -> Path:
    """Write tests.json, then record.json, each atomically; returns record.json's path.

    In that order a reader that finds a record.json also finds the tests it counts.
    """
    tests_file = write_tests(run_dir, record) if record.tests else TESTS_NAME
    path = run_dir / RECORD_NAME
    atomic.write_text(path, header(record, tests_file).model_dump_json(indent=2) + "\n")
    return path


def write_tests(run_dir: Path, record: RunRecord) -> str:
    """The record's tests as tests.json in run_dir (tests.json.gz when big), atomically; the file's
    name. Only one of the two is left."""
    # Fields at their default are left out: most tests have no message, log tail or retry.
    tests = _TEST_LIST.dump_json(record.tests, exclude_defaults=True)
    head = json.dumps({"schema_version": SCHEMA_VERSION, "run_id": record.run_id}).encode()
    text = head[:-1] + b', "tests": ' + tests + b"}\n"
    name, other = (TESTS_GZ_NAME, TESTS_NAME) if len(text) >= COMPRESS_FROM else (TESTS_NAME, TESTS_GZ_NAME)
    atomic.write_bytes(run_dir / name, gzip.compress(text, compresslevel=6, mtime=0) if name == TESTS_GZ_NAME
                       else text)
    (run_dir / other).unlink(missing_ok=True)
    return name


def read_tests_bytes(source: Path) -> bytes:
    """The JSON of a tests.json or tests.json.gz: OSError when it cannot be read, ValueError when
    a .gz does not decompress."""
    data = source.read_bytes()
    if not source.name.endswith(".gz"):
        return data
    try:
        return gzip.decompress(data)
    except (EOFError, OSError, zlib.error) as exc:  # gzip's BadGzipFile is an OSError
        raise ValueError(f"not gzip'd JSON: {exc}") from None


def tests_path(record_path: Path, record: RunRecord) -> Path | None:
    """Where the record's tests are (None: inline). The name is a plain file name (see the model)."""
    return record_path.parent / record.tests_file if record.tests_file else None


def read(record_path: Path, *, with_tests: bool = True) -> RunRecord:
    """The record at record_path, its tests loaded from tests.json (or the history's packed
    results, see packed_tests) unless with_tests is False.

    Raises OSError, or a ValueError: pydantic's ValidationError for bad JSON or fields,
    packed_tests.PackError for packed results that do not decode.
    """
    record = RunRecord.model_validate_json(record_path.read_bytes())
    source = tests_path(record_path, record)
    if with_tests and source is not None:
        if source.name == packed_tests.RESULTS_NAME:
            record.tests = _TEST_LIST.validate_python(packed_rows(record_path, record))
        else:
            record.tests = TestsFile.model_validate_json(read_tests_bytes(source)).tests
    return record


def find_runs(source: Path) -> list[tuple[Path, RunRecord | None]]:
    """Every run directory under `source`, with its record read without its tests (None when it
    does not load). The runs of a bisection's steps are part of the bisection (the directory of
    its bisect.json), not runs of their own: every reader of a directory of runs skips them."""
    runs = []
    bisections = {p.parent for p in source.rglob(BISECT_NAME)}
    for record_file in sorted(source.rglob(RECORD_NAME)):
        if any(parent in bisections for parent in record_file.parents):
            continue
        try:
            record = read(record_file, with_tests=False)
        except (OSError, ValueError):
            record = None
        runs.append((record_file.parent, record))
    return runs


def packed_rows(record_path: Path, record: RunRecord) -> list[dict]:
    """The tests of a record kept in the history's packed form, as dicts (see packed_tests)."""
    results = packed_tests.loads((record_path.parent / packed_tests.RESULTS_NAME).read_bytes())
    if not isinstance(results, dict) or results.get("run_id") != record.run_id:
        raise packed_tests.PackError(f"{packed_tests.RESULTS_NAME} does not belong to run {record.run_id}")
    testset = str(results.get("testset"))
    rows = packed_tests.loads(packed_tests.testset_path(record_path.parent, testset).read_bytes())
    return packed_tests.unpack_rows(rows, results)
