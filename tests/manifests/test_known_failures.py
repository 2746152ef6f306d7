"""The known-failures file (runner/manifests/known_failures.py) and `ootci expect`: written, read back,
updated from a run, named in the manifest; every mistake in it is one line naming the file."""

from __future__ import annotations

import datetime as dt
import tomllib
from pathlib import Path

import pytest

from ootci.runner.core import causes
from ootci.runner.core.errors import ManifestError
from ootci.runner.manifests import known_failures, manifest
from ootci.runner.models import Outcome, RunRecord, TorchInfo
from ootci.runner.models import TestResult as Result
from ootci.runner.records import record_files
from ootci.runner.suite_runs import classify
from tests.support.cli import ootci

MANIFEST = """\
name = "partly"
device = "partly"
distribution = "torch_partly"
import_name = "torch_partly"
entry_point = "torch_partly = torch_partly:_autoload"
# the capabilities it has
capabilities = ["autograd"]

[source]
path = ".."
"""


def result(test_id: str, outcome: Outcome, suite: str = "integration", message: str = "") -> Result:
    return Result(id=test_id, suite=suite, outcome=outcome, message=message)


def write_run(directory: Path, command: str, tests: list[Result]) -> Path:
    record = RunRecord(run_id="partly-1", backend="partly", device="partly", started_at=dt.datetime.now(dt.UTC),
                       torch=TorchInfo(spec="2.13.0", version="2.13.0+cpu"), command=command, tests=tests)
    record_files.write(directory, record)
    return directory


@pytest.fixture
def vendor(tmp_path) -> Path:
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "backend.toml").write_text(MANIFEST)
    return tmp_path


def test_expect_writes_the_baseline_names_it_in_the_manifest_and_the_run_then_classifies_by_it(vendor):
    run = write_run(vendor / "run1", "ootci run ci/backend.toml --torch 2.13.0", [
        result("test_opinfo.py::test_compare_cpu[abs-int64]", Outcome.failed,
               message="RuntimeError: abs is only implemented\nfor floating dtypes"),
        result("test_opinfo.py::test_compare_cpu[fft.fft-float32]", Outcome.crashed, message="crashed: SIGSEGV"),
        result("test_opinfo.py::test_compare_cpu[add-float32]", Outcome.passed),
        result("test_opinfo.py::test_compare_cpu[sum-float32]", Outcome.flaky),
        result("tests/test_mem.py::test_stats", Outcome.error, suite="own", message="No module named 'psutil'"),
    ])
    done = ootci("expect", "--from", str(run), cwd=vendor)
    assert done.returncode == 0, done.stderr
    baseline_file = vendor / "ci" / "known-failures.toml"
    assert f"{baseline_file}: 3 known failures (3 added, 0 removed)" in done.stdout
    # What it recorded, by cause: one line a cause, with an example test.
    assert ("by cause (3 causes; tests, cause):\n"
            "  1  No module named 'psutil'  (e.g. own::tests/test_mem.py::test_stats)\n") in done.stdout, done.stdout
    text = baseline_file.read_text()
    # One line a test, sorted by suite and id: a pull request's diff shows each test.
    body = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert body == [
        "[integration]",
        '"test_opinfo.py::test_compare_cpu[abs-int64]" = { outcome = "failed", torch = "2.13.0+cpu", '
        'cause = "RuntimeError: abs is only implemented", '
        'reason = "RuntimeError: abs is only implemented for floating dtypes" }',
        '"test_opinfo.py::test_compare_cpu[fft.fft-float32]" = { outcome = "crashed", torch = "2.13.0+cpu", '
        'cause = "SIGSEGV in `fft`", reason = "crashed: SIGSEGV" }',
        "[own]",
        '"tests/test_mem.py::test_stats" = '
        '{ outcome = "error", torch = "2.13.0+cpu", cause = "No module named \'psutil\'", '
        'reason = "No module named \'psutil\'" }',
    ]
    manifest_text = (vendor / "ci" / "backend.toml").read_text()
    assert manifest_text == MANIFEST.replace("\n\n[source]", '\nknown_failures = "known-failures.toml"\n\n[source]')
    # The manifest now reads the file (the vendor suite 'own' must exist for its table).
    path = vendor / "ci" / "backend.toml"
    with pytest.raises(ManifestError, match=r"known-failures.toml: \[own\]: no such suite in .*backend.toml"):
        manifest.load(path)
    path.write_text(manifest_text + '\n[[suites.vendor]]\nname = "own"\npath = "tests"\n')
    m = manifest.load(path)
    assert set(m.known) == {"integration", "own"}

    def classified(test_id, outcome, suite="integration", message=""):
        entry = classify.expected_failure(m, suite, test_id, "2.14.0")
        return classify.apply_expected(result(test_id, outcome, suite, message), entry).outcome

    assert classified("test_opinfo.py::test_compare_cpu[abs-int64]", Outcome.failed,
                      message="RuntimeError: abs is only implemented\nfor integer dtypes") is Outcome.xfailed
    assert classified("test_opinfo.py::test_compare_cpu[fft.fft-float32]", Outcome.crashed,
                      message="crashed: the test process was killed by SIGSEGV") is Outcome.xfailed
    # Another cause behind a known failure is news: it stays a failure, saying so.
    assert classified("test_opinfo.py::test_compare_cpu[fft.fft-float32]", Outcome.timeout) is Outcome.timeout
    assert classified("test_opinfo.py::test_compare_cpu[abs-int64]", Outcome.passed) is Outcome.fixed
    assert classified("test_opinfo.py::test_compare_cpu[neg-int64]", Outcome.failed) is Outcome.failed
    assert Outcome.fixed.ok

    # A later run: abs is fixed and one listed test is gone; --prune removes both, nothing else.
    later = write_run(vendor / "run2", "ootci run ci/backend.toml --torch 2.13.0", [
        result("test_opinfo.py::test_compare_cpu[abs-int64]", Outcome.fixed),
        result("test_opinfo.py::test_compare_cpu[add-float32]", Outcome.passed),
        result("tests/test_mem.py::test_stats", Outcome.xfailed, suite="own"),
    ])
    done = ootci("expect", "--from", str(later / "record.json"), cwd=vendor)
    assert "1 fixed (they passed): `--prune` removes them" in done.stdout and "3 known failures" in done.stdout
    done = ootci("expect", "--from", str(later), "--prune", cwd=vendor)
    assert done.returncode == 0 and "1 known failures (0 added, 2 removed)" in done.stdout, done.stdout
    assert list(tomllib.loads(baseline_file.read_text())) == ["own"]
    assert path.read_text().count("known_failures =") == 1


