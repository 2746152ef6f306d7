"""`ootci expect --from RUN`: a run's failures become the backend's known failures.

Writes every failed, crashed or timed-out test of the run into the known-failures file
the backend's manifest names (runner/manifests/known_failures.py), creating the file, and naming it
in the manifest, the first time. `--prune` removes the listed tests that passed (fixed)
or that their suite no longer has.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from pydantic import ValidationError

from ootci.runner.core.errors import UsageError
from ootci.runner.manifests import known_failures, registry
from ootci.runner.manifests.manifest import Manifest
from ootci.runner.models import RunRecord
from ootci.runner.records import record_files


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("expect", help="make a run's failures the backend's known failures (its baseline)")
    p.add_argument("--from", dest="source", type=Path, required=True, metavar="RUN",
                   help="a run directory or its record.json")
    p.add_argument("--manifest", metavar="NAME|PATH",
                   help="the backend's manifest (default: the one the run was started with)")
    p.add_argument("--prune", action="store_true",
                   help="also remove listed tests that passed (fixed) or no longer exist")
    p.set_defaults(func=cmd_expect)


def read_run(source: Path) -> RunRecord:
    path = record_path(source)
    if not path.is_file():
        raise UsageError(f"--from {source}: not a run record (no {path.name} there)")
    try:
        record = record_files.read(path)
    except (OSError, ValueError, ValidationError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"--from {source}: not a run record ({first})") from None
    if record.tests_pruned_at is not None:
        raise UsageError(f"--from {source}: the run's test list was pruned from the history; use a newer run")
    return record


def record_path(source: Path) -> Path:
    """The record of RUN: a record.json, a run directory's, or that of the one run in a directory of
    runs (`--out`'s, out/runs); several there is one line naming them."""
    if not source.is_dir():
        return source
    path = source / record_files.RECORD_NAME
    if path.is_file():
        return path
    runs = sorted(p.parent for p in source.glob(f"*/{record_files.RECORD_NAME}"))
    if len(runs) > 1:
        shown = ", ".join(run.name for run in runs[:5]) + (f" and {len(runs) - 5} more" if len(runs) > 5 else "")
        raise UsageError(f"--from {source}: {len(runs)} runs there ({shown}): name one, e.g. --from {runs[-1]}")
    return runs[0] / record_files.RECORD_NAME if runs else path


def manifest_of(record: RunRecord, given: str | None) -> Manifest:
    if given:
        return registry.resolve(given)
    argv = shlex.split(record.command) if record.command else []
    if len(argv) < 3 or argv[:2] != ["ootci", "run"]:
        raise UsageError("the run does not say which manifest it used: give --manifest NAME|PATH")
    return registry.resolve(argv[2])


def cmd_expect(args: argparse.Namespace) -> int:
    record = read_run(args.source)
    manifest = manifest_of(record, args.manifest)
    if manifest.name != record.backend:
        raise UsageError(f"--from {args.source}: a run of {record.backend!r}, "
                         f"not of {manifest.name!r} ({manifest.path})")
    recorded = known_failures.record_run(manifest, record.tests, record.torch.version or record.torch.spec,
                                         prune=args.prune)
    counts = recorded.counts
    fixed = ""
    if counts["fixed"] and not args.prune:
        fixed = f"; {counts['fixed']} fixed (they passed): `--prune` removes them"
    print(f"ootci expect: {recorded.path}: {recorded.total} known failures ({counts['added']} added, "
          f"{counts['removed']} removed){fixed}")
    if recorded.total:
        print(f"by cause ({len(known_failures.by_cause(recorded.baseline))} causes; tests, cause):")
        print("\n".join(known_failures.cause_lines(recorded.baseline)))
    return 0
