"""Every git command ootci runs goes through `git`: in its own process group with a time
limit (procs.run), with stdout kept apart from stderr so that what a query prints can be
parsed, and every failure raised as one GitError that names the command and quotes the last
line git wrote to stderr."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from ootci.runner.core import procs
from ootci.runner.core.errors import GitError

TIMEOUT_S = 600
# What a query prints is parsed whole (a `git log` between two nightlies, an `ls-tree -r`), so it
# must not be cut to procs' usual tail; this bounds memory all the same.
OUTPUT_BYTES = 256 * 1024 * 1024


def argv(repo: str | os.PathLike | None, *args: str | os.PathLike, config: Sequence[str] = ()) -> list[str]:
    """The command line of `git [-c KEY=VALUE]... [-C repo] args`: for a plan that prints its
    commands before running them (torch_source), and for `git` below."""
    words = ["git"]
    for setting in config:
        words += ["-c", setting]
    if repo is not None:
        words += ["-C", os.fspath(repo)]
    return words + [os.fspath(a) for a in args]


def git(repo: str | os.PathLike | None, *args: str | os.PathLike, timeout: float = TIMEOUT_S,
        config: Sequence[str] = (), env: dict[str, str] | None = None, log: Path | None = None,
        input_text: str | None = None) -> str:
    """Run git (in `repo` when given) and return its stdout; raise GitError when it fails.

    env: the whole environment (None: the runner's). GIT_TERMINAL_PROMPT=0 is always set: a
    remote that asks for a password must fail, not wait for a terminal nobody is at.
    """
    base = dict(os.environ) if env is None else dict(env)
    base.setdefault("GIT_TERMINAL_PROMPT", "0")
    command = str(args[0]) if args else ""
    where = os.fspath(repo) if repo is not None else None
    result = procs.run(argv(repo, *args, config=config), timeout=timeout, env=base, log=log,
                       input_text=input_text, tail_bytes=OUTPUT_BYTES, separate_stderr=True)
    if result.returncode == 127 and shutil.which("git") is None:
        raise GitError(command, where, "git is not installed")
    if result.timed_out:
        raise GitError(command, where, f"took longer than {timeout:g} s")
    if result.returncode != 0:
        said = result.stderr_tail.strip().splitlines() or result.output_tail.strip().splitlines()
        raise GitError(command, where, said[-1] if said else f"exit status {result.returncode}",
                       result.returncode)
    return result.output_tail
