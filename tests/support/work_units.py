"""`--dist loadgroup` as `make test` needs it: a unit of work is a test's `xdist_group`, or its file.

pytest-xdist's own loadgroup renames each marked test's node id to carry its group, which
pytest 9 no longer allows (a node id is read-only there), so every test became a unit of its
own and a module fixture ran on every worker. Here the workers say each test's unit in a file
beside their temporary directories, and the controller, which collects nothing itself, reads
it when it hands the units out.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

UNITS_FILE = "work-units.json"


def unit_of(item: pytest.Item) -> str:
    """The item's xdist_group, or its file's name when it has none."""
    for mark in item.iter_markers("xdist_group"):
        return str(mark.args[0] if mark.args else mark.kwargs["name"])
    return item.path.name


def tell_controller(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a worker: write every collected test's unit where the controller looks for it."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    shared = Path(config.option.basetemp).parent  # a worker's basetemp is <the controller's>/gwN
    part = shared / f"{UNITS_FILE}.{os.environ['PYTEST_XDIST_WORKER']}"
    part.write_text(json.dumps({item.nodeid: unit_of(item) for item in items}))
    part.replace(shared / UNITS_FILE)  # every worker collects the same tests: any one's file will do


class UnitScheduling(LoadScopeScheduling):
    """LoadScopeScheduling whose scope is the unit the workers wrote down."""

    def __init__(self, config: pytest.Config, log=None) -> None:
        super().__init__(config, log)
        self._units_file = config._tmp_path_factory.getbasetemp() / UNITS_FILE
        self._units: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._units is None:  # read once the workers have collected, before the first unit goes out
            self._units = json.loads(self._units_file.read_text())
        return self._units.get(nodeid) or nodeid.split("::", 1)[0]
