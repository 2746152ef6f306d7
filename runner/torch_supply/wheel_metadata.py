"""What a backend wheel says about itself, read from the file without installing it.

Two facts matter to ootci: which torch the wheel *requires* (its `Requires-Dist`
on torch, which decides whether it may be installed over the torch under test) and
which torch it was *built against* (which decides whether an undefined symbol at
load time means a torch mismatch or a bug of the backend).

The build torch is read, best first, from:
- `<dist>.dist-info/torch_build.json`, `{"version": ..., "git_version": ...}`, the
  convention OpenReg's setup.py follows and any backend can adopt;
- an exact pin in `Requires-Dist` (`torch==2.13.0`, `torch==2.13.0.*`), which is how
  prebuilt vendor wheels such as torch_npu say it.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

from packaging.markers import InvalidMarker, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

TORCH_BUILD_FILE = "torch_build.json"


@dataclass(frozen=True)
class BuildTorch:
    """The torch an extension was compiled against; `how` says where that was read."""

    version: str
    git_version: str | None = None
    how: str = ""

    def describe(self) -> str:
        return f"{self.version} ({self.git_version[:12]})" if self.git_version else self.version

    def matches(self, version: str, git_version: str | None) -> bool:
        """Is this the torch `version` (torch.__version__) at `git_version`?"""
        if self.git_version and git_version:
            return self.git_version == git_version
        try:
            mine, theirs = Version(self.version), Version(version)
        except InvalidVersion:
            return self.version == version
        # A pin such as torch==2.13.0.* says nothing of the local label (+cpu, +cu130).
        return mine == theirs if mine.local else mine.public == theirs.public

    def to_json(self) -> dict:
        return {"version": self.version, "git_version": self.git_version, "how": self.how}

    @classmethod
    def from_json(cls, data: dict | None) -> BuildTorch | None:
        if not isinstance(data, dict) or not isinstance(data.get("version"), str) or not data["version"]:
            return None
        git = data.get("git_version")
        return cls(data["version"], git if isinstance(git, str) and git else None, str(data.get("how") or ""))


@dataclass(frozen=True)
class WheelMetadata:
    """The metadata of a distribution: read from a wheel file, or reported by a probe for an installed one."""

    name: str
    version: str
    requires: list[str] = field(default_factory=list)
    torch_build: dict | None = None

    def torch_requirements(self) -> list[Requirement]:
        """The wheel's requirements on torch that apply to a plain install (no extras)."""
        found = []
        for text in self.requires:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if canonicalize_name(req.name) != "torch":
                continue
            if req.marker is not None:
                try:
                    if not req.marker.evaluate({"extra": ""}):
                        continue
                except (InvalidMarker, UndefinedEnvironmentName):
                    continue
            found.append(req)
        return found

    def build_torch(self) -> BuildTorch | None:
        recorded = BuildTorch.from_json(self.torch_build)
        if recorded is not None:
            return BuildTorch(recorded.version, recorded.git_version, f"{TORCH_BUILD_FILE} in the wheel's metadata")
        for req in self.torch_requirements():
            pinned = exact_pin(req)
            if pinned:
                return BuildTorch(pinned, None, f"its requirement {req}")
        return None


def exact_pin(req: Requirement) -> str | None:
    """'2.13.0' for torch==2.13.0 or torch==2.13.0.*; None for a range."""
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "==="):
        return specs[0].version.removesuffix(".*")
    return None


class BadWheel(Exception):
    """The file is not a readable wheel."""


def read(wheel: Path) -> WheelMetadata:
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            metadata = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if not metadata:
                raise BadWheel(f"{wheel.name}: no .dist-info/METADATA")
            dist_info = metadata[0].split("/")[0]
            headers = HeaderParser().parsestr(zf.read(metadata[0]).decode("utf-8", "replace"))
            torch_build = None
            if f"{dist_info}/{TORCH_BUILD_FILE}" in names:
                try:
                    torch_build = json.loads(zf.read(f"{dist_info}/{TORCH_BUILD_FILE}"))
                except ValueError:
                    torch_build = None
    except (OSError, zipfile.BadZipFile) as exc:
        raise BadWheel(f"{wheel.name}: {exc}") from None
    return WheelMetadata(name=headers.get("Name", ""), version=headers.get("Version", ""),
                         requires=headers.get_all("Requires-Dist") or [], torch_build=torch_build)
