"""JUnit ingestion (runner/suite_runs/junit.py): ootci's streaming files, pytest's own, generic
JUnit, files cut off by a crash, and the classified file ootci writes back."""

from __future__ import annotations

import gzip
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ootci.runner import models
from ootci.runner.models import Outcome
from ootci.runner.suite_runs import junit
from ootci.runner.suite_runs.suite_runner import SUITES_DIR

SYNTHETIC = Path(__file__).parents[1] / "fixtures" / "backends" / "synthetic" / "suite"


def _pytest(python: Path, state: Path, *args: str, cwd: Path = SYNTHETIC) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(SUITES_DIR), PYTHONDONTWRITEBYTECODE="1", SYNTHETIC_STATE_DIR=str(state))
    return subprocess.run([str(python), "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def plugin_file(torch_layer, tmp_path_factory) -> Path:
    """A JUnit file written by ootci's plugin, for real, from the synthetic outcomes suite."""
    out = tmp_path_factory.mktemp("plugin") / "outcomes.xml"
    done = _pytest(torch_layer.python, out.parent, "check_outcomes.py", "-p", "ootci_plugin",
                   "--ootci-capabilities", "generator",
                   "--ootci-suite", "outcomes", "--ootci-junit", str(out))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    return out


def _by_id(cases):
    return {c.id: c for c in cases}


def test_reads_the_plugin_file(plugin_file):
    parsed = junit.parse(plugin_file)
    assert parsed.complete and parsed.error is None
    cases = _by_id(parsed.cases)
    expected = {
        "check_outcomes.py::test_passes": Outcome.passed,
        "check_outcomes.py::test_fails": Outcome.failed,
        "check_outcomes.py::test_needs_streams": Outcome.skipped,
        "check_outcomes.py::test_needs_generator": Outcome.passed,
        "check_outcomes.py::test_pytest_xfail": Outcome.xfailed,
        "check_outcomes.py::test_setup_error": Outcome.error,
        "check_outcomes.py::test_records_op": Outcome.failed,
    }
    for test_id, outcome in expected.items():
        assert cases[test_id].outcome is outcome, test_id
    assert cases["check_outcomes.py::test_needs_streams"].message == "capability 'streams' not claimed"
    assert "arithmetic is broken on purpose" in cases["check_outcomes.py::test_fails"].message
    assert "OSError: fixture setup failed" in cases["check_outcomes.py::test_setup_error"].message
    op_case = cases["check_outcomes.py::test_records_op"]
    result = op_case.to_result("outcomes")
    assert (result.op, result.dtype) == ("add", "float32")
    assert "some captured output" in result.log_tail and "\x01" not in result.log_tail
    assert result.log_tail.count("Captured stdout call") == 1, "captured output repeated per phase"
    assert list(op_case.properties) == ["nodeid", "ootci.outcome", "op", "dtype"]


def test_keeps_every_complete_case_of_a_cut_off_file(plugin_file, tmp_path):
    data = plugin_file.read_bytes()
    whole = _by_id(junit.parse(plugin_file).cases)
    ends = [i + len(b"</testcase>") for i in range(len(data)) if data.startswith(b"</testcase>", i)]
    assert len(ends) == len(whole)
    for k, end in enumerate(ends):
        # Cut in the middle of the next case (or of the closing tags after the last one).
        cut = tmp_path / f"cut{k}.xml"
        cut.write_bytes(data[:end + 40])
        parsed = junit.parse(cut)
        assert not parsed.complete
        assert [c.id for c in parsed.cases] == list(whole)[:k + 1]
        assert [c.outcome for c in parsed.cases] == [c.outcome for c in list(whole.values())[:k + 1]]


def test_garbage_after_a_crash_keeps_what_came_before(plugin_file, tmp_path):
    data = plugin_file.read_bytes()
    first_end = data.index(b"</testcase>") + len(b"</testcase>")
    broken = tmp_path / "broken.xml"
    broken.write_bytes(data[:first_end] + b"\n<testcase name='x'>\x00\xff<<<garbage" + data[first_end:])
    parsed = junit.parse(broken)
    assert not parsed.complete and "broke off" in parsed.error
    assert [c.id for c in parsed.cases] == ["check_outcomes.py::test_passes"]


def test_missing_and_empty_files(tmp_path):
    missing = junit.parse(tmp_path / "nope.xml")
    assert missing.cases == [] and not missing.complete and "no such file" in missing.error
    empty = tmp_path / "empty.xml"
    empty.write_bytes(b"")
    assert junit.parse(empty).cases == []


def test_reads_pytests_own_junit(torch_layer, tmp_path):
    """A vendor suite run without ootci's plugin: pytest's junitxml, both families."""
    for family in ("xunit1", "xunit2"):
        out = tmp_path / f"{family}.xml"
        _pytest(torch_layer.python, tmp_path, "check_outcomes.py", f"--junitxml={out}", "-o", f"junit_family={family}",
                "-p", "no:ootci_plugin")
        cases = {c.id.rsplit("::", 1)[-1]: c for c in junit.parse(out).cases}
        assert cases["test_passes"].outcome is Outcome.passed
        assert cases["test_fails"].outcome is Outcome.failed
        assert cases["test_pytest_xfail"].outcome is Outcome.xfailed
        assert cases["test_setup_error"].outcome is Outcome.error
        assert cases["test_passes"].id == "check_outcomes::test_passes"
        if family == "xunit1":
            assert cases["test_records_op"].to_result("v").op == "add"


def test_reads_generic_junit(tmp_path):
    path = tmp_path / "gtest.xml"
    path.write_text("""<?xml version="1.0"?>
<testsuites><testsuite name="DeviceTest">
  <testsuite name="Nested">
    <testcase classname="DeviceTest" name="Copies" time="0.25"/>
    <testcase classname="DeviceTest" name="Hangs" time="60"><failure message="Timeout after 60 s"/></testcase>
    <testcase classname="DeviceTest" name="Faults"><error message="worker 'gw1' crashed while running 'x'"/></testcase>
    <testcase classname="DeviceTest" name="Breaks"><error type="RuntimeError">boom
line two</error></testcase>
    <testcase classname="DeviceTest" name="Off"><skipped message="no second device"/></testcase>
  </testsuite>
</testsuite></testsuites>""")
    cases = _by_id(junit.parse(path).cases)
    assert cases["DeviceTest::Copies"].outcome is Outcome.passed
    assert cases["DeviceTest::Copies"].duration_s == 0.25
    assert cases["DeviceTest::Hangs"].outcome is Outcome.timeout
    assert cases["DeviceTest::Faults"].outcome is Outcome.crashed
    assert cases["DeviceTest::Breaks"].outcome is Outcome.error
    assert cases["DeviceTest::Breaks"].message == "line two"
    assert cases["DeviceTest::Off"].outcome is Outcome.skipped


def test_written_file_round_trips_and_other_readers_see_junit(tmp_path):
    results = [
        models.TestResult(id="test_a.py::test_ok", suite="s", outcome=Outcome.passed, duration_s=0.5),
        models.TestResult(id="test_a.py::test_flaky", suite="s", outcome=Outcome.flaky, attempts=2,
                          message="passed later"),
        models.TestResult(id="test_a.py::test_bad[add-float32]", suite="s", outcome=Outcome.failed, op="add",
                   dtype="float32", message="differs \x07", log_tail="trace\x00back"),
        models.TestResult(id="test_a.py::test_hang", suite="s", outcome=Outcome.timeout),
        models.TestResult(id="test_a.py::test_seg", suite="s", outcome=Outcome.crashed),
        models.TestResult(id="test_a.py::test_known", suite="s", outcome=Outcome.xfailed, message="expected"),
        models.TestResult(id="test_a.py::test_fixed", suite="s", outcome=Outcome.xpassed),
        models.TestResult(id="test_a.py::test_off", suite="s", outcome=Outcome.skipped, message="capability"),
    ]
    path = tmp_path / "junit" / "s.xml"
    junit.write(path, "s", results)
    suite = ET.parse(path).getroot().find("testsuite")
    counts = (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped"))
    assert counts == ("8", "2", "1", "2")
    parsed = junit.parse(path)
    assert parsed.complete
    back = [c.to_result("s", attempts=int(c.properties["attempts"])) for c in parsed.cases]
    assert [(r.id, r.outcome, r.attempts, r.op, r.dtype) for r in back] == \
        [(r.id, r.outcome, r.attempts, r.op, r.dtype) for r in results]
    assert "\ufffd" in back[2].message


def test_a_suites_file_is_gzip_and_round_trips(tmp_path):
    """The classified file ootci keeps is gzip'd, the same bytes for the same results, and parse reads
    it as it reads plain XML; one cut short keeps the complete cases before the cut."""
    results = [models.TestResult(id=f"test_a.py::test_{i}", suite="s", outcome=Outcome.passed if i % 7 else
                                 Outcome.failed, duration_s=i / 1000, message="" if i % 7 else f"error {i}")
               for i in range(2000)]
    path = junit.suite_file(tmp_path / "junit", "s")
    assert path.name == "s.xml.gz"
    junit.write(path, "s", results)
    data = path.read_bytes()
    plain = gzip.decompress(data)
    assert data[:2] == b"\x1f\x8b" and len(data) * 10 < len(plain)
    assert ET.fromstring(plain).find("testsuite").get("tests") == "2000"
    junit.write(tmp_path / "again.xml.gz", "s", results)
    assert (tmp_path / "again.xml.gz").read_bytes() == data
    parsed = junit.parse(path)
    assert parsed.complete and parsed.error is None
    assert [(c.id, c.outcome, c.message) for c in parsed.cases] == [(r.id, r.outcome, r.message) for r in results]
    cut = tmp_path / "cut.xml.gz"
    cut.write_bytes(data[:len(data) // 2])
    half = junit.parse(cut)
    assert not half.complete and "gzip stream cut short" in half.error
    assert 0 < len(half.cases) < len(results)
    assert [c.id for c in half.cases] == [r.id for r in results[:len(half.cases)]]
    garbage = tmp_path / "garbage.xml.gz"
    garbage.write_bytes(data[:10] + b"\x00" * 50)
    broken = junit.parse(garbage)
    assert broken.cases == [] and not broken.complete and "not gzip" in broken.error


def test_forked_run_retries_what_did_not_pass_in_one_more_fork(torch_layer, tmp_path):
    """--ootci-retry-junit: once the forked children are done, the tests that did not pass run once
    more in a fork of the same collected session (no interpreter, no collection), their results in a
    file of their own; a test that failed and passes now (test_flaky) says so there."""
    first, again, progress = tmp_path / "first.xml", tmp_path / "again.xml", tmp_path / "progress"
    progress.mkdir()
    done = _pytest(torch_layer.python, tmp_path, "check_outcomes.py", "-p", "ootci_plugin", "-p", "no:xdist",
                   "--ootci-capabilities", "generator", "--ootci-suite", "outcomes", "--ootci-junit", str(first),
                   "--ootci-fork", "2", f"--ootci-progress={progress}", f"--ootci-retry-junit={again}")
    # The forks ran the tests: the session's own count is nothing to go by; the JUnit files are.
    assert junit.parse(first).complete, done.stdout[-2000:] + done.stderr[-2000:]
    cases = _by_id(junit.parse(first).cases)
    not_passed = {i for i, c in cases.items() if c.outcome in (Outcome.failed, Outcome.error)}
    assert "check_outcomes.py::test_flaky" in not_passed and "check_outcomes.py::test_passes" not in not_passed
    retried = junit.parse(again)
    assert retried.complete
    assert {c.id for c in retried.cases} == not_passed
    outcomes = {c.id: c.outcome for c in retried.cases}
    assert outcomes["check_outcomes.py::test_flaky"] is Outcome.passed
    assert outcomes["check_outcomes.py::test_fails"] is Outcome.failed
    # Without the option no test is noted, and nothing is re-run.
    assert list(progress.glob("not-passed-*"))
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    _pytest(torch_layer.python, fresh, "check_outcomes.py", "-p", "ootci_plugin", "-p", "no:xdist",
            "--ootci-capabilities", "generator", "--ootci-junit", str(fresh / "plain.xml"), "--ootci-fork", "2",
            f"--ootci-progress={fresh}")
    assert junit.parse(fresh / "plain.xml").complete
    assert not list(fresh.glob("not-passed-*")) and not (fresh / "again.xml").exists()
