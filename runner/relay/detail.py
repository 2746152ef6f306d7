"""`workflow.failed_tests_detail`: the failing tests of a job, the ones that matter first.

HUD (pytorch/test-infra#8607) keeps at most 1,000 entries, each message cut at 1 KB and each
stacktrace at 4 KB, and reads an entry's `name` (else `classname`) for the failure line of
the job; the body must stay under HUD's 2 MB. So ootci sends the backend's own failures first
(new against the nightly before those the nightly had too), then the known failures, then
what failed on CPU too (upstream), then what passed on retry (flaky); within each, one
example of each cause first when a cause is known (`cause_of`). Entries are cut to HUD's
limits, and shorter still, stacktraces first, when the body would not fit otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable
from typing import Any

from ootci.runner.models import NOVELTY, Outcome, TestResult

MAX_ENTRIES = 1000
MESSAGE_CHARS = 1024
STACKTRACE_CHARS = 4096
_CUTS = ((MESSAGE_CHARS, STACKTRACE_CHARS), (MESSAGE_CHARS, 2048), (MESSAGE_CHARS, 1024), (MESSAGE_CHARS, 768),
         (MESSAGE_CHARS, 512), (512, 512), (512, 256), (256, 128), (256, 0), (128, 0))
"""(message, stacktrace) characters per entry, tried in turn until the entries fit"""

NEW, OLD, KNOWN, UPSTREAM, FLAKY = range(5)
_RANKED = {Outcome.xfailed: KNOWN, Outcome.upstream: UPSTREAM, Outcome.flaky: FLAKY}


def rank(test: TestResult, failing_in_nightly: Collection[str] = ()) -> int | None:
    """Where a test goes in the list (None: not a failure at all)."""
    if NOVELTY.get(test.outcome) == "new":
        return OLD if test.id in failing_in_nightly else NEW
    return _RANKED.get(test.outcome)


def ordered(tests: Iterable[TestResult], failing_in_nightly: Collection[str] = (),
            cause_of: Callable[[TestResult], str] | None = None) -> list[TestResult]:
    """The failures in the order above; stable within a group (the record's order), and with
    `cause_of`, the first test of each cause ahead of the rest of its group."""
    ranked = [(r, i, t) for i, t in enumerate(tests) if (r := rank(t, failing_in_nightly)) is not None]
    seen: set[tuple[int, str]] = set()
    keyed = []
    for r, i, test in ranked:
        repeat = 0
        if cause_of is not None:
            cause = (r, cause_of(test))
            repeat = 1 if cause in seen else 0
            seen.add(cause)
        keyed.append(((r, repeat, i), test))
    return [test for _, test in sorted(keyed, key=lambda kv: kv[0])]


def split_id(test_id: str) -> tuple[str, str | None, str]:
    """(file, class or None, name) of a test id `file::Class::test` (or `file::test`)."""
    parts = test_id.split("::")
    if len(parts) >= 3:
        return parts[0], parts[-2], parts[-1]
    if len(parts) == 2:
        return parts[0], None, parts[1]
    return test_id, None, test_id


def entry(test: TestResult, message_chars: int = MESSAGE_CHARS, stacktrace_chars: int = STACKTRACE_CHARS) -> \
        dict[str, Any]:
    """One test as HUD reads it: `name` is the whole id (unique; HUD shows it), with its file,
    class, message and stacktrace (the end of the test's output, where the error is)."""
    file, classname, _ = split_id(test.id)
    tail = test.log_tail or ""
    return {"name": test.id, "classname": classname, "file": file, "outcome": test.outcome.value,
            "message": (test.message or "")[:message_chars],
            "stacktrace": tail[-stacktrace_chars:] if stacktrace_chars else ""}


def size(data: Any) -> int:
    """Bytes of `data` as the relay forwards it to HUD (Python's json.dumps: spaces after
    separators, non-ASCII escaped), which is never less than ootci sends."""
    return len(json.dumps(data).encode("utf-8"))


def failed_tests_detail(tests: Iterable[TestResult], budget: int, *, failing_in_nightly: Collection[str] = (),
                        cause_of: Callable[[TestResult], str] | None = None,
                        limit: int = MAX_ENTRIES) -> tuple[list[dict[str, Any]], int]:
    """(the entries, how many failures there were) in at most `budget` bytes and `limit` entries."""
    failures = ordered(tests, failing_in_nightly, cause_of)
    chosen = failures[:limit]
    entries: list[dict[str, Any]] = []
    for message_chars, stacktrace_chars in _CUTS:
        entries = [entry(t, message_chars, stacktrace_chars) for t in chosen]
        if size(entries) <= budget:
            return entries, len(failures)
    # Even the shortest entries do not fit: as many as do, the first ones.
    sizes = [size(e) + 2 for e in entries]
    kept, used = 0, 2
    for n in sizes:
        if used + n > budget:
            break
        used += n
        kept += 1
    return entries[:kept], len(failures)
