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
    for name in ("signal_processing_algorithms", "signal_processing_algorithms.energy_statistics",
                 "signal_processing_algorithms.energy_statistics.energy_statistics"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: the import fails
    with pytest.raises(UsageError, match=r"pip install 'ootci\[perf\]'"):
        changes.change_points(noisy([(1.0, 10)]))


def record(run_id: str, day: int, ratios: dict[str, float] | None, **fields) -> RunRecord:
    stages = [StageResult(name="build", status=Status.passed, data={"source": f"git@{day:040x}"})]
    if ratios is not None:
        stages.append(StageResult(name="bench", status=Status.passed, data={"measurements": {
            name: {"device": {"median": r}, "cpu": {"median": 1.0}, "ratio": r} for name, r in ratios.items()}}))
    return RunRecord(run_id=run_id, backend="acme", device="acme", torch=TorchInfo(spec="nightly", git_version=f"{day:040x}"),
                     started_at=dt.datetime(2026, 10, 1, tzinfo=dt.timezone.utc) + dt.timedelta(days=day),
                     status=Status.passed, stages=stages, trigger=fields.pop("trigger", "nightly"), **fields)


def test_series_hold_main_line_runs_with_a_bench_stage_oldest_first():
    records = [record("n2", 2, {"matmul": 1.2, "add_tiny": 3.0}), record("n1", 1, {"matmul": 1.1}),
               record("pr", 3, {"matmul": 9.0}, trigger="pr", pr=5), record("shard", 4, {"matmul": 9.0}, shard="1/2"),
               record("off", 5, None), record("n6", 6, {"matmul": 1.3, "bad": -1.0})]
    found = series.of_records(records)
    assert set(found) == {("acme", "matmul"), ("acme", "add_tiny")}
    matmul = found[("acme", "matmul")]
    assert [p.run_id for p in matmul.points] == ["n1", "n2", "n6"] and matmul.ratios == [1.1, 1.2, 1.3]
    assert matmul.points[0].source == f"git@{1:040x}" and matmul.points[0].torch_commit == f"{1:040x}"


def test_ootci_perf_names_the_open_regression_and_the_runs_around_it(tmp_path):
    runs = tmp_path / "runs"
    matmul = noisy([(1.1, 24), (1.3, 4)], seed=3)
    add = noisy([(2.0, 28)], seed=4)
    for day, (m, a) in enumerate(zip(matmul, add)):
        record_files.write(runs / f"acme-{day:02d}", record(f"acme-{day:02d}", day, {"matmul": m, "add_tiny": a}))
    result = ootci("perf", "--runs", str(runs), "--json")
    assert result.returncode == 0, result.stderr
    [found] = json.loads(result.stdout)
    assert (found["backend"], found["measurement"], found["runs_since"]) == ("acme", "matmul", 4)
    assert (found["last_good"]["run_id"], found["first_bad"]["run_id"]) == ("acme-23", "acme-24")
    assert found["relative"] == pytest.approx(0.18, abs=0.04)
    text = ootci("perf", "--runs", str(runs))
    assert text.stdout.splitlines()[-1] == "1 open performance regression(s)"
    assert text.stdout.startswith("acme matmul: +")
    missing = ootci("perf", "--runs", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "--runs:" in missing.stderr and "is not a directory" in missing.stderr
