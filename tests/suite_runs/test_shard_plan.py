"""A matrix planned from recorded times (`ootci shards plan`), one job's part (`ootci run --shard-plan`),
and the merge that names what a silent job should have run (`ootci shards merge --plan`).

Times are the records' own `duration_s`, written here; nothing is timed."""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path

import pytest

from ootci.runner.core.errors import UsageError
from ootci.runner.history.recorded_times import recorded_times
from ootci.runner.manifests.manifest import UpstreamSuite
from ootci.runner.models import Outcome, RunRecord, StageResult, Status, TorchInfo
from ootci.runner.models import TestResult as Result
from ootci.runner.records import record_files
from ootci.runner.suite_runs import shard_plan, shards
from tests.support.cli import ootci
from tests.support.records import records_under

NIGHT = dt.datetime(2026, 12, 1, 3, 17, tzinfo=dt.UTC)
LONG, MID, SHORT, BROKEN, NEW = "test_long.py", "test_mid.py", "nn/test_short.py", "test_broken.py", "test_new.py"
SIZES = {LONG: 900, MID: 200, SHORT: 60}

MANIFEST = """\
name = "openreg-plan"
device = "openreg"
distribution = "torch_openreg"
import_name = "torch_openreg"
entry_point = "torch_openreg = torch_openreg:_autoload"
dtypes = ["float32"]
[source]
requirement = "torch_openreg"
[build]
recipe = "prebuilt"
[suites.upstream]
files = {files}
timeout = {timeout}
"""


def manifest(where: Path, files=(LONG, MID, SHORT, BROKEN, NEW), timeout: float = 600) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    path = where / "backend.toml"
    path.write_text(MANIFEST.format(files=json.dumps(list(files)), timeout=timeout))
    return path


def tid(file: str, i: int) -> str:
    return f"{file}::TestThing::test_op{i:04d}_openreg_float32"


def night(history: Path, day: int, seed: int, *, trigger: str = "nightly", backend: str = "openreg-plan") -> RunRecord:
    """A recorded night: skewed test times (most tests fast, a few slow), a file that did not collect,
    and tests a file's time limit left unrun (no time of their own)."""
    rng = random.Random(seed)
    tests = [Result(id=tid(file, i), suite="upstream", outcome=Outcome.passed,
                        duration_s=round(rng.lognormvariate(-1.0, 1.0), 3))
             for file, n in SIZES.items() for i in range(n)]
    tests.append(Result(id=BROKEN, suite="upstream", outcome=Outcome.error, duration_s=4.0,
                            message="ImportError: cannot import name 'x'"))
    tests.append(Result(id=tid(MID, 9999), suite="upstream", outcome=Outcome.skipped,
                            message="not run: the file's 600 s time limit ran out before this test"))
    stages = [StageResult(name="torch", status=Status.passed, duration_s=30),
              StageResult(name="build", status=Status.passed, duration_s=50),
              StageResult(name="autoload", status=Status.passed, duration_s=5),
              StageResult(name="smoke", status=Status.passed, duration_s=40),
              StageResult(name="upstream", status=Status.failed, duration_s=999, counts={"passed": len(tests)})]
    started = NIGHT + dt.timedelta(days=day)
    record = RunRecord(run_id=f"{backend}-{started:%Y%m%dT%H%M%SZ}-{seed:06x}", backend=backend, device="openreg",
                       torch=TorchInfo(spec="nightly"), started_at=started, status=Status.failed, stages=stages,
                       tests=tests, trigger=trigger)
    record_files.write(history / record.run_id, record)
    return record


def recorded_means(records: list[RunRecord]) -> dict[str, float]:
    """Each test's mean time; a test no night reached, the mean of its file's tests that ran."""
    seen: dict[str, list[float]] = {}
    unreached: set[str] = set()
    for record in records:
        for t in record.tests:
            if t.message.startswith("not run:"):
                unreached.add(t.id)
            else:
                seen.setdefault(t.id, []).append(t.duration_s)
    means = {i: sum(v) / len(v) for i, v in seen.items()}
    for test_id in unreached - means.keys():
        ran = [m for i, m in means.items() if i.split("::")[0] == test_id.split("::")[0]]
        means[test_id] = sum(ran) / len(ran)
    return means


