"""The candidates of a bisection: torches between two runs, or commits between two refs.

A torch axis is walked first over what a package index publishes (the nightlies
between two dates, or the releases between two versions, or an explicit list), and
then, with `--commits`, over the PyTorch commits between two adjacent nightlies'
`git_version`s. A backend axis is the backend's own first-parent history.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ootci.runner.core.errors import GitError, UsageError
from ootci.runner.core.git import git
from ootci.runner.models import BisectCandidate
from ootci.runner.torch_supply.torch_index import IndexFile, Target, _python_allowed, _wheel_tags

_DEV_DATE = re.compile(r"^(\d{4})(\d{2})(\d{2})$")
# PyTorch's merge bot ends every landed commit's message with this line.
_PR_RESOLVED = re.compile(r"^Pull Request resolved: https://github\.com/pytorch/pytorch/pull/(\d+)\s*$", re.M)
_PR_IN_SUBJECT = re.compile(r"\(#(\d+)\)\s*$")


@dataclass
class Listing:
    """Candidates read from an index, and what the index did not have."""

    candidates: list[BisectCandidate] = field(default_factory=list)
    missing_days: list[str] = field(default_factory=list)
    yanked: list[str] = field(default_factory=list)

    def notes(self) -> list[str]:
        notes = []
        if self.missing_days:
            notes.append(f"no nightly on {len(self.missing_days)} day(s): {', '.join(self.missing_days)}")
        if self.yanked:
            notes.append(f"yanked, left out: {', '.join(self.yanked)}")
        return notes


def nightly_date(version: Version) -> dt.date | None:
    """The build date a nightly's `.devYYYYMMDD` carries."""
    m = _DEV_DATE.match(str(version.dev)) if version.dev is not None else None
    if not m:
        return None
    try:
        return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None


def _installable(files: list[IndexFile], target: Target) -> list[tuple[Version, IndexFile]]:
    rank = {tag: i for i, tag in enumerate(target.tags)}
    found = []
    for f in files:
        tags = _wheel_tags(f.filename)
        if tags is None or not any(t in rank for t in tags):
            continue
        if not _python_allowed(f.requires_python, target.python_version):
            continue
        try:
            version = parse_wheel_filename(f.filename)[1]
        except InvalidWheelFilename:
            continue
        found.append((version, f))
    return found


def nightlies_between(files: list[IndexFile], target: Target, good: Version, bad: Version) -> Listing:
    """One candidate per day strictly between the good and the bad nightly (the newest build of a day),
    oldest first; days without a nightly and yanked files are reported, not guessed."""
    good_day, bad_day = nightly_date(good), nightly_date(bad)
    if good_day is None or bad_day is None:
        raise UsageError(f"nightlies are bisected between two nightly versions (.devYYYYMMDD): got {good} and {bad}")
    listing = Listing()
    by_day: dict[dt.date, tuple[Version, IndexFile]] = {}
    for version, f in _installable(files, target):
        day = nightly_date(version)
        if day is None or not good_day < day < bad_day:
            continue
        if f.yanked:
            listing.yanked.append(f.filename)
            continue
        if day not in by_day or version > by_day[day][0]:
            by_day[day] = (version, f)
    day = good_day + dt.timedelta(days=1)
    while day < bad_day:
        if day in by_day:
            version, f = by_day[day]
            listing.candidates.append(BisectCandidate(label=f"torch {version.public}", spec=str(version),
                                                         date=day.isoformat()))
        else:
            listing.missing_days.append(day.isoformat())
        day += dt.timedelta(days=1)
    return listing


def releases_between(files: list[IndexFile], target: Target, good: Version, bad: Version) -> Listing:
    """The final releases strictly between two releases, oldest first."""
    listing = Listing()
    versions: dict[Version, IndexFile] = {}
    for version, f in _installable(files, target):
        if version.is_prerelease or version.is_devrelease or not good < version < bad:
            continue
        if f.yanked:
            listing.yanked.append(f.filename)
            continue
        versions.setdefault(version, f)
    for version in sorted(versions):
        listing.candidates.append(BisectCandidate(label=f"torch {version.public}", spec=str(version)))
    return listing


def explicit(specs: list[str], good: str, bad: str) -> list[BisectCandidate]:
    """`--versions a,b,c`: those strictly between the ends when the list names them, else all of them."""
    inner = list(specs)
    if good in inner and bad in inner and inner.index(good) < inner.index(bad):
        inner = inner[inner.index(good) + 1:inner.index(bad)]
    else:
        inner = [s for s in inner if s not in (good, bad)]
    return [BisectCandidate(label=f"torch {s}", spec=s) for s in inner]


def version_of(spec: str) -> Version | None:
    try:
        return Version(spec)
    except InvalidVersion:
        return None


# -- git history ----------------------------------------------------------------------

def _query(repo: Path, *args: str) -> str:
    """A read-only git query in a user's repository; its failure is a GitError naming the repository."""
    # safe.directory: a vendor's checkout in a container job belongs to the runner's user, not root.
    return git(repo, *args, config=[f"safe.directory={repo}"])


def resolve_commit(repo: Path, ref: str) -> str:
    try:
        return _query(repo, "rev-parse", "--verify", f"{ref}^{{commit}}").strip()
    except GitError:
        raise UsageError(f"no commit {ref!r} in {repo}") from None


def pr_number(message: str) -> int | None:
    """The PyTorch pull request a commit message names (the merge bot's trailer, or `(#N)` in the subject)."""
    m = _PR_RESOLVED.search(message)
    if m:
        return int(m.group(1))
    subject = message.splitlines()[0] if message else ""
    m = _PR_IN_SUBJECT.search(subject)
    return int(m.group(1)) if m else None


def commits_between(repo: Path, good: str, bad: str, *, label: str, subdir: str = "",
                    spec: str = "{sha}") -> list[BisectCandidate]:
    """The first-parent commits after `good` up to and including `bad`, oldest first.

    The last one is `bad` itself: callers put the ends around the commits between them.
    `subdir` keeps only commits that touch it (a backend in a monorepo).
    """
    good_sha, bad_sha = resolve_commit(repo, good), resolve_commit(repo, bad)
    merge_base = _query(repo, "merge-base", good_sha, bad_sha).strip()
    if merge_base != good_sha:
        raise UsageError(f"{good} is not an ancestor of {bad} in {repo}: nothing to bisect between them")
    args = ["log", "--first-parent", "--reverse", "--format=%H%x00%B%x1e", f"{good_sha}..{bad_sha}"]
    if subdir:
        args += ["--", subdir]
    out = []
    for entry in _query(repo, *args).split("\x1e"):
        sha, _, message = entry.strip("\n").partition("\x00")
        if not sha:
            continue
        subject = message.strip().splitlines()[0] if message.strip() else ""
        out.append(BisectCandidate(label=f"{label}@{sha[:10]}", spec=spec.format(sha=sha), commit=sha,
                                   pr=pr_number(message), subject=subject[:200]))
    if not out or out[-1].commit != bad_sha:
        out.append(BisectCandidate(label=f"{label}@{bad_sha[:10]}", spec=spec.format(sha=bad_sha), commit=bad_sha))
    return out
