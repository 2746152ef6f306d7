"""PyTorch's own test files at the exact commit of the torch under test.

No torch wheel ships PyTorch's `test/` folder, and a test file is only guaranteed to work with
the torch it was written with (a file of another commit may import what this torch does not
have). So the `upstream` suite takes `test/` from the torch repository at the torch's own
commit: `torch.version.git_version`, or for a release that records none its `v<version>`
tag. Only `test/` is fetched, shallow, without blobs outside it (a sparse checkout), and kept
in the cache per repository and commit, so every backend tested against one torch on a
machine shares one fetch. A torch built from source (`git:REF`, `pr:N`) takes `test/` from the
mirror its build cloned, at the commit it built.

`--upstream-tests DIR` gives a folder instead (offline, or a patched copy). Where it says
which commit it holds (a git work tree, or a folder this module fetched, which records it),
that commit is compared with the torch's; where it does not, the files are marked as not the
torch's own, on every page that shows their results.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock
from packaging.version import InvalidVersion, Version

from ootci.runner.core import git
from ootci.runner.core.errors import GitError, UpstreamTestsError, UpstreamUnreachable
from ootci.runner.models import COMMIT_SHA
from ootci.runner.torch_supply import torch_source
from ootci.runner.torch_supply.envs import digest

MARKER = ".ootci-upstream-tests.json"
"""written beside test/ by a fetch: the repository, the ref asked for and the commit it is"""
FETCH_TIMEOUT_S = 900
# git's words for a remote it could not reach at all (no network, no such host): the stage then
# says that it did not run, instead of failing the backend's run.
_UNREACHABLE = re.compile(r"Could not resolve host|Failed to connect|Connection (timed out|refused)|"
                          r"Network is unreachable|Temporary failure in name resolution|No route to host", re.I)
# Asked of the side that serves the fetch: a local repository (a source build's mirror, a file://
# URL) is served by a git of ours, which reads these; GitHub allows both anyway.
_SERVE = ("uploadpack.allowFilter=true", "uploadpack.allowAnySHA1InWant=true")


@dataclass(frozen=True)
class UpstreamTests:
    """Where the upstream test files of a run come from."""

    test_dir: Path
    """PyTorch's test/ folder: the manifest's files are paths under it"""
    origin: str
    """fetched (from `repository`), source build (the mirror of a torch built from source) or given
    (--upstream-tests)"""
    commit: str | None
    """the commit the files are from; None when a given folder does not say"""
    torch_commit: str | None
    """the torch under test's own commit, when it records one"""
    repository: str | None = None
    ref: str | None = None
    """what was fetched: the torch's commit, or its release tag"""
    changed: bool = False
    """a given git work tree has changes of its own in test/: the files are not `commit`'s"""

    @property
    def own_commit(self) -> bool:
        """Are the files the torch's own? A tag fetched for a release is (the release is the tag)."""
        if self.origin != "given":
            return True
        return bool(self.commit and self.torch_commit and self.commit == self.torch_commit and not self.changed)

    def describe(self) -> str:
        """One line for the stage summary and the page."""
        short = (self.commit or "")[:12]
        if self.origin == "given":
            if not self.commit:
                return f"files from {self.test_dir}, of an unknown commit: not the torch's own ({self._torch()})"
            if self.changed:
                return (f"files from {self.test_dir} at {short} with local changes: "
                        f"not the torch's own ({self._torch()})")
            if not self.own_commit:
                return f"files from {self.test_dir} at {short}: not the torch's own commit ({self._torch()})"
            return f"files from {self.test_dir} at {short}, the torch's own commit"
        if self.origin == "source build":
            return f"files from the source build's tree at {short}"
        tag = f" ({self.ref})" if self.ref and self.ref.startswith("v") else ""
        return f"files from {self.repository} at {short}{tag}"

    def _torch(self) -> str:
        return f"torch is {self.torch_commit[:12]}" if self.torch_commit else "torch records no commit"

    def to_data(self) -> dict:
        data = asdict(self)
        data["test_dir"] = str(self.test_dir)
        data["own_commit"] = self.own_commit
        return data


def torch_ref(version: str | None, git_version: str | None) -> str:
    """What to fetch for a torch: its commit, else the tag of its release; one line otherwise."""
    if git_version and re.fullmatch(COMMIT_SHA, git_version):
        return git_version
    try:
        parsed = Version(version or "")
    except InvalidVersion:
        parsed = None
    if parsed is not None and not parsed.is_devrelease and not parsed.local:
        return f"v{parsed.public}"
    if parsed is not None and parsed.local and re.fullmatch(r"(cpu|cu\d+|rocm[\d.]+|xpu)", parsed.local) \
            and not parsed.is_devrelease:
        return f"v{parsed.public}"  # 2.13.0+cpu is the release 2.13.0, built for the CPU
    raise UpstreamTestsError(
        f"torch {version or '(unknown version)'} records no commit (torch.version.git_version is "
        f"{git_version!r}) and is not a release with a v<version> tag: give the files with --upstream-tests DIR")


def fetch(repository: str, ref: str, cache: Path, *, torch_commit: str | None, origin: str = "fetched",
          log: Path | None = None) -> UpstreamTests:
    """test/ of `repository` at `ref`, from the cache or fetched once into it."""
    where = cache / "upstream-tests" / f"{_slug(repository)}-{digest(repository, length=8)}" / _safe(ref)
    where.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(os.fspath(where) + ".lock"):
        recorded = _recorded(where)
        if recorded is None:
            recorded = _fetch_into(where, repository, ref, log)
    return UpstreamTests(test_dir=where / "test", origin=origin, commit=recorded["commit"], torch_commit=torch_commit,
                         repository=repository, ref=ref)