@pytest.fixture
def history(tmp_path) -> tuple[Path, list[RunRecord]]:
    runs = tmp_path / "history" / "runs"
    kept = [night(runs, day, seed) for day, seed in ((1, 11), (2, 12), (3, 13))]
    night(runs, 0, 10)  # older than the latest three: not read
    night(runs, 4, 14, trigger="pr")  # a PR's run is not a night
    night(runs, 4, 15, backend="other")
    return runs, kept


def test_a_plan_from_the_latest_nights_meets_its_budget_and_holds_every_recorded_test_once(tmp_path, history):
    runs, nights = history
    path = manifest(tmp_path / "backend")
    done = ootci("shards", "plan", str(path), "--minutes", "12", "--history", str(runs),
                 "--out", str(tmp_path / "plan.json"))
    assert done.returncode == 0, done.stderr
    matrix = json.loads(done.stdout)
    planned = shard_plan.read(tmp_path / "plan.json")
    assert sorted(planned.runs) == sorted(r.run_id for r in nights)
    assert matrix == {"include": [{"shard": k, "shards": planned.n, "expected_min": round(j.expected_s / 60, 1)}
                                  for k, j in enumerate(planned.jobs, start=1)]}
    # Each job's expectation, worked out again from the records: its tests' mean times and the overhead
    # (torch, build and autoload in every job, its share of the smoke suite).
    means = recorded_means(nights)
    overhead = 85 + 40 / planned.n
    assert planned.overhead_s == pytest.approx(overhead, abs=0.001)
    for job in planned.jobs:
        files_s = sum(means[i] for p in job.pieces for i in p.tests) + sum(600 for p in job.pieces if p.file == NEW)
        assert job.expected_s == pytest.approx(files_s + overhead, abs=0.01)
        assert job.expected_s <= 12 * 60
    # No more jobs than the budget needs: one fewer could not hold the tests' times.
    assert sum(j.files_s for j in planned.jobs) > (planned.n - 1) * (12 * 60 - overhead)
    # Every recorded test is in exactly one piece, and in that piece's range; the one its file's time
    # limit never reached too, at its file's mean.
    pieces = [p for j in planned.jobs for p in j.pieces]
    placed = [i for p in pieces for i in p.tests]
    assert sorted(placed) == sorted(means) and tid(MID, 9999) in placed
    assert "test_mid.py: 1 of its tests were not reached before its time limit ran out, planned at the " in done.stderr
    assert all(p.holds(i) for p in pieces for i in p.tests)
    # The long file is cut into ranges (no piece past the file's 600 s limit); the short ones are whole.
    long_pieces = [p for p in pieces if p.file == LONG]
    assert len(long_pieces) >= 2 and all(p.expected_s <= 600 for p in long_pieces)
    assert [p.file for p in pieces].count(SHORT) == 1 and [p.file for p in pieces].count(BROKEN) == 1
    # The file never seen is planned at its time limit, and the plan says so.
    assert [p.expected_s for p in pieces if p.file == NEW] == [600]
    assert "1 files never seen in those runs, planned at their 600 s time limit: test_new.py" in done.stderr
    assert f"openreg-plan: {planned.n} jobs of at most 12 min, from times of 3 recorded runs" in done.stderr


def test_the_ranges_of_a_split_file_hold_every_id_it_may_have_tonight_exactly_once():
    times = shard_plan.FileTimes(LONG, {tid(LONG, i): 1.0 for i in range(0, 600, 2)})
    planned = shard_plan.plan("openreg", [times], budget_s=100, file_limit_s=600)
    pieces = [p for j in planned.jobs for p in j.pieces]
    assert len(pieces) == planned.n == 3 and pieces[0].start is None and pieces[-1].before is None
    # Tests added since the recorded nights (the odd numbers, one before the first, one after the last).
    tonight = [tid(LONG, i) for i in range(600)] + [f"{LONG}::A::test", f"{LONG}::Z::test"]
    assert all(sum(p.holds(i) for p in pieces) == 1 for i in tonight)
    part = planned.part(2)
    assert part.files([LONG, "test_other.py", MID]) == [LONG] + [
        f for f in ("test_other.py", MID) if shard_plan.unplanned_shard(f, 3) == 2]


