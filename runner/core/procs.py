"""Subprocesses that cannot take the runner down with them.

Every stage and every probe goes through `run`: its own process group (so a hang is
killed with all its children), a hard timeout, output streamed to a log file and
only a bounded tail kept in memory, and the way it ended classified.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

TAIL_BYTES = 64 * 1024
CHUNK_BYTES = 64 * 1024
LINE_BYTES = 4096


@dataclass
class ProcResult:
    argv: list[str]
    returncode: int | None
    duration_s: float
    timed_out: bool
    output_tail: str
    timeout_s: float | None = None
    log: Path | None = None
    output_truncated: bool = False
    extra: dict = field(default_factory=dict)
    stderr_tail: str = ""
    """stderr, when run(separate_stderr=True) kept it apart from output_tail"""

    @property
    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.returncode == 0


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


# Children of the runner that are still running, so a SIGTERM to the runner can end them.
_live: set[subprocess.Popen] = set()
_live_lock = threading.Lock()
INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while a child starts, and raise them once it is in _live.

    Raised inside Popen (after the fork, while it waits for the exec), an interrupt would
    leave a child that nobody knows of, let alone ends: the pipeline's SIGTERM test caught
    a hanging build's three processes still running after ootci had exited. Python runs
    signal handlers in the main thread only, so only there is anything to hold; a child that
    another thread starts in the instant kill_all runs can still be missed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: held.append(signum)) for sig in INTERRUPTS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if held:
            signal.raise_signal(held[0])


def kill_all() -> None:
    with _live_lock:
        procs = list(_live)
    for proc in procs:
        _kill_group(proc)


def run(
    command: Sequence[str | os.PathLike[str]],
    *,
    timeout: float | None,
    log: Path | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    tail_bytes: int = TAIL_BYTES,
    input_text: str | None = None,
    separate_stderr: bool = False,
) -> ProcResult:
    """Run argv to completion or timeout; stdout and stderr are merged, unless
    separate_stderr: then output_tail is stdout alone (for a caller that parses it) and
    stderr_tail is stderr (both still go to the log, and only stdout to on_line)."""
    argv = [os.fspath(a) for a in command]
    start = time.monotonic()
    log_file = open(log, "ab") if log else None
    if log_file:
        log_file.write(f"$ {' '.join(argv)}\n".encode())
        log_file.flush()
    log_lock = threading.Lock()
    out_tail, err_tail = _Tail(tail_bytes), _Tail(tail_bytes)
    proc = None
    try:
        with _interrupts_held():
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if separate_stderr else subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
            with _live_lock:
                _live.add(proc)
    except OSError as exc:
        if log_file:
            log_file.close()
        return ProcResult(argv, 127, time.monotonic() - start, False, f"{exc.strerror}: {argv[0]}", timeout, log)
    except BaseException:
        # An interrupt that came while the child was starting, raised now that it is known.
        if proc is not None:
            _kill_group(proc)
            with _live_lock:
                _live.discard(proc)
        if log_file:
            log_file.close()
        raise

    def pump(stream, tail: _Tail, on_line: Callable[[str], None] | None) -> None:
        # Chunks, not lines: a child that prints gigabytes without a newline must
        # not be held in memory. Lines are reassembled (bounded) for on_line only.
        partial = b""
        while chunk := stream.read1(CHUNK_BYTES):
            if log_file:
                with log_lock:
                    log_file.write(chunk)
            tail.keep(chunk)
            if on_line:
                *lines, partial = (partial + chunk).split(b"\n")
                for line in lines:
                    on_line(line.decode("utf-8", "replace") + "\n")
                partial = partial[-LINE_BYTES:]
        if on_line and partial:
            on_line(partial.decode("utf-8", "replace"))

    readers = [threading.Thread(target=pump, args=(proc.stdout, out_tail, on_line), daemon=True)]
    if separate_stderr:
        readers.append(threading.Thread(target=pump, args=(proc.stderr, err_tail, None), daemon=True))
    for reader in readers:
        reader.start()
    if input_text is not None:
        assert proc.stdin is not None
        try:
            proc.stdin.write(input_text.encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
    except BaseException:
        # Interrupted (SIGINT/SIGTERM in the runner): the child must not outlive us.
        _kill_group(proc)
        raise
    finally:
        with _live_lock:
            _live.discard(proc)
    # A grandchild may still hold the pipe open; do not wait on it forever.
    for reader in readers:
        reader.join(timeout=5)
    if any(reader.is_alive() for reader in readers):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for reader in readers:
            reader.join(timeout=2)
    duration = time.monotonic() - start
    if log_file:
        with log_lock:
            if timed_out:
                log_file.write(f"\n[ootci] killed after {timeout:g} s time limit\n".encode())
            log_file.close()
    text, err_text = out_tail.text(), err_tail.text()  # text() is what settles `truncated`
    return ProcResult(argv, proc.returncode, duration, timed_out, text, timeout, log,
                      out_tail.truncated or err_tail.truncated, stderr_tail=err_text)


class _Tail:
    """The last `limit` bytes of a stream, kept as the chunks they came in."""

    def __init__(self, limit: int):
        self.limit = limit
        self.chunks: deque[bytes] = deque()
        self.size = 0
        self.truncated = False

    def keep(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.size += len(chunk)
        while self.size > self.limit and len(self.chunks) > 1:
            self.size -= len(self.chunks.popleft())
            self.truncated = True

    def text(self) -> str:
        raw = b"".join(self.chunks)
        if len(raw) > self.limit:
            raw = raw[-self.limit:]
            self.truncated = True
        return raw.decode("utf-8", "replace")


def start_detached(argv: Sequence[str | os.PathLike]) -> None:
    """Start argv and return at once: for work nobody waits for (deleting an old copy).
    It runs in its own session, with no terminal and no pipes, so it outlives the runner
    and kill_all does not end it."""
    subprocess.Popen([os.fspath(a) for a in argv], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)


def python_argv(python: str | os.PathLike[str], *args: str) -> list[str]:
    # -X utf8 keeps output decoding predictable whatever the locale of the runner.
    return [os.fspath(python), "-X", "utf8", *args]


@functools.cache
def neutral_dir() -> Path:
    """An empty working directory for code run in the environment under test. From the
    orchestrator's own working directory (a vendor's checkout, with the backend's package
    at its root), `python -c` and `python -m` would import that source tree instead of
    the installed wheel. Environments get PYTHONSAFEPATH=1 as well (target_env).
    It is removed when this process exits: every `ootci verify` and pipeline makes one, and
    a CI machine's /tmp would otherwise collect them (a test session left some eight hundred)."""
    path = Path(tempfile.mkdtemp(prefix="ootci-cwd-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def target_env(env: dict[str, str]) -> dict[str, str]:
    """`env` for an interpreter of the environment under test: neither the working directory
    nor a script's directory goes on sys.path (Python 3.11+; older ones ignore it)."""
    return {**env, "PYTHONSAFEPATH": "1"}
