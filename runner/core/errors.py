"""Every exception ootci shows a user, one class per kind of failure, and their exit codes.

A user of ootci sees `ootci: <message>` on one line and the exit code below, never a
traceback. `EXIT_CODES` is the table of every exit code ootci ends with, each once;
tests/core/test_errors.py checks it against the classes here, and that no OotciError is
defined anywhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ootci.runner.core.procs import ProcResult
    from ootci.runner.models import RootCause

EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


class OotciError(Exception):
    exit_code = 2

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class UsageError(OotciError):
    exit_code = 2


class GitError(OotciError):
    """A git command failed or took too long. Exit 2, as UsageError: it is most often a ref,
    a path or a remote the user gave; callers that mean something more precise (a manifest's
    source, a history push) catch it and raise their own class."""

    exit_code = 2

    def __init__(self, command: str, repo: str | None, detail: str, returncode: int | None = None):
        where = f" in {repo}" if repo else ""
        # A timeout reads as a sentence ("git log in R took longer than 600 s"), a failure as git's own words.
        joint = " " if detail.startswith("took longer than") else ": "
        super().__init__(f"git {command}{where}{joint}{detail}")
        self.command = command
        self.repo = repo
        self.detail = detail
        self.returncode = returncode


class ManifestError(OotciError):
    exit_code = 3


class UnknownBackendError(OotciError):
    exit_code = 4


class TorchSpecError(OotciError):
    exit_code = 5


class TorchWheelNotFound(TorchSpecError):
    """The spec names a wheel file that does not exist."""


class PackageIndexError(OotciError):
    """A package index could not be reached or had nothing for this platform."""

    exit_code = 6


class TargetEnvironmentError(OotciError):
    """The environment under test is unusable (no interpreter, no torch), or the runner it would run on
    is unsafe for it (a PR run on a shared self-hosted runner: runner/core/runner_host.py)."""

    exit_code = 7


class OutputError(OotciError):
    exit_code = 8


class PublishError(OotciError):
    """The history could not be committed or pushed."""

    exit_code = 9


class ProjectError(OotciError):
    """A vendor's repository does not say what `ootci init` needs (its metadata, its entry point)."""

    exit_code = 10


class RelayError(OotciError):
    """A dispatch of PyTorch's CI relay that does not validate, or a report the relay did not take."""

    exit_code = 11


class BisectError(OotciError):
    """The two ends cannot be bisected (the bad end did not fail, the good end fails the same way)."""

    exit_code = 12


class GitHubError(OotciError):
    """GitHub's REST API could not be reached, refused a request, or answered what it does not document."""

    exit_code = 13


class UpstreamTestsError(OotciError):
    """PyTorch's test files for the upstream suite cannot be had: no commit or tag to take them
    at, a fetch that failed, a file the folder does not have."""

    exit_code = 14


class UpstreamUnreachable(UpstreamTestsError):
    """The torch repository could not be reached at all (no network): the upstream stage says it
    did not run, and the backend's run is not red for it."""


class TorchBuildError(OotciError):
    """A command of a source build of torch failed; `result` is its process, `cause` why it failed.
    Exit 1, as a run whose stage failed: the build is the torch stage of a run, and it failed."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, result: ProcResult | None = None, cause: RootCause | None = None):
        super().__init__(message)
        self.result = result
        self.cause = cause


EXIT_CODES: dict[int, str] = {
    0: "the command did what it was asked; a run: every stage passed",
    EXIT_FAILED: "the run finished and something failed (TorchBuildError: the source build of torch)",
    2: "a mistake in the command line or in what it names (UsageError; GitError: a git command failed)",
    3: "the backend manifest is invalid (ManifestError)",
    4: "no backend of that name in the registry (UnknownBackendError)",
    5: "the torch spec is invalid or names no wheel (TorchSpecError, TorchWheelNotFound)",
    6: "a package index could not be read or had nothing for this platform (PackageIndexError)",
    7: "the environment under test is unusable (TargetEnvironmentError)",
    8: "a place to write output cannot be used (OutputError)",
    9: "the history could not be committed or pushed (PublishError)",
    10: "the vendor's repository does not say what ootci init needs (ProjectError)",
    11: "a relay dispatch does not validate, or the relay refused a report (RelayError)",
    12: "the two ends cannot be bisected (BisectError)",
    13: "GitHub's REST API refused or could not be reached (GitHubError)",
    14: "PyTorch's test files cannot be had (UpstreamTestsError; UpstreamUnreachable: no network to fetch them)",
    EXIT_INTERRUPTED: "interrupted (SIGINT or SIGTERM)",
}
"""Every exit code of ootci, once. A code is shared by two classes only where the table says why."""
