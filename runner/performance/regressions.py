"""The open performance regressions of the backends under a directory of runs."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from ootci.runner.performance import changes, series


@dataclass(frozen=True)
class Regression:
    backend: str
    measurement: str
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

    def to_json(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        return (f"{self.backend} {self.measurement}: {self.relative:+.1%} (device/CPU {self.before:.3g} -> "
                f"{self.after:.3g}) from run {self.first_bad.run_id}, {self.runs_since} run(s) at it; "
                f"last good {self.last_good.run_id}")


def newly_found(runs: Path, backends: set[str] | None = None) -> list[Regression]:
    """The open regressions that the latest point of their series revealed: judged without that
    point, the series had none (or one that began elsewhere). What the nightly bisects, once."""
    every = series.of_directory(runs)
    found = []
    for regression in _open(every, backends):
        one = every[(regression.backend, regression.measurement)]
        before = changes.open_regression(one.ratios[:-1])
        if before is None or one.points[before.index].run_id != regression.first_bad.run_id:
            found.append(regression)
    return found


def find(runs: Path, backends: set[str] | None = None) -> list[Regression]:
    return _open(series.of_directory(runs), backends)


def _open(every: dict[tuple[str, str], series.Series], backends: set[str] | None) -> list[Regression]:
    found = []
    for (backend, measurement), one in sorted(every.items()):
        if backends and backend not in backends:
            continue
        change = changes.open_regression(one.ratios)
        if change is None:
            continue
        found.append(Regression(backend, measurement, change.relative, change.before, change.after,
                                last_good=one.points[change.index - 1], first_bad=one.points[change.index],
                                runs_since=len(one.points) - change.index))
    return found
