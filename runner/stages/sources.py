"""Where a backend's sources are, and a hash that changes exactly when they do."""

from __future__ import annotations

import hashlib
import os
import shutil
import site
import sysconfig
import tarfile
from pathlib import Path

from ootci.runner.core.errors import GitError, ManifestError, UsageError
from ootci.runner.core.git import git
from ootci.runner.manifests.manifest import Manifest
from ootci.runner.torch_supply.envs import digest

# Build products and caches inside a source tree do not make it a different source.
IGNORED_DIRS = {".git", "build", "dist", "__pycache__", ".pytest_cache", ".eggs", ".venv"}
IGNORED_SUFFIXES = (".so", ".pyc", ".o", ".egg-info")
# A bisection checks out commit after commit; git need not explain detached HEADs each time.
QUIET = ["advice.detachedHead=false"]


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
        try:
            git(None, "clone", "--quiet", src.git, repo, config=QUIET, timeout=timeout, log=log)
        except GitError as exc:
            raise ManifestError(f"{manifest.path}: field 'source.git': cannot clone {src.git}: {exc.detail}") from None
    else:
        try:
            git(repo, "fetch", "--quiet", "--tags", "origin", config=QUIET, timeout=timeout, log=log)
        except GitError:
            pass  # offline or the remote is gone: the clone as it is may still hold the ref (checkout says if not)
    return repo


def checkout(manifest: Manifest, cache: Path, *, log: Path, timeout: float) -> tuple[Path, str]:
    """Clone (or update) a git source into the cache; returns (package dir, commit)."""
    src = manifest.source
    repo = clone(manifest, cache, log=log, timeout=timeout)
    for ref in (f"origin/{src.ref}", src.ref):
        try:
            git(repo, "checkout", "--quiet", "--force", ref, config=QUIET, timeout=timeout, log=log)
            break
        except GitError:
            continue  # a branch is origin/<name> in the clone; a tag or commit is found as given
    else:
        raise ManifestError(f"{manifest.path}: field 'source.ref': no such ref {src.ref!r} in {src.git}")
    # Build products of another commit (a bisection walks many) must not leak into this build.
    try:
        git(repo, "clean", "-ffdxq", config=QUIET, timeout=timeout, log=log)
    except GitError:
        pass  # what it could not remove the build overwrites or ignores; the log shows git's complaint
    head = git(repo, "rev-parse", "HEAD", config=QUIET, timeout=60)
    package = repo / src.subdir if src.subdir else repo
    if not package.is_dir():
        raise ManifestError(f"{manifest.path}: field 'source.subdir': {src.subdir!r} is not a directory in {src.git}")
    return package, head.strip()


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
    try:
        lines = git(directory, "rev-parse", "--show-toplevel", "--show-prefix",
                    config=[*QUIET, f"safe.directory={directory}"], timeout=60).splitlines()
    except GitError:
        return None  # not in a work tree (or no git at all): the directory is the source, without history
    if not lines:
        return None
    return Path(lines[0].strip()), (lines[1].strip().rstrip("/") if len(lines) > 1 else "")


def _build_product(relative: Path) -> bool:
    """What tree_hash leaves out: build products and caches inside a source tree."""
    return (any(part in IGNORED_DIRS or part.endswith(".egg-info") for part in relative.parts)
            or relative.name.endswith(IGNORED_SUFFIXES))


def work_tree_commit(directory: Path) -> tuple[str, bool] | None:
    """(the commit HEAD names, whether `directory` differs from it) for a path source inside a git work
    tree, else None (not in one, no commit yet, or no git).

    A run records it, so a vendor's nightly can bisect its own backend from two run records, and the
    page says which commit ran. Build products and caches inside the directory (what tree_hash leaves
    out) are no change; anything else uncommitted there, untracked files too, makes the tree dirty.
    A directory the work tree tracks nothing of is not its source (a tree exported into ootci's cache,
    which may lie in some checkout, ignored): None."""
    found = work_tree(directory)
    if found is None:
        return None
    top, prefix = found
    config = [*QUIET, f"safe.directory={directory}", f"safe.directory={top}"]
    try:
        if not git(directory, "ls-files", "-z", "--", ".", config=config, timeout=120):
            return None
        head = git(directory, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", config=config, timeout=60).strip()
        status = git(directory, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", ".",
                     config=config, timeout=300)
    except GitError:
        return None
    changed: list[Path] = []
    fields = iter(status.split("\0"))
    for field in fields:
        if len(field) < 4:
            continue
        changed.append(Path(field[3:]))  # "XY path", relative to the work tree's top
        if field[0] in "RC":
            next(fields, None)  # a rename or copy names its source next
    prefixed = [path.relative_to(prefix) if prefix and path.is_relative_to(prefix) else path for path in changed]
    return head, any(not _build_product(path) for path in prefixed)


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
    try:
        git(top, "archive", "--format=tar", "-o", tar, commit, config=[*QUIET, f"safe.directory={top}"],
            timeout=timeout, log=log)
    except GitError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise UsageError(f"cannot export commit {commit[:12]} of {top}: {exc.detail}") from None
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
