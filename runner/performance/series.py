"""Each bench measurement of a backend as a series over its main-line runs, oldest first.

A main-line run is one of the nightly or by hand on the default torch: not a PR run, not a
shard, not a step of a bisection (record_files.find_runs leaves those out). A run whose
bench stage did not record a measurement leaves a gap, not a zero: the series holds the
runs that measured it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ootci.runner.models import RunRecord
from ootci.runner.records import record_files

BENCH = "bench"


@dataclass(frozen=True)
class Point:
    run_id: str
    started_at: str
    ratio: float
    """the device median over the CPU median (what is compared)"""
    torch_commit: str | None
    source: str | None
    """the backend's sources as the build stage named them (a commit where they come from git)"""


@dataclass
class Series:
    backend: str
    measurement: str
    points: list[Point] = field(default_factory=list)

    @property
    def ratios(self) -> list[float]:
        return [p.ratio for p in self.points]


def ratios(record: RunRecord) -> dict[str, float]:
    """The device/CPU ratio of each measurement the record's bench stage recorded ({} without one)."""
    stage = record.stage(BENCH)
    measured = stage.data.get("measurements") if stage is not None else None
    if not isinstance(measured, dict):
        return {}
    return {name: float(m["ratio"]) for name, m in sorted(measured.items())
            if isinstance(m, dict) and isinstance(m.get("ratio"), (int, float)) and m["ratio"] > 0}


def is_main_line(record: RunRecord) -> bool:
    return record.trigger != "pr" and record.pr is None and record.shard is None


def of_records(records: list[RunRecord]) -> dict[tuple[str, str], Series]:
    """(backend, measurement) -> its series, from records of any backends, in any order."""
    found: dict[tuple[str, str], Series] = {}
    for record in sorted(filter(is_main_line, records), key=lambda r: r.started_at):
        build = record.stage("build")
        source = build.data.get("source") if build is not None else None
        for name, ratio in ratios(record).items():
            series = found.setdefault((record.backend, name), Series(record.backend, name))
            series.points.append(Point(record.run_id, record.started_at.isoformat(), ratio,
                                       record.torch.git_version, source))
    return found


def of_directory(runs: Path) -> dict[tuple[str, str], Series]:
    """The series of every backend with runs under `runs` (a history's runs/ or an --out directory)."""
    return of_records([record for _, record in record_files.find_runs(runs) if record is not None])
