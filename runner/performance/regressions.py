"""The open performance regressions of the backends under a directory of runs.

A count series (device instructions, device/CPU instructions) is judged by its steps
(runner/performance/steps.py, standard library only); a gated device-time series by E-divisive
over its points that were not too noisy (runner/performance/changes.py, the `perf` extra).
Without the extra, counts are still judged and `Findings.not_judged` says what was not.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ootci.runner.core.errors import UsageError
from ootci.runner.performance import changes, series, steps
from ootci.runner.performance.changes import Change

UNITS = {series.COUNT: "instructions", series.COUNT_RATIO: "device/CPU instructions", series.TIME: "device s"}


@dataclass(frozen=True)
class Regression:
    backend: str
    measurement: str
    metric: str
    """count, count_ratio or time (runner/performance/series.py)"""
    method: str
    """the counter (callgrind, perf_event) or the timing (events, wall) of the series"""
    relative: float
    """how much slower, relative (0.12: 12 % slower), median after the change over median before"""
    before: float
    after: float
    last_good: series.Point
    """the last run before the change"""
    first_bad: series.Point
    """the first run at the new level: the range between the two holds its cause"""
    runs_since: int
    """runs at the new level so far, the first included"""
    cpu_relative: float | None = None
    """how the CPU side moved across the same change: as much as the device, an upstream change;
    not at all, the backend's own"""

    @property
    def origin(self) -> str | None:
        """'upstream' where the CPU side moved as well (by half the device's move or more), else
        'backend'; None where there is no CPU side to tell by."""
        if self.cpu_relative is None:
            return None
        return "upstream" if self.cpu_relative >= self.relative / 2 else "backend"

    def to_json(self) -> dict:
        return {**asdict(self), "origin": self.origin}

    def line(self) -> str:
        origin = {"upstream": "; the CPU side moved too: upstream",
                  "backend": "; the CPU side did not move: the backend's own"}.get(self.origin or "", "")
        return (f"{self.backend} {self.measurement} {self.metric} ({self.method}): {self.relative:+.1%} "
                f"({UNITS.get(self.metric, self.metric)} {self.before:.4g} -> {self.after:.4g}) from run "
                f"{self.first_bad.run_id}, {self.runs_since} run(s) at it; last good {self.last_good.run_id}{origin}")


@dataclass
class Findings:
    regressions: list[Regression] = field(default_factory=list)
    not_judged: str | None = None
    """why some series were not judged (the perf extra is missing for gated device time)"""


def judged_points(one: series.Series) -> list[series.Point]:
    return one.points if one.metric in series.COUNTED else one.judged


def last_change(one: series.Series, points: list[series.Point]) -> Change | None:
    """The series' open regression over `points`; UsageError for time without the perf extra."""
    values = [p.value for p in points]
    if one.metric in series.COUNTED:
        return steps.open_regression(values)
    return changes.open_regression(values)


def judged(every: dict, backends: set[str] | None) -> list[series.Series]:
    """The series that are judged: counts, and device time where it is gated."""
    return [one for key, one in sorted(every.items()) if (not backends or one.backend in backends)
            and (one.metric in series.COUNTED or one.gated)]


def _open(every: dict, backends: set[str] | None, *, without_latest: bool = False) -> Findings:
    findings = Findings()
    for one in judged(every, backends):
        points = judged_points(one)
        try:
            change = last_change(one, points)
        except UsageError as exc:
            findings.not_judged = f"device time not judged: {exc.message}"
            continue
        if change is None:
            continue
        regression = _regression(one, points, change)
        if without_latest:
            before = last_change(one, points[:-1])
            if before is not None and points[before.index].run_id == regression.first_bad.run_id:
                continue  # already open without the latest point: not new
        findings.regressions.append(regression)
    return findings


def _regression(one: series.Series, points: list[series.Point], change: Change) -> Regression:
    cpu_relative = None
    cpu_before = [p.cpu for p in points[:change.index] if p.cpu]
    cpu_after = [p.cpu for p in points[change.index:] if p.cpu]
    if cpu_before and cpu_after:
        cpu_relative = statistics.median(cpu_after) / statistics.median(cpu_before) - 1
    return Regression(one.backend, one.measurement, one.metric, one.method, change.relative, change.before,
                      change.after, last_good=points[change.index - 1], first_bad=points[change.index],
                      runs_since=len(points) - change.index, cpu_relative=cpu_relative)


def find(runs: Path, backends: set[str] | None = None) -> Findings:
    return _open(series.of_directory(runs), backends)


def newly_found(runs: Path, backends: set[str] | None = None) -> Findings:
    """The open regressions that the latest point of their series revealed: judged without that
    point, the series had none (or one that began elsewhere). What the nightly bisects, once."""
    return _open(series.of_directory(runs), backends, without_latest=True)
