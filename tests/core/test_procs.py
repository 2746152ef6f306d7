"""The subprocess runner every stage relies on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ootci.runner.core import procs
from tests.support.sleepers import running, unique_sleep


def test_timeout_kills_the_whole_process_group(tmp_path):
    marker = tmp_path / "grandchild-alive"
    grandchild = f"import time; time.sleep(5); open({str(marker)!r}, 'w')"
    code = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {grandchild!r}]); time.sleep(60)"
    start = time.monotonic()
    result = procs.run([sys.executable, "-c", code], timeout=1)
    assert result.timed_out and not result.ok
    assert time.monotonic() - start < 10
    time.sleep(6)
    assert not marker.exists(), "the grandchild outlived the timeout"


def test_output_goes_to_log_and_only_a_bounded_tail_is_kept(tmp_path):
    log = tmp_path / "stage.log"
    result = procs.run([sys.executable, "-c", "for i in range(200000): print('x' * 50, i)"],
                       timeout=60, log=log, tail_bytes=4096)
    assert result.ok
    assert len(result.output_tail) <= 4096
    assert result.output_truncated
    assert "199999" in result.output_tail
    assert log.stat().st_size > 200000 * 50
    assert log.read_text().startswith("$ ")


def test_missing_program_is_a_result_not_an_exception():
    result = procs.run(["/nonexistent/tool"], timeout=5)
    assert result.returncode == 127 and "/nonexistent/tool" in result.output_tail


def test_lines_are_streamed_to_the_callback():
    seen: list[str] = []
    procs.run([sys.executable, "-c", "print('a'); print('b')"], timeout=30, on_line=seen.append)
    assert [s.strip() for s in seen] == ["a", "b"]


def test_stdin_closed_so_prompts_do_not_hang():
    result = procs.run([sys.executable, "-c", "input()"], timeout=30)
    assert result.returncode == 1 and "EOFError" in result.output_tail


def test_one_enormous_line_stays_bounded():
    result = procs.run([sys.executable, "-c", "import sys; sys.stdout.write('y' * 50_000_000)"],
                       timeout=60, tail_bytes=1000, on_line=lambda line: None)
    assert result.ok
    assert len(result.output_tail) == 1000
    assert result.output_truncated


def test_stderr_kept_apart_leaves_stdout_parseable(tmp_path):
    log = tmp_path / "git.log"
    code = "import sys; print('answer'); print('warning: noise', file=sys.stderr)"
    result = procs.run([sys.executable, "-c", code], timeout=30, log=log, separate_stderr=True)
    assert result.ok and result.output_tail == "answer\n" and result.stderr_tail == "warning: noise\n"
    assert "answer" in log.read_text() and "warning: noise" in log.read_text()


def test_the_neutral_working_directory_goes_when_the_process_exits(tmp_path):
    # Every `ootci verify` makes one; a CI machine's /tmp must not collect them.
    code = ("from ootci.runner.core import procs; d = procs.neutral_dir(); "
            "assert d.is_dir() and d == procs.neutral_dir(); print(d)")
    result = procs.run([sys.executable, "-c", code], timeout=60, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert result.ok, result.output_tail
    made = Path(result.output_tail.strip().splitlines()[-1])
    assert made.parent == tmp_path and made.name.startswith("ootci-cwd-")
    assert list(tmp_path.iterdir()) == []


class Interrupted(BaseException):
    """What the pipeline's SIGTERM handler raises (runner/stages/pipeline.py)."""


def test_an_interrupt_while_a_child_starts_still_ends_the_child(monkeypatch):
    """SIGTERM can reach the runner while a child is starting: a clean-clone run of the suite
    caught it, when the pipeline's SIGTERM test read "compiling" in the build log's command
    line and signalled before Popen had returned. Here the signal is sent at that moment on
    purpose: from inside Popen, right after the child exists."""
    marker = unique_sleep()

    class SignalledWhileStarting(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGTERM)

    def on_term(signum, frame):
        raise Interrupted()

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        with monkeypatch.context() as patched, pytest.raises(Interrupted):
            patched.setattr(subprocess, "Popen", SignalledWhileStarting)
            procs.run(["sh", "-c", f"{marker} & {marker}"], timeout=60)
        deadline = time.monotonic() + 10
        while running(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert running(marker) == [], "the child and its own child outlived the interrupt"
    finally:
        signal.signal(signal.SIGTERM, previous)
        subprocess.run(["pkill", "-f", marker])
    assert not procs._live
