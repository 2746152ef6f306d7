"""The CPU each test costs, for keeping `make test` within its budget (count, do not time).

Wall time under three workers on two cores says more about the neighbours than about the test.
CPU seconds (the worker's own, and its children's once they are reaped: pip, builds, act,
`ootci run`) add up to what the machine had to do. With OOTCI_TEST_CPU_REPORT=FILE every
worker appends one JSON line per test, setup and teardown included (a module fixture counts
towards the first test that uses it):

    {"test": NODEID, "cpu_s": 12.3, "children_s": 11.9, "wall_s": 20.1}

At the end of the session one more line says what an `import torch` costs on this machine,
the unit most of that CPU is made of (the 2.13.0 layer's, where the session made it):

    {"yardstick": "import torch", "python": PATH, "cpu_s": 1.17}

`python -m tests.support.cpu_report FILE` prints the files and tests that cost most, and the
whole in that unit, beside the 20-minute budget in the same unit: machines differ by more than
twice in speed, so a budget in seconds alone says little about a run on another machine.
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

ENV = "OOTCI_TEST_CPU_REPORT"
BUDGET_S = 2 * 20 * 60
"""`make test`'s budget: 20 minutes on the two cores it keeps busy, in CPU seconds"""
YARDSTICK_RUNS = 3


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


class CpuReport:
    def __init__(self, path: Path) -> None:
        self.path = path

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        own0, children0 = _cpu()
        start = time.monotonic()
        yield
        own1, children1 = _cpu()
        line = {"test": item.nodeid, "cpu_s": round(own1 - own0 + children1 - children0, 2),
                "children_s": round(children1 - children0, 2), "wall_s": round(time.monotonic() - start, 2)}
        # One short write per line in append mode: the workers' lines do not interleave.
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")

    def pytest_sessionfinish(self, session):
        if hasattr(session.config, "workerinput"):  # once, by the controller, after the workers
            return
        python = layer_python()
        if python is None:
            return
        try:
            cpu = import_torch_cpu(python)
        except (OSError, subprocess.SubprocessError) as error:
            print(f"cpu report: no yardstick: {error}", file=sys.stderr)
            return
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"yardstick": "import torch", "python": str(python), "cpu_s": round(cpu, 3)}) + "\n")


def layer_python() -> Path | None:
    """The interpreter of the session's 2.13.0 torch layer, if the session made it (never made here)."""
    from ootci.runner.torch_supply import envs
    from tests.conftest import TORCH_SPEC

    layer = envs.layer_env(TORCH_SPEC)
    return layer.python if layer.is_ready() else None


def import_torch_cpu(python: Path | str, runs: int = YARDSTICK_RUNS) -> float:
    """The least CPU (user and system) of `runs` interpreters that import torch and exit.

    Each child's own usage, from wait4: the controller's other children (the xdist workers) may
    be reaped meanwhile, so the difference of two RUSAGE_CHILDREN readings could count them too."""
    best = math.inf
    for _ in range(runs):
        with subprocess.Popen([os.fspath(python), "-c", "import torch"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}) as child:
            # To its end before the wait: a child that filled the pipe would wait for the reader.
            error = child.stderr.read() if child.stderr else ""
            _, status, usage = os.wait4(child.pid, 0)
            child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: the exit's wait returns at once
        if child.returncode != 0:
            raise subprocess.CalledProcessError(child.returncode, child.args, stderr=error)
        best = min(best, usage.ru_utime + usage.ru_stime)
    return best


def register(config: pytest.Config) -> None:
    if path := os.environ.get(ENV):
        config.pluginmanager.register(CpuReport(Path(path)), "ootci-cpu-report")


def main(argv: list[str]) -> int:
    every = [json.loads(line) for line in Path(argv[0]).read_text().splitlines() if line.strip()]
    lines = [line for line in every if "test" in line]
    yardsticks = [line["cpu_s"] for line in every if line.get("yardstick") == "import torch"]
    by_file: dict[str, float] = defaultdict(float)
    for line in lines:
        by_file[line["test"].partition("::")[0]] += line["cpu_s"]
    total = sum(by_file.values())
    print(f"{len(lines)} tests, {total:.0f} s of CPU")
    if yardsticks:
        unit = min(yardsticks)
        print(f"  = {total / unit:.0f} imports of torch at {unit:.2f} s of CPU each; the budget "
              f"({BUDGET_S} s) is {BUDGET_S / unit:.0f} of them")
    for name, cpu in sorted(by_file.items(), key=lambda kv: -kv[1])[:25]:
        print(f"{cpu:8.1f}  {name}")
    print()
    for line in sorted(lines, key=lambda t: -t["cpu_s"])[:40]:
        print(f"{line['cpu_s']:8.1f} {line['wall_s']:8.1f}  {line['test'][:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