def test_a_file_that_ran_out_of_time_is_planned_long_enough_to_finish_next_night(tmp_path):
    """A night whose file reached 500 of its 1,000 tests in its 600 s: planned from the 500 alone, the
    file would fit one 600 s piece, and the other 500 would be cut off again."""
    tests = [Result(id=tid(LONG, i), suite="upstream", outcome=Outcome.passed, duration_s=1.2) for i in range(500)]
    tests += [Result(id=tid(LONG, i), suite="upstream", outcome=Outcome.skipped,
                     message="not run: the file's 600 s time limit ran out before this test") for i in range(500, 1000)]
    record = RunRecord(run_id="openreg-20261201T031700Z-000001", backend="openreg", device="openreg",
                       torch=TorchInfo(spec="nightly"), started_at=NIGHT, status=Status.timeout, tests=tests,
                       stages=[StageResult(name="upstream", status=Status.timeout, duration_s=600,
                                           counts={"passed": 500, "skipped": 500})])
    record_files.write(tmp_path / record.run_id, record)
    times = recorded_times(tmp_path, "openreg")
    assert len(times.tests[LONG]) == 1000 and times.unreached == {LONG: 500}
    assert times.tests[LONG][tid(LONG, 999)] == pytest.approx(1.2)
    planned = shard_plan.plan_suite("openreg", UpstreamSuite(files=[LONG], timeout=600), times.tests,
                                    budget_s=3600, runs=times.runs, unreached=times.unreached)
    pieces = [p for j in planned.jobs for p in j.pieces]
    assert len(pieces) == 3 and all(p.expected_s <= 600 for p in pieces)
    assert sum(len(p.tests) for p in pieces) == 1000 and pieces[-1].holds(tid(LONG, 999))
    assert any(n.startswith("test_long.py: 500 of its tests were not reached") for n in planned.notes)


def test_a_fixed_number_of_jobs_is_balanced_by_recorded_times():
    rng = random.Random(5)
    files = [shard_plan.FileTimes(f"test_{k}.py", {tid(f"test_{k}.py", i): rng.lognormvariate(-2, 1.3)
                                                  for i in range(n)})
             for k, n in enumerate((5000, 800, 700, 400, 100))]
    planned = shard_plan.plan("openreg", files, budget_s=10 ** 6, file_limit_s=10 ** 6, jobs=4)
    loads = [j.files_s for j in planned.jobs]
    assert planned.n == 4 and max(loads) <= 1.25 * sum(loads) / 4
    assert sum(len(p.tests) for j in planned.jobs for p in j.pieces) == 7000


def test_a_plan_with_no_times_says_it_used_the_defaults(tmp_path):
    path = manifest(tmp_path / "backend", files=(LONG, MID, SHORT), timeout=300)
    done = ootci("shards", "plan", str(path), "--minutes", "10", "--out", str(tmp_path / "plan.json"))
    assert done.returncode == 0, done.stderr
    assert ("ootci: shards plan: no recorded times for openreg-plan: every file planned at its 300 s time limit "
            "(the default for a file never seen: the most it may take before it is cut)") in done.stderr.splitlines()
    assert json.loads(done.stdout) == {"include": [{"shard": 1, "shards": 2, "expected_min": 10.0},
                                                   {"shard": 2, "shards": 2, "expected_min": 5.0}]}


def test_bad_input_is_one_line_each(tmp_path, history):
    runs, _ = history
    path = manifest(tmp_path / "backend")
    small = ootci("shards", "plan", str(path), "--minutes", "1", "--history", str(runs), "--out", str(tmp_path / "p"))
    assert small.returncode == 2 and len(small.stderr.strip().splitlines()) == 1
    assert small.stderr.startswith("ootci: --minutes 1: every job spends 1.") and "no time is left" in small.stderr
    many = ootci("shards", "plan", str(path), "--minutes", "2", "--history", str(runs), "--out", str(tmp_path / "p"))
    assert many.returncode == 2 and many.stderr.strip().endswith("more than the 256 of a GitHub matrix")
    # One test longer than what a job can give a piece.
    times = shard_plan.FileTimes(LONG, {tid(LONG, 1): 5.0, tid(LONG, 2): 700.0})
    with pytest.raises(UsageError) as err:
        shard_plan.plan("openreg", [times], budget_s=3600, file_limit_s=600)
    assert err.value.message == (f"--minutes 60: {tid(LONG, 2)} took 700 s, more than one job can give a piece "
                                 "(600 s): the budget is smaller than one test")
    assert not (tmp_path / "p").exists()
    ootci("shards", "plan", str(path), "--minutes", "12", "--history", str(runs), "--out", str(tmp_path / "plan.json"))
    n = shard_plan.read(tmp_path / "plan.json").n
    for shard, words in ((str(n + 1), f"unknown job: the plan has jobs 1 to {n}"),
                         (f"1/{n + 1}", f"the plan has {n} jobs, not {n + 1}"), ("x", "K or K/N")):
        bad = ootci("run", str(path), "--torch", "2.13.0", "--shard-plan", str(tmp_path / "plan.json"),
                    "--shard", shard, "--out", str(tmp_path / "out"))
        assert bad.returncode == 2 and bad.stderr.startswith("ootci: --shard ") and words in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
    other = ootci("run", "openreg", "--shard-plan", str(tmp_path / "plan.json"), "--shard", "1")
    assert other.returncode == 2 and other.stderr.strip() == (
        f"ootci: --shard-plan {tmp_path / 'plan.json'}: a plan for openreg-plan, not openreg")
    (tmp_path / "notplan.json").write_text("{}")
    notplan = ootci("run", str(path), "--shard-plan", str(tmp_path / "notplan.json"), "--shard", "1")
    assert notplan.returncode == 2 and notplan.stderr.strip() == (
        f"ootci: --shard-plan {tmp_path / 'notplan.json'}: not a plan of `ootci shards plan` "
        "(field 'version' 1 and a list 'jobs')")
    without = ootci("shards", "plan", str(path), "--minutes", "0")
    assert without.returncode == 2 and without.stderr.strip() == "ootci: --minutes 0: must be more than 0"
    outside = ootci("shards", "plan", str(path), "--minutes", "5", "--github-output", "x", env={"GITHUB_OUTPUT": ""})
    assert outside.returncode == 2 and outside.stderr.strip() == (
        "ootci: --github-output: $GITHUB_OUTPUT is not set (it is, in a step of a GitHub Actions job)")


