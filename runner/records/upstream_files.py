"""The upstream suite's results per PyTorch test file, read off a run's tests.

What a vendor asks of PyTorch's own files is, per file: how many tests passed, how many failed
and were the backend's, how many failed on CPU too (not the backend's), and how much of the
file never ran on the device, and why: `@onlyCUDA` and its kind, a dtype the backend does not
claim, a capability, a slow test. Everything here is worked out from the TestResults, so a
record, a merge of shards and the dashboard all say the same.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from ootci.runner.models import Outcome

SUITE = "upstream"

# A skip's reason, as PyTorch's decorators and ootci word it, reduced to what it says of coverage.
_CATEGORIES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^dtype '[^']+' not claimed"), "dtype not claimed"),
    (re.compile(r"^capability '([^']+)' not claimed"), r"capability '\1' not claimed"),
    (re.compile(r"^Only runs on (.+)$"), r"only on \1"),
    (re.compile(r"^onlyNativeDeviceTypes"), "onlyNativeDeviceTypes"),
    (re.compile(r"^onlyNativeDeviceTypesAnd"), "onlyNativeDeviceTypesAnd"),
    (re.compile(r"test is slow"), "slow (PYTORCH_TEST_WITH_SLOW)"),
    (re.compile(r"^fewer than (\d+) devices"), r"fewer than \1 devices"),
    (re.compile(r"not run: the file's"), "file time limit"),
)
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+(\.\d+)?")
REASON_CHARS = 80


def file_of(test_id: str) -> str:
    """The test file a test id belongs to (the whole id for a file that failed to collect)."""
    return test_id.split("::", 1)[0]


def skip_category(message: str) -> str:
    """What a skip says of coverage: a named category, else its reason with numbers folded."""
    text = " ".join((message or "").split()).removeprefix("Skipped: ")
    for pattern, category in _CATEGORIES:
        found = pattern.search(text)
        if found:
            return found.expand(category)
    text = _NUMBERS.sub("N", text)
    return (text[:REASON_CHARS - 1] + "…") if len(text) > REASON_CHARS else (text or "no reason given")


@dataclass
class FileSummary:
    name: str
    tests: int = 0
    passed: int = 0
    failed: int = 0
    """the backend's: failed, errored, crashed or timed out on the device and not on CPU"""
    known: int = 0
    """the backend's known failures (the baseline) and expected failures"""
    upstream: int = 0
    """failed on the device and on CPU too"""
    fixed: int = 0
    skipped: int = 0
    skipped_by_reason: dict[str, int] = field(default_factory=dict)
    collection_error: str | None = None
    """the file did not import or collect: why"""

    @property
    def ran(self) -> int:
        return self.tests - self.skipped


_BAD = frozenset({Outcome.failed, Outcome.error, Outcome.crashed, Outcome.timeout, Outcome.xpassed})


class Summarized(Protocol):
    """What summarize reads of a test: a TestResult, or a lighter row of the same fields."""

    @property
    def id(self) -> str: ...
    @property
    def suite(self) -> str: ...
    @property
    def outcome(self) -> Outcome: ...
    @property
    def message(self) -> str: ...


def summarize(tests: Iterable[Summarized]) -> dict[str, FileSummary]:
    """file -> its summary, for the upstream suite's tests, files in order of name."""
    files: dict[str, FileSummary] = {}
    for t in tests:
        if t.suite != SUITE:
            continue
        name = file_of(t.id)
        summary = files.setdefault(name, FileSummary(name))
        if t.id == name:  # the file itself: it failed to collect (or was re-run and failed on CPU too)
            summary.collection_error = t.message or t.outcome.value
        summary.tests += 1
        if t.outcome in (Outcome.passed, Outcome.flaky):
            summary.passed += 1
        elif t.outcome is Outcome.skipped:
            summary.skipped += 1
            reason = skip_category(t.message)
            summary.skipped_by_reason[reason] = summary.skipped_by_reason.get(reason, 0) + 1
        elif t.outcome is Outcome.upstream:
            summary.upstream += 1
        elif t.outcome is Outcome.xfailed:
            summary.known += 1
        elif t.outcome is Outcome.fixed:
            summary.fixed += 1
            summary.passed += 1
        elif t.outcome in _BAD:
            summary.failed += 1
    for summary in files.values():
        summary.skipped_by_reason = dict(sorted(summary.skipped_by_reason.items(), key=lambda kv: (-kv[1], kv[0])))
    return dict(sorted(files.items()))
