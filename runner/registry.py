"""The backend registry: every `backends/<name>/backend.toml`."""

from __future__ import annotations

import os
from pathlib import Path

from . import manifest as manifest_mod
from .errors import UnknownBackendError
from .manifest import Manifest

REPO_ROOT = Path(__file__).resolve().parent.parent


def registry_dir() -> Path:
    return Path(os.environ.get("OOTCI_REGISTRY", REPO_ROOT / "backends"))


def manifest_paths(root: Path | None = None) -> list[Path]:
    root = root or registry_dir()
    return sorted(root.glob("*/backend.toml"))


def load_all(root: Path | None = None) -> list[Manifest]:
    return [manifest_mod.load(p) for p in manifest_paths(root)]


def reference(m: Manifest, root: Path | None = None) -> str:
    """How a command line names this backend: its registered name, or the manifest's path
    (relative to the working directory when it lies below it, as `ci/backend.toml` does in a
    vendor's checkout)."""
    assert m.path is not None
    if m.path.resolve() in {p.resolve() for p in manifest_paths(root)}:
        return m.path.parent.name
    try:
        return str(m.path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(m.path)


def resolve(name_or_path: str, root: Path | None = None) -> Manifest:
    """A registered name, or the path of a manifest (a vendor's own repository)."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or candidate.is_dir():
        file = candidate / "backend.toml" if candidate.is_dir() else candidate
        if not file.is_file():
            raise UnknownBackendError(f"{file}: no such manifest")
        return manifest_mod.load(file)
    for path in manifest_paths(root):
        if path.parent.name == name_or_path:
            return manifest_mod.load(path)
    known = ", ".join(p.parent.name for p in manifest_paths(root)) or "none"
    raise UnknownBackendError(f"unknown backend '{name_or_path}' (registered: {known})")