# -- the merge, with the plan the shards ran -------------------------------------------------

def planned_shard(out: Path, part: shard_plan.Part, results: dict[str, Outcome], *, timed_out: str | None = None,
                  message: str = "") -> RunRecord:
    """The record job part.k would leave: its upstream tests, and per file its status."""
    tests = [Result(id=i, suite="upstream", outcome=o,
                        message=message if o is Outcome.skipped else "") for i, o in results.items()]
    files = {p.file: {"status": "timeout" if p.file == timed_out else "passed", "duration_s": 10.0, "rerun": 0,
                      "failed_on_cpu": 0, "tests": sum(1 for i in results if i.startswith(p.file))}
             for p in part.pieces}
    stage = StageResult(name="upstream", status=Status.timeout if timed_out else Status.passed, duration_s=50,
                        counts={"passed": len(tests)},
                        data={"suites": {"upstream": {"status": "passed", "counts": {}, "duration_s": 50,
                                                      "junit": "junit/upstream.xml"}},
                              "upstream": {"tests": {"origin": "given"}, "describe": "files from a folder",
                                           "files": files, "second_opinion_s": 1.0}})
    started = NIGHT + dt.timedelta(days=9, seconds=part.k)
    record = RunRecord(run_id=f"openreg-{started:%Y%m%dT%H%M%SZ}-00000{part.k}", backend="openreg",
                       device="openreg", torch=TorchInfo(spec="2.13.0"), started_at=started, status=stage.status,
                       stages=[stage], tests=tests, shard=f"{part.k}/{part.n}", shard_group="night-9",
                       command=f"ootci run openreg --torch 2.13.0 --shard-plan plan.json --shard {part.k}")
    record_files.write(out / record.run_id, record)
    return record


