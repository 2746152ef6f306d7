"""RunRecords with an upstream stage, shaped by the runner's own code: the stage's data comes from
runner/stages/upstream.py (`result_of`, what `ootci run` records after the files ran) over
runner/torch_supply/torch_tests.UpstreamTests and runner/suite_runs/upstream_runs' FileRun, so a
change of the record's shape reaches these tests; the offline stage is built the way the stage
builds it when the torch repository cannot be reached."""

from __future__ import annotations

from pathlib import Path

from ootci.dashboard import synthetic
from ootci.runner.models import Outcome, RunRecord, StageResult, Status, TestResult, overall_status
from ootci.runner.records.upstream_files import file_of
from ootci.runner.stages import upstream as upstream_stage
from ootci.runner.suite_runs.upstream_runs import FileRun, UpstreamRun
from ootci.runner.torch_supply.torch_tests import UpstreamTests

DEVICE = "vdev"
VIEW = "test_view_ops.py::TestViewOps::"
OLD_VIEW = "test_view_ops.py::TestOldViewOps::"
SORT = "test_sort_and_select.py::TestSortAndSelect::"
BROKEN = "test_up_broken.py"
REPOSITORY = "https://github.com/pytorch/pytorch"
UNREACHABLE = (f"cannot fetch PyTorch's test files at {synthetic.torch_commit(1)}: {REPOSITORY} cannot be "
               "reached (Could not resolve host: github.com)")
FILES = ("test_view_ops.py", "test_sort_and_select.py", BROKEN)


def cpu_too(device_message: str, cpu_message: str) -> str:
    """The message the second opinion gives a test that failed on CPU too (upstream_runs._classify)."""
    return (f"fails on CPU too: not the backend's (failed on {DEVICE}: {device_message} | "
            f"failed on cpu: {cpu_message})")


def night_tests(night: int) -> list[TestResult]:
    """PyTorch-style upstream results of one night: night 0 at the first commit, night 1 at the next,
    where one test regressed, one is new and failing, a known failure was fixed and the baseline
    made another failure known."""
    msort = "AttributeError: module 'numpy' has no attribute 'msort'"
    specs = [
        (VIEW + f"test_flip_{DEVICE}_float32", Outcome.passed, ""),
        (VIEW + f"test_flip_{DEVICE}_complex64", Outcome.skipped, "dtype 'complex64' not claimed"),
        (VIEW + f"test_view_dtype_{DEVICE}_float32", Outcome.skipped, "Only runs on cuda"),
        (VIEW + f"test_ravel_{DEVICE}_float32", *((Outcome.passed, "") if night == 0 else
                                                   (Outcome.failed, "AssertionError: Tensor-likes are not equal!"))),
        (VIEW + f"test_flatten_quantized_{DEVICE}", *(
            (Outcome.failed, "NotImplementedError: _empty_affine_quantized") if night == 0 else
            (Outcome.xfailed, "known failure: NotImplementedError: _empty_affine_quantized"))),
        (VIEW + f"test_flip_{DEVICE}_bool", *((Outcome.xfailed, "known failure: flip of bool") if night == 0 else
                                               (Outcome.fixed, "known failure that passed: flip of bool"))),
        (OLD_VIEW + f"test_contiguous_{DEVICE}", Outcome.skipped,
         f"onlyNativeDeviceTypes: doesn't run on {DEVICE}"),
        (VIEW + f"test_unfold_{DEVICE}_float32", Outcome.upstream,
         cpu_too("RuntimeError: expected IndexError", "RuntimeError: expected IndexError")),
        (SORT + f"test_msort_{DEVICE}_float32", Outcome.upstream, cpu_too(msort, msort)),
        (SORT + f"test_sort_{DEVICE}_float32", Outcome.passed, ""),
        (SORT + f"test_topk_{DEVICE}_float64", Outcome.skipped, "dtype 'float64' not claimed"),
        (BROKEN, Outcome.upstream, cpu_too("collection error: ImportError: cannot import name 'binary_ufuncs'",
                                           "ImportError: cannot import name 'binary_ufuncs'")),
    ]
    if night == 1:
        specs.append((VIEW + f"test_new_at_second_commit_{DEVICE}_float32", Outcome.failed,
                      "RuntimeError: not implemented for 'vdev'"))
    return [TestResult(id=tid, suite="upstream", outcome=outcome, message=message, duration_s=0.125,
                       dtype=tid.rsplit("_", 1)[-1] if tid.endswith(("float32", "float64", "complex64", "bool"))
                       else None)
            for tid, outcome, message in specs]


def upstream_stage_of(tests: list[TestResult], source: UpstreamTests) -> StageResult:
    """The stage `ootci run` records for these results of these files."""
    files = []
    for name in FILES:
        results = [t for t in tests if file_of(t.id) == name]
        bad = [t for t in results if not t.outcome.ok]
        files.append(FileRun(name, results, status=Status.failed if bad else Status.passed, duration_s=4.5,
                             rerun=sum(1 for t in results if t.outcome is Outcome.upstream or not t.outcome.ok),
                             failed_on_cpu=sum(1 for t in results if t.outcome is Outcome.upstream)))
    run = UpstreamRun(files, Path("/runs/x/junit/upstream.xml"), second_opinion_s=3.0)
    return upstream_stage.result_of(source, run, tests, [])


def fetched(night: int) -> UpstreamTests:
    """The files of the torch's own commit, fetched from PyTorch's repository."""
    commit = synthetic.torch_commit(night)
    return UpstreamTests(test_dir=Path(f"/cache/upstream-tests/pytorch/{commit}/test"), origin="fetched",
                         commit=commit, torch_commit=commit, repository=REPOSITORY, ref=commit)


def given_elsewhere(night: int) -> UpstreamTests:
    """`--upstream-tests DIR`: a folder of files at another commit than the torch's."""
    return UpstreamTests(test_dir=Path("/home/vendor/pytorch/test"), origin="given",
                         commit=synthetic.torch_commit(night - 1), torch_commit=synthetic.torch_commit(night))


def with_upstream(name: str, night: int, source: UpstreamTests | None, tests: list[TestResult] | None = None
                  ) -> RunRecord:
    """A synthetic night of backend `name` (its smoke and integration suites green) with an upstream
    stage: run over `source`'s files, or, for source None, skipped because the torch repository
    could not be reached."""
    record = synthetic.build_record(synthetic.Scenario(name, DEVICE), night)
    if source is None:
        stage = StageResult(name="upstream", status=Status.skipped,
                            summary=f"not run: {UNREACHABLE}; --upstream-tests DIR runs them from a folder",
                            data={"upstream": {"not_run": UNREACHABLE, "files_selected": list(FILES)}})
    else:
        tests = night_tests(night) if tests is None else tests
        stage = upstream_stage_of(tests, source)
        record.tests.extend(tests)
    record.stages.append(stage)
    record.status = overall_status(record.stages)
    return record


def build_site(records: dict[str, list[RunRecord]], data: Path, out: Path) -> None:
    """Lay the records out under data as `ootci run` does and build the site from them into out,
    with no warning."""
    from ootci.dashboard import site

    for runs in records.values():
        for record in runs:
            synthetic.write_record(data, record)
    warnings: list[str] = []
    site.build(data, out, jobs=1, warn=warnings.append)
    assert warnings == []
