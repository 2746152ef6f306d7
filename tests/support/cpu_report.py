"""The CPU each test costs, for keeping `make test` within its budget (count, do not time).

Wall time under three workers on two cores says more about the neighbours than about the test.
CPU seconds (the worker's own, and its children's once they are reaped: pip, builds, act,
`ootci run`) add up to what the machine had to do. With OOTCI_TEST_CPU_REPORT=FILE every
worker appends one JSON line per test, setup and teardown included (a module fixture counts
towards the first test that uses it):

    {"test": NODEID, "cpu_s": 12.3, "children_s": 11.9, "wall_s": 20.1}

`python -m tests.support.cpu_report FILE` prints the files and tests that cost most.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

ENV = "OOTCI_TEST_CPU_REPORT"


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


def register(config: pytest.Config) -> None:
    if path := os.environ.get(ENV):
        config.pluginmanager.register(CpuReport(Path(path)), "ootci-cpu-report")


def main(argv: list[str]) -> int:
    lines = [json.loads(line) for line in Path(argv[0]).read_text().splitlines() if line.strip()]
    by_file: dict[str, float] = defaultdict(float)
    for line in lines:
        by_file[line["test"].partition("::")[0]] += line["cpu_s"]
    total = sum(by_file.values())
    print(f"{len(lines)} tests, {total:.0f} s of CPU")
    for name, cpu in sorted(by_file.items(), key=lambda kv: -kv[1])[:25]:
        print(f"{cpu:8.1f}  {name}")
    print()
    for line in sorted(lines, key=lambda t: -t["cpu_s"])[:40]:
        print(f"{line['cpu_s']:8.1f} {line['wall_s']:8.1f}  {line['test'][:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
