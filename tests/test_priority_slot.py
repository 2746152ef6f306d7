"""The priority slot of timed tests (tests/support/priority.py): the timed test's sibling workers,
and what they start, go to the lowest CPU priority; its own process tree keeps its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import priority

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")

# A process that starts one child (a sleeper) and then sleeps: a worker and the work it started.
WORKER = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
# A worker in the priority slot: under `others_yield_the_cpu` as the timed worker is, then it
# starts a child of its own.
TIMED_WORKER = ("import subprocess, sys, time\n"
                "from tests.support.priority import others_yield_the_cpu\n"
                "with others_yield_the_cpu(every_s=0.1):\n"
                "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                "    time.sleep(60)\n")


@pytest.fixture
def now_nice():
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    if nice >= priority.LOWEST:
        pytest.skip(f"this worker already runs at nice {nice} (lowered beside a timed test): "
                    "no lower priority is left to show")
    return nice


def nice_of(pid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, pid)


def wait_for_children(pid: int, count: int) -> list[int]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = sorted(priority.descendants(pid, priority.parents()))
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not start {count} children")


def start(code: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], **kwargs)


def stop(*procs: subprocess.Popen) -> None:
    for proc in procs:
        for pid in priority.descendants(proc.pid, priority.parents()):
            os.kill(pid, 9)
        proc.kill()
        proc.wait()


def test_the_other_workers_trees_are_lowered_and_the_kept_tree_is_not(now_nice):
    # This test process stands for xdist's controller: two workers under it, each with a child.
    kept, other = start(WORKER), start(WORKER)
    try:
        kept_child = wait_for_children(kept.pid, 1)[0]
        other_child = wait_for_children(other.pid, 1)[0]
        changed = priority.lower_the_others(os.getpid(), keep=kept.pid)
        assert {other.pid, other_child} <= set(changed)
        assert (nice_of(other.pid), nice_of(other_child)) == (priority.LOWEST, priority.LOWEST)
        assert (nice_of(kept.pid), nice_of(kept_child)) == (now_nice, now_nice)
        assert nice_of(os.getpid()) == now_nice, "the controller itself is not a sibling"
        # A second pass finds nothing left to change.
        assert not set(priority.lower_the_others(os.getpid(), keep=kept.pid)) & {other.pid, other_child}
    finally:
        stop(kept, other)


@pytest.mark.parametrize("under_xdist", [True, False], ids=["xdist-worker", "no-xdist"])
def test_a_worker_in_the_slot_lowers_its_siblings_while_it_runs_and_only_under_xdist(under_xdist, now_nice, repo):
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    env["PYTHONPATH"] = str(repo)
    if under_xdist:
        env["PYTEST_XDIST_WORKER"] = "gw0"
    sibling = start(WORKER)
    timed = start(TIMED_WORKER, env=env, cwd=repo)
    try:
        sibling_child = wait_for_children(sibling.pid, 1)[0]
        timed_child = wait_for_children(timed.pid, 1)[0]
        expected = priority.LOWEST if under_xdist else now_nice
        # The slot passes every 0.1 s; outside xdist, a second is time enough to see it never does.
        deadline = time.monotonic() + (30 if under_xdist else 1)
        while nice_of(sibling_child) != priority.LOWEST and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (nice_of(sibling.pid), nice_of(sibling_child)) == (expected, expected)
        assert (nice_of(timed.pid), nice_of(timed_child)) == (now_nice, now_nice)
    finally:
        stop(sibling, timed)
