"""A PR run's bench measurements against the nightly baseline of the same backend.

One PR run is one sample. Its instruction counts are all but deterministic, so one sample is
enough: a count is slower when it is a step above the nightlies' current level (at least the
larger of 2 % and three times their night-to-night spread, runner/performance/steps.py), judged
against the latest NIGHTLIES nightly runs before it counted by the same counter. A gated device
time is noisy: it is slower when it is above every one of those nightlies and at least
MIN_SLOWDOWN above their median, so the nightlies' own noise never reads as the PR's doing, and
it needs MIN_NIGHTLIES of them; a time too noisy to judge, on either side, is left out.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from ootci.runner.models import RunRecord
from ootci.runner.performance import series, steps
from ootci.runner.performance.changes import MIN_SLOWDOWN

NIGHTLIES = 10
MIN_NIGHTLIES = 3
"""nightlies a PR run's device time needs to be judged against (a count needs one)"""


@dataclass(frozen=True)
class Slower:
    measurement: str
    metric: str
    method: str
    value: float
    """the PR run's value (instructions per call, their device/CPU ratio, or seconds per call)"""
    nightly_median: float
    nightly_max: float
    nightlies: int

    @property
    def relative(self) -> float:
        return self.value / self.nightly_median - 1

    def to_json(self) -> dict:
        return {**asdict(self), "relative": round(self.relative, 4)}


def compare(pr_run: RunRecord, history: list[RunRecord]) -> list[Slower] | None:
    """The measurements `pr_run` made slower than the nightly baseline; None when there is no
    baseline to judge by (no bench in the PR run, or no nightly of its backend measured the same way)."""
    mine = series.values(pr_run)
    if not mine:
        return None
    nightlies = sorted((r for r in history if r.backend == pr_run.backend and r.trigger == "nightly"
                        and r.started_at < pr_run.started_at), key=lambda r: r.started_at)
    measured = [found for found in map(series.values, nightlies) if found][-NIGHTLIES:]
    slower, judged = [], False
    for key, value in sorted(mine.items()):
        name, metric, method = key
        base = [night[key] for night in measured if key in night]
        if metric in series.COUNTED:
            if not base:
                continue
            judged = True
            level = steps.current_level([b.value for b in base])
            if steps.above(value.value, level) is not None:
                slower.append(Slower(name, metric, method, value.value, statistics.median(level), max(level),
                                     len(level)))
            continue
        base = [b for b in base if not b.noisy]
        if not value.gated or value.noisy or len(base) < MIN_NIGHTLIES:
            continue
        judged = True
        times = [b.value for b in base]
        median = statistics.median(times)
        if value.value > max(times) and value.value >= median * (1 + MIN_SLOWDOWN):
            slower.append(Slower(name, metric, method, value.value, median, max(times), len(times)))
    return slower if judged else None
