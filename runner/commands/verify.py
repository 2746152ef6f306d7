"""`ootci verify`: the autoload verification of one backend, or of every installed one."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ootci.runner.core.errors import EXIT_FAILED, UsageError
from ootci.runner.manifests import registry
from ootci.runner.models import Status
from ootci.runner.verification.verify import (
    DEFAULT_RUNS,
    DEFAULT_TIMEOUT,
    RUNS_VARIABLE,
    Verification,
    import_cost_runs,
    verify,
)

_MARKS = {Status.passed: "ok", Status.failed: "FAIL", Status.crashed: "CRASH", Status.timeout: "HANG",
          Status.skipped: "skip", Status.blocked: "-"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="check that `import torch` autoloads a backend and its device works",
                       description="Run the autoload probes in fresh interpreters of the environment under test.")
    p.add_argument("--python", required=True, type=Path,
                   help="interpreter (or venv directory) of the environment under test")
    p.add_argument("--backend", help="registered backend name or backend.toml path (default: every installed "
                                     "torch.backends entry point)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--runs", type=int, default=None,
                   help=f"timed imports for the import cost (default ${RUNS_VARIABLE}, else {DEFAULT_RUNS})")
    p.add_argument("--timeout", type=float, default=None,
                   help=f"seconds per probe (default {DEFAULT_TIMEOUT:g}, at most the manifest's timeouts.autoload)")
    p.add_argument("--jobs", type=int, default=2, help="probes run at once (default 2)")
    p.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    if args.runs is None:
        args.runs = import_cost_runs()
    if args.runs < 1:
        raise UsageError(f"--runs {args.runs}: must be at least 1")
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError(f"--timeout {args.timeout:g}: must be positive")
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: must be at least 1")
    manifest = registry.resolve(args.backend) if args.backend else None
    timeout = args.timeout or DEFAULT_TIMEOUT
    if manifest is not None and args.timeout is None:
        timeout = min(timeout, manifest.timeouts.autoload)
    result = verify(args.python, manifest, timeout=timeout, runs=args.runs, jobs=args.jobs)
    if args.json:
        print(json.dumps(result.model_dump(mode="json", exclude_none=True), indent=2))
    else:
        print(render(result))
    return 0 if result.status.ok else EXIT_FAILED


def render(result: Verification) -> str:
    """A compact table: one line a check, then the root cause and its hint."""
    width = max((len(c.name) for c in result.checks), default=5)
    lines = [f"ootci verify: {result.python} (torch {result.torch_version or '?'}; "
             f"{', '.join(result.backends) or 'no backend'})"]
    for check in result.checks:
        detail = check.detail if len(check.detail) <= 110 else check.detail[:107] + "..."
        lines.append(f"  {_MARKS.get(check.status, check.status.value):<5} {check.name:<{width}}  "
                     f"{check.duration_s:5.1f}s  {detail}")
    lines.append(f"{result.status.value.upper()} in {result.duration_s:.1f} s")
    if result.root_cause:
        cause = result.root_cause
        lines.append(f"root cause: {cause.summary}" + (f" [culprit: {cause.culprit}]" if cause.culprit else ""))
        if cause.hint:
            lines.append(f"hint: {cause.hint}")
    return "\n".join(lines)