def test_a_folder_of_runs_gives_its_one_run_and_names_several(vendor):
    runs = vendor / "out" / "runs"
    write_run(runs / "partly-1", "ootci run ci/backend.toml --torch 2.13.0",
              [result("test_opinfo.py::test_compare_cpu[abs-int64]", Outcome.failed)])
    done = ootci("expect", "--from", str(runs), cwd=vendor)
    assert done.returncode == 0 and "1 known failures (1 added, 0 removed)" in done.stdout, done.stderr
    write_run(runs / "partly-2", "ootci run ci/backend.toml --torch 2.13.0", [])
    done = ootci("expect", "--from", str(runs), cwd=vendor)
    assert done.returncode == 2
    assert done.stderr == (f"ootci: --from {runs}: 2 runs there (partly-1, partly-2): name one, e.g. --from "
                           f"{runs / 'partly-2'}\n")


def test_bad_input_is_one_line(vendor, tmp_path):
    not_a_run = tmp_path / "empty"
    not_a_run.mkdir()
    done = ootci("expect", "--from", str(not_a_run), cwd=vendor)
    assert done.returncode == 2
    assert done.stderr == f"ootci: --from {not_a_run}: not a run record (no record.json there)\n"
    (not_a_run / "record.json").write_text("{\"run_id\": 3}")
    done = ootci("expect", "--from", str(not_a_run), cwd=vendor)
    assert done.returncode == 2 and done.stderr.startswith(f"ootci: --from {not_a_run}: not a run record (")
    assert len(done.stderr.splitlines()) == 1

    path = vendor / "ci" / "backend.toml"
    path.write_text(MANIFEST.replace("# the", 'known_failures = "known.toml"\n# the'))
    done = ootci("show", str(path), cwd=vendor)
    assert done.returncode == 3
    assert done.stderr == (f"ootci: {path}: field 'known_failures': {path.parent / 'known.toml'} does not exist "
                           "(`ootci expect --from RUN` writes it)\n")
    for line, complaint in [
        ('"test_compare_cpu?*abs" = { outcome = "failed", reason = "x" }', "not a test id"),
        ('"test_a.py::test_b" = { outcome = "failed" }', "field 'reason': Field required"),
        ('"test_a.py::test_b" = { outcome = "failed", reason = "x", why = "y" }', "field 'why'"),
    ]:
        (path.parent / "known.toml").write_text(f"[integration]\n{line}\n")
        done = ootci("show", str(path), cwd=vendor)
        assert done.returncode == 3 and len(done.stderr.splitlines()) == 1, done.stderr
        assert done.stderr.startswith(f"ootci: {path.parent / 'known.toml'}: [integration] ")
        assert complaint in done.stderr


@pytest.mark.parametrize("test_id, ok", [
    ("test_opinfo.py::test_compare_cpu[abs-int64]", True),
    ("tests/test_x.py::TestA::test_b[a b-1]", True),
    ("outcomes::(command)", True),
    ("test_opinfo.py::test_compare_cpu?*group_norm*", False),
    ("no_separator", False),
    ("two\nlines::x", False),
    ("tests/test_autograd.py", True),  # a file that failed to collect: pytest's id of its collection error
    ("(collection)", True),
    ("tests/test_*.py", False),
])
def test_a_test_id_is_exact(test_id, ok):
    assert known_failures.is_test_id(test_id) is ok


