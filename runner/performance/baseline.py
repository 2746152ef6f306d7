"""A PR run's bench measurements against the nightly baseline of the same backend.

One PR run is one sample, so no change-point method applies: each of its device/CPU ratios is
held against the backend's latest NIGHTLIES nightly runs before it. A measurement is slower
when its ratio is above every one of those nightlies and at least MIN_SLOWDOWN above their
median: above the whole recent range, so the nightlies' own noise never reads as the PR's doing.
Fewer than MIN_NIGHTLIES nightlies say nothing.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from ootci.runner.models import RunRecord
from ootci.runner.performance.changes import MIN_SLOWDOWN
from ootci.runner.performance.series import ratios

NIGHTLIES = 10
MIN_NIGHTLIES = 3


@dataclass(frozen=True)
class Slower:
    measurement: str
    ratio: float
    """the PR run's device/CPU ratio"""
    nightly_median: float
    nightly_max: float
    nightlies: int

    @property
    def relative(self) -> float:
        return self.ratio / self.nightly_median - 1

    def to_json(self) -> dict:
        return {**asdict(self), "relative": round(self.relative, 4)}


def compare(pr_run: RunRecord, history: list[RunRecord]) -> list[Slower] | None:
    """The measurements `pr_run` made slower than the nightly baseline; None when there is no
    baseline to judge by (no bench in the PR run, or too few nightlies of its backend with one)."""
    mine = ratios(pr_run)
    if not mine:
        return None
    nightlies = sorted((r for r in history if r.backend == pr_run.backend and r.trigger == "nightly"
                        and r.started_at < pr_run.started_at), key=lambda r: r.started_at)
    measured = [found for found in map(ratios, nightlies) if found][-NIGHTLIES:]
    if len(measured) < MIN_NIGHTLIES:
        return None
    slower = []
    for name, ratio in sorted(mine.items()):
        base = [night[name] for night in measured if name in night]
        if len(base) < MIN_NIGHTLIES:
            continue
        median = statistics.median(base)
        if ratio > max(base) and ratio >= median * (1 + MIN_SLOWDOWN):
            slower.append(Slower(name, ratio, median, max(base), len(base)))
    return slower
