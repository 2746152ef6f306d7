"""Each bench measurement of a backend as series over its main-line runs, oldest first.

A measurement gives up to three series (METRICS): its host instructions per call on the device
(`count`), the device's count over the CPU's (`count_ratio`), and its device time per call
(`time`). Each series has one `method` and never mixes two: the counter that counted (callgrind,
perf_event) or how the device was timed (events, wall); a run measured another way starts
another series. Counts are always judged; a time series is judged where its latest run says
the backend's time is gated (`[suites] bench_time`), and a time too noisy to judge is kept
(charted) but left out of detection.

A main-line run is one of the nightly or by hand on the default torch: not a PR run, not a
shard, not a step of a bisection (record_files.find_runs leaves those out). A run whose
bench stage did not record a measurement leaves a gap, not a zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ootci.runner.models import RunRecord, StageResult
from ootci.runner.records import record_files

BENCH = "bench"
COUNT, COUNT_RATIO, TIME = "count", "count_ratio", "time"
METRICS = (COUNT, COUNT_RATIO, TIME)
COUNTED = (COUNT, COUNT_RATIO)


@dataclass(frozen=True)
class Value:
    """One measurement's value in one run, for one metric."""

    value: float
    cpu: float | None = None
    """the CPU side's count or time: which side moved tells an upstream change from the backend's own"""
    noisy: bool = False
    """a time too noisy to judge: charted, not judged"""
    gated: bool = True
    """judged: counts always; time where the run's backend gates it"""


@dataclass(frozen=True)
class Point:
    run_id: str
    started_at: str
    value: float
    torch_commit: str | None
    source: str | None
    """the backend's sources as the build stage named them (a commit where they come from git)"""
    cpu: float | None = None
    noisy: bool = False


Key = tuple[str, str, str]
"""(measurement, metric, method)"""


@dataclass
class Series:
    backend: str
    measurement: str
    metric: str
    method: str
    gated: bool = True
    """whether the series is judged (as its latest run says)"""
    points: list[Point] = field(default_factory=list)

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]

    @property
    def judged(self) -> list[Point]:
        """The points detection looks at: all but the noisy ones."""
        return [p for p in self.points if not p.noisy]


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _side(measured: dict, side: str, field: str) -> float | None:
    """measured[side][field] where it is a positive number, else None."""
    found = measured.get(side)
    value = found.get(field) if isinstance(found, dict) else None
    return float(value) if isinstance(value, (int, float)) and _positive(value) else None


def values(record: RunRecord) -> dict[Key, Value]:
    """Every (measurement, metric, method) the record's bench stage measured ({} without one)."""
    return stage_values(record.stage(BENCH))


def stage_values(stage: StageResult | None) -> dict[Key, Value]:
    """Every (measurement, metric, method) a bench stage's result holds."""
    data = stage.data if stage is not None else {}
    measured = data.get("measurements")
    if not isinstance(measured, dict):
        return {}
    counter = data.get("counter")
    # Records from before the stage said how it timed (or gated) measured wall time, ungated.
    timing = data.get("timing") or "wall"
    gated = data.get("time_gated") is True
    found: dict[Key, Value] = {}
    for name, m in sorted(measured.items()):
        if not isinstance(m, dict):
            continue
        counts = m.get("counts")
        if isinstance(counter, str) and isinstance(counts, dict):
            device, cpu = _side(counts, "device", "per_call"), _side(counts, "cpu", "per_call")
            if device is not None and cpu is not None:
                found[(name, COUNT, counter)] = Value(device, cpu=cpu)
                found[(name, COUNT_RATIO, counter)] = Value(device / cpu)
        device_time = _side(m, "device", "median")
        if device_time is not None:
            found[(name, TIME, m.get("timing") or timing)] = Value(
                device_time, cpu=_side(m, "cpu", "median"), noisy=m.get("noisy") is True, gated=gated)
    return found


def is_main_line(record: RunRecord) -> bool:
    return record.trigger != "pr" and record.pr is None and record.shard is None


def of_records(records: list[RunRecord]) -> dict[tuple[str, str, str, str], Series]:
    """(backend, measurement, metric, method) -> its series, from records of any backends, in any order."""
    found: dict[tuple[str, str, str, str], Series] = {}
    for record in sorted(filter(is_main_line, records), key=lambda r: r.started_at):
        build = record.stage("build")
        source = build.data.get("source") if build is not None else None
        for (name, metric, method), v in values(record).items():
            key = (record.backend, name, metric, method)
            series = found.setdefault(key, Series(record.backend, name, metric, method))
            series.gated = v.gated
            series.points.append(Point(record.run_id, record.started_at.isoformat(), v.value,
                                       record.torch.git_version, source, cpu=v.cpu, noisy=v.noisy))
    return found


def of_directory(runs: Path) -> dict[tuple[str, str, str, str], Series]:
    """The series of every backend with runs under `runs` (a history's runs/ or an --out directory)."""
    return of_records([record for _, record in record_files.find_runs(runs) if record is not None])
