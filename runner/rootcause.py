"""Turn how a subprocess ended into a RootCause a person can act on.

Python prints a chained exception innermost first, so the root cause of
`RuntimeError: Failed to load the backend extension` is the first exception of the
last chain in the output.
"""

from __future__ import annotations

import re

from .models import RootCause
from .procs import ProcResult

_CHAIN_LINKS = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure|error)?)(?::\s?(.*))?$")

# pip -v prints this right after a failed build backend's output, at the same indentation.
_PIP_SUBPROCESS_ERROR = "error: subprocess-exited-with-error"

# (pattern in the root cause text, hint). First match wins.
HINTS: list[tuple[re.Pattern, str]] = [
    (re.compile(r"lib[\w+.-]*\.so[\w.]*: cannot open shared object file"),
     "a shared library is missing: the vendor runtime is not installed on this machine"),
    (re.compile(r"undefined symbol"),
     "the backend was built against a different torch: rebuild it against the torch under test"),
    (re.compile(r"No module named 'torch'"), "torch is not installed in the environment under test"),
    (re.compile(r"No module named"), "a module is missing: check the package and its dependencies"),
    (re.compile(r"partially initialized module|circular import"),
     "circular import: guard the autoload hook with a loaded flag"),
    (re.compile(r"has no attribute"), "the entry point names an attribute the module does not define"),
    (re.compile(r"SIGSEGV"), "the process crashed in native code: run it under gdb or with faulthandler"),
    (re.compile(r"SIGABRT"), "native code aborted (an assertion or std::terminate)"),
    (re.compile(r"time limit"), "the process hung: a deadlock or a wait on hardware that is not there"),
]


def hint_for(text: str) -> str | None:
    for pattern, hint in HINTS:
        if pattern.search(text):
            return hint
    return None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _blocks(lines: list[str]) -> list[tuple[int, int]]:
    # Tracebacks may be indented (pip re-prints a build's output six spaces in).
    starts = [i for i, line in enumerate(lines) if line.lstrip().startswith("Traceback (most recent call last):")]
    return [(s, starts[k + 1] if k + 1 < len(starts) else len(lines)) for k, s in enumerate(starts)]


def _exception_of(lines: list[str], start: int, end: int) -> tuple[str, str] | None:
    """The exception line ending a traceback block: the first line after the frames
    that is indented like the `Traceback` header."""
    base = _indent(lines[start])
    for i in range(start + 1, end):
        line = lines[i]
        if not line.strip() or _indent(line) > base:
            continue
        text = line.strip()
        if text.startswith(_CHAIN_LINKS):
            break
        m = _EXC_LINE.match(text)
        if m:
            message = (m.group(2) or "").strip()
            # A multi-line message continues at the same indentation up to a blank line.
            j = i + 1
            while j < end and lines[j].strip() and _indent(lines[j]) == base:
                nxt = lines[j].strip()
                if nxt.startswith(_CHAIN_LINKS + ("Traceback", "[end of output]", _PIP_SUBPROCESS_ERROR)):
                    break
                message += " " + nxt
                j += 1
            return m.group(1), message.strip()
        break
    return None


def innermost_exception(output: str) -> tuple[str, str] | None:
    lines = output.splitlines()
    blocks = _blocks(lines)
    if not blocks:
        return None
    # Walk back from the last traceback while the previous block is chained to it.
    first = len(blocks) - 1
    while first > 0:
        prev_start, prev_end = blocks[first - 1]
        between = "\n".join(l.strip() for l in lines[prev_start:blocks[first][0]])
        if any(link in between for link in _CHAIN_LINKS):
            first -= 1
        else:
            break
    for start, end in blocks[first:]:
        exc = _exception_of(lines, start, end)
        if exc:
            return exc
    return None


def from_proc(result: ProcResult, *, what: str = "process", culprit: str | None = None) -> RootCause | None:
    """None when the process succeeded."""
    if result.timed_out:
        summary = f"{what} exceeded its {result.timeout_s:g} s time limit and was killed"
        return RootCause(kind="timeout", summary=summary, timeout_s=result.timeout_s,
                         hint=hint_for("time limit"), culprit=culprit)
    if result.returncode == 0:
        return None
    exc = innermost_exception(result.output_tail)
    signame = result.signal_name
    if signame:
        summary = f"{what} was killed by {signame}"
        if exc:
            summary += f" after {exc[0]}: {exc[1]}"
        return RootCause(kind="signal", summary=summary, signal=signame, exit_code=result.returncode,
                         hint=hint_for(signame), culprit=culprit)
    if exc:
        exc_type, message = exc
        summary = f"{exc_type}: {message}" if message else exc_type
        return RootCause(kind="exception", summary=summary[:500], exception_type=exc_type, message=message[:2000],
                         exit_code=result.returncode, hint=hint_for(summary), culprit=culprit)
    last = next((l.strip() for l in reversed(result.output_tail.splitlines()) if l.strip()), "")
    summary = f"{what} exited with code {result.returncode}" + (f": {last[:300]}" if last else "")
    return RootCause(kind="exit_code", summary=summary, exit_code=result.returncode,
                     hint=hint_for(result.output_tail), culprit=culprit)
