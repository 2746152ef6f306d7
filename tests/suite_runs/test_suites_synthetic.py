"""Classification end to end: the synthetic fixture backend's vendor suites produce every
outcome (flaky, hang in Python, hang in native code, segfault, expected failure,
unexpected pass, capability skip...) in a real environment over the torch layer, run
by `ootci test` exactly as the integration stage runs them."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from ootci.runner.manifests import manifest
from ootci.runner.models import Outcome, Status
from ootci.runner.records import record_files
from ootci.runner.suite_runs import junit, suite_runner
from tests.support.cli import ootci as run_ootci

FIXTURES = Path(__file__).parents[1] / "fixtures" / "backends"
SYNTHETIC = FIXTURES / "synthetic" / "backend.toml"
# What the crash and hangs suites must give, however crashes are contained.
CRASH_OUTCOMES = {
    "check_crash.py::test_before_crash": Outcome.passed,
    "check_crash.py::test_segfaults": Outcome.crashed,
    "check_crash.py::test_after_crash": Outcome.passed,
    "check_crash.py::test_fails_after_crash": Outcome.failed,
}
HANG_OUTCOMES = {
    "check_hangs.py::test_before": Outcome.passed,
    "check_hangs.py::test_hangs_in_python": Outcome.timeout,
    "check_hangs.py::test_hangs_in_native_code": Outcome.timeout,
    "check_hangs.py::test_after": Outcome.passed,
}


def ootci(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return run_ootci(*args, env=env, timeout=timeout, cwd=Path(__file__).parents[2])


@pytest.fixture(scope="module")
def synthetic_run(torch_layer, tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    state = out / "state"
    state.mkdir()
    done = ootci("test", "--python", str(torch_layer.python), "--backend", str(SYNTHETIC), "--suite", "integration",
                 "--out", str(out / "run"), env={"SYNTHETIC_STATE_DIR": str(state)})
    record = record_files.read(out / "run" / "record.json")
    return done, record, out / "run"


@pytest.mark.slow
def test_every_outcome_is_classified(synthetic_run):
    done, record, _ = synthetic_run
    assert done.returncode == 1, done.stdout + done.stderr
    got = {(t.suite, t.id): (t.outcome, t.attempts) for t in record.tests}
    expected = {
        ("outcomes", "check_outcomes.py::test_passes"): (Outcome.passed, 1),
        ("outcomes", "check_outcomes.py::test_fails"): (Outcome.failed, 2),
        ("outcomes", "check_outcomes.py::test_flaky"): (Outcome.flaky, 2),
        ("outcomes", "check_outcomes.py::test_known_bug"): (Outcome.xfailed, 1),
        ("outcomes", "check_outcomes.py::test_fixed_bug"): (Outcome.xpassed, 1),
        ("outcomes", "check_outcomes.py::test_needs_streams"): (Outcome.skipped, 1),
        ("outcomes", "check_outcomes.py::test_needs_generator"): (Outcome.passed, 1),
        ("outcomes", "check_outcomes.py::test_pytest_xfail"): (Outcome.xfailed, 1),
        ("outcomes", "check_outcomes.py::test_setup_error"): (Outcome.error, 2),
        ("outcomes", "check_outcomes.py::test_records_op"): (Outcome.failed, 2),
        ("hangs", "check_hangs.py::test_before"): (Outcome.passed, 1),
        ("hangs", "check_hangs.py::test_hangs_in_python"): (Outcome.timeout, 2),
        ("hangs", "check_hangs.py::test_hangs_in_native_code"): (Outcome.timeout, 2),
        ("hangs", "check_hangs.py::test_after"): (Outcome.passed, 1),
        ("crash", "check_crash.py::test_before_crash"): (Outcome.passed, 1),
        ("crash", "check_crash.py::test_segfaults"): (Outcome.crashed, 2),
        ("crash", "check_crash.py::test_after_crash"): (Outcome.passed, 1),
        ("crash", "check_crash.py::test_fails_after_crash"): (Outcome.failed, 2),
        ("command", "check_command::test_command_passes"): (Outcome.passed, 1),
        ("command", "check_command::test_command_fails"): (Outcome.failed, 1),
        ("command", "check_command::test_command_skipped"): (Outcome.skipped, 1),
    }
    assert got == expected


@pytest.mark.slow
def test_messages_name_the_cause(synthetic_run):
    _, record, _ = synthetic_run
    tests = {t.id: t for t in record.tests}
    assert tests["check_outcomes.py::test_needs_streams"].message == "capability 'streams' not claimed"
    assert tests["check_outcomes.py::test_flaky"].message.startswith(
        "passed on attempt 2 after it failed: RuntimeError")
    known_bug = tests["check_outcomes.py::test_known_bug"].message
    assert "known bug in the fixture (https://example.invalid/issues/1)" in known_bug
    assert "remove the entry" in tests["check_outcomes.py::test_fixed_bug"].message
    segfault = tests["check_crash.py::test_segfaults"]
    assert "SIGSEGV" in segfault.message and "check_crash.py:11 in test_segfaults" in segfault.message
    assert "Fatal Python error: Segmentation fault" in segfault.log_tail
    native = tests["check_hangs.py::test_hangs_in_native_code"]
    assert "2 s time limit" in native.message and "check_hangs.py" in native.message
    assert native.duration_s >= 2
    assert "OotciTestTimeout" in tests["check_hangs.py::test_hangs_in_python"].message
    op = tests["check_outcomes.py::test_records_op"]
    assert (op.op, op.dtype) == ("add", "float32")


@pytest.mark.slow
def test_problems_stage_and_files(synthetic_run):
    done, record, run_dir = synthetic_run
    stage = record.stage("integration")
    assert stage.status is Status.failed
    assert stage.counts == {"crashed": 1, "error": 1, "failed": 4, "flaky": 1, "passed": 7, "skipped": 2,
                            "timeout": 2, "xfailed": 2, "xpassed": 1}
    assert len(record.problems) == 2
    missing, unmatched = record.problems
    assert "suites.vendor[4].path 'suite/check_does_not_exist.py'" in missing and "does not exist" in missing
    assert "expected_failures[2].test 'check_outcomes.py::test_renamed_long_ago' matched no test" in unmatched
    assert missing in stage.summary and unmatched in stage.summary
    assert "PROBLEM" in done.stdout and "does not exist" in done.stdout
    assert stage.data["suites"]["missing"]["status"] == "failed"
    for suite in ("outcomes", "hangs", "crash", "command"):
        parsed = junit.parse(run_dir / "junit" / f"{suite}.xml.gz")
        assert parsed.complete
        assert {c.id for c in parsed.cases} == {t.id for t in record.tests if t.suite == suite}
    flaky = next(c for c in junit.parse(run_dir / "junit" / "outcomes.xml.gz").cases if c.id.endswith("test_flaky"))
    assert flaky.outcome is Outcome.flaky and flaky.properties["attempts"] == "2"


@pytest.mark.slow
def test_a_crash_under_xdist_is_named_and_the_rest_still_runs(torch_layer, tmp_path):
    m = manifest.load(SYNTHETIC).model_copy(update={"retries": 0, "expected_failures": []})
    runner = suite_runner.SuiteRunner(python=torch_layer.python, manifest=m, junit_dir=tmp_path / "junit",
                                      log=tmp_path / "crash.log", deadline=time.monotonic() + 300)
    spec = suite_runner.vendor_suite(m.suites.vendor[2], m.directory, 2)
    spec.workers = 2
    run = runner.run(spec)
    outcomes = {r.id: r.outcome for r in run.results}
    assert outcomes == CRASH_OUTCOMES
    crashed = next(r for r in run.results if r.outcome is Outcome.crashed)
    assert "crashed while running 'check_crash.py::test_segfaults'" in crashed.message
    assert run.status is Status.failed and run.root_cause is not None


@pytest.mark.slow
def test_bad_input_gets_one_line_and_an_exit_code(torch_layer, tmp_path):
    unknown = ootci("test", "--python", str(torch_layer.python), "--backend", str(SYNTHETIC), "--suite", "nosuch")
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == ("ootci: --suite 'nosuch': not a suite of synthetic "
                                      "(known: smoke, integration, upstream, outcomes, hangs, crash, command, missing)")
    no_python = ootci("test", "--python", str(tmp_path / "nopython"), "--backend", str(SYNTHETIC), "--suite", "smoke")
    assert no_python.returncode == 7 and "no such interpreter" in no_python.stderr
    bad = tmp_path / "backend.toml"
    bad.write_text(SYNTHETIC.read_text().replace('capabilities = ["generator"]', 'capabilities = ["warp_drive"]'))
    rejected = ootci("test", "--python", str(torch_layer.python), "--backend", str(bad), "--suite", "smoke")
    assert rejected.returncode == 3
    assert rejected.stderr.startswith(f"ootci: {bad}: field 'capabilities.0'") and "warp_drive" in rejected.stderr
    assert "Traceback" not in unknown.stderr + no_python.stderr + rejected.stderr
    missing = ootci("test", "--python", str(torch_layer.python), "--backend", str(SYNTHETIC), "--suite", "missing",
                    "--out", str(tmp_path / "out"))
    assert missing.returncode == 1
    record = json.loads((tmp_path / "out" / "record.json").read_text())
    assert record["stages"][0]["status"] == "failed" and "does not exist" in record["problems"][0]


def _runner(python, tmp_path, seconds, **changes):
    m = manifest.load(SYNTHETIC).model_copy(update={"retries": 0, "expected_failures": [], **changes})
    runner = suite_runner.SuiteRunner(python=python, manifest=m, junit_dir=tmp_path / "junit",
                                      log=tmp_path / "suite.log", deadline=time.monotonic() + seconds)
    return m, runner


@pytest.mark.slow
def test_hangs_under_xdist_are_timeouts(torch_layer, tmp_path):
    m, runner = _runner(torch_layer.python, tmp_path, 300)
    spec = suite_runner.vendor_suite(m.suites.vendor[1], m.directory, 1)
    spec.workers = 2
    run = runner.run(spec)
    results = {r.id: r for r in run.results}
    assert {i: r.outcome for i, r in results.items()} == HANG_OUTCOMES
    assert "never returned to Python; faulthandler ended worker" in \
        results["check_hangs.py::test_hangs_in_native_code"].message


@pytest.mark.slow
def test_crash_isolation_by_fork_names_the_crash_and_the_hang_and_forks_on(torch_layer, tmp_path):
    """suites.crash_isolation = "fork": one process collects, forked children run the tests; a
    segfault or a hang in native code ends only a child, and a new fork goes on after the test."""
    m, runner = _runner(torch_layer.python, tmp_path, 300,
                        suites=manifest.load(SYNTHETIC).suites.model_copy(update={"crash_isolation": "fork"}))
    crash = suite_runner.vendor_suite(m.suites.vendor[2], m.directory, 2)
    crash.workers = 2
    run = runner.run(crash)
    results = {r.id: r for r in run.results}
    assert {i: r.outcome for i, r in results.items()} == CRASH_OUTCOMES
    segfault = results["check_crash.py::test_segfaults"]
    assert segfault.message.startswith("crashed: the test process was killed by SIGSEGV at check_crash.py:")
    assert "Fatal Python error: Segmentation fault" in segfault.log_tail
    # One pytest process for the whole attempt: the crash cost a fork, not a resumed interpreter.
    started = [line for line in (tmp_path / "suite.log").read_text().splitlines() if line.startswith("$ ")]
    assert len(started) == 1 and "--ootci-fork" in started[0]
    # The raw files of that process are gone: what they said is in the classified file.
    assert not (tmp_path / "junit" / "raw").exists()
    assert {c.id for c in junit.parse(tmp_path / "junit" / "crash.xml.gz").cases} == set(results)
    hangs = runner.run(suite_runner.vendor_suite(m.suites.vendor[1], m.directory, 1))
    results = {r.id: r for r in hangs.results}
    assert {i: r.outcome for i, r in results.items()} == HANG_OUTCOMES
    assert "never returned to Python; faulthandler ended the process" in \
        results["check_hangs.py::test_hangs_in_native_code"].message


@pytest.mark.slow
def test_the_suite_time_limit_names_the_test_it_stopped(torch_layer, tmp_path):
    # One test may take 10 minutes, the whole suite 25 seconds: the suite's limit ends it. (8 s
    # was not always enough on a loaded 2-core machine for `import torch` and the first test.)
    m, runner = _runner(torch_layer.python, tmp_path, 25,
                        timeouts=manifest.Timeouts(test=600))
    run = runner.run(suite_runner.vendor_suite(m.suites.vendor[1], m.directory, 1))
    assert run.status is Status.timeout
    results = {r.id: r for r in run.results}
    assert results["check_hangs.py::test_before"].outcome is Outcome.passed
    stopped = results["check_hangs.py::test_hangs_in_python"]
    assert stopped.outcome is Outcome.timeout and "suite's time limit ran out" in stopped.message
    for never_ran in ("check_hangs.py::test_hangs_in_native_code", "check_hangs.py::test_after"):
        assert results[never_ran].outcome is Outcome.error
        assert results[never_ran].message == "not run: the suite process stopped before reaching it"


def test_vendor_suites_keep_the_integration_stage_on():
    from ootci.runner.stages import RunOptions, pipeline

    m = manifest.load(SYNTHETIC)
    assert not m.suites.integration and m.suites.vendor
    assert pipeline.skip_reason(m, RunOptions(), "integration") is None
    assert pipeline.skip_reason(m, RunOptions(), "smoke") == "switched off in the manifest ([suites])"
    assert pipeline.skip_reason(m, RunOptions(suites=("smoke",)), "integration") == "not selected (--suites)"


def test_a_vendor_suite_has_the_ids_pytest_gives_it_wherever_the_run_writes(tmp_path):
    """pytest finds its rootdir, and so the test ids, from the paths on its command line. The runner's
    own (the JUnit file, the progress directory) are option values and never count, so a vendor suite's
    ids are those of `pytest tests` in its repository, whether the run writes under it or (as `ootci init`
    does, in the cache) somewhere below another project's pytest configuration."""
    import sys

    from ootci.runner.manifests.manifest import Manifest, Source, VendorSuite

    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "setup.py").write_text("")
    (repo / "tests" / "test_ids.py").write_text("def test_one():\n    pass\n")
    elsewhere = tmp_path / "cache"
    elsewhere.mkdir()
    (elsewhere / "pytest.ini").write_text("[pytest]\n")
    # No torch here: the plugin imports the "backend" alone (a stdlib module), and the tests need nothing else.
    m = Manifest(name="ids", device="cpu", distribution="ids", import_name="json", entry_point="ids = json:dumps",
                 source=Source(path="."))
    runner = suite_runner.SuiteRunner(python=Path(sys.executable), manifest=m, junit_dir=elsewhere / "junit",
                                      log=tmp_path / "suite.log", deadline=time.monotonic() + 120)
    run = runner.run(suite_runner.vendor_suite(VendorSuite(name="tests", path="tests"), repo, 0))
    assert [(r.id, r.outcome) for r in run.results] == [("tests/test_ids.py::test_one", Outcome.passed)], \
        (tmp_path / "suite.log").read_text()[-2000:]