def test_a_job_that_never_reports_and_a_file_that_did_not_finish_are_named_with_their_tests(tmp_path):
    ids = [tid(LONG, i) for i in range(30)]
    files = [shard_plan.FileTimes(LONG, {i: 10.0 for i in ids}), shard_plan.FileTimes(MID, {tid(MID, 1): 90.0}),
             shard_plan.FileTimes(SHORT, {tid(SHORT, 1): 100.0})]
    planned = shard_plan.plan("openreg", files, budget_s=200, file_limit_s=600)
    shard_plan.write(tmp_path / "plan.json", planned)
    assert planned.n == 3
    one, two, three = (planned.part(k) for k in (1, 2, 3))
    split = [p for j in planned.jobs for p in j.pieces if p.file == LONG]
    assert len(split) == 2  # the long file in two jobs
    # Job 1 ran all of its tests; job 2 ran out of time in the long file: half its range not reached;
    # job 3 never reported.
    first = {i: Outcome.passed for p in one.pieces for i in p.tests}
    reached = {i: Outcome.passed for p in two.pieces for i in p.tests[: len(p.tests) // 2]}
    left = {i: Outcome.skipped for p in two.pieces if p.file == LONG for i in p.tests[len(p.tests) // 2:]}
    planned_shard(tmp_path / "runs", one, first)
    planned_shard(tmp_path / "runs", two, {**reached, **left}, timed_out=LONG,
                  message="not run: the file's 600 s time limit ran out before this test")
    done = ootci("shards", "merge", str(tmp_path / "runs"), "--out", str(tmp_path / "out"),
                 "--plan", str(tmp_path / "plan.json"))
    assert done.returncode == 0, done.stderr
    [merged] = records_under(tmp_path / "out")
    by_id = {t.id: t for t in merged.tests}
    should = [i for p in three.pieces for i in p.tests]
    assert should and all(by_id[i].outcome is Outcome.skipped
                          and by_id[i].message == "not run: shard 3/3 left no record (its job never reported)"
                          for i in should)
    assert len(merged.tests) == len(ids) + 2  # every planned test once: nothing recorded is lost
    assert ("shard 3/3 should have run upstream " + ", ".join(p.describe() for p in three.pieces)
            + f": {len(should)} tests, in the record as not run") in merged.problems
    assert (f"upstream {LONG} did not finish in shard 2/3: {len(left)} tests not reached ({min(left)}, ...)"
            in merged.problems)
    stage = merged.stage("upstream")
    assert stage.status is Status.timeout and stage.root_cause.kind == "missing"
    assert {f: e["status"] for f, e in stage.data["upstream"]["files"].items() if e["status"] == "missing"} == {
        p.file: "missing" for p in three.pieces}
    assert stage.data["shard_plan"] == {"plan": planned.digest, "jobs": 3}
    # The plan and the records disagree on N: one line.
    bad = ootci("shards", "merge", str(tmp_path / "runs"), "--out", str(tmp_path / "out2"),
                "--plan", str(tmp_path / "plan.json"), "--expect", "4")
    assert bad.returncode == 2
    assert bad.stderr.strip() == f"ootci: --expect 4: the plan {tmp_path / 'plan.json'} has 3 jobs"


def test_upstream_suite_without_times_plans_whole_files_at_their_limit():
    suite = UpstreamSuite(files=[LONG, MID], timeout=120)
    planned = shard_plan.plan_suite("openreg", suite, None, budget_s=300)
    assert [[p.describe() for p in j.pieces] for j in planned.jobs] == [[LONG, MID]]
    assert planned.unseen == [LONG, MID] and planned.jobs[0].expected_s == 240


def test_a_discovering_suite_before_its_first_night_says_its_files_are_shared_by_hash():
    """OpenReg's own manifest discovers its files: before a night is recorded there is no name to place."""
    planned = shard_plan.plan_suite("openreg", UpstreamSuite(files="discover"), None, budget_s=300)
    assert planned.n == 1 and planned.jobs[0].pieces == []
    assert any("discovered" in note and "by hash" in note for note in planned.notes)
    assert shard_plan.describe(planned)[1].endswith("no upstream file named (discovered ones by hash)")
    listed = shard_plan.plan_suite("openreg", UpstreamSuite(files=[LONG]), None, budget_s=3000)
    assert not any("discovered" in note for note in listed.notes)


def test_a_planned_shard_reproduces_with_its_plan_and_the_merge_drops_both():
    from ootci.runner.models import reproduce_command

    torch = TorchInfo(spec="2.13.0", version="2.13.0")
    command = reproduce_command("openreg", torch, ("upstream",), "2/4", shard_plan="/t/shard-plan.json")
    assert command == "ootci run openreg --torch 2.13.0 --suites upstream --shard-plan /t/shard-plan.json --shard 2/4"
    assert shards._without_shard(command) == "ootci run openreg --torch 2.13.0 --suites upstream"


def test_a_split_file_that_does_not_collect_is_one_result_in_the_merge(tmp_path):
    files = [shard_plan.FileTimes(LONG, {tid(LONG, i): 10.0 for i in range(20)})]
    planned = shard_plan.plan("openreg", files, budget_s=100, file_limit_s=600)
    assert planned.n == 2
    for k in (1, 2):  # tonight the file does not import: each job reports it under its path
        planned_shard(tmp_path / "runs", planned.part(k), {LONG: Outcome.error})
    written, _ = shards.merge([tmp_path / "runs"], tmp_path / "out", planned=planned)
    assert [t.id for t in written[0].tests] == [LONG]
    assert not [p for p in written[0].problems if "more than one shard" in p]