def for_torch(*, spec: str, version: str | None, git_version: str | None, cache: Path, torch_repo: str | None,
              log: Path | None = None) -> UpstreamTests:
    """The files of the torch under test: from the mirror of its source build, or fetched."""
    if spec.startswith(("git:", "pr:")) and git_version:
        mirror = torch_source.Layout(cache, torch_source.torch_repo(torch_repo), "").mirror
        if mirror.is_dir():
            return fetch(os.fspath(mirror), git_version, cache, torch_commit=git_version, origin="source build",
                         log=log)
    ref = torch_ref(version, git_version)
    return fetch(torch_source.torch_repo(torch_repo), ref, cache, torch_commit=git_version, log=log)


def given(folder: Path, *, torch_commit: str | None) -> UpstreamTests:
    """A folder given with --upstream-tests: PyTorch's test/ itself, or a checkout that has one."""
    folder = folder.absolute()
    if not folder.is_dir():
        raise UpstreamTestsError(f"--upstream-tests: {folder} is not a directory")
    test_dir = folder / "test" if (folder / "test").is_dir() and not any(folder.glob("test_*.py")) else folder
    recorded = _recorded(test_dir.parent)
    if recorded:
        return UpstreamTests(test_dir=test_dir, origin="given", commit=recorded["commit"], torch_commit=torch_commit,
                             repository=recorded.get("repository"), ref=recorded.get("ref"))
    commit, changed = _work_tree_state(test_dir)
    return UpstreamTests(test_dir=test_dir, origin="given", commit=commit, torch_commit=torch_commit,
                         changed=changed)


def missing_files(tests: UpstreamTests, files: list[str]) -> list[str]:
    return [name for name in files if not (tests.test_dir / name).is_file()]


# -- the fetch ------------------------------------------------------------------------------

def _fetch_into(where: Path, repository: str, ref: str, log: Path | None) -> dict:
    part = where.with_name(where.name + f".part-{os.getpid()}")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    wanted = f"refs/tags/{ref}:refs/tags/{ref}" if not re.fullmatch(COMMIT_SHA, ref) else ref
    try:
        git.git(part, "init", "-q", log=log)
        git.git(part, "remote", "add", "origin", _url(repository), log=log)
        # Only test/: no file of the repository's root either (its setup.py, a torch/ beside the tests).
        git.git(part, "sparse-checkout", "set", "--no-cone", "/test/", log=log)
        git.git(part, "fetch", "-q", "--depth", "1", "--filter=blob:none", "--no-tags", "origin", wanted,
                timeout=FETCH_TIMEOUT_S, config=_SERVE, log=log)
        git.git(part, "checkout", "-q", "--detach", "FETCH_HEAD", timeout=FETCH_TIMEOUT_S, config=_SERVE, log=log)
        commit = git.git(part, "rev-parse", "HEAD", log=log).strip()
    except GitError as exc:
        shutil.rmtree(part, ignore_errors=True)
        what = f"PyTorch's test files at {ref} from {repository}"
        if _UNREACHABLE.search(exc.detail):
            why = re.sub(r"^fatal: unable to access '[^']*': ", "", exc.detail)
            raise UpstreamUnreachable(f"{repository} cannot be reached ({why}), so {what} were not fetched") from None
        raise UpstreamTestsError(f"cannot fetch {what}: {exc.detail}") from None
    if not (part / "test").is_dir():
        shutil.rmtree(part, ignore_errors=True)
        raise UpstreamTestsError(f"{repository} at {ref} ({commit[:12]}) has no test/ folder")
    recorded = {"repository": repository, "ref": ref, "commit": commit}
    (part / MARKER).write_text(json.dumps(recorded, indent=2) + "\n")
    shutil.rmtree(where, ignore_errors=True)
    part.rename(where)
    return recorded


def _url(repository: str) -> str:
    """A local repository as a file:// URL: git serves a plain path without --filter (it copies
    every blob of the commit), a file:// URL with it."""
    if "://" in repository or re.match(r"^[\w.-]+@[\w.-]+:", repository):
        return repository
    return Path(repository).absolute().as_uri()


def _recorded(where: Path) -> dict | None:
    try:
        data = json.loads((where / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not re.fullmatch(COMMIT_SHA, str(data.get("commit", ""))):
        return None
    return data if (where / "test").is_dir() else None


def _work_tree_state(folder: Path) -> tuple[str | None, bool]:
    """(HEAD's commit, whether the folder has changes of its own) of a git work tree; (None, False)
    for a plain folder. A commit is the files' only where they are tracked at it: a folder inside
    some other work tree whose files that repository ignores (or never added) is a plain folder,
    and an ignored test file beside tracked ones is a change of its own."""
    try:
        commit = git.git(folder, "rev-parse", "HEAD", timeout=60).strip()
        tracked = git.git(folder, "ls-tree", "-r", "--name-only", "HEAD", "--", ".", timeout=120)
        status = git.git(folder, "status", "--porcelain", "--ignored=matching", "--", ".", timeout=120)
    except GitError:
        return None, False
    if not re.fullmatch(COMMIT_SHA, commit) or not tracked.strip():
        return None, False
    changes = [line for line in status.splitlines()
               if line.strip() and not (line.startswith("!! ") and not _ignored_source(line[3:]))]
    return commit, bool(changes)


def _ignored_source(path: str) -> bool:
    """An ignored path that would change what runs: a .py file or a folder of them (byte code never does)."""
    path = path.strip().strip('"')
    return "__pycache__" not in path and (path.endswith(".py") or path.endswith("/"))


def _slug(repository: str) -> str:
    name = repository.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git") or "repo"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _safe(ref: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", ref)
