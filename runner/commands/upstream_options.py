"""The options of every command that runs the upstream suite, declared once and checked once.

`ootci run` and `ootci test` both take which of PyTorch's test files to run (`--upstream-files`)
and where to take them from instead of the torch's own commit (`--upstream-tests`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pydantic import ValidationError

from ootci.runner.core.errors import UsageError
from ootci.runner.manifests.manifest import UpstreamSuite

FILES_HELP = ("the upstream suite runs only these of PyTorch's test files (paths under its test/, e.g. "
              "test_view_ops.py; default: the manifest's [suites.upstream] files)")
TESTS_HELP = ("take PyTorch's test files from DIR (its test/ folder, or a checkout that has one) instead of "
              "fetching them at the torch's commit; the record says whose commit they are")


def add_upstream(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--upstream-files", metavar="FILE[,FILE...]", help=FILES_HELP)
    add_upstream_tests(parser)


def add_upstream_tests(parser: argparse.ArgumentParser, help_text: str = TESTS_HELP) -> None:
    parser.add_argument("--upstream-tests", type=Path, metavar="DIR", help=help_text)


def folder_from(args: argparse.Namespace) -> Path | None:
    """--upstream-tests, checked: an existing directory, made absolute (stages run elsewhere)."""
    folder = args.upstream_tests
    if folder is None:
        return None
    folder = folder.absolute()
    if not folder.is_dir():
        raise UsageError(f"--upstream-tests: {folder} is not a directory")
    return folder


def from_args(args: argparse.Namespace) -> tuple[tuple[str, ...], Path | None]:
    """(files, folder) as add_upstream declared them, checked: each file a path of a .py file
    under PyTorch's test/, the folder an existing directory, made absolute (stages run elsewhere)."""
    text = args.upstream_files
    files = tuple(f.strip() for f in (text or "").split(",") if f.strip())
    if text is not None and not files:
        raise UsageError("--upstream-files: no file named")
    for name in files:
        try:
            UpstreamSuite(files=[name])
        except ValidationError:
            raise UsageError(f"--upstream-files: {name!r} is not a path of a .py file under PyTorch's test/ "
                             f"(e.g. test_view_ops.py)") from None
    return files, folder_from(args)
