"""The history's compact store: headers forever, tests packed against shared test sets, no logs,
and `ootci history prune` applying the retention policy. Through the real commands and the
dashboard build that reads the result."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from ootci.dashboard import site
from ootci.runner.history import history_store
from ootci.runner.models import Outcome, RunRecord, StageResult, Status, TorchInfo
from ootci.runner.models import TestResult as Result
from ootci.runner.records import packed_tests, record_files
from tests.support.cli import ootci

REPO = Path(__file__).resolve().parents[2]
STARTED = dt.datetime(2026, 11, 21, 3, 17, tzinfo=dt.UTC)
RUN_URL = "https://github.com/ootci/ootci/actions/runs/123456"


def results_of(night: int) -> list[Result]:
    """One test per outcome and a few hundred passes, with the details a real run has."""
    tests = [Result(id=f"integration::test_ops.py::test_add_openreg_float{i}", suite="integration",
                        outcome=Outcome.passed, duration_s=0.001 * (i + night), op="add", dtype=f"float{i}")
             for i in range(300)]
    for i, outcome in enumerate(Outcome):
        tests.append(Result(id=f"smoke::test_{outcome.value}", suite="smoke", outcome=outcome,
                                duration_s=1.25, message=f"{outcome.value} because {night}" if i % 2 else "",
                                log_tail="last lines\n" if outcome is Outcome.failed else "",
                                attempts=3 if outcome is Outcome.flaky else 1))
    return tests


def write_run(out: Path, run_id: str, night: int = 0, *, started: dt.datetime = STARTED,
              tests: list[Result] | None = None, ci_run_url: str | None = RUN_URL) -> Path:
    """A run directory as `ootci run` leaves it: record.json, tests.json, a log and a JUnit file."""
    run_dir = out / run_id
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / "integration.log").write_text("integration output\n" * 1000)
    (run_dir / "junit").mkdir()
    (run_dir / "junit" / "integration.xml").write_text("<testsuite/>\n")
    record = RunRecord(run_id=run_id, backend="openreg", device="openreg", torch=TorchInfo(spec="2.13.0"),
                       started_at=started + dt.timedelta(days=night), finished_at=started + dt.timedelta(days=night),
                       status=Status.failed, ci_run_url=ci_run_url,
                       stages=[StageResult(name="integration", status=Status.failed, log="logs/integration.log")],
                       tests=results_of(night) if tests is None else tests)
    record_files.write(run_dir, record)
    return run_dir


def merge(artifacts: Path, history: Path) -> str:
    result = ootci("history", "merge", str(artifacts), "--into", str(history))
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_a_run_in_the_history_reads_back_with_every_test_but_without_its_logs(tmp_path):
    original = record_files.read(write_run(tmp_path / "artifacts", "openreg-1") / "record.json")
    history = tmp_path / "history" / "runs"
    assert "1 added" in merge(tmp_path / "artifacts", history)

    assert sorted(p.name for p in (history / "openreg-1").iterdir()) == ["record.json", "results.json.gz"]
    kept = record_files.read(history / "openreg-1" / "record.json")
    assert kept.tests_file == packed_tests.RESULTS_NAME
    assert kept.ci_run_url == RUN_URL
    assert kept.test_counts == original.test_counts and kept.notable_tests == original.notable_tests
    by_id = {t.id: t for t in kept.tests}
    assert len(by_id) == len(original.tests)
    for test in original.tests:  # durations are kept to the millisecond
        assert by_id[test.id].model_copy(update={"duration_s": test.duration_s}) == test
        assert abs(by_id[test.id].duration_s - test.duration_s) < 0.0005


def test_runs_of_the_same_tests_share_one_test_set_and_add_a_few_kilobytes_each(tmp_path):
    artifacts, history = tmp_path / "artifacts", tmp_path / "history" / "runs"
    for night in range(5):
        write_run(artifacts, f"openreg-{night}", night)
    merge(artifacts, history)

    (shared,) = (history / packed_tests.TESTSETS_DIR).iterdir()
    assert shared.name == f"{record_files.read(history / 'openreg-0' / 'record.json').test_ids_hash}.json.gz"
    runner_bytes = sum((artifacts / f"openreg-{n}" / "tests.json").stat().st_size for n in range(5))
    stored = sum((history / f"openreg-{n}" / packed_tests.RESULTS_NAME).stat().st_size for n in range(5))
    assert stored * 10 < runner_bytes, (stored, runner_bytes)
    # Packing is deterministic: the same tests give the same bytes (git stores them once).
    again = tmp_path / "again"
    merge(artifacts, again)
    assert (again / "openreg-3" / packed_tests.RESULTS_NAME).read_bytes() == \
        (history / "openreg-3" / packed_tests.RESULTS_NAME).read_bytes()


def test_a_run_whose_ids_repeat_keeps_its_whole_test_list(tmp_path):
    twice = [Result(id="smoke::test_x", suite="smoke", outcome=Outcome.passed),
             Result(id="smoke::test_x", suite="smoke", outcome=Outcome.failed, message="second")]
    write_run(tmp_path / "artifacts", "openreg-1", tests=twice)
    history = tmp_path / "runs"
    merge(tmp_path / "artifacts", history)
    kept = record_files.read(history / "openreg-1" / "record.json")
    assert kept.tests_file == record_files.TESTS_NAME
    assert [t.outcome for t in kept.tests] == [Outcome.passed, Outcome.failed]


def test_a_packed_record_cannot_point_its_test_set_outside_the_history(tmp_path):
    history = tmp_path / "runs"
    write_run(tmp_path / "artifacts", "openreg-1")
    merge(tmp_path / "artifacts", history)
    results = history / "openreg-1" / packed_tests.RESULTS_NAME
    document = json.loads(gzip.decompress(results.read_bytes()))
    document["testset"] = "../../../etc/passwd"
    results.write_bytes(packed_tests.dumps(document))
    with pytest.raises(packed_tests.PackError, match="not a hex digest"):
        record_files.read(history / "openreg-1" / "record.json")


def test_prune_keeps_headers_drops_old_test_lists_and_unused_sets_and_the_dashboard_says_so(tmp_path):
    artifacts, history = tmp_path / "artifacts", tmp_path / "runs"
    old_tests = [Result(id=f"smoke::old_{i}", suite="smoke", outcome=Outcome.passed) for i in range(20)]
    write_run(artifacts, "openreg-old", 0, tests=old_tests)  # its set is used by no newer run
    for night in (1, 30, 31):
        write_run(artifacts, f"openreg-{night}", night)
    merge(artifacts, history)
    (history / "openreg-31" / "logs").mkdir()  # an older layout kept logs in the branch
    (history / "openreg-31" / "logs" / "build.log").write_text("old layout\n")
    old_layout = write_run(tmp_path / "old-layout", "openreg-32", 32)  # and every test in tests.json
    shutil.copytree(old_layout, history / "openreg-32")
    headers = {p.parent.name: RunRecord.model_validate_json(p.read_bytes()) for p in history.glob("*/record.json")}

    now = STARTED + dt.timedelta(days=31, hours=1)
    result = ootci("history", "prune", str(history), "--keep-results-days", "10", "--now", now.isoformat())

    assert result.returncode == 0, result.stdout + result.stderr
    assert ("test lists of 2 run(s) older than 10 days removed, 1 unused test set(s), 3 log or JUnit file(s) "
            "of an older layout, 1 test list(s) packed") in result.stdout
    assert sorted(p.name for p in (history / "openreg-32").iterdir()) == ["record.json", "results.json.gz"]
    assert len(record_files.read(history / "openreg-32" / "record.json").tests) == len(results_of(32))
    for run_id in ("openreg-old", "openreg-1"):
        pruned = record_files.read(history / run_id / "record.json")
        assert not (history / run_id / packed_tests.RESULTS_NAME).exists()
        assert pruned.tests == [] and pruned.tests_file is None and pruned.tests_pruned_at == now
        assert pruned.test_counts == headers[run_id].test_counts  # the header keeps the counts
        assert pruned.notable_tests == headers[run_id].notable_tests
    assert len(record_files.read(history / "openreg-30" / "record.json").tests) == len(results_of(30))
    assert not (history / "openreg-31" / "logs").exists()
    assert [p.name for p in (history / packed_tests.TESTSETS_DIR).iterdir()] == \
        [f"{headers['openreg-30'].test_ids_hash}.json.gz"]

    out = tmp_path / "site"
    build = ootci("dashboard", "build", "--data", str(history), "--out", str(out), "--run-pages", "10")
    assert build.returncode == 0, build.stdout + build.stderr
    assert "without tests" not in build.stdout + build.stderr  # pruned on purpose: no warning
    pages = {p.name: p.read_text() for p in out.glob("runs/*/*.html")}
    pruned_page = next(text for name, text in pages.items() if "openreg-1." in name or "openreg-1" in text)
    assert "removed from the history on" in pruned_page
    # Packed tests are the runs' JSON on the site, against the set the history packed them with.
    lists = [packed_tests.loads(p.read_bytes()) for p in out.glob("runs/*/*.tests.json.gz")]
    assert lists and all((out / "api" / "testsets" / f"{d['testset']}.json.gz").is_file() for d in lists)
    ids = {row[0] for d in lists
           for row in packed_tests.loads((out / "api" / "testsets" / f"{d['testset']}.json.gz").read_bytes())}
    assert any("test_add_openreg_float7" in i for i in ids)


def test_run_pages_link_the_logs_the_history_does_not_keep_until_the_artifacts_expire():
    record = RunRecord(run_id="r", backend="openreg", device="openreg", torch=TorchInfo(spec="2.13.0"),
                       started_at=STARTED, ci_run_url=RUN_URL)
    fresh = site.artifacts_link(record, now=STARTED + dt.timedelta(days=29))
    assert fresh == {"url": RUN_URL, "until": "2026-12-21", "expired": False}
    assert site.artifacts_link(record, now=STARTED + dt.timedelta(days=30))["expired"] is True
    assert site.artifacts_link(record.model_copy(update={"ci_run_url": None})) is None
    with pytest.raises(ValueError):
        RunRecord.model_validate({**record.model_dump(mode="json"), "ci_run_url": "javascript:alert(1)"})


def test_prune_refuses_a_retention_of_zero_days_in_one_line(tmp_path):
    result = ootci("history", "prune", str(tmp_path), "--keep-results-days", "0")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["ootci: --keep-results-days: must be at least 1, not 0"]


def test_a_partial_pull_fetches_every_header_but_only_the_newest_runs_and_pushes_without_losing_any(tmp_path):
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    remote = f"file://{bare}"  # a plain path would be copied whole: git filters only over a transport
    # The server side of a partial clone: it must be willing to filter blobs (GitHub is).
    subprocess.run(["git", "-C", str(bare), "config", "uploadpack.allowFilter", "true"], check=True)
    artifacts, seed = tmp_path / "artifacts", tmp_path / "seed"
    names = []
    for backend in ("openreg", "vendor-x"):
        for night in range(6):
            started = STARTED + dt.timedelta(days=night)
            names.append(f"{backend}-{started:%Y%m%dT%H%M%SZ}-abc{night}")
            write_run(artifacts, names[-1], 0, started=started)
    merge(artifacts, seed / "runs")
    assert ootci("history", "push", str(seed), "--branch", "ootci-data", "--remote", remote).returncode == 0

    partial = tmp_path / "partial"
    result = ootci("history", "pull", str(partial), "--branch", "ootci-data", "--remote", remote, "--latest", "2")

    assert result.returncode == 0, result.stdout + result.stderr
    # Every run is red: the first one starts the red stretch, and its page (the culprit's) is built too.
    assert "the 6 run(s) of the 13 directories that get a page" in result.stdout  # 12 runs + .testsets
    runs = partial / "runs"
    assert len(list(runs.glob("*/record.json"))) == 12
    with_results = sorted(p.parent.name for p in runs.glob(f"*/{packed_tests.RESULTS_NAME}"))
    assert with_results == sorted(n for n in names if n.endswith(("abc0", "abc4", "abc5")))
    assert len(record_files.read(runs / with_results[0] / "record.json").tests) == len(results_of(0))
    # Blobs of the other runs' results were never downloaded.
    missing = subprocess.run(["git", "-C", str(partial), "rev-list", "--objects", "--missing=print", "HEAD"],
                             capture_output=True, text=True, check=True).stdout
    assert sum(line.startswith("?") for line in missing.splitlines()) == 6
    # The dashboard builds from it: runs without their results are known by their shared test set.
    build = ootci("dashboard", "build", "--data", str(runs), "--out", str(tmp_path / "site"), "--run-pages", "2")
    assert build.returncode == 0 and "not read" not in build.stdout + build.stderr, build.stdout + build.stderr
    assert "without tests" not in build.stdout + build.stderr
    # Prune cannot wrongly rewrite headers whose lists it does not hold.
    copy = tmp_path / "copy"
    shutil.copytree(partial, copy, symlinks=True)
    assert ootci("history", "prune", str(copy / "runs"), "--keep-results-days", "1").returncode == 0
    assert record_files.read(copy / "runs" / names[1] / "record.json", with_tests=False).tests_file == \
        packed_tests.RESULTS_NAME  # not fetched: left alone
    assert record_files.read(copy / "runs" / names[0] / "record.json", with_tests=False).tests_pruned_at

    tonight = STARTED + dt.timedelta(days=7)
    write_run(tmp_path / "tonight", f"openreg-{tonight:%Y%m%dT%H%M%SZ}-abc7", 0, started=tonight)
    merge(tmp_path / "tonight", runs)
    pushed = ootci("history", "push", str(partial), "--branch", "ootci-data", "--remote", remote)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr

    full = tmp_path / "full"
    assert ootci("history", "pull", str(full), "--branch", "ootci-data", "--remote", remote,
                 "--full").returncode == 0
    assert len(list((full / "runs").glob(f"*/{packed_tests.RESULTS_NAME}"))) == 13  # nothing lost


def test_the_runs_a_partial_pull_fetches_are_the_ones_the_dashboard_gives_a_page(tmp_path):
    """Newest N main-line and N PR runs per backend, plus the culprit pair when the newest is red
    (a missing run neither starts nor ends a red stretch), told from names and headers."""
    statuses = {  # oldest first
        "green-then-red": ["passed", "passed", "failed", "missing", "failed", "failed", "failed"],
        "all-green": ["passed"] * 6,
        "red-from-start": ["failed"] * 5,
    }
    expected = set()
    for backend, history in statuses.items():
        for night, status in enumerate(history):
            name = f"{backend}-202611{night + 1:02d}T031700Z-{night:04x}"
            (tmp_path / name).mkdir()
            (tmp_path / name / "record.json").write_text(json.dumps({"trigger": "nightly", "status": status}))
            if night >= len(history) - 2:
                expected.add(name)
    pr = "all-green-20261001T031700Z-ffff"  # an old PR run: the newest PR run of its backend
    (tmp_path / pr).mkdir()
    (tmp_path / pr / "record.json").write_text(json.dumps({"trigger": "pr", "status": "failed"}))
    (tmp_path / "not-a-run-dir").mkdir()
    expected |= {pr, "green-then-red-20261102T031700Z-0001", "green-then-red-20261103T031700Z-0002",
                 "red-from-start-20261101T031700Z-0000"}

    assert set(history_store.runs_with_pages(tmp_path, 2)) == expected


def test_the_weekly_prune_workflow_pulls_the_whole_tip_before_pruning_and_writes_only_contents():
    workflow = YAML(typ="safe").load(REPO / ".github" / "workflows" / "prune-history.yml")
    assert workflow["permissions"] == {}
    (job,) = workflow["jobs"].values()
    assert job["permissions"] == {"contents": "write"}
    commands = [step["run"] for step in job["steps"] if "run" in step]
    assert [c.split()[:3] for c in commands] == [["ootci", "history", "pull"], ["ootci", "history", "prune"],
                                                 ["ootci", "history", "push"]]
    assert "--full" in commands[0]  # a partial pull would leave old test lists unpruned
