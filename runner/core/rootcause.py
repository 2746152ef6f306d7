"""Turn how a subprocess ended into a RootCause a person can act on.

Python prints a chained exception innermost first, so the root cause of
`RuntimeError: Failed to load the backend extension` is the first exception of the
last chain in the output.
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import TYPE_CHECKING

from ootci.runner.core.procs import ProcResult
from ootci.runner.models import RootCause

if TYPE_CHECKING:
    from ootci.runner.torch_supply.wheel_metadata import BuildTorch

_CHAIN_LINKS = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure|error)?)(?::\s?(.*))?$")

# pip -v prints this right after a failed build backend's output, at the same indentation.
_PIP_SUBPROCESS_ERROR = "error: subprocess-exited-with-error"

CIRCULAR = re.compile(r"partially initialized module|circular import")
# torch's autoload calls the hook while the package that imported torch is still half
# run: the hook must exist by then. A loaded flag does not help; the order does.
CIRCULAR_HINT = ("circular import: define the autoload hook (the entry point's function) before the package's "
                 "`import torch` in its __init__.py, so that torch's autoload finds it while the package is still "
                 "being imported")

# (pattern in the root cause text, hint). First match wins.
HINTS: list[tuple[re.Pattern, str]] = [
    (re.compile(r"lib[\w+.-]*\.so[\w.]*: cannot open shared object file"),
     "a shared library is missing: the vendor runtime is not installed on this machine"),
    # Which torch the extension was built against decides the rest: see undefined_symbol_hint.
    (re.compile(r"undefined symbol"),
     "an undefined symbol: a native library does not match the libraries it was loaded with"),
    (re.compile(r"No module named 'torch'"), "torch is not installed in the environment under test"),
    (re.compile(r"No module named"), "a module is missing: check the package and its dependencies"),
    (CIRCULAR, CIRCULAR_HINT),
    (re.compile(r"has no attribute"), "the entry point names an attribute the module does not define"),
    (re.compile(r"SIGSEGV"), "the process crashed in native code: run it under gdb or with faulthandler"),
    (re.compile(r"SIGABRT"), "native code aborted (an assertion or std::terminate)"),
    (re.compile(r"time limit"), "the process hung: a deadlock or a wait on hardware that is not there"),
    (re.compile(r"^SystemExit"), "the backend calls sys.exit() while it is imported: raise an exception instead"),
    (re.compile(r"exited with code .* during import"),
     "the backend ends the interpreter while it is imported (sys.exit or os._exit)"),
    (re.compile(r"is not linked with support for|PrivateUse1HooksInterface|"
                r"Could not run 'aten::[\w.]+' with arguments from the 'PrivateUse1' backend"),
     "no tensor support: the backend registers no allocator or kernels for its device"),
    (re.compile(r"device type at start of device string"),
     "the device name is not registered: the backend did not run torch.utils.rename_privateuse1_backend"),
    (re.compile(r"declares no entry point"),
     "declare `<name> = <module>:<function>` in group torch.backends (see the autoload tutorial)"),
    (re.compile(r"not loaded by .import torch."),
     "torch did not load the backend: its entry point is missing or another one failed first"),
    (re.compile(r"a same-named directory of a source tree"),
     "the checkout shadows the installed package: keep it off sys.path (run from elsewhere; for pytest, "
     "--import-mode=importlib or no __init__.py above the tests) or use a src/ layout"),
    (re.compile(r"loaded the backend although autoload is off"),
     "the backend is imported by something else (a .pth file or sitecustomize): autoload=0 must not load it"),
]


def hint_for(text: str) -> str | None:
    for pattern, hint in HINTS:
        if pattern.search(text):
            return hint
    return None


def undefined_symbol_hint(build: BuildTorch | None, version: str | None, git_version: str | None) -> str:
    """The hint for an undefined symbol, given the torch the extension was built against
    (None: not recorded) and the torch under test. Says 'built against a different
    torch' only when that is known to be true."""
    under = f"{version} ({git_version[:12]})" if version and git_version else (version or "unknown")
    if build is None:
        return (f"an undefined symbol, and nothing records which torch the backend was built against: if it was "
                f"not torch {under}, rebuild it against the torch under test; if it was, a library it needs is "
                f"missing the symbol")
    if version is None or not build.matches(version, git_version):
        return (f"the backend was built against torch {build.describe()} ({build.how}), but the torch under test "
                f"is {under}: rebuild it against the torch under test")
    return (f"the backend was built against this very torch ({build.describe()}, {build.how}): the symbol is "
            f"missing from torch's exported API or from a library the backend should link; check its link "
            f"flags and its C++ ABI (_GLIBCXX_USE_CXX11_ABI)")


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
        between = "\n".join(line.strip() for line in lines[prev_start:blocks[first][0]])
        if any(link in between for link in _CHAIN_LINKS):
            first -= 1
        else:
            break
    for start, end in blocks[first:]:
        exc = _exception_of(lines, start, end)
        if exc:
            return exc
    return None


