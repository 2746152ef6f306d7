"""The history's git side: pulling the data branch (partly: every header, the newest runs)
and pushing it, creating the branch on the first push and replaying onto a newer tip when
another job pushed first. Only `pull` and `push` see a token; every failure is a
PublishError (exit 9).
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from urllib.parse import urlsplit

from ootci.runner.core.errors import GitError, OutputError, PublishError, UsageError
from ootci.runner.core.git import git
from ootci.runner.history import history_store

PUSH_ATTEMPTS = 4
RUNS_DIR = "runs"
"""the history's run directories, in the data branch (the workflows merge into and build from it)"""
GIT_TIMEOUT_S = 300

# Commits of the data branch are ootci's, whoever runs it: the runner may have no git identity.
IDENTITY = ("user.name=ootci", "user.email=ootci@users.noreply.github.com")


def _git(checkout: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    """git in the history checkout; a failure there means the history was not published (PublishError)."""
    try:
        return git(checkout, *args, config=IDENTITY, env=env, input_text=stdin, timeout=GIT_TIMEOUT_S)
    except GitError as exc:
        raise PublishError(exc.message) from None


def _git_or_none(checkout: Path, *args: str, env: dict[str, str] | None = None) -> str | None:
    """git's stdout in the history checkout, or None when git says no (a remote or a work tree
    that is not there, nothing staged): for the questions whose failure is an answer."""
    try:
        return git(checkout, *args, config=IDENTITY, env=env, timeout=GIT_TIMEOUT_S)
    except GitError:
        return None


DATA_REMOTE_ENV = "OOTCI_DATA_REMOTE"
"""the data branch's repository when no --remote names one (a mirror, GitHub Enterprise, or the
local bare repository the act tests publish to); else the repository the workflow runs in"""


def _default_remote() -> str:
    if os.environ.get(DATA_REMOTE_ENV):
        return os.environ[DATA_REMOTE_ENV]
    server, repository = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_REPOSITORY")
    if server and repository:
        return f"{server}/{repository}.git"
    raise UsageError(f"history: no --remote, no 'origin', no ${DATA_REMOTE_ENV} and no $GITHUB_REPOSITORY to use")


def _remote_url(checkout: Path, remote: str | None) -> str:
    if remote:
        if "://" in remote or os.path.isabs(remote):
            return remote
        found = _git_or_none(checkout, "remote", "get-url", remote)
        if found is None:
            raise UsageError(f"--remote: no remote named {remote!r} in {checkout}")
        return found.strip()
    found = _git_or_none(checkout, "remote", "get-url", "origin")
    if found is not None:
        return found.strip()
    return _default_remote()


def _auth_env(url: str) -> dict[str, str]:
    """Environment for git that carries $GITHUB_TOKEN as an HTTP header.

    Passed through GIT_CONFIG_* variables, so the token is never on a command line
    nor written to .git/config (the checkout was made with persist-credentials: false).
    """
    env = dict(os.environ)
    token = env.get("GITHUB_TOKEN")
    parts = urlsplit(url)
    if token and parts.scheme == "https":
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        index = int(env.get("GIT_CONFIG_COUNT", "0"))
        env["GIT_CONFIG_COUNT"] = str(index + 1)
        env[f"GIT_CONFIG_KEY_{index}"] = f"http.{parts.scheme}://{parts.netloc}/.extraheader"
        env[f"GIT_CONFIG_VALUE_{index}"] = f"AUTHORIZATION: basic {basic}"
    return env


def pull(checkout: Path, branch: str, remote: str | None, latest: int | None = history_store.PAGED_RUNS) -> str:
    """Clone the tip of `branch` into `checkout`; an empty repository if the branch is new.

    latest: check out every header and test set, but only the newest `latest` run directories
    of each backend (a partial clone: other files are not even downloaded); None: everything.
    """
    url = remote or _default_remote()
    if checkout.exists() and any(checkout.iterdir()):
        raise OutputError(f"history pull: {checkout} exists and is not empty")
    checkout.mkdir(parents=True, exist_ok=True)
    env = _auth_env(url)
    heads = _git(checkout, "ls-remote", "--heads", url, branch, env=env)
    if heads.strip() and latest is None:
        # Only the tip: records are immutable, their history is not needed to add more.
        _git(checkout, "clone", "-q", "--depth", "1", "--branch", branch, "--single-branch", url, ".", env=env)
        return f"cloned {branch}"
    if heads.strip() and latest is not None:  # None cloned it all, above
        _git(checkout, "clone", "-q", "--depth", "1", "--filter=blob:none", "--no-checkout", "--branch", branch,
             "--single-branch", url, ".", env=env)
        # Headers first; they tell which runs get a page, and only those are then fetched whole.
        # Git downloads the blobs of what each step checks out, and nothing else.
        headers = history_store.sparse_patterns(RUNS_DIR, [])
        _git(checkout, "sparse-checkout", "set", "--no-cone", "--stdin", stdin="\n".join(headers) + "\n")
        _git(checkout, "checkout", "-q", branch, env=env)
        runs = checkout / RUNS_DIR
        fetched = history_store.runs_with_pages(runs, latest) if runs.is_dir() else []
        patterns = history_store.sparse_patterns(RUNS_DIR, fetched)
        _git(checkout, "sparse-checkout", "set", "--no-cone", "--stdin", stdin="\n".join(patterns) + "\n", env=env)
        held = sum(1 for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else 0
        return (f"cloned {branch}: every header, and the {len(fetched)} run(s) of the {held} directories "
                f"that get a page (each backend's newest {latest}, and the culprit pair)")
    _git(checkout, "init", "-q", "-b", branch)
    _git(checkout, "remote", "add", "origin", url)
    return f"{branch} does not exist yet: starting an empty history"


def commit_of(checkout: Path) -> str:
    """The commit a history checkout has checked out; empty for a history not committed yet."""
    return (_git_or_none(checkout, "rev-parse", "--verify", "-q", "HEAD") or "").strip()


def remote_tip(branch: str, remote: str | None) -> str:
    """The commit `branch` points at on the remote now, read without a checkout; empty when it does not exist."""
    url = remote or _default_remote()
    heads = _git(Path.cwd(), "ls-remote", "--heads", url, branch, env=_auth_env(url))
    wanted = f"refs/heads/{branch}"
    return next((line.split()[0] for line in heads.splitlines() if line.split()[1:] == [wanted]), "")


def push(checkout: Path, branch: str, remote: str | None, message: str) -> str:
    """Commit everything in `checkout` and push it to `branch`; returns what was done."""
    checkout.mkdir(parents=True, exist_ok=True)
    inside = _git_or_none(checkout, "rev-parse", "--show-toplevel")
    if inside is None or Path(inside.strip()).resolve() != checkout.resolve():
        _git(checkout, "init", "-q", "-b", branch)
    url = _remote_url(checkout, remote)
    env = _auth_env(url)
    # --sparse: after a partial pull, new run directories lie outside the sparse patterns.
    _git(checkout, "add", "-A", "--sparse")
    if _git_or_none(checkout, "diff", "--cached", "--quiet") is not None:  # exit 0: nothing staged
        return "nothing new to commit"
    _git(checkout, "commit", "-q", "-m", message)
    refused = ""
    for _ in range(PUSH_ATTEMPTS):
        try:
            git(checkout, "push", "-q", url, f"HEAD:refs/heads/{branch}", config=IDENTITY, env=env,
                timeout=GIT_TIMEOUT_S)
            return f"pushed to {branch}"
        except GitError as exc:
            refused = exc.detail
        # Someone else pushed first. Records are new files, so replaying ours on top of
        # theirs cannot conflict.
        if _git_or_none(checkout, "fetch", "-q", url, branch, env=env) is None:
            break
        _git(checkout, "rebase", "-q", "FETCH_HEAD")
    raise PublishError(f"git push to {branch} failed: {refused}")
