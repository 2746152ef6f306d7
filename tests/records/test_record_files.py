"""record.json and tests.json: the split that keeps a run's header small."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from pydantic import ValidationError

from ootci.runner.models import Outcome, RunRecord, StageResult, Status, TorchInfo
from ootci.runner.models import TestResult as Result  # not "Test*": pytest would try to collect it
from ootci.runner.records import record_files


def make_record(tests: int) -> RunRecord:
    outcomes = [Outcome.passed, Outcome.failed, Outcome.skipped, Outcome.xfailed, Outcome.flaky]
    return RunRecord(
        run_id="openreg-1", backend="openreg", device="openreg", torch=TorchInfo(spec="2.13.0"),
        started_at=dt.datetime(2026, 11, 21, 3, 0), status=Status.failed,
        stages=[StageResult(name="smoke", status=Status.failed, counts={"passed": 1})],
        tests=[Result(id=f"test_x.py::test_{i}", suite="smoke", outcome=outcomes[i % 5], duration_s=0.25,
                          message="boom" if i % 5 == 1 else "", attempts=2 if i % 5 == 4 else 1)
               for i in range(tests)],
    )


def test_tests_live_beside_the_record(tmp_path):
    record = make_record(2000)
    path = record_files.write(tmp_path, record)
    header = json.loads(path.read_text())
    assert header["tests"] == [] and header["tests_file"] == "tests.json"
    assert header["test_counts"] == {"passed": 400, "failed": 400, "skipped": 400, "xfailed": 400, "flaky": 400}
    assert len(header["notable_tests"]) == 1200
    assert header["notable_tests"]["test_x.py::test_1"] == "failed"
    assert "test_x.py::test_0" not in header["notable_tests"]  # passed and skipped tests are only counted
    tests = json.loads((tmp_path / "tests.json").read_text())
    assert tests["run_id"] == "openreg-1" and len(tests["tests"]) == 2000
    assert tests["tests"][0] == {"id": "test_x.py::test_0", "suite": "smoke", "outcome": "passed", "duration_s": 0.25}
    back = record_files.read(path)
    assert back.tests == record.tests and back.stages == record.stages and back.run_id == record.run_id
    assert record_files.read(path, with_tests=False).tests == []
    # The fingerprint of the test ids: the same set in any order matches, another set does not.
    ids = [t.id for t in record.tests]
    assert header["test_ids_hash"] == record_files.ids_hash(reversed(ids)) != record_files.ids_hash(ids[1:])


def test_the_header_stays_small_for_a_mostly_green_run(tmp_path):
    record = make_record(2000)
    for t in record.tests[10:]:
        t.outcome, t.message = Outcome.passed, ""
    path = record_files.write(tmp_path, record)
    assert path.stat().st_size < 4_000 < (tmp_path / "tests.json").stat().st_size // 20


def test_a_run_without_tests_has_no_tests_file(tmp_path):
    path = record_files.write(tmp_path, make_record(0))
    assert not (tmp_path / "tests.json").exists()
    assert record_files.read(path).tests_file is None


def test_records_with_inline_tests_still_load(tmp_path):
    record = make_record(7)
    (tmp_path / "record.json").write_text(record.model_dump_json())
    assert record_files.read(tmp_path / "record.json").tests == record.tests


@pytest.mark.parametrize("name", ["../outside.json", "/etc/passwd", ".hidden", "a/b.json", ""])
def test_tests_file_is_a_plain_name(tmp_path, name):
    doc = json.loads(make_record(0).model_dump_json())
    doc["tests_file"] = name
    with pytest.raises(ValidationError, match="tests_file"):
        RunRecord.model_validate(doc)


def test_a_big_test_list_is_written_gzipd_and_reads_back(tmp_path):
    """100,000 tests of PyTorch's long ids are about 13 MB as JSON: written as tests.json.gz, a
    fraction of it, and read back the same; a stale list of the other form does not stay beside it."""
    record = make_record(0)
    record.tests = [Result(id=f"test_ops.py::TestCommon::test_compare_cpu_op{i // 4:05d}_openreg_"
                              f"{('float32', 'float64', 'int64', 'int32')[i % 4]}", suite="upstream",
                           outcome=Outcome.failed if i % 20 == 0 else Outcome.passed, duration_s=(i % 97) / 1000,
                           message=f"AssertionError: Tensor-likes are not close! ({i})" if i % 20 == 0 else "")
                    for i in range(100_000)]
    (tmp_path / "tests.json").write_text("stale")
    path = record_files.write(tmp_path, record)
    assert json.loads(path.read_text())["tests_file"] == "tests.json.gz"
    assert not (tmp_path / "tests.json").exists()
    packed = (tmp_path / "tests.json.gz").stat().st_size
    plain = len(record_files.read_tests_bytes(tmp_path / "tests.json.gz"))
    assert plain > 10_000_000 and packed < 1_500_000
    assert record_files.read(path).tests == record.tests
    (tmp_path / "tests.json.gz").write_bytes((tmp_path / "tests.json.gz").read_bytes()[:1000])
    with pytest.raises(ValueError, match="not gzip'd JSON"):
        record_files.read(path)
