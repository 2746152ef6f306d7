"""Change points of bench timings: found by E-divisive means, not by a threshold; an open regression
is a last change that slows the device down; series come from main-line runs only. The series
here are noisy on purpose (seeded); bench/perf_detection.py measures the same on real ones."""

from __future__ import annotations

import datetime as dt
import json
import random
import sys

import pytest

from ootci.runner.core.errors import UsageError
from ootci.runner.models import RunRecord, StageResult, Status, TorchInfo
from ootci.runner.performance import changes, series
from ootci.runner.records import record_files
from tests.support.cli import ootci


def noisy(levels: list[tuple[float, int]], noise: float = 0.02, seed: int = 1) -> list[float]:
    """`count` points around each `level`, each off by up to `noise` (relative)."""
    rng = random.Random(seed)
    return [level * (1 + rng.uniform(-noise, noise)) for level, count in levels for _ in range(count)]


def test_a_flat_noisy_series_has_no_change():
    assert changes.changes(noisy([(1.5, 40)])) == []


def test_a_ten_percent_slowdown_is_found_three_runs_after_it_and_is_open():
    values = noisy([(1.5, 30), (1.65, 3)])
    found = changes.open_regression(values)
    assert found is not None and found.index == 30
    assert found.relative == pytest.approx(0.10, abs=0.03)


def test_a_slowdown_undone_later_is_not_open_and_a_speedup_is_no_regression():
    back = noisy([(1.5, 20), (1.8, 10), (1.5, 10)])
    assert [c.index for c in changes.changes(back)] == [20, 30]
    assert changes.open_regression(back) is None
    faster = noisy([(1.5, 30), (1.2, 5)])
    assert [c.index for c in changes.changes(faster)] == [30]
    assert changes.open_regression(faster) is None


def test_too_few_points_say_nothing():
    assert changes.change_points(noisy([(1.0, 3), (2.0, 2)])) == []


def test_the_answer_is_the_same_every_time_and_numpy_is_left_as_it_was():
    import numpy as np

    values = noisy([(1.0, 25), (1.07, 4)], noise=0.03, seed=7)
    np.random.seed(123)
    expected_next = np.random.random()
    np.random.seed(123)
    first = changes.change_points(values)
    assert all(changes.change_points(values) == first for _ in range(3))
    assert np.random.random() == expected_next  # the seed used inside did not leak out


SERIES = {
    "flat": noisy([(1.5, 40)]),
    "flat, long": noisy([(1.0, 60)], noise=0.1, seed=2),
    "10 % step": noisy([(1.5, 30), (1.65, 3)]),
    "back and forth": noisy([(1.5, 20), (1.8, 10), (1.5, 10)]),
    "small step in noise": noisy([(1.0, 25), (1.07, 4)], noise=0.03, seed=7),
    "fourfold after 7": noisy([(1.0, 7), (4.0, 2)], noise=0.1, seed=3),
    "constant": [2.0] * 12,
    "gradual": [1 + i / 50 for i in range(50)],
}


@pytest.mark.parametrize("name", SERIES)
def test_the_change_points_are_the_librarys_own(name):
    """The permutation test stops early here; every answer must still be what the library's
    e_divisive says from the same seed, for series with and without changes."""
    import numpy as np
    from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive

    values = SERIES[name]
    np.random.seed(changes.SEED)
    expected = sorted(e_divisive(changes.factor_scale(values), pvalue=changes.PVALUE,
                                 permutations=changes.PERMUTATIONS))
    assert changes.change_points(values) == expected


