"""Which of PyTorch's test files are device-generic: found by reading them, never by importing.

`[suites.upstream] files = "discover"` runs every `test_*.py` under the torch's `test/` that
makes tests per device type: it calls `instantiate_device_type_tests(...)`, or (PyTorch's runner
selecting by `--hw-classification ACCELERATOR`) declares a class
`hw_classification = HardwareClassification.ACCELERATOR`. The scan is text: importing a file
would need torch, which the orchestrator never imports, and would cost what collection costs.
A mention in a comment does not count. Folders named `.*` or `__*` are not entered, as PyTorch's
own runner does not.

What the manifest's `exclude` leaves out is kept with its reason, so that the record, the
terminal and `ootci init` can say what did not run and why.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ootci.runner.manifests.manifest import UpstreamExclusion

# At the start of a statement (indented or not) or after code on the line, never after a `#`.
_MARKERS = re.compile(r"^[^#\n]*?\b(instantiate_device_type_tests\s*\(|HardwareClassification\.ACCELERATOR\b)",
                      re.M)


@dataclass
class Discovery:
    """The device-generic files of one test/ folder, less the exclusions."""

    files: list[str] = field(default_factory=list)
    """found and not excluded: the files to run, in path order"""
    excluded: dict[str, UpstreamExclusion] = field(default_factory=dict)
    """found, but left out: file -> the entry that covers it"""
    scanned: int = 0
    """test_*.py files read"""

    @property
    def found(self) -> int:
        return len(self.files) + len(self.excluded)

    def unused(self, exclude: list[UpstreamExclusion]) -> list[UpstreamExclusion]:
        """Entries that left out no device-generic file of this folder."""
        used = {id(e) for e in self.excluded.values()}
        return [e for e in exclude if id(e) not in used]

    def by_reason(self) -> dict[str, list[str]]:
        """reason -> the files it left out, for a terminal or a page that says why."""
        grouped: dict[str, list[str]] = {}
        for file, entry in self.excluded.items():
            grouped.setdefault(entry.reason, []).append(file)
        return grouped

    def describe(self) -> str:
        return (f"{len(self.files)} device-generic files discovered of {self.scanned} test files"
                + (f", {len(self.excluded)} more excluded" if self.excluded else ""))

    def to_data(self) -> dict:
        return {"scanned": self.scanned, "found": self.found, "files": len(self.files),
                "excluded": {file: {"path": e.path, "reason": e.reason} for file, e in self.excluded.items()}}


def candidate_files(test_dir: Path) -> list[str]:
    """Every test_*.py under test_dir, as paths relative to it with `/`, sorted."""
    found = []
    for root, dirs, files in os.walk(test_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
        rel = Path(root).relative_to(test_dir)
        found += [(rel / name).as_posix() for name in files if name.startswith("test_") and name.endswith(".py")]
    return sorted(found)


def is_device_generic(path: Path) -> bool:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return _MARKERS.search(text) is not None


def discover(test_dir: Path, exclude: list[UpstreamExclusion]) -> Discovery:
    """The device-generic files under test_dir, those an exclusion covers set apart."""
    discovery = Discovery()
    for name in candidate_files(test_dir):
        discovery.scanned += 1
        if not is_device_generic(test_dir / name):
            continue
        entry = next((e for e in exclude if e.covers(name)), None)
        if entry is None:
            discovery.files.append(name)
        else:
            discovery.excluded[name] = entry
    return discovery
