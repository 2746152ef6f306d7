"""A priority slot for a test whose verdict rests on real timings, inside an xdist run.

The timed test's worker lowers the CPU priority of its sibling workers and everything they
start (raising a process's nice value needs no privilege for one's own processes), so the
light files on the other workers fill the cores the timed test leaves idle without taking
time from it. The niceness is inherited by every process the siblings start later; it is
never lowered again, which only means the other workers stay equal among themselves.

Linux only (/proc); elsewhere, and outside an xdist worker, it does nothing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOWEST = 19
"""the nice value the siblings get: the scheduler's weight at 19 is 15 against 1024 at 0"""


def parents() -> dict[int, int]:
    """Each live process's parent, read from /proc (processes that exit meanwhile are left out)."""
    found: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields start after the last ')'.
        fields = text[text.rfind(")") + 2:].split()
        found[int(stat.parent.name)] = int(fields[1])
    return found


def descendants(root: int, parent_of: dict[int, int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in parent_of.items():
        children.setdefault(ppid, []).append(pid)
    out: set[int] = set()
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, ()))
    return out


def lower_the_others(controller: int, keep: int, nice: int = LOWEST) -> list[int]:
    """Set every process under `controller`, except `keep` and its own descendants, to at least
    `nice`. Returns the processes changed now."""
    parent_of = parents()
    mine = descendants(keep, parent_of) | {keep}
    changed = []
    for pid in descendants(controller, parent_of) - mine:
        try:
            if os.getpriority(os.PRIO_PROCESS, pid) < nice:
                os.setpriority(os.PRIO_PROCESS, pid, nice)
                changed.append(pid)
        except (ProcessLookupError, PermissionError):
            continue  # gone meanwhile, or another user's process: left alone
    return changed


@contextmanager
def others_yield_the_cpu(every_s: float = 0.5) -> Iterator[None]:
    """While the block runs, keep this xdist worker's siblings (and what they start) at the lowest
    priority. A pass repeats every `every_s`: a process started between two passes by an
    already-lowered one inherits its niceness anyway; the passes catch the rest."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or not Path("/proc/self/stat").exists():
        yield
        return
    controller, me = os.getppid(), os.getpid()
    stop = threading.Event()

    def keep_lowering() -> None:
        while not stop.is_set():
            lower_the_others(controller, keep=me)
            stop.wait(every_s)

    thread = threading.Thread(target=keep_lowering, name="others-yield-the-cpu", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