def test_a_known_failure_is_re_run_only_when_its_cause_changed(tmp_path):
    """A known failure that fails with the cause its baseline entry lists is expected and costs no
    re-run; one that fails with another cause (a new bug behind an old one) is re-run like a new
    failure and stays a failure, saying it is known but now failing differently."""
    import sys

    from ootci.runner.manifests.known_failures import KnownFailure
    from ootci.runner.manifests.manifest import Manifest, Source, VendorSuite

    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "setup.py").write_text("")
    (repo / "tests" / "test_known.py").write_text(
        "import os\n\n"
        "def test_same():\n    raise ValueError(f'broken at {id(object()):#x} in pid {os.getpid()}')\n\n"
        "def test_other():\n    raise KeyError('a new bug')\n")
    m = Manifest(name="known", device="cpu", distribution="known", import_name="json",
                 entry_point="known = json:dumps", source=Source(path="."), retries=2)
    m.known = {"tests": {
        "tests/test_known.py::test_same": KnownFailure(outcome="failed", reason="ValueError: broken",
                                                       cause="ValueError: broken at 0x? in pid N"),
        "tests/test_known.py::test_other": KnownFailure(outcome="failed", reason="ValueError: old",
                                                        cause="ValueError: an old bug")}}
    runner = suite_runner.SuiteRunner(python=Path(sys.executable), manifest=m, junit_dir=tmp_path / "junit",
                                      log=tmp_path / "suite.log", deadline=time.monotonic() + 120)
    run = runner.run(suite_runner.vendor_suite(VendorSuite(name="tests", path="tests"), repo, 0))
    found = {r.id.rpartition("::")[2]: r for r in run.results}
    assert (found["test_same"].outcome, found["test_same"].attempts) == (Outcome.xfailed, 1)
    other = found["test_other"]
    # Re-run, failing the same way twice: deterministic, not run a third time.
    assert (other.outcome, other.attempts) == (Outcome.failed, 2), (tmp_path / "suite.log").read_text()[-2000:]
    assert other.message.startswith("known failure, now failing differently (listed as `ValueError: an old bug`); "
                                    "it failed: KeyError")
    assert run.status is Status.failed and run.retries["rerun"] == 1