def test_a_series_without_a_change_is_settled_in_a_few_shuffles(monkeypatch):
    from signal_processing_algorithms.energy_statistics import energy_statistics

    computed = []
    statistics_of = energy_statistics._calculate_t_stats
    monkeypatch.setattr(energy_statistics, "_calculate_t_stats",
                        lambda distances: computed.append(1) or statistics_of(distances))
    flat = [noisy([(1.0, 60)], noise=0.1, seed=seed) for seed in range(10)]
    assert [changes.change_points(values) for values in flat] == [[]] * 10
    # Each: the split itself, then shuffles until 3 score as high as it (all 200 before).
    assert len(computed) < len(flat) * changes.PERMUTATIONS / 4
    computed.clear()
    assert changes.change_points(SERIES["10 % step"]) == [30]
    assert len(computed) > changes.PERMUTATIONS  # a significant split takes every shuffle


def test_without_the_perf_extra_the_error_says_what_to_install(monkeypatch):
    """Neither the library nor numpy: the one line, not a ModuleNotFoundError (a plain install has no numpy)."""
    for name in ("numpy", "signal_processing_algorithms", "signal_processing_algorithms.energy_statistics",
                 "signal_processing_algorithms.energy_statistics.energy_statistics"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: the import fails
    with pytest.raises(UsageError, match=r"pip install 'ootci\[perf\]'"):
        changes.change_points(noisy([(1.0, 10)]))
    assert changes.available() is False


def bench(counts: dict[str, tuple[float, float]] | None = None, times: dict[str, float] | None = None, *,
          counter: str = "callgrind", gated: bool = False, noisy_names: tuple[str, ...] = ()) -> StageResult:
    """A bench stage's result: (device, CPU) instructions per call, and device seconds per call."""
    measurements: dict[str, dict] = {}
    for name, (device, cpu) in (counts or {}).items():
        measurements.setdefault(name, {})["counts"] = {"device": {"per_call": device}, "cpu": {"per_call": cpu},
                                                       "ratio": device / cpu}
    for name, t in (times or {}).items():
        measurements.setdefault(name, {}).update({"device": {"median": t, "rsd": 0.01}, "cpu": {"median": 1e-3},
                                                  "ratio": t / 1e-3, "timing": "events",
                                                  "noisy": name in noisy_names})
    return StageResult(name="bench", status=Status.passed, data={
        "measurements": measurements, "counter": counter if counts else None, "timing": "events",
        "time_gated": gated})


def record(run_id: str, day: int, stage: StageResult | None, **fields) -> RunRecord:
    stages = [StageResult(name="build", status=Status.passed, data={"source": f"git@{day:040x}"})]
    if stage is not None:
        stages.append(stage)
    return RunRecord(run_id=run_id, backend="acme", device="acme",
                     torch=TorchInfo(spec="nightly", git_version=f"{day:040x}"),
                     started_at=dt.datetime(2026, 10, 1, tzinfo=dt.UTC) + dt.timedelta(days=day),
                     status=Status.passed, stages=stages, trigger=fields.pop("trigger", "nightly"), **fields)


def test_series_hold_main_line_runs_one_per_metric_and_method_oldest_first():
    records = [record("n2", 2, bench({"matmul": (120.0, 100.0), "add_tiny": (300.0, 100.0)})),
               record("n1", 1, bench({"matmul": (110.0, 100.0)}, {"matmul": 2e-3})),
               record("pr", 3, bench({"matmul": (900.0, 100.0)}), trigger="pr", pr=5),
               record("shard", 4, bench({"matmul": (900.0, 100.0)}), shard="1/2"),
               record("off", 5, None),
               record("n6", 6, bench({"matmul": (130.0, 100.0), "bad": (-1.0, 100.0)}, counter="perf_event")),
               # Before the stage counted: its time was wall time, ungated.
               record("old", 7, StageResult(name="bench", status=Status.passed, data={"measurements": {
                   "matmul": {"ratio": 1.2, "device": {"median": 3e-3}, "cpu": {"median": 1e-3}}}}))]
    found = series.of_records(records)
    assert set(found) == {("acme", "matmul", "count", "callgrind"), ("acme", "matmul", "count_ratio", "callgrind"),
                          ("acme", "add_tiny", "count", "callgrind"), ("acme", "add_tiny", "count_ratio", "callgrind"),
                          ("acme", "matmul", "count", "perf_event"), ("acme", "matmul", "count_ratio", "perf_event"),
                          ("acme", "matmul", "time", "events"), ("acme", "matmul", "time", "wall")}
    counted = found[("acme", "matmul", "count", "callgrind")]
    assert [p.run_id for p in counted.points] == ["n1", "n2"] and counted.values == [110.0, 120.0]
    assert [p.cpu for p in counted.points] == [100.0, 100.0] and counted.gated
    assert found[("acme", "matmul", "count_ratio", "callgrind")].values == [1.1, 1.2]
    # Another counter is another series: never one series of two counters.
    assert found[("acme", "matmul", "count", "perf_event")].values == [130.0]
    assert counted.points[0].source == f"git@{1:040x}" and counted.points[0].torch_commit == f"{1:040x}"
    old = found[("acme", "matmul", "time", "wall")]
    assert old.values == [3e-3] and not old.gated


def write_nights(runs, stages) -> None:
    for day, stage in enumerate(stages):
        record_files.write(runs / f"acme-{day:02d}", record(f"acme-{day:02d}", day, stage))


def test_ootci_perf_names_a_count_step_on_its_first_night_and_tells_the_backends_own(tmp_path):
    runs = tmp_path / "runs"
    # add_tiny: the device's count steps 3 % at night 8, the CPU's does not: the backend's own.
    # matmul: both sides step 4 % at night 8: upstream. view: steady.
    stages = [bench({"add_tiny": (18_400 * (1.03 if day >= 8 else 1), 9_000),
                     "matmul": (1.1e8 * (1.04 if day >= 8 else 1), 1.0e8 * (1.04 if day >= 8 else 1)),
                     "view": (9_460 * (1 + 0.0005 * (day % 3)), 9_444)}) for day in range(9)]
    write_nights(runs, stages)
    result = ootci("perf", "--runs", str(runs), "--json")
    assert result.returncode == 0, result.stderr
    found = {(r["measurement"], r["metric"]): r for r in json.loads(result.stdout)}
    assert set(found) == {("add_tiny", "count"), ("add_tiny", "count_ratio"), ("matmul", "count")}
    tiny = found[("add_tiny", "count")]
    assert (tiny["last_good"]["run_id"], tiny["first_bad"]["run_id"], tiny["runs_since"]) == ("acme-07", "acme-08", 1)
    assert tiny["relative"] == pytest.approx(0.03) and tiny["origin"] == "backend"
    assert found[("matmul", "count")]["origin"] == "upstream"
    text = ootci("perf", "--runs", str(runs))
    assert text.stdout.splitlines()[-1] == "3 open performance regression(s)"
    assert "acme add_tiny count (callgrind): +3.0%" in text.stdout and "the backend's own" in text.stdout
    missing = ootci("perf", "--runs", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "--runs:" in missing.stderr and "is not a directory" in missing.stderr


def test_device_time_is_judged_only_where_gated_and_without_its_noisy_nights(tmp_path):
    times = noisy([(1e-3, 24), (1.3e-3, 4)], seed=3)
    gated, shown = tmp_path / "gated", tmp_path / "shown"
    # The gated backend's night 25 is far off, and marked too noisy to judge: left out.
    write_nights(gated, [bench(times={"matmul": t * (3 if day == 25 else 1)}, gated=True,
                               noisy_names=("matmul",) if day == 25 else ()) for day, t in enumerate(times)])
    write_nights(shown, [bench(times={"matmul": t}, gated=False) for t in times])
    [found] = json.loads(ootci("perf", "--runs", str(gated), "--json").stdout)
    assert (found["metric"], found["method"], found["first_bad"]["run_id"]) == ("time", "events", "acme-24")
    assert found["runs_since"] == 3 and found["relative"] == pytest.approx(0.3, abs=0.05)
    assert json.loads(ootci("perf", "--runs", str(shown), "--json").stdout) == []
