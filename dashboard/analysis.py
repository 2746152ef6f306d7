"""History questions about one backend, or one pull request, answered from the index.

`runs` are the backend's main-line runs (not PR runs), oldest first, unless a
function says otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import pairwise

from ootci.dashboard.records import FAILING
from ootci.dashboard.store import Index, Run

FLAKY_WINDOW = 30
_HEX = re.compile(r"^[0-9a-f]{7,40}$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
COMPARE_URL = "https://github.com/pytorch/pytorch/compare/{green}...{red}"
COMMIT_URL = "https://github.com/pytorch/pytorch/commit/{sha}"
PULL_URL = "https://github.com/pytorch/pytorch/pull/{pr}"
NEW_VS_NIGHTLY_SHOWN = 50  # per PR run; the run page has the rest


def mainline(runs: list[Run]) -> list[Run]:
    return [r for r in runs if r.trigger != "pr"]


def with_results(runs: list[Run]) -> list[Run]:
    """The runs that say something of the backend: not those that left no record (status
    missing), which are shown as such but neither start nor end a red stretch."""
    return [r for r in runs if r.status != "missing"]


def last_green(runs: list[Run]) -> Run | None:
    return next((r for r in reversed(runs) if r.ok), None)


def compare_url(good: str | None, bad: str | None) -> str | None:
    """PyTorch's commits between two runs' torch builds. Only ever links commit ids: a record's
    git_version is untrusted text."""
    g, b = good or "", bad or ""
    return COMPARE_URL.format(green=g, red=b) if _HEX.match(g) and _HEX.match(b) and g != b else None


@dataclass
class Culprit:
    """The upstream range in which the backend turned red."""

    green: Run | None
    red: Run
    red_runs: int

    @property
    def compare_url(self) -> str | None:
        return compare_url(self.green.torch_git if self.green else None, self.red.torch_git)

    @property
    def same_torch(self) -> bool:
        return bool(self.green and self.green.torch_git and self.green.torch_git == self.red.torch_git)


def culprit(runs: list[Run]) -> Culprit | None:
    """When the latest run is red: the last green run and the first red run after it."""
    if not runs or runs[-1].ok:
        return None
    first_red = len(runs) - 1
    while first_red > 0 and not runs[first_red - 1].ok:
        first_red -= 1
    green = runs[first_red - 1] if first_red > 0 else None
    return Culprit(green=green, red=runs[first_red], red_runs=len(runs) - first_red)


@dataclass
class Changes:
    new_failures: list[tuple[str, str]] = field(default_factory=list)
    """(test id, outcome): regressions, tests the previous run ran and did not fail"""
    new_tests_failing: list[tuple[str, str]] = field(default_factory=list)
    """(test id, outcome): failing tests the previous run did not have (new upstream, a new file)"""
    fixed: list[tuple[str, str]] = field(default_factory=list)  # (test id, outcome it had)


def changes(index: Index, runs: list[Run]) -> Changes:
    """Tests failing now but not in the previous run, and tests fixed since it.

    A failing test the previous run did not have at all is a new test, failing: shown apart from
    a regression of a test that used to pass. When the previous run has no test set to tell
    (none ran, or its tests cannot be read), every one counts as a regression, as before. A test
    that now fails on CPU too (outcome upstream) is not the backend's, and not fixed either."""
    if len(runs) < 2:
        return Changes()
    prev, last = runs[-2], runs[-1]
    notable_now = index.notable(last.id)
    now = {t: o for t, o in notable_now.items() if o in FAILING}
    before = {t: o for t, o in index.notable(prev.id).items() if o in FAILING}
    present = index.testset(last.id)
    had = index.testset(prev.id) if now.keys() - before.keys() else frozenset()
    new = sorted((t, o) for t, o in now.items() if t not in before)
    return Changes(
        new_failures=[(t, o) for t, o in new if not had or t in had],
        new_tests_failing=[(t, o) for t, o in new if had and t not in had],
        fixed=sorted((t, o) for t, o in before.items()
                     if t not in now and t in present and notable_now.get(t) != "upstream"),
    )


@dataclass
class Flaky:
    test: str
    flaky_runs: int  # passed on retry
    failed_runs: int
    seen: int
    flips: int
    last: str


def flaky(index: Index, runs: list[Run], window: int = FLAKY_WINDOW) -> list[Flaky]:
    """Tests that passed on retry, or failed in two or more separate stretches, lately.

    One failing stretch is a regression (and maybe its fix), not a flake.
    """
    recent = [r for r in runs[-window:] if r.total]
    notable = [index.notable(r.id) for r in recent]
    candidates = {t for n in notable for t, o in n.items() if o in FAILING or o == "flaky"}
    ran = [index.testset(r.id) for r in recent] if candidates else []
    found = []
    for test in sorted(candidates):
        states = []
        flaky_runs = failed_runs = 0
        for n, tests in zip(notable, ran, strict=True):
            outcome = n.get(test)
            if outcome is None:
                if test not in tests:
                    continue
                outcome = "passed"
            flaky_runs += outcome == "flaky"
            failed_runs += outcome in FAILING
            states.append(outcome in FAILING)
        flips = sum(1 for a, b in pairwise(states) if a != b)
        stretches = sum(1 for i, bad in enumerate(states) if bad and (i == 0 or not states[i - 1]))
        if flaky_runs or stretches >= 2:
            found.append(Flaky(test, flaky_runs, failed_runs, len(states), flips,
                               "failing" if states and states[-1] else "passing"))
    found.sort(key=lambda f: (-(f.flaky_runs + f.flips), f.test))
    return found


