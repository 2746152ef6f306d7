"""pytest plugin: what PyTorch's test files collect for the device, file by file (`ootci init`).

Runs in the environment under test (torch, pytest and the standard library only), loaded with
`-p ootci_collect` beside ootci_plugin and ootci_upstream in one `pytest --collect-only` of all
the candidate files, under the environment the upstream suite runs them in (the device chosen by
PYTORCH_TESTING_DEVICE_ONLY_FOR, from a folder without torch/). One process for every file:
each pays only for what it imports itself, since the imports they all share
(SHARED_IMPORTS) are made before the first is collected.

`--ootci-collect-report FILE` gets, for each file that pytest started to collect:
- `tests`: tests instantiated for the device in a dtype the backend claims (what the upstream
  suite would run there);
- `unclaimed`: tests for the device that ootci_upstream skips, their dtype not claimed;
- `other`: tests of classes not instantiated per device type (they never run on the device);
- `seconds`: how long collecting the file took;
- `error` / `skipped`: why the file did not collect (its import error), or skipped itself.
"""

from __future__ import annotations

import json
import os
import time

import pytest

SHARED_IMPORTS = ("torch.testing._internal.common_utils", "torch.testing._internal.common_device_type")
# The class suffixes of an instantiation for a PrivateUse1 device (runner/suites/device_type_ids.py).
PRIVATEUSE1 = "PRIVATEUSE1"
UNCLAIMED = " not claimed"
"""the end of ootci_upstream's reason for skipping a dtype the backend does not claim"""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("ootci").addoption(
        "--ootci-collect-report", default="", metavar="FILE",
        help="write what each test file collected for the device (--ootci-device) to FILE, as JSON")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("ootci_collect_report")
    if not path:
        return
    for name in SHARED_IMPORTS:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - each file that imports it fails to collect with the reason
            break
    config.pluginmanager.register(_Collection(path, config.getoption("ootci_device")), "ootci-collect")


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _error_line(report: pytest.CollectReport) -> str:
    """The exception pytest reports for a file that did not collect, on one line."""
    lines = [line.strip() for line in str(report.longreprtext).splitlines() if line.strip()]
    raised = [line[1:].strip() for line in lines if line.startswith("E ")]
    text = (raised or lines or ["it did not collect"])[-1]
    return text[:200]


class _Collection:
    def __init__(self, path: str, device: str):
        self.path = path
        self.suffixes = (PRIVATEUSE1, device.upper())
        self.started: dict[str, float] = {}
        self.files: dict[str, dict] = {}

    def _entry(self, file: str) -> dict:
        return self.files.setdefault(file, {"tests": 0, "unclaimed": 0, "other": 0, "seconds": 0.0})

    def pytest_collectstart(self, collector: pytest.Collector) -> None:
        if isinstance(collector, pytest.Module):
            self.started.setdefault(_file(collector.nodeid), time.perf_counter())

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        file = _file(report.nodeid)
        if file not in self.started:
            return
        entry = self._entry(file)
        # The module's own report comes after its import, its classes' after that: the last one ends it.
        entry["seconds"] = round(time.perf_counter() - self.started[file], 3)
        if report.failed:
            entry.setdefault("error", _error_line(report))
        elif report.skipped and report.nodeid == file:
            entry.setdefault("skipped", _error_line(report).removeprefix("Skipped: "))

    def _for_device(self, item: pytest.Item) -> bool:
        cls = getattr(item, "cls", None)
        name = cls.__name__ if cls is not None else ""
        return any(name.endswith(suffix) and len(name) > len(suffix) for suffix in self.suffixes)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        for item in items:
            entry = self._entry(_file(item.nodeid))
            if not self._for_device(item):
                entry["other"] += 1
            elif any(str(mark.kwargs.get("reason", "")).endswith(UNCLAIMED) for mark in item.iter_markers("skip")):
                entry["unclaimed"] += 1
            else:
                entry["tests"] += 1

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        part = f"{self.path}.part"
        with open(part, "w", encoding="utf-8") as f:
            json.dump({"files": self.files}, f, indent=1)
        os.replace(part, self.path)
