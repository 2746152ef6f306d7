"""Subprocesses that cannot take the runner down with them.

Every stage and every probe goes through `run`: its own process group (so a hang is
killed with all its children), a hard timeout, output streamed to a log file and
only a bounded tail kept in memory, and the way it ended classified.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

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


def kill_all() -> None:
    with _live_lock:
        procs = list(_live)
    for proc in procs:
        _kill_group(proc)


def run(
    argv: Sequence[str | os.PathLike],
    *,
    timeout: float | None,
    log: Path | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    tail_bytes: int = TAIL_BYTES,
    input_text: str | None = None,
) -> ProcResult:
    """Run argv to completion or timeout; stdout and stderr are merged."""
    argv = [os.fspath(a) for a in argv]
    start = time.monotonic()
    log_file = open(log, "ab") if log else None
    if log_file:
        log_file.write(f"$ {' '.join(argv)}\n".encode())
        log_file.flush()
    tail: deque[bytes] = deque()
    tail_size = 0
    truncated = False
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        if log_file:
            log_file.close()
        return ProcResult(argv, 127, time.monotonic() - start, False, f"{exc.strerror}: {argv[0]}", timeout, log)
    with _live_lock:
        _live.add(proc)

    def keep(chunk: bytes) -> None:
        nonlocal tail_size, truncated
        tail.append(chunk)
        tail_size += len(chunk)
        while tail_size > tail_bytes and len(tail) > 1:
            tail_size -= len(tail.popleft())
            truncated = True

    def pump() -> None:
        # Chunks, not lines: a child that prints gigabytes without a newline must
        # not be held in memory. Lines are reassembled (bounded) for on_line only.
        assert proc.stdout is not None
        partial = b""
        while chunk := proc.stdout.read1(CHUNK_BYTES):
            if log_file:
                log_file.write(chunk)
            keep(chunk)
            if on_line:
                *lines, partial = (partial + chunk).split(b"\n")
                for line in lines:
                    on_line(line.decode("utf-8", "replace") + "\n")
                partial = partial[-LINE_BYTES:]
        if on_line and partial:
            on_line(partial.decode("utf-8", "replace"))

    reader = threading.Thread(target=pump, daemon=True)
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
    reader.join(timeout=5)
    if reader.is_alive():
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        reader.join(timeout=2)
    duration = time.monotonic() - start
    if log_file:
        if timed_out:
            log_file.write(f"\n[ootci] killed after {timeout:g} s time limit\n".encode())
        log_file.close()
    raw = b"".join(tail)
    if len(raw) > tail_bytes:
        raw = raw[-tail_bytes:]
        truncated = True
    text = raw.decode("utf-8", "replace")
    return ProcResult(argv, proc.returncode, duration, timed_out, text, timeout, log, truncated)


def python_argv(python: Path | str, *args: str) -> list[str]:
    # -X utf8 keeps output decoding predictable whatever the locale of the runner.
    return [os.fspath(python), "-X", "utf8", *args]


def this_python() -> str:
    return sys.executable


@functools.cache
def neutral_dir() -> Path:
    """An empty working directory for code run in the environment under test. From the
    orchestrator's own working directory (a vendor's checkout, with the backend's package
    at its root), `python -c` and `python -m` would import that source tree instead of
    the installed wheel. Environments get PYTHONSAFEPATH=1 as well (target_env)."""
    return Path(tempfile.mkdtemp(prefix="ootci-cwd-"))


def target_env(env: dict[str, str]) -> dict[str, str]:
    """`env` for an interpreter of the environment under test: neither the working directory
    nor a script's directory goes on sys.path (Python 3.11+; older ones ignore it)."""
    return {**env, "PYTHONSAFEPATH": "1"}
