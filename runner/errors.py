"""One exception class per kind of mistake, each with its own exit code.

A user of ootci sees `ootci: <message>` on one line and the exit code below, never a
traceback. Exit code 1 is kept for "the run finished and something failed".
"""

from __future__ import annotations


class OotciError(Exception):
    exit_code = 2

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class UsageError(OotciError):
    exit_code = 2


class ManifestError(OotciError):
    exit_code = 3


class UnknownBackendError(OotciError):
    exit_code = 4


class TorchSpecError(OotciError):
    exit_code = 5


class IndexError_(OotciError):
    """A package index could not be reached or had nothing for this platform."""

    exit_code = 6


class EnvironmentError_(OotciError):
    """The environment under test is unusable (no interpreter, no torch)."""

    exit_code = 7


class OutputError(OotciError):
    exit_code = 8


class ProjectError(OotciError):
    """A vendor's repository does not say what `ootci init` needs (its metadata, its entry point)."""

    exit_code = 10  # 9 is history's PublishError


class RelayError(OotciError):
    """A dispatch of PyTorch's CI relay that does not validate, or a report the relay did not take."""

    exit_code = 11


class GitHubError(OotciError):
    """GitHub's REST API could not be reached, refused a request, or answered what it does not document."""

    exit_code = 13


EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
