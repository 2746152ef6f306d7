"""What `ootci run` prints: terminal progress, GitHub Actions folds, the summary."""

from __future__ import annotations

import datetime as dt
import io
import time

from ootci.runner.models import RootCause, RunRecord, StageResult, Status, TorchInfo
from ootci.runner.stages.report import Reporter, markdown_summary


def record() -> RunRecord:
    return RunRecord(
        run_id="demo-1", backend="demo", device="demo", torch=TorchInfo(spec="2.13.0", version="2.13.0+cpu",
                                                                         git_version="cf30153c4c131c8164ee"),
        started_at=dt.datetime(2026, 11, 21, tzinfo=dt.UTC), status=Status.failed,
        command="ootci run demo --torch 2.13.0",
        stages=[StageResult(name="build", status=Status.passed, duration_s=1.5, summary="built | demo.whl"),
                StageResult(name="autoload", status=Status.failed, summary="import torch failed",
                            root_cause=RootCause(kind="exception", summary="OSError: libx.so: cannot open",
                                                 hint="a shared library is missing")),
                StageResult(name="smoke", status=Status.blocked, summary="blocked")],
        problems=["expected failure 'x' matches no test"],
    )


def test_terminal_progress_ticks_while_a_stage_runs():
    out = io.StringIO()
    reporter = Reporter(out, github=False, summary_path="", interactive=True)
    reporter.stage_started("demo", "build")
    reporter.line("compiling kernels.cpp\n")
    time.sleep(1.2)
    reporter.stage_finished("demo", StageResult(name="build", status=Status.passed, duration_s=1.2, summary="ok"))
    text = out.getvalue()
    assert "\r\x1b[K  demo build" in text
    assert "compiling kernels.cpp" in text
    assert text.rstrip().endswith("✅ build        passed       1.2s  ok")


def test_github_mode_folds_and_annotates():
    out = io.StringIO()
    reporter = Reporter(out, github=True, summary_path="")
    reporter.stage_started("demo", "autoload")
    reporter.line("probe output\n")
    failed = record().stages[1]
    reporter.stage_finished("demo", failed)
    lines = out.getvalue().splitlines()
    assert lines[:3] == ["::group::ootci demo autoload", "probe output", "::endgroup::"]
    assert lines[3] == ("::error title=ootci demo autoload failed::OSError: libx.so: cannot open "
                        "(hint: a shared library is missing)")


def test_annotation_escapes_newlines():
    out = io.StringIO()
    reporter = Reporter(out, github=True, summary_path="")
    reporter.stage_started("demo", "build")
    reporter.stage_finished("demo", StageResult(name="build", status=Status.failed, summary="a\nb 100%"))
    assert "::error title=ootci demo build failed::a%0Ab 100%25" in out.getvalue()


def test_markdown_summary_is_a_table():
    text = markdown_summary(record())
    assert "### ootci: demo ❌ failed" in text
    assert "| build | ✅ passed | 1.5s | built \\| demo.whl |" in text
    assert "| autoload | ❌ failed | 0.0s | OSError: libx.so: cannot open |" in text
    assert "- expected failure 'x' matches no test" in text
    assert "Reproduce: `ootci run demo --torch 2.13.0`" in text


def test_terminal_progress_never_shows_pytests_raw_verdict():
    """pytest counts an expected failure as failed; the ticking line must not show "2 failed" before
    the stage reports its classified counts ("passed ... 2 xfailed")."""
    out = io.StringIO()
    reporter = Reporter(out, github=False, summary_path="", interactive=True)
    reporter.stage_started("demo", "integration")
    reporter.line("test_opinfo.py ........F.......F  [100%]\n")
    time.sleep(0.7)
    for raw in ("FAILED test_opinfo.py::test_op[nonzero_static] - AssertionError",
                "=========== 2 failed, 3680 passed, 57 skipped in 61.02s (0:01:01) ===========",
                "2 failed, 3680 passed in 61.0s"):
        reporter.line(raw + "\n")
    time.sleep(0.7)
    reporter.stage_finished("demo", StageResult(name="integration", status=Status.passed, duration_s=1.4,
                                                summary="integration: 3680 passed, 57 skipped, 2 xfailed"))
    text = out.getvalue()
    assert "........F" in text  # ordinary output still ticks by
    assert "pytest finished; classifying the results" in text
    assert "2 failed" not in text and "FAILED" not in text
    assert text.rstrip().endswith("integration: 3680 passed, 57 skipped, 2 xfailed")


def test_the_run_line_names_the_new_failures_by_cause_largest_first_and_the_root_cause_is_the_largest():
    from ootci.runner.core import causes
    from ootci.runner.models import Outcome
    from ootci.runner.models import TestResult as Result

    tolist = "NotImplementedError: .tolist() is not supported for tensor subclasses."
    tests = [Result(id=f"test_a.py::test_tolist_{i}", suite="upstream", outcome=Outcome.failed, op=f"op{i % 4}",
                    dtype="float32", message=f"AssertionError: sample {i} (Tensor[{i}, 2]): raised on pyreg but "
                                             f"not on CPU: {tolist}") for i in range(18)]
    tests += [Result(id=f"test_b.py::test_out_{i}", suite="upstream", outcome=Outcome.failed, op="add",
                     message=f"RuntimeError: out= result has the wrong shape [{i}, 3], expected [{i + 1}, 3]")
              for i in range(14)]
    tests += [Result(id="test_c.py::test_known", suite="upstream", outcome=Outcome.xfailed, message="known failure "
                     "(failed with torch 2.13.0); it failed: RuntimeError: data pointer of a tensor without storage")]
    stage = StageResult(name="upstream", status=Status.failed,
                        root_cause=RootCause(kind="test", summary="failed: test_b.py::test_out_0: ..."))
    causes.attach(stage, tests, "pyreg")
    record = RunRecord(run_id="r", backend="pyreg", device="pyreg", torch=TorchInfo(spec="2.13.0"),
                       started_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), stages=[stage], tests=tests)
    out = io.StringIO()
    Reporter(out, github=False, interactive=False).run_finished(record, "out/record.json")
    assert ("32 new failures in 2 causes: 18 `NotImplementedError: .tolist() is not supported for tensor "
            "subclasses.` (op0, op1, op2 +1; float32); 14 `RuntimeError: out= result has the wrong shape […], "
            "expected […]` (add); 1 known failures failed as expected") in out.getvalue()
    assert stage.root_cause.summary.startswith(f"{tolist} (18 of 32 new failures, e.g. test_a.py::test_tolist_0)")
