"""`ootci bisect --perf MEASUREMENT`: the performance predicate (runner/bisection/slowdown.py) from the
ends' instruction counts where they moved (each step judged by which end its count lies nearer),
else from their time rounds (by which end most rounds lie nearer), and a walk over candidates that
finds the commit that made the measurement slower and never guesses a noisy step."""

from __future__ import annotations

import datetime as dt

import pytest

from ootci.runner.bisection import bisect, slowdown
from ootci.runner.core.errors import BisectError
from ootci.runner.models import BisectCandidate, BisectRecord, BisectRound, RunRecord, StageResult, Status, TorchInfo
from ootci.runner.models import Verdict as V
from tests.support.cli import ootci

STARTED = dt.datetime(2026, 11, 20, 3, 17, tzinfo=dt.UTC)
GOOD_ROUNDS = [3.0, 3.05, 2.95, 3.02, 2.98]
BAD_ROUNDS = [3.9, 3.95, 3.85, 4.0, 3.92]


def bench_run(run_id: str, rounds: list[float] | None, measurement: str = "add_tiny",
              status: Status = Status.passed, day: int = 0) -> RunRecord:
    stages = [StageResult(name="build", status=Status.passed)]
    if rounds is not None:
        stages.append(StageResult(name="bench", status=status, summary="bench", data={"measurements": {
            measurement: {"ratio": sorted(rounds)[len(rounds) // 2], "round_ratios": rounds}}}))
    return RunRecord(run_id=run_id, backend="openreg", device="openreg", trigger="nightly",
                     torch=TorchInfo(spec="2.13.0", version="2.13.0"), started_at=STARTED + dt.timedelta(days=day),
                     status=Status.passed, stages=stages)


def predicate():
    return slowdown.derive(bench_run("good", GOOD_ROUNDS), bench_run("bad", BAD_ROUNDS), "add_tiny")


def count_run(run_id: str, device: float | None, cpu: float = 9_000.0, measurement: str = "add_tiny",
              counter: str = "callgrind", day: int = 0) -> RunRecord:
    """A run whose bench stage counted `measurement` (instructions per call on each side), and timed it."""
    record = bench_run(run_id, GOOD_ROUNDS, measurement=measurement, day=day)
    stage = record.stage("bench")
    stage.data["counter"] = counter
    if device is not None:
        stage.data["measurements"][measurement]["counts"] = {
            "device": {"per_call": device}, "cpu": {"per_call": cpu}, "ratio": device / cpu}
    return record


def test_on_counts_the_predicate_takes_the_measure_that_moved_and_says_by_which_counter():
    own = slowdown.derive(count_run("good", 18_400), count_run("bad", 18_960), "add_tiny")
    assert (own.stage, own.measurement, own.metric, own.counter) == ("bench", "add_tiny", "count", "callgrind")
    assert (own.good_value, own.bad_value) == (18_400, 18_960) and own.good_ratios == []
    assert own.cause == "add_tiny +3.0% instructions (1.84e+04 -> 1.896e+04, callgrind)"
    # Upstream made the CPU's add cheaper and the device's did not follow: the ratio moved.
    relative = slowdown.derive(count_run("good", 18_400, cpu=9_000), count_run("bad", 18_400, cpu=8_500), "add_tiny")
    assert relative.metric == "count_ratio" and relative.bad_value == pytest.approx(18_400 / 8_500)


@pytest.mark.parametrize("good, bad, said", [
    (count_run("good", 18_400), count_run("bad", 18_600), r"counts no 2% more instructions .* \(device \+1.09%"),
    # Counted by different counters, and the time rounds do not tell apart: refused on time.
    (count_run("good", 18_400), count_run("bad", 19_400, counter="perf_event"), "is not 5% slower"),
])
def test_ends_whose_counts_did_not_move_are_refused(good, bad, said):
    with pytest.raises(BisectError, match=said):
        slowdown.derive(good, bad, "add_tiny")


def test_a_step_on_counts_is_judged_by_which_end_its_count_lies_nearer_and_never_noisy():
    p = slowdown.derive(count_run("good", 18_400), count_run("bad", 18_960), "add_tiny")
    assert bisect.judge(count_run("step", 18_950), p)[:2] == \
        (V.bad, "add_tiny 1.895e+04 instructions (good 1.84e+04, bad 1.896e+04)")
    assert bisect.judge(count_run("step", 18_600), p)[0] is V.good
    assert bisect.judge(count_run("step", 18_700), p)[0] is V.bad  # past the middle, as factors
    assert bisect.judge(count_run("step", 19_000, counter="perf_event"), p)[:2] == \
        (V.skip, "add_tiny was counted by perf_event, the ends by callgrind")
    uncounted = count_run("step", None)
    uncounted.stage("bench").data["counter_note"] = "time only: valgrind is not on PATH"
    assert bisect.judge(uncounted, p)[:2] == (V.skip, "add_tiny was not counted (time only: valgrind is not on PATH)")


def test_the_predicate_keeps_both_ends_rounds_and_says_the_slowdown():
    p = predicate()
    assert (p.stage, p.measurement, p.good_ratios, p.bad_ratios) == ("bench", "add_tiny", GOOD_ROUNDS, BAD_ROUNDS)
    assert p.cause == "add_tiny +31% slower (device/CPU 3 -> 3.92)"


@pytest.mark.parametrize("good, bad, said", [
    (GOOD_ROUNDS, [3.05, 3.1, 3.08, 3.12, 3.06], "is not 5% slower than the good run"),
    # 2 of the bad end's 5 rounds nearer the good median: the bad end, judged as a step, is noise.
    (GOOD_ROUNDS, [3.04, 3.08, 3.35, 3.4, 3.32], r"the ends do not tell apart \(0 of 5 good rounds and 3 of 5 bad"),
    ([3.0, 3.05, 3.25, 3.3, 2.98], [3.3, 3.4, 3.35, 3.42, 3.38], r"\(2 of 5 good rounds and 5 of 5 bad"),
    (None, BAD_ROUNDS, "has no bench rounds of 'add_tiny'"),
])
def test_ends_that_do_not_tell_apart_are_refused(good, bad, said):
    with pytest.raises(BisectError, match=said):
        slowdown.derive(bench_run("good", good), bench_run("bad", bad), "add_tiny")


def test_ends_with_one_wild_round_each_still_tell_apart():
    """A loaded machine (2 cores running the whole test suite) timed a fourfold slowdown's ends with a
    round each far off: good 0.52-2.83, bad 2.31-11.6. Most rounds of each end lie nearer its own
    median, as a step needs, so the bisection goes on."""
    p = slowdown.derive(bench_run("good", [0.52, 0.95, 1.0, 1.1, 2.83]),
                        bench_run("bad", [2.31, 3.9, 4.1, 4.3, 11.6]), "add_tiny")
    assert (max(p.good_ratios), min(p.bad_ratios)) == (2.83, 2.31)
    assert p.cause == "add_tiny +310% slower (device/CPU 1 -> 4.1)"


@pytest.mark.parametrize("rounds, verdict, said", [
    ([3.8, 3.9, 4.1, 3.7, 3.95], V.bad, "5 of 5 rounds nearer bad"),
    ([3.1, 2.9, 3.0, 3.3, 3.05], V.good, "0 of 5 rounds nearer bad"),
    ([3.8, 3.9, 3.0, 3.1, 3.95], V.skip, "too noisy to decide"),  # 3 of 5: no verdict is guessed
    ([3.8, 3.9, 3.7, 3.95, 3.1], V.bad, "4 of 5 rounds nearer bad"),
])
def test_a_step_is_judged_by_which_end_its_rounds_lie_nearer(rounds, verdict, said):
    found, why, stage = bisect.judge(bench_run("step", rounds), predicate())
    assert found is verdict and said in why and stage == "bench"


def test_a_step_without_the_measurement_is_skipped():
    assert bisect.judge(bench_run("step", [1.0], measurement="matmul"), predicate())[:2] == \
        (V.skip, "add_tiny was not measured")
    failed = bench_run("step", None)
    failed.stages.append(StageResult(name="bench", status=Status.failed, summary="1 of 16 measurements failed"))
    assert bisect.judge(failed, predicate())[:2] == (V.skip, "bench failed: 1 of 16 measurements failed")


def test_nearer_is_judged_as_factors_not_differences():
    """Ends 1 and 28 (a copy of 16 MB added to an op): a step at 5.5 is 5.5 times the good end and
    5 times below the bad one, so bad; by plain difference it would have been called good."""
    wide = slowdown.derive(bench_run("good", [1.0] * 5), bench_run("bad", [28.0] * 5), "add_tiny")
    assert bisect.judge(bench_run("step", [5.5] * 5), wide)[0] is V.bad
    assert bisect.judge(bench_run("step", [5.0] * 5), wide)[0] is V.good


def test_a_walk_finds_the_commit_that_made_it_slower_past_a_noisy_one(tmp_path):
    """Eight backend commits; the fifth adds the slowdown; the third is noisy (its rounds straddle
    the ends): it is skipped, and the fifth is named with the fourth as the last good one."""
    from ootci.runner.manifests import registry

    options = bisect.BisectOptions(manifest=registry.resolve("openreg"), good="c0", bad="c7", out=tmp_path,
                                   axis="backend", perf="add_tiny")
    state = BisectRecord(bisect_id="bisect-openreg-perf", backend="openreg", started_at=bisect.now(),
                         good="c0", bad="c7", predicate=predicate())
    b = bisect.Bisection(options, state, tmp_path)
    commits = [f"{k:x}" * 40 for k in range(8)]
    r = BisectRound(axis="backend", fixed="torch 2.13.0", torch="2.13.0",
                    candidates=[BisectCandidate(label=f"openreg@{c[:7]}", spec=c, commit=c) for c in commits])
    state.rounds.append(r)

    def step(candidate):
        k = commits.index(candidate.commit)
        rounds = BAD_ROUNDS if k >= 4 else [3.8, 3.9, 3.0, 3.1, 3.95] if k == 2 else GOOD_ROUNDS
        return bench_run(f"step-{k}", rounds)

    b.walk(r, state.predicate, step)
    assert r.result.kind == "found", r.result
    ends = (r.candidates[r.result.last_good].commit, r.candidates[r.result.first_bad].commit)
    assert ends == (commits[3], commits[4])
    assert r.result.cause.startswith("add_tiny 3.92") and "5 of 5 rounds nearer bad" in r.result.cause
    assert all(s.verdict is not V.bad for s in r.steps if r.candidates[s.candidate].commit in commits[:4])


def test_a_walk_on_counts_names_the_commit_without_judging_a_step_twice(tmp_path):
    """Eight backend commits, the fifth 3 % more instructions on the device: a count has no noise,
    so each verdict stands as given (a walk on time rounds judges its boundaries twice)."""
    from ootci.runner.manifests import registry

    on_counts = slowdown.derive(count_run("good", 18_400), count_run("bad", 18_952), "add_tiny")
    options = bisect.BisectOptions(manifest=registry.resolve("openreg"), good="c0", bad="c7", out=tmp_path,
                                   axis="backend", perf="add_tiny")
    state = BisectRecord(bisect_id="bisect-openreg-perf", backend="openreg", started_at=bisect.now(),
                         good="c0", bad="c7", predicate=on_counts)
    b = bisect.Bisection(options, state, tmp_path)
    commits = [f"{k:x}" * 40 for k in range(8)]
    r = BisectRound(axis="backend", fixed="torch 2.13.0", torch="2.13.0",
                    candidates=[BisectCandidate(label=f"openreg@{c[:7]}", spec=c, commit=c) for c in commits])
    state.rounds.append(r)
    b.walk(r, on_counts, lambda c: count_run("step", 18_952 if commits.index(c.commit) >= 4 else 18_401))
    assert r.result.kind == "found", r.result
    named = (r.candidates[r.result.last_good].commit, r.candidates[r.result.first_bad].commit)
    assert named == (commits[3], commits[4])
    assert not any(s.rerun for s in r.steps) and len(r.steps) == 3


def test_without_ends_the_open_regression_under_runs_names_them(tmp_path):
    """--perf without --good/--bad: the runs either side of the step `ootci perf` finds."""
    from ootci.runner.records import record_files

    runs = tmp_path / "runs"
    for day in range(12):
        record = count_run(f"openreg-202611{day + 1:02d}T031700Z-{day:06x}", 18_400 * (1.04 if day >= 8 else 1.0),
                           day=day)
        record.finished_at = record.started_at + dt.timedelta(minutes=5)
        record_files.write(runs / record.run_id, record)
    planned = ootci("bisect", "openreg", "--perf", "add_tiny", "--runs", str(runs), "--out", str(tmp_path / "b"),
                    "--axis", "backend", "--dry-run")
    assert "openreg-20261108T031700Z-000007" in planned.stdout + planned.stderr
    assert "openreg-20261109T031700Z-000008" in planned.stdout + planned.stderr
    assert "predicate: stage bench: add_tiny +4.0% instructions" in planned.stdout
    none = ootci("bisect", "openreg", "--perf", "matmul", "--runs", str(runs), "--out", str(tmp_path / "c"))
    assert none.returncode == 2 and "no open regression of openreg matmul" in none.stderr


def test_the_nightly_plan_lists_a_slowdown_on_the_night_it_appears_and_only_that_night(tmp_path):
    """`ootci bisect --turned-red` (nightly.yml's bisect-plan): besides backends that turned red, each
    bench measurement whose count stepped with the latest run, once (its count and its count ratio
    moved together), with the runs either side (`perf`: the measurement). Steady nights list
    nothing; the night after, it is not listed again. No perf extra is needed for counts."""
    import json
    import random

    from ootci.runner.records import record_files

    runs = tmp_path / "runs"
    noise = random.Random(3)
    nights = [18_400 * (1 + noise.uniform(-0.002, 0.002)) for _ in range(20)] + [18_400 * 1.03] * 2

    def night(day: int) -> str:
        record = count_run(f"openreg-{(STARTED + dt.timedelta(days=day)):%Y%m%dT%H%M%SZ}-{day:06x}", nights[day],
                           day=day)
        record.finished_at = record.started_at + dt.timedelta(minutes=5)
        record_files.write(runs / record.run_id, record)
        return record.run_id

    ids = [night(day) for day in range(20)]
    steady = ootci("bisect", "--turned-red", "--runs", str(runs))
    assert (steady.returncode, json.loads(steady.stdout)) == (0, []), steady.stderr
    ids.append(night(20))  # the first night at the new level: found with it
    planned = ootci("bisect", "--turned-red", "--runs", str(runs))
    assert planned.returncode == 0, planned.stderr
    assert [(e["backend"], e["good"], e["bad"], e["perf"]) for e in json.loads(planned.stdout)] == \
        [("openreg", ids[19], ids[20], "add_tiny")]
    night(21)
    assert json.loads(ootci("bisect", "--turned-red", "--runs", str(runs)).stdout) == []


def test_a_step_measures_only_the_measurement_and_an_end_measures_them_all(tmp_path, monkeypatch):
    """A slowdown's step costs one measurement, not the whole bench stage: the probe gets --only
    MEASUREMENT (and on counts, no timing); an end run from a spec records every measurement, as a
    nightly does."""
    from ootci.runner.manifests import registry
    from ootci.runner.stages import bench

    manifest = registry.resolve("openreg")
    asked = []
    monkeypatch.setattr(bisect, "run_backend",
                        lambda m, options, reporter: asked.append(options) or bench_run("x", None))
    options = bisect.BisectOptions(manifest=manifest, good="c0", bad="c7", out=tmp_path, perf="add_tiny")
    b = bisect.Bisection(options, BisectRecord(bisect_id="b", backend="openreg", started_at=bisect.now(),
                                               good="c0", bad="c7"), tmp_path)
    b.run(manifest, "2.13.0", None, predicate())
    b.run(manifest, "2.13.0", None, None)
    on_counts = slowdown.derive(count_run("good", 18_400), count_run("bad", 18_960), "add_tiny")
    b.run(manifest, "2.13.0", None, on_counts)
    step, end, counting = asked
    assert (step.bench, step.bench_only, step.last_stage, step.suites) == (True, ("add_tiny",), "bench", ())
    assert (end.bench, end.bench_only, end.bench_time) == (True, (), True)
    # A step judged on counts counts, and times nothing; one judged on time rounds times.
    assert (step.bench_time, counting.bench_time, counting.bench_only) == (True, False, ("add_tiny",))
    assert bench.probe_args(manifest, step.bench_only)[-2:] == ["--only", "add_tiny"]
    assert "--only" not in bench.probe_args(manifest)
