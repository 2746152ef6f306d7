"""The backend registry: every `<dir>/<name>/backend.toml` of the registry directories.

The bundled directory (`backends/` in a checkout, `ootci/backends` in an installed
wheel) comes first; `OOTCI_REGISTRY` (directories joined by the path separator) and
`ootci --registry DIR` add an organisation's own backends after it.
"""

from __future__ import annotations

import os
from pathlib import Path

from ootci.runner.core.errors import ManifestError, UnknownBackendError
from ootci.runner.manifests import manifest as manifest_mod
from ootci.runner.manifests.manifest import Manifest

BUNDLED = Path(__file__).resolve().parents[2] / "backends"
ENV = "OOTCI_REGISTRY"


def registry_dirs() -> list[Path]:
    extra = [Path(p) for p in os.environ.get(ENV, "").split(os.pathsep) if p]
    seen: dict[Path, Path] = {}
    for d in (BUNDLED, *extra):
        seen.setdefault(d.resolve(), d)
    return list(seen.values())


def add_dirs(dirs: list[Path]) -> None:
    """`--registry DIR`: in the environment, so that every ootci this one starts sees them too."""
    if not dirs:
        return
    for d in dirs:
        if not d.is_dir():
            raise ManifestError(f"--registry {d}: not a directory")
    joined = os.pathsep.join([os.environ.get(ENV, ""), *map(str, dirs)]).strip(os.pathsep)
    os.environ[ENV] = joined


def manifest_paths(root: Path | None = None) -> list[Path]:
    """Every registered manifest; a name registered in two directories is an error."""
    found: dict[str, Path] = {}
    for d in [root] if root else registry_dirs():
        for path in sorted(d.glob("*/backend.toml")):
            name = path.parent.name
            if name in found:
                raise ManifestError(f"backend '{name}' is registered twice: {found[name]} and {path}")
            found[name] = path
    return sorted(found.values(), key=lambda p: p.parent.name)


def describe_dirs() -> str:
    return ", ".join(str(d) for d in registry_dirs())


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
    paths = manifest_paths(root)
    for path in paths:
        if path.parent.name == name_or_path:
            return manifest_mod.load(path)
    if not paths:
        raise UnknownBackendError(f"unknown backend '{name_or_path}': the registry is empty "
                                  f"(searched {root or describe_dirs()})")
    known = ", ".join(p.parent.name for p in paths)
    raise UnknownBackendError(f"unknown backend '{name_or_path}' (registered: {known})")