def from_proc(result: ProcResult, *, what: str = "process", culprit: str | None = None,
              code_prefixes: list[str] | None = None) -> RootCause | None:
    """None when the process succeeded.

    For a hang or a fatal signal, a faulthandler stack dump in the output (the probes
    arm one) adds where it happened, preferring frames under `code_prefixes`.
    """
    where = where_stuck(result.output_tail, code_prefixes) if (result.timed_out or result.signal_name) else None
    at = f" at {where}" if where else ""
    if result.timed_out:
        summary = f"{what} exceeded its {result.timeout_s:g} s time limit and was killed{at}"
        return RootCause(kind="timeout", summary=summary, timeout_s=result.timeout_s,
                         hint=hint_for("time limit"), culprit=culprit)
    if result.returncode == 0:
        return None
    exc = innermost_exception(result.output_tail)
    signame = result.signal_name
    if signame:
        summary = f"{what} was killed by {signame}{at}"
        if exc:
            summary += f" after {exc[0]}: {exc[1]}"
        return RootCause(kind="signal", summary=summary, signal=signame, exit_code=result.returncode,
                         hint=hint_for(signame), culprit=culprit)
    if exc:
        exc_type, message = exc
        summary = f"{exc_type}: {message}" if message else exc_type
        return RootCause(kind="exception", summary=summary[:500], exception_type=exc_type, message=message[:2000],
                         exit_code=result.returncode, hint=hint_for(summary), culprit=culprit)
    last = next((line.strip() for line in reversed(result.output_tail.splitlines()) if line.strip()), "")
    summary = f"{what} exited with code {result.returncode}" + (f": {last[:500]}" if last else "")
    return RootCause(kind="exit_code", summary=summary, exit_code=result.returncode,
                     hint=hint_for(result.output_tail), culprit=culprit)


# torch wraps every failing hook as: Failed to load the backend extension: <entry point name>. You can ...
_WRAPPED = re.compile(r"Failed to load the backend extension: (.+?)\. You can disable")
# faulthandler: "Current thread 0x... (most recent call first):" / "Thread 0x..." then '  File "...", line N in f'
_FAULT_HEADER = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+ .*most recent call first\):", re.M)
_FAULT_FRAME = re.compile(r'^\s+File "(.+)", line (\d+) in (.+)$')


def wrapped_entry_point(message: str) -> str | None:
    """The entry point named by torch's `Failed to load the backend extension` wrapper."""
    m = _WRAPPED.search(message or "")
    return m.group(1) if m else None


def stack_frames(output: str) -> list[list[str]]:
    """Each thread faulthandler dumped, innermost frame first, as 'file:line in function'."""
    threads = []
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if not _FAULT_HEADER.match(line):
            continue
        frames = []
        for nxt in lines[i + 1:]:
            m = _FAULT_FRAME.match(nxt)
            if not m:
                break
            frames.append(f"{m.group(1)}:{m.group(2)} in {m.group(3)}")
        threads.append(frames)
    return threads