def expected_failures(index: Index, run: Run | None) -> list[tuple[str, str, str]]:
    """(test id, xfailed or xpassed, reason) in the run."""
    if run is None:
        return []
    reasons = index.xfail(run.id)
    return sorted((t, o, reasons.get(t, "")) for t, o in index.notable(run.id).items() if o in ("xfailed", "xpassed"))


# --- pull requests ---------------------------------------------------------------------

def pull_url(pr: int) -> str:
    return PULL_URL.format(pr=int(pr))


@dataclass
class AgainstNightly:
    """A PR run's failing tests that were not failing in its backend's nightly before it."""

    nightly: Run | None  # None: the backend has no nightly run that started before the PR run
    new_failures: list[tuple[str, str]] = field(default_factory=list)  # (test id, outcome)


def against_nightly(index: Index, run: Run) -> AgainstNightly:
    """Compare with the backend's latest nightly that started before the run: what the PR
    run fails that this nightly did not fail (passed, skipped, or did not run)."""
    nightly = index.nightly_before(run.backend, run.started_at)
    if nightly is None:
        return AgainstNightly(None)
    before = index.notable(nightly.id)
    new = sorted((t, o) for t, o in index.notable(run.id).items() if o in FAILING and before.get(t) not in FAILING)
    return AgainstNightly(nightly, new)


@dataclass
class PrRun:
    run: Run
    latest: bool  # the newest run of its backend at this head
    vs_nightly: AgainstNightly


@dataclass
class Head:
    """The runs of a PR at one head commit."""

    sha: str | None  # None: records that do not name the head (older ones, or started by hand)
    runs: list[PrRun]

    @property
    def commit_url(self) -> str | None:
        # The model only admits 40 hex digits; checked again because the link is built from it.
        return COMMIT_URL.format(sha=self.sha) if self.sha and _SHA.match(self.sha) else None


def pr_heads(index: Index, runs: list[Run]) -> list[Head]:
    """A PR's runs grouped by the head commit they tested, the group with the newest run
    first; in a group by backend, each backend's newest run first."""
    groups: dict[str | None, list[Run]] = {}
    for run in sorted(runs, key=lambda r: (r.started_at, r.id), reverse=True):
        groups.setdefault(run.pr_head_sha, []).append(run)
    heads = []
    for sha, members in groups.items():
        members.sort(key=lambda r: r.backend)  # stable: newest first within a backend
        seen: set[str] = set()
        rows = []
        for run in members:
            rows.append(PrRun(run, run.backend not in seen, against_nightly(index, run)))
            seen.add(run.backend)
        heads.append(Head(sha, rows))
    return heads


# --- causes: failures grouped by what broke (runner/core/causes.py) -------------------------

CAUSE_NOVELTY = ("new", "changed", "known", "upstream")


def run_causes(run: Run) -> list[dict]:
    """The causes the run's stages recorded (as the index keeps them), each with its stage,
    ordered new, changed, known, upstream and the largest first within each."""
    found = [dict(c, stage=s["name"]) for s in run.stages for c in s.get("causes", ())]
    return sorted(found, key=lambda c: (CAUSE_NOVELTY.index(c["novelty"]) if c["novelty"] in CAUSE_NOVELTY
                                        else len(CAUSE_NOVELTY), -c["count"], c["text"]))


@dataclass
class CauseSince:
    """Since when a cause has been failing: the first run of its current stretch, and the run
    before it (the culprit range of the night it appeared is between the two)."""

    first: Run
    before: Run | None

    @property
    def compare_url(self) -> str | None:
        return compare_url(self.before.torch_git if self.before else None, self.first.torch_git)


def cause_history(runs: list[Run]) -> dict[int, dict[str, CauseSince]]:
    """For each run (main-line, with results, oldest first): cause text -> since when it has
    been failing without a break. A cause is the same from night to night when its text is."""
    history: dict[int, dict[str, CauseSince]] = {}
    current: dict[str, CauseSince] = {}
    previous: Run | None = None
    for run in runs:
        texts = {c["text"] for c in run_causes(run)}
        current = {t: current.get(t) or CauseSince(run, previous) for t in texts}
        history[run.id] = current
        previous = run
    return history


@dataclass
class SharedCause:
    """A new cause that several backends hit in their latest runs of the same night: an upstream
    break, shown once."""

    text: str
    night: str
    backends: list[tuple[str, int]]
    """(backend, its tests with the cause)"""


def shared_causes(latest: dict[str, list[tuple[str, int, str]]]) -> list[SharedCause]:
    """Causes new on two or more backends the same night. `latest`: backend -> (cause text, count,
    night YYYY-MM-DD) of its latest run's new causes."""
    by_key: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for backend, found in latest.items():
        for text, count, night in found:
            by_key.setdefault((text, night), []).append((backend, count))
    shared = [SharedCause(text, night, sorted(hit)) for (text, night), hit in by_key.items() if len(hit) > 1]
    return sorted(shared, key=lambda s: (-len(s.backends), -sum(n for _, n in s.backends), s.text))
