"""Root causes from real process output."""

from __future__ import annotations

import sys
import textwrap

from ootci.runner.core import procs, rootcause


def run_python(code: str, timeout: float = 30) -> procs.ProcResult:
    return procs.run([sys.executable, "-c", textwrap.dedent(code)], timeout=timeout)


def test_innermost_exception_of_a_chain():
    result = run_python("""
        try:
            raise OSError("libhccl.so: cannot open shared object file: No such file or directory")
        except OSError as e:
            raise RuntimeError("Failed to load the backend extension: torch_npu.") from e
    """)
    cause = rootcause.from_proc(result, what="import torch")
    assert cause.kind == "exception"
    assert cause.exception_type == "OSError"
    assert cause.summary == "OSError: libhccl.so: cannot open shared object file: No such file or directory"
    assert cause.hint.startswith("a shared library is missing")


def test_exception_raised_while_handling_another():
    result = run_python("""
        try:
            {}["k"]
        except KeyError:
            raise ImportError("cannot import name 'x'")
    """)
    assert rootcause.from_proc(result).exception_type == "KeyError"


def test_only_the_last_chain_counts():
    result = run_python("""
        import traceback
        try:
            raise ValueError("handled earlier")
        except ValueError:
            traceback.print_exc()
        raise TypeError("the real one")
    """)
    assert rootcause.from_proc(result).summary == "TypeError: the real one"


def test_indented_traceback_from_pip():
    output = textwrap.dedent("""\
        error: subprocess-exited-with-error
          ╰─> [3 lines of output]
              Traceback (most recent call last):
                File "setup.py", line 1, in <module>
              ValueError: vendor SDK not found
              [end of output]
        error: metadata-generation-failed
    """)
    assert rootcause.innermost_exception(output) == ("ValueError", "vendor SDK not found")


def test_signal_exit_code_and_timeout():
    segv = run_python("import ctypes; ctypes.string_at(0)")
    cause = rootcause.from_proc(segv)
    assert (cause.kind, cause.signal) == ("signal", "SIGSEGV")
    abort = run_python("import os; os.abort()")
    assert rootcause.from_proc(abort).signal == "SIGABRT"
    exited = run_python("import sys; print('bye'); sys.exit(3)")
    cause = rootcause.from_proc(exited, what="import torch")
    assert (cause.kind, cause.exit_code) == ("exit_code", 3)
    assert cause.summary == "import torch exited with code 3: bye"
    hang = run_python("import time; time.sleep(60)", timeout=1)
    cause = rootcause.from_proc(hang, what="probe")
    assert cause.kind == "timeout" and cause.timeout_s == 1
    assert rootcause.from_proc(run_python("pass")) is None
