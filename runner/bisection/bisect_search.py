"""Where a bisection looks next, worked out from the verdicts so far and nothing else.

Candidates are numbered 0..n-1 along the axis: 0 is the good end, n-1 the bad end,
neither of them judged here. Because the next probe is a function of the steps taken,
a bisection that was interrupted continues exactly where it stopped: replay the
recorded steps and ask again.

The rules, like `git bisect`:
- probe the candidate nearest the middle of the open range (the upper middle, so a
  range of two probes the later one first);
- a `skip` verdict takes a candidate out, and the search moves to its neighbours;
- once the range is closed, each boundary verdict that a step gave (not the ends)
  is judged once more: a verdict that changes means the predicate is flaky there,
  and no culprit is named. A predicate that cannot be flaky (an instruction count,
  all but deterministic) is not judged twice (`recheck=False`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ootci.runner.models import Verdict


@dataclass(frozen=True)
class Probe:
    candidate: int
    rerun: bool = False


@dataclass(frozen=True)
class Ended:
    """Where the search ended."""

    kind: str  # found, range, flaky
    last_good: int
    first_bad: int
    skipped: tuple[int, ...] = ()
    flaky: int | None = None


@dataclass(frozen=True)
class Step:
    candidate: int
    verdict: Verdict
    rerun: bool = False


def first_verdicts(steps: list[Step]) -> dict[int, Verdict]:
    verdicts: dict[int, Verdict] = {}
    for step in steps:
        if not step.rerun:
            verdicts[step.candidate] = step.verdict
    return verdicts


def bounds(size: int, verdicts: dict[int, Verdict]) -> tuple[int, int]:
    """(last good, first bad): the first bad candidate, and the last good one before it."""
    first_bad = min([i for i, v in verdicts.items() if v is Verdict.bad] + [size - 1])
    last_good = max([i for i, v in verdicts.items() if v is Verdict.good and i < first_bad] + [0])
    return last_good, first_bad


def next_probe(size: int, steps: list[Step], recheck: bool = True) -> Probe | Ended:
    """The next candidate to judge, or where the search ended; recheck: judge the boundaries twice."""
    if size < 2:
        raise ValueError("a bisection needs a good and a bad end")
    verdicts = first_verdicts(steps)
    last_good, first_bad = bounds(size, verdicts)
    open_ = [i for i in range(last_good + 1, first_bad) if i not in verdicts]
    if open_:
        middle = (last_good + first_bad + 1) // 2
        return Probe(min(open_, key=lambda i: (abs(i - middle), -i)))
    skipped = tuple(i for i in range(last_good + 1, first_bad) if verdicts.get(i) is Verdict.skip)
    if not recheck:
        return Ended("range" if skipped else "found", last_good, first_bad, skipped)
    reruns = {s.candidate: s.verdict for s in steps if s.rerun}
    for boundary in (first_bad, last_good):
        if boundary in (0, size - 1):
            continue  # an end is given, not judged
        if boundary not in reruns:
            return Probe(boundary, rerun=True)
        if reruns[boundary] is not verdicts[boundary]:
            return Ended("flaky", last_good, first_bad, skipped, flaky=boundary)
    return Ended("range" if skipped else "found", last_good, first_bad, skipped)


def most_judged_steps(size: int) -> int:
    """Judged steps a search over `size` candidates takes at most without skips: halvings plus two re-runs."""
    between = max(size - 2, 0)
    halvings = between.bit_length()  # ceil(log2(between + 1))
    return halvings + min(2, between)