def where_stuck(output: str, prefixes: list[str] | None = None) -> str | None:
    """The innermost frame of the last stack dump, preferring frames inside one of `prefixes`.

    faulthandler prints the dump when the probe is about to be killed for a hang and
    when it dies of a fatal signal; that frame says where it hung or crashed.
    """
    threads = stack_frames(output)
    if not threads:
        return None
    for frames in reversed(threads):
        for frame in frames:
            if prefixes and any(frame.startswith(p) for p in prefixes):
                return frame
    first = next((frames for frames in reversed(threads) if frames), None)
    return first[0] if first else None


def from_chain(chain: list[dict], *, what: str = "import", culprit: str | None = None,
               where: str | None = None) -> RootCause:
    """A RootCause from a probe's exception chain (outermost first): the innermost exception wins.

    A SystemExit becomes an exit-code cause: the interpreter would have ended there.
    """
    inner = chain[-1]
    exc_type = inner.get("type") or "Exception"
    message = (inner.get("message") or "").strip()
    if culprit is None:
        culprit = next((n for n in (wrapped_entry_point(c.get("message", "")) for c in chain) if n), None)
    frames = [f for f in inner.get("frames", []) if not f.startswith("<frozen")]
    where = where or (frames[-1] if frames else None)
    if exc_type == "SystemExit":
        code = inner.get("exit_code", 1)
        summary = f"the interpreter exited with code {code} during {what} (sys.exit)"
        if where:
            summary += f" at {where}"
        return RootCause(kind="exit_code", summary=summary[:500], exception_type=exc_type, message=message[:2000],
                         exit_code=code, hint=hint_for(f"SystemExit: {message}"), culprit=culprit)
    if message:
        summary = f"{exc_type}: {message}"
    else:
        # A bare `raise StopIteration` says nothing by its name alone: say where it came from.
        summary = f"{exc_type} (no message) raised at {where}" if where else f"{exc_type} (no message)"
    hint = hint_for(summary) or hint_for(f"{exc_type}: {message}")
    if hint == CIRCULAR_HINT:
        site = first_torch_import([f for entry in chain for f in entry.get("frames", [])])
        if site:
            hint += f" ({site} imports torch first)"
    return RootCause(kind="exception", summary=summary[:500], exception_type=exc_type, message=message[:2000],
                     hint=hint, culprit=culprit)


_FRAME_TEXT = re.compile(r"^(?P<file>.+):(?P<line>\d+) in (?P<func>.+)$")


def _in_torch(path: str) -> bool:
    parts = path.replace("\\", "/").split("/")
    return any(part == "torch" and parent in ("site-packages", "dist-packages")
               for parent, part in zip(parts, parts[1:-1], strict=False))


def first_torch_import(frames: list[str]) -> str | None:
    """`file:line` of the frame outside torch that started importing torch, from a probe's
    frames ("file:line in func", outermost first): the line just before torch's own frames."""
    for before, after in pairwise(frames):
        outer, inner = _FRAME_TEXT.match(before), _FRAME_TEXT.match(after)
        if not outer or not inner or outer.group("file").startswith("<"):
            continue
        if (not _in_torch(outer.group("file")) and _in_torch(inner.group("file"))
                and inner.group("file").endswith("__init__.py") and inner.group("func") == "<module>"):
            return f"{outer.group('file')}:{outer.group('line')}"
    return None


def missing(summary: str, *, culprit: str | None = None, hint: str | None = None) -> RootCause:
    """Something the contract requires is absent (an entry point, a module, an attribute)."""
    return RootCause(kind="missing", summary=summary[:500], hint=hint or hint_for(summary), culprit=culprit)
