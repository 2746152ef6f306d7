"""The options of every command that gets or builds a torch, declared once and checked once.

`ootci run`, `init`, `bisect`, `cache-key` and `torch` all take where nightlies come from
(`--index-url`) and which PyTorch repository a source build clones (`--torch-repo`); the
ones that build take `--jobs` and `--cache`. A command declares them with `add_torch_source`
and `add_build`, passing its own help only where the option means something narrower there,
and reads them back with `from_args` into one TorchSourceOptions. Before, each command
declared its own copy, and `ootci init` had lost `--torch-repo` on the way.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ootci.runner.core.errors import UsageError
from ootci.runner.torch_supply import torch_source

INDEX_HELP = "package index for nightly torch (default $OOTCI_TORCH_INDEX or PyTorch's)"
JOBS_HELP = "parallel build jobs (MAX_JOBS)"
CACHE_HELP = "cache directory (default $OOTCI_CACHE or ~/.cache/ootci)"


@dataclass(frozen=True)
class TorchSourceOptions:
    index_url: str | None = None
    torch_repo: str | None = None
    jobs: int | None = None
    cache: Path | None = None
    """absolute: stages run their tools in other working directories"""


def add_torch_source(parser: argparse.ArgumentParser, *, index_help: str = INDEX_HELP,
                     repo_help: str = torch_source.REPO_HELP) -> None:
    parser.add_argument("--index-url", help=index_help)
    parser.add_argument("--torch-repo", help=repo_help)


def add_build(parser: argparse.ArgumentParser, *, jobs_help: str = JOBS_HELP, cache: bool = True) -> None:
    parser.add_argument("--jobs", type=int, help=jobs_help)
    if cache:
        parser.add_argument("--cache", type=Path, help=CACHE_HELP)


def from_args(args: argparse.Namespace) -> TorchSourceOptions:
    """What add_torch_source and add_build declared, checked: a bad --jobs is one line."""
    jobs = getattr(args, "jobs", None)
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs {jobs}: must be at least 1")
    cache = getattr(args, "cache", None)
    return TorchSourceOptions(index_url=getattr(args, "index_url", None), torch_repo=getattr(args, "torch_repo", None),
                              jobs=jobs, cache=Path(cache).absolute() if cache is not None else None)
