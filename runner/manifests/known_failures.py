"""A backend's known failures: the baseline file beside its manifest.

A real backend always fails some tests. `ootci expect --from RUN` writes every test
that did not pass in that run into the file the manifest names (`known_failures =
"known-failures.toml"`); the next runs then tell what is new from what was already
broken: a known failure that fails (or crashes, or hangs) again is expected
(`xfailed`), one that passes is `fixed`, and only a failure that is not in the file
turns the run red.

The file is made to be reviewed in pull requests: one table per suite, one line per
test, sorted, so that a diff shows exactly which tests became known or stopped being
known:

    [integration]
    "test_opinfo.py::test_compare_cpu[abs-int64]" = { outcome = "failed", torch = "2.13.0+cpu",
        cause = "...", reason = "..." }   (on one line)

Each entry keeps its failure's cause (runner/core/causes.py): a known failure that fails again
with another cause is a new bug hiding behind an old one, reported as "known, now failing
differently" and not counted as known. A file written before causes were kept (no `cause`) still
loads, and its entries hold for any cause until `ootci expect` runs again and fills them in.

Entries name tests exactly, never by pattern: patterns, with a reason and a link a
person wrote, are the manifest's own `expected_failures`.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ootci.runner.core import atomic, causes
from ootci.runner.core.errors import ManifestError

if TYPE_CHECKING:  # manifest.py imports this module
    from ootci.runner.manifests.manifest import Manifest

DEFAULT_NAME = "known-failures.toml"
REASON_CHARS = 240
# FILE_OR_CLASS::NAME[PARAMS] on one line, as pytest and ootci's JUnit reader write ids, or the
# id of a collection error: the path of the .py file that failed to collect
# (`tests/test_autograd.py`), or ootci's `(collection)` for one outside any file; no fnmatch
# wildcards outside the parameters (a pattern belongs in expected_failures).
_TEST_ID = re.compile(r"^(?:[^\s*?\[\]:][^\n*?\[]*::[^\n*?\[]+(\[[^\n]*\])?"  # a test id
                      r"|[^\s*?\[\]:][^\s*?\[\]:]*\.py"  # a test file that failed to import
                      r"|\(collection\))$")
_SUITE = re.compile(r"^[A-Za-z0-9_.-]+$")

HEADER = """\
# Known failures of backend {backend!r}: tests that fail, crash or time out today.
# Written by {written_by}; reviewed like code. One line a test, by suite.
# A run passes when every failure is listed here; a listed test that passes again is
# reported `fixed`, and `ootci expect --prune --from RUN` removes it.
# outcome: how it failed when listed; torch: the torch it was seen failing with;
# cause: its error with numbers, shapes, dtypes and the device masked (a new cause is news).
"""


class KnownFailure(BaseModel):
    model_config = ConfigDict(extra="forbid")

    outcome: str = Field(description="failed, error, crashed or timeout, when it was listed")
    reason: str = Field(description="its message when it was listed")
    torch: str = Field(default="", description="the torch it was seen failing with")
    cause: str = Field(default="", description="its cause when listed (runner/core/causes.py); '' in a file "
                                               "written before causes were kept: any cause is the known one")


Baseline = dict[str, dict[str, KnownFailure]]
"""suite -> test id -> entry"""


def is_test_id(text: str) -> bool:
    return bool(_TEST_ID.match(text))


def load(path: Path) -> Baseline:
    """Read and check a baseline file; any problem is one line naming the file and the entry."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: not valid TOML: {exc}") from None
    baseline: Baseline = {}
    for suite, tests in data.items():
        if not isinstance(tests, dict) or not _SUITE.match(suite):
            raise ManifestError(f"{path}: [{suite}]: expected a table of tests named after a suite")
        for test_id, entry in tests.items():
            if not is_test_id(test_id):
                raise ManifestError(f"{path}: [{suite}] {test_id!r}: not a test id; entries name one test as "
                                    f"FILE::TEST[PARAMS] (or a FILE that failed to collect), as `ootci expect` "
                                    f"writes them (patterns belong in the manifest's expected_failures)")
            try:
                baseline.setdefault(suite, {})[test_id] = KnownFailure.model_validate(entry)
            except ValidationError as exc:
                err = exc.errors()[0]
                field = ".".join(str(p) for p in err["loc"]) or "(entry)"
                raise ManifestError(f"{path}: [{suite}] {test_id!r}: field '{field}': {err['msg']}") from None
    return baseline


_CONTROL = re.compile("[\x00-\x1f\x7f]")


def one_line(text: str) -> str:
    """A reason or cause as the file keeps it: one line, cut to REASON_CHARS."""
    text = _CONTROL.sub(" ", " ".join(text.split()))
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 1].rstrip() + "…"


EXPECT = "`ootci expect --from RUN`"
"""who writes a baseline, as its header says"""


def render(backend: str, baseline: Baseline, written_by: str = EXPECT) -> str:
    lines = [HEADER.format(backend=backend, written_by=written_by)]
    for suite in sorted(baseline):
        if not baseline[suite]:
            continue
        lines.append(f"\n[{suite}]\n")
        for test_id in sorted(baseline[suite]):
            e = baseline[suite][test_id]
            fields = [f"outcome = {json.dumps(e.outcome)}"]
            if e.torch:
                fields.append(f"torch = {json.dumps(e.torch)}")
            if e.cause:
                fields.append(f"cause = {json.dumps(e.cause, ensure_ascii=False)}")
            fields.append(f"reason = {json.dumps(one_line(e.reason), ensure_ascii=False)}")
            lines.append(f"{json.dumps(test_id, ensure_ascii=False)} = {{ {', '.join(fields)} }}\n")
    return "".join(lines)


