"""From raw test outcomes to what a run reports: expected failures, flaky, failing.

A manifest's `expected_failures` entries name a test id exactly, or an fnmatch
pattern of ids; a pattern may start with `<suite>::` to apply to one suite only. An
id is compared for equality first, because pytest ids contain `[...]`, which fnmatch
reads as a character class. An entry with `torch = "<2.15"` applies only to the torch
versions it names; for any other torch it does not exist. The backend's known-failures
file (runner/manifests/known_failures.py) names tests exactly and applies to every torch.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from ootci.runner.core import causes
from ootci.runner.manifests.known_failures import KnownFailure, one_line
from ootci.runner.manifests.manifest import ExpectedFailure, Manifest
from ootci.runner.models import SUITES, Outcome, TestResult

# Outcomes of a test that did not pass: retried, and turned into xfailed when expected.
NOT_PASSING = frozenset({Outcome.failed, Outcome.error, Outcome.timeout, Outcome.crashed})


def matches(entry: ExpectedFailure, suite: str, test_id: str) -> bool:
    for candidate in (test_id, f"{suite}::{test_id}"):
        if candidate == entry.test or fnmatchcase(candidate, entry.test):
            return True
    return False


def expected_failures(manifest: Manifest, torch_version: str | None) -> list[ExpectedFailure]:
    """The manifest's entries that hold for this torch (all of them when it is unknown)."""
    return [e for e in manifest.expected_failures if e.applies_to(torch_version)]


def expected_failure(manifest: Manifest, suite: str, test_id: str,
                     torch_version: str | None = None) -> ExpectedFailure | KnownFailure | None:
    """The manifest's entry for this test, else its line in the known-failures file, else None."""
    found = next((e for e in expected_failures(manifest, torch_version) if matches(e, suite, test_id)), None)
    return found or manifest.known.get(suite, {}).get(test_id)


def _reason(entry: ExpectedFailure) -> str:
    return entry.reason + (f" ({entry.link})" if entry.link else "")


def cause_changed(result: TestResult, entry: KnownFailure, device: str | None) -> bool:
    """A known failure that failed with another cause than its baseline entry lists: a new bug
    hiding behind an old one. An entry without a cause (an older file) holds for any.

    The entry's cause was signed by the ootci of the night it was listed, and a later ootci may sign
    the same failure otherwise (a crash with no op known was once named by its test, now by the
    function it died in): every known crash of a baseline would read as changed after an upgrade.
    The entry's reason is that night's message, so where the causes differ, it is signed again by
    today's ootci, beside today's message cut to the same length: only a failure that changed differs."""
    if not entry.cause or result.outcome not in NOT_PASSING:
        return False
    if one_line(causes.cause_of(result, device)) == entry.cause:
        return False
    try:
        listed = Outcome(entry.outcome)
    except ValueError:
        return True
    then = TestResult(id=result.id, suite=result.suite, outcome=listed, message=entry.reason, op=result.op)
    today = result.model_copy(update={"message": one_line(result.message)})
    return causes.cause_of(then, device) != causes.cause_of(today, device)


def apply_expected(result: TestResult, entry: ExpectedFailure | KnownFailure | None,
                   device: str | None = None) -> TestResult:
    """xfailed for an expected failure that failed; for one that passed, xpassed (a manifest
    entry: the list a person keeps must not go stale) or fixed (a known failure: good news,
    which `ootci expect --prune` takes off the list). A known failure that failed with another
    cause keeps its outcome, its message saying it is known but now failing differently."""
    if entry is None:
        return result
    if isinstance(entry, KnownFailure):
        if cause_changed(result, entry, device):
            message = f"{causes.CHANGED} (listed as `{entry.cause}`); it {result.outcome.value}: {result.message}"
            return result.model_copy(update={"message": message})
        if result.outcome in NOT_PASSING:
            message = f"known failure ({entry.outcome} with torch {entry.torch or '?'}); it {result.outcome.value}: " \
                      f"{result.message}"
            return result.model_copy(update={"outcome": Outcome.xfailed, "message": message})
        if result.outcome in (Outcome.passed, Outcome.flaky):
            message = f"fixed: listed as a known failure ({entry.outcome}: {entry.reason}), and it passed"
            return result.model_copy(update={"outcome": Outcome.fixed, "message": message})
        return result
    if result.outcome in NOT_PASSING:
        message = f"expected failure: {_reason(entry)}; it {result.outcome.value}: {result.message}"
        return result.model_copy(update={"outcome": Outcome.xfailed, "message": message})
    if result.outcome in (Outcome.passed, Outcome.flaky):
        message = (f"passed but is listed in expected_failures ({entry.test!r}: {_reason(entry)}); "
                   "remove the entry if the bug is fixed")
        return result.model_copy(update={"outcome": Outcome.xpassed, "message": message})
    return result


def unmatched_expected_failures(manifest: Manifest, results: list[TestResult], suites: list[str],
                                torch_version: str | None = None) -> list[str]:
    """A problem line for each expected-failure entry (for this torch) that matched no test of these suites."""
    problems = []
    suite_names = {*SUITES, *(v.name for v in manifest.suites.vendor)}
    for index, entry in enumerate(manifest.expected_failures):
        if not entry.applies_to(torch_version):
            continue
        scope = entry.test.split("::", 1)[0]
        if scope in suite_names and scope not in suites:
            continue  # an entry for a suite that did not run this time
        if not any(matches(entry, r.suite, r.id) for r in results):
            where = f"{manifest.path}: " if manifest.path else ""
            problems.append(
                f"{where}expected_failures[{index}].test {entry.test!r} matched no test of the suites run "
                f"({', '.join(suites) or 'none'}): a typo, or a test that was renamed or removed"
            )
    return problems
