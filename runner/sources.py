"""Where a backend's sources are, and a hash that changes exactly when they do."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import site
import sysconfig
import tarfile
from pathlib import Path

from . import procs
from .envs import digest
from .errors import ManifestError, UsageError
from .manifest import Manifest

# Build products and caches inside a source tree do not make it a different source.
IGNORED_DIRS = {".git", "build", "dist", "__pycache__", ".pytest_cache", ".eggs", ".venv"}
IGNORED_SUFFIXES = (".so", ".pyc", ".o", ".egg-info")
GIT = ["git", "-c", "advice.detachedHead=false"]


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_DIRS and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if name.endswith(IGNORED_SUFFIXES):
                continue
            path = Path(dirpath) / name
            h.update(os.fsencode(path.relative_to(root)))
            h.update(b"\0")
            h.update(path.read_bytes())
            h.update(b"\0")
    return h.hexdigest()[:16]


def clone(manifest: Manifest, cache: Path, *, log: Path, timeout: float) -> Path:
    """The cache's clone of a git source, cloned or fetched now; returns the repository directory."""
    src = manifest.source
    assert src.git
    repo = cache / "src" / digest(src.git)
    if not (repo / ".git").exists():
        repo.parent.mkdir(parents=True, exist_ok=True)
        result = procs.run([*GIT, "clone", "--quiet", src.git, repo], timeout=timeout, log=log)
        if not result.ok:
            raise ManifestError(f"{manifest.path}: field 'source.git': cannot clone {src.git}: "
                                f"{result.output_tail.strip().splitlines()[-1:] or ['no output']}")
    else:
        procs.run([*GIT, "-C", repo, "fetch", "--quiet", "--tags", "origin"], timeout=timeout, log=log)
    return repo


def checkout(manifest: Manifest, cache: Path, *, log: Path, timeout: float) -> tuple[Path, str]:
    """Clone (or update) a git source into the cache; returns (package dir, commit)."""
    src = manifest.source
    repo = clone(manifest, cache, log=log, timeout=timeout)
    git = GIT
    for ref in (f"origin/{src.ref}", src.ref):
        result = procs.run([*git, "-C", repo, "checkout", "--quiet", "--force", ref], timeout=timeout, log=log)
        if result.ok:
            break
    else:
        raise ManifestError(f"{manifest.path}: field 'source.ref': no such ref {src.ref!r} in {src.git}")
    # Build products of another commit (a bisection walks many) must not leak into this build.
    procs.run([*git, "-C", repo, "clean", "-ffdxq"], timeout=timeout, log=log)
    head = procs.run([*git, "-C", repo, "rev-parse", "HEAD"], timeout=60)
    package = repo / src.subdir if src.subdir else repo
    if not package.is_dir():
        raise ManifestError(f"{manifest.path}: field 'source.subdir': {src.subdir!r} is not a directory in {src.git}")
    return package, head.output_tail.strip()


def remote_commit(manifest: Manifest, *, timeout: float = 120) -> str:
    """The commit a git source's ref names now, asked with `git ls-remote` (nothing is cloned).

    A full commit is its own answer, and so is an abbreviated one (a remote lists refs,
    not commits); a branch or tag is looked up, as `checkout` would find it."""
    src = manifest.source
    assert src.git
    if re.fullmatch(r"[0-9a-f]{7,40}", src.ref):
        return src.ref
    result = procs.run([*GIT, "ls-remote", "--", src.git, src.ref], timeout=timeout,
                       env=dict(os.environ, GIT_TERMINAL_PROMPT="0"))
    if not result.ok:
        why = "timed out" if result.timed_out else (result.output_tail.strip().splitlines() or ["no output"])[-1]
        raise ManifestError(f"{manifest.path}: field 'source.git': cannot read {src.git}: {why}")
    refs = {}
    for line in result.output_tail.splitlines():
        commit, _, ref = line.partition("\t")
        if ref:
            refs[ref.strip()] = commit.strip()
    for candidate in (src.ref, f"refs/heads/{src.ref}", f"refs/tags/{src.ref}^{{}}", f"refs/tags/{src.ref}"):
        if candidate in refs:
            return refs[candidate]
    raise ManifestError(f"{manifest.path}: field 'source.ref': no such ref {src.ref!r} in {src.git}")


# -- a path source's own git history ---------------------------------------------------


def work_tree(directory: Path) -> tuple[Path, str] | None:
    """(top level, the directory's path inside it) when `directory` is in a git work tree, else None.

    `ootci init` writes `path = ".."`: the vendor's checkout is the source, and its history is
    what a backend bisection walks. safe.directory is given on the command line (git reads it
    only from there or from global config) because in a container job the checkout belongs to
    the runner's user, not to the container's root.
    """
    if not directory.is_dir():
        return None
    result = procs.run([*GIT, "-c", f"safe.directory={directory}", "-C", directory, "rev-parse",
                        "--show-toplevel", "--show-prefix"], timeout=60)
    lines = result.output_tail.splitlines()
    if not result.ok or not lines:
        return None
    return Path(lines[0].strip()), (lines[1].strip().rstrip("/") if len(lines) > 1 else "")


def export(top: Path, commit: str, cache: Path, *, log: Path, timeout: float) -> Path:
    """The tree of `commit` in the work tree `top`, written once into the cache.

    `git archive` reads the object store and writes nothing into the repository: the
    user's work tree, index and worktree list stay as they are while a bisection builds
    old commits (submodules and export-ignore'd paths are not in an archive)."""
    root = cache / "src" / f"{top.name}-{digest(str(top), length=10)}-{commit[:16]}"
    if root.is_dir():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = root.with_name(root.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    tar = staging.with_suffix(".tar")
    result = procs.run([*GIT, "-c", f"safe.directory={top}", "-C", top, "archive", "--format=tar", "-o", tar,
                        commit], timeout=timeout, log=log)
    if not result.ok:
        shutil.rmtree(staging, ignore_errors=True)
        tail = (result.output_tail.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"cannot export commit {commit[:12]} of {top}: {tail}")
    with tarfile.open(tar) as archive:
        archive.extractall(staging, filter="data")
    tar.unlink()
    try:
        staging.rename(root)
    except OSError:  # another bisection exported it first
        shutil.rmtree(staging, ignore_errors=True)
    return root


def _installed_trees() -> list[Path]:
    paths = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")} | set(site.getsitepackages())
    return [Path(p).resolve() for p in paths]


def buildable(source: Path, cache: Path) -> Path:
    """A directory an in-tree build may write to. Sources inside an installed package (the
    OpenReg copy an installed ootci carries) or in a read-only place are copied once per
    tree hash into the cache, so a build never writes into site-packages."""
    resolved = source.resolve()
    installed = any(resolved.is_relative_to(tree) for tree in _installed_trees())
    if not installed and os.access(resolved, os.W_OK):
        return source
    copy = cache / "src" / f"{resolved.name}-{tree_hash(resolved)}"
    if not copy.is_dir():
        staging = copy.with_name(copy.name + f".tmp{os.getpid()}")
        shutil.copytree(resolved, staging, ignore=shutil.ignore_patterns(*IGNORED_DIRS, "*.egg-info", "*.so", "*.pyc"))
        try:
            staging.rename(copy)
        except OSError:  # another run put it there first
            shutil.rmtree(staging, ignore_errors=True)
    return copy