def test_what_expect_writes_the_next_run_reads_a_file_that_failed_to_import_too(vendor):
    """A vendor suite whose file cannot import (a missing psutil) fails under the file's own id, the
    id pytest gives its collection error: `ootci expect` lists it, and the manifest loads it again
    (before, the next run refused it as "not a test id" and the nightly broke on its own baseline)."""
    path = vendor / "ci" / "backend.toml"
    path.write_text(MANIFEST + '\n[[suites.vendor]]\nname = "own"\npath = "tests"\n')
    run = write_run(vendor / "run", "ootci run ci/backend.toml --torch 2.13.0", [
        result("tests/test_autograd.py", Outcome.error, suite="own", message="ModuleNotFoundError: No module named "
               "'psutil' (a module the suite's tests need: list its package in `requirements`)"),
        result("test_view_ops.py::TestViewOps::test_flip_openreg_float32", Outcome.failed, suite="upstream"),
        result("test_sort_and_select.py::TestSortAndSelect::test_msort_openreg_float32", Outcome.upstream,
               suite="upstream", message="fails on CPU too: not the backend's"),
    ])
    path.write_text(path.read_text() + '\n[suites.upstream]\nfiles = ["test_view_ops.py"]\n')
    done = ootci("expect", "--from", str(run), cwd=vendor)
    assert done.returncode == 0, done.stderr
    loaded = manifest.load(path)
    assert set(loaded.known["own"]) == {"tests/test_autograd.py"}
    # A test that fails on CPU too is not the backend's: never a known failure of it.
    assert set(loaded.known["upstream"]) == {"test_view_ops.py::TestViewOps::test_flip_openreg_float32"}
    entry = classify.expected_failure(loaded, "own", "tests/test_autograd.py")
    applied = classify.apply_expected(result("tests/test_autograd.py", Outcome.error, "own",
                                             "ModuleNotFoundError: No module named 'psutil'"), entry)
    assert applied.outcome is Outcome.xfailed
    # --prune drops a listed test that now fails on CPU too.
    later = write_run(vendor / "later", "ootci run ci/backend.toml --torch 2.13.0", [
        result("tests/test_autograd.py", Outcome.xfailed, suite="own"),
        result("test_view_ops.py::TestViewOps::test_flip_openreg_float32", Outcome.upstream, suite="upstream"),
    ])
    done = ootci("expect", "--from", str(later), "--prune", cwd=vendor)
    assert done.returncode == 0 and "(0 added, 1 removed)" in done.stdout, done.stdout
    assert "upstream" not in manifest.load(path).known


def test_a_known_failure_listed_by_an_older_ootci_is_still_known_and_a_changed_one_still_changed():
    """A baseline outlives the ootci that wrote it. Its crash of PyTorch's test_fn_gradgrad_abs on OpenReg was
    listed as "SIGSEGV in `test_fn_gradgrad_abs`" (named by its test); today's ootci names a crash with no op
    known by the function it died in. The same crash is known, not changed; a failure whose message or
    outcome changed is still changed."""
    crash_id = "test_ops_gradients.py::TestBwdGradients::test_fn_gradgrad_abs_openreg_float64"
    crash = "crashed: the test process was killed by SIGSEGV at test_ops_gradients.py:69 in test_fn_gradgrad"
    old_entry = known_failures.KnownFailure(outcome="crashed", torch="2.13.0+cpu", reason=crash,
                                            cause="SIGSEGV in `test_fn_gradgrad_abs`")
    long = "RuntimeError: " + "the kernel of this op does not hold this layout; " * 12
    listed_long = known_failures.entry("failed", long, "2.13.0+cpu",
                                       causes.cause_of(result("t.py::test_long", Outcome.failed, "upstream", long),
                                                       "openreg"))

    def applied(test_id, entry, outcome, message):
        return classify.apply_expected(result(test_id, outcome, "upstream", message), entry, "openreg")

    assert applied(crash_id, old_entry, Outcome.crashed, crash).outcome is Outcome.xfailed
    assert applied("t.py::test_long", listed_long, Outcome.failed, long).outcome is Outcome.xfailed
    changed = [applied(crash_id, old_entry, Outcome.failed, "RuntimeError: gradgrad of abs is not implemented"),
               applied(crash_id, old_entry, Outcome.crashed, crash.replace("SIGSEGV", "SIGABRT")),
               applied("t.py::test_long", listed_long, Outcome.failed, long.replace("layout", "dtype"))]
    assert [(r.outcome, r.message.startswith("known failure, now failing differently")) for r in changed] == [
        (Outcome.failed, True), (Outcome.crashed, True), (Outcome.failed, True)]