def entry(outcome: str, message: str, torch: str | None, cause: str = "") -> KnownFailure:
    return KnownFailure(outcome=outcome, reason=one_line(message) or f"it {outcome}", torch=torch or "",
                        cause=one_line(cause))


# -- from a run to the file -----------------------------------------------------------------

NOT_PASSING = ("failed", "error", "crashed", "timeout")


def update(baseline: Baseline, tests, torch: str | None, *, prune: bool,
           device: str | None = None) -> tuple[Baseline, dict[str, int]]:
    """The baseline after a run's tests (runner.models.TestResult): every test that did not pass
    and is not yet listed is added, with its cause; with `prune`, a listed test that passed
    (fixed), that failed on CPU too (upstream: not the backend's) or that its suite no longer has
    is removed. Entries already listed keep what they said; one without a cause (an older file)
    takes the cause it failed with as expected. Every id it adds is one `load` reads back."""
    new: Baseline = {suite: dict(entries) for suite, entries in baseline.items()}
    counts = {"added": 0, "removed": 0, "fixed": 0, "kept": 0}
    seen: dict[str, set[str]] = {}
    for t in tests:
        seen.setdefault(t.suite, set()).add(t.id)
        listed = new.get(t.suite, {}).get(t.id)
        if t.outcome.value in NOT_PASSING and listed is None:
            if not is_test_id(t.id):
                raise ManifestError(f"test id {t.id!r} of suite {t.suite!r} cannot be listed as a known failure "
                                    f"(it has whitespace or a wildcard outside its parameters)")
            new.setdefault(t.suite, {})[t.id] = entry(t.outcome.value, t.message, torch,
                                                      causes.cause_of(t, device))
            counts["added"] += 1
        elif t.outcome.value == "xfailed" and listed is not None and not listed.cause:
            new[t.suite][t.id] = listed.model_copy(update={"cause": one_line(causes.cause_of(t, device))})
        elif t.outcome.value == "fixed":
            counts["fixed"] += 1
            if prune:
                del new[t.suite][t.id]
                counts["removed"] += 1
        elif t.outcome.value == "upstream" and listed is not None and prune:
            del new[t.suite][t.id]
            counts["removed"] += 1
    if prune:
        for suite, ids in seen.items():
            for test_id in sorted(set(new.get(suite, {})) - ids):
                del new[suite][test_id]
                counts["removed"] += 1
    counts["kept"] = sum(len(v) for v in new.values()) - counts["added"]
    return {s: e for s, e in new.items() if e}, counts


NO_CAUSE = "(no cause recorded: listed before causes were kept)"
CAUSES_SHOWN = 10


def by_cause(baseline: Baseline) -> list[tuple[str, list[str]]]:
    """(cause, `suite::test` ids) of every entry, the largest cause first."""
    found: dict[str, list[str]] = {}
    for suite, entries in baseline.items():
        for test_id, e in entries.items():
            found.setdefault(e.cause or NO_CAUSE, []).append(f"{suite}::{test_id}")
    return sorted(found.items(), key=lambda item: (-len(item[1]), item[0]))


def cause_lines(baseline: Baseline, shown: int = CAUSES_SHOWN) -> list[str]:
    """A baseline by cause, for people: one line each, the largest first, with its first test."""
    grouped = by_cause(baseline)
    width = len(str(max((len(ids) for _, ids in grouped), default=0)))
    lines = [f"  {len(ids):>{width}}  {cause}  (e.g. {sorted(ids)[0]})" for cause, ids in grouped[:shown]]
    if len(grouped) > shown:
        rest = sum(len(ids) for _, ids in grouped[shown:])
        lines.append(f"  and {len(grouped) - shown} more causes ({rest} tests)")
    return lines


def name_in_manifest(manifest_text: str, file_name: str, comment: str = "") -> str:
    """The manifest's text with `known_failures = "<file>"` among its top-level keys (before the
    first table, where TOML puts them), after `comment` (lines that start with #) when given; the
    rest of the text, comments included, unchanged."""
    line = comment + f"known_failures = {json.dumps(file_name)}\n"
    lines = manifest_text.splitlines(keepends=True)
    first_table = next((i for i, text in enumerate(lines) if text.lstrip().startswith("[")), len(lines))
    insert_at = first_table
    while insert_at > 0 and (not lines[insert_at - 1].strip() or lines[insert_at - 1].lstrip().startswith("#")):
        insert_at -= 1  # above the blank lines and comments that introduce the first table
    if insert_at and not lines[insert_at - 1].endswith("\n"):
        lines[insert_at - 1] += "\n"
    lines.insert(insert_at, line)
    return "".join(lines)


@dataclass(frozen=True)
class Recorded:
    """What writing a run's failures into a backend's baseline did."""

    path: Path
    baseline: Baseline
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(len(entries) for entries in self.baseline.values())


def record_run(manifest: Manifest, tests, torch: str | None, *, prune: bool = False, written_by: str = EXPECT,
               comment: str = "") -> Recorded:
    """A run's failures into the baseline file the manifest names (`update`); the first time, the
    file `known-failures.toml` beside the manifest, named in the manifest's top-level keys (after
    `comment`). `ootci expect` and `ootci init` both write a baseline through here."""
    assert manifest.path is not None, "a manifest read from a file"
    target = manifest.known_failures_path() or manifest.directory / DEFAULT_NAME
    baseline, counts = update(manifest.known, tests, torch, prune=prune, device=manifest.device)
    atomic.write_text(target, render(manifest.name, baseline, written_by))
    if not manifest.known_failures:
        text = manifest.path.read_text(encoding="utf-8")
        atomic.write_text(manifest.path, name_in_manifest(text, target.name, comment))
    return Recorded(target, baseline, counts)
