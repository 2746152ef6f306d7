"""A run's tests in the history's compact form: a shared test set plus one line of outcomes.

Night after night a backend runs the same few thousand tests. What changes from run to
run is each test's outcome, its duration and, for the few that did not pass, a message.
So the history keeps the tests in two parts:

- a **test set**, `<fingerprint>.json.gz`: every test's id, suite, op and dtype, sorted
  by id. Its name is the fingerprint the header already carries (`test_ids_hash`), so
  every run of the same tests shares one file;
- the run's **results**, `results.json.gz`: one character per test of the set for its
  outcome, durations in milliseconds in the same order, and the message, log tail and
  attempts of the tests that have any.

2,000 tests are ~330 KB as tests.json; their results here are a few kilobytes, most
of it durations, and the set is stored once. This module only encodes and decodes:
where the files live is `history_store`'s business.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from ootci.runner.models import Outcome, TestResult

RESULTS_NAME = "results.json.gz"
"""the results file beside a run's record.json in the history"""
TESTSETS_DIR = ".testsets"
"""the test sets of the runs in a directory lie in this folder of it (dashboards skip dot folders)"""
PACKED_VERSION = 1
# One letter per outcome; never reuse a letter, or old results would decode wrongly.
_LETTER = {
    Outcome.passed: "p", Outcome.failed: "f", Outcome.error: "e", Outcome.skipped: "s",
    Outcome.xfailed: "x", Outcome.xpassed: "X", Outcome.flaky: "k", Outcome.timeout: "t",
    Outcome.crashed: "c", Outcome.fixed: "F", Outcome.upstream: "u",
}
_OUTCOME = {letter: outcome.value for outcome, letter in _LETTER.items()}
_DETAILS = ("message", "log_tail", "attempts")
_DEFAULT = {name: TestResult.model_fields[name].default for name in _DETAILS}
# gzip's timestamp would make two packings of the same tests differ byte for byte (and in git).
_MTIME = 0
_FINGERPRINT = re.compile(r"[0-9a-f]{8,64}")


class PackError(ValueError):
    """Tests that do not fit a shared test set, or a packed file that does not decode."""


Test = TestResult | Mapping[str, Any]
"""a TestResult, or its fields as a dict with those at their default left out (the dashboard's rows)"""


_FIELD_DEFAULT = {name: info.default for name, info in TestResult.model_fields.items()}


def _get(test: Test, name: str):
    if isinstance(test, Mapping):
        return test.get(name, _FIELD_DEFAULT[name])
    return getattr(test, name)


def testset_rows(tests: Sequence[Test]) -> list[list]:
    """The test set of these tests: [id, suite, op, dtype] per test, sorted by id.

    PackError when an id occurs twice: a set is keyed by id.
    """
    rows = sorted(([_get(t, "id"), _get(t, "suite"), _get(t, "op"), _get(t, "dtype")] for t in tests),
                  key=lambda row: row[0] or "")
    for before, after in pairwise(rows):
        if before[0] == after[0]:
            raise PackError(f"test id {before[0]!r} occurs twice")
    return rows


def pack(run_id: str, testset: str, rows: list[list], tests: Sequence[Test]) -> dict:
    """The results document of `tests`, in the order of the set's rows (testset_rows of the same tests)."""
    by_id = {_get(t, "id"): t for t in tests}
    if len(by_id) != len(rows) or any(row[0] not in by_id for row in rows):
        raise PackError(f"the tests of run {run_id} are not the tests of set {testset}")
    outcomes, durations, details = [], [], {}
    for index, row in enumerate(rows):
        t = by_id[row[0]]
        outcomes.append(_LETTER[Outcome(_get(t, "outcome"))])
        durations.append(round(_get(t, "duration_s") * 1000))
        extra = {name: _get(t, name) for name in _DETAILS if _get(t, name) != _DEFAULT[name]}
        if extra:
            details[str(index)] = extra
    return {"packed_version": PACKED_VERSION, "run_id": run_id, "testset": testset,
            "outcomes": "".join(outcomes), "durations_ms": durations, "details": details}


def unpack_rows(rows: list[list], results: dict) -> list[dict]:
    """The tests as dicts with TestResult's fields (defaults left out), in the set's order."""
    outcomes, durations = results.get("outcomes"), results.get("durations_ms")
    if not isinstance(outcomes, str) or not isinstance(durations, list) or \
            not len(outcomes) == len(durations) == len(rows):
        raise PackError(f"results of run {results.get('run_id')!r} do not match test set "
                        f"{results.get('testset')!r} ({len(rows)} tests)")
    details = results.get("details") or {}
    tests = []
    for index, ((test_id, suite, op, dtype), letter, ms) in enumerate(zip(rows, outcomes, durations, strict=True)):
        outcome = _OUTCOME.get(letter)
        if outcome is None:
            raise PackError(f"results of run {results.get('run_id')!r}: unknown outcome letter {letter!r}")
        test = {"id": test_id, "suite": suite, "outcome": outcome, "duration_s": ms / 1000}
        if op is not None:
            test["op"] = op
        if dtype is not None:
            test["dtype"] = dtype
        test.update(details.get(str(index), {}))
        tests.append(test)
    return tests


def testset_path(run_dir: Path, fingerprint: str) -> Path:
    """Where the test set of a run in run_dir lies: beside the run directory, shared with its neighbours."""
    # The fingerprint comes from a record, which is untrusted: it must not lead out of the folder.
    if not _FINGERPRINT.fullmatch(fingerprint):
        raise PackError(f"test set fingerprint {fingerprint!r} is not a hex digest")
    return run_dir.parent / TESTSETS_DIR / f"{fingerprint}.json.gz"


def dumps(document) -> bytes:
    """A testset's rows or a results document as the gzip'd JSON the history stores."""
    return gzip.compress(json.dumps(document, separators=(",", ":")).encode(), compresslevel=9, mtime=_MTIME)


def loads(data: bytes):
    """The inverse of dumps; PackError for anything that is not gzip'd JSON."""
    try:
        return json.loads(gzip.decompress(data))
    except (OSError, EOFError, ValueError) as exc:
        raise PackError(f"not gzip'd JSON: {exc}") from None
