"""`ootci torch SPEC`: resolve and acquire a torch, print the plan, optionally place the wheel.

The build-torch workflow uses it to turn a spec into a wheel artifact once
(`ootci torch pr:12345 --out dist/`), which backend jobs then test against
(`ootci run openreg --torch dist/torch-*.whl`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ootci.runner.commands import torch_options
from ootci.runner.core.errors import UsageError
from ootci.runner.torch_supply import envs, torch_acquire, torch_index, torch_source, torchspec
from ootci.runner.torch_supply.envs import cache_root


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("torch", help="resolve and acquire a torch (nightly, version, wheel, git:REF, pr:N)",
                       description="Resolve a torch spec, acquire its wheel and print the plan. "
                                   "Specs: installed, nightly, 2.13.0, PATH.whl, https://.../X.whl, git:REF, pr:N.")
    p.add_argument("spec", help="torch spec")
    torch_options.add_torch_source(
        p, index_help=f"package index for nightly (default $OOTCI_TORCH_INDEX or {torch_index.DEFAULT_NIGHTLY_INDEX})",
        repo_help=f"git repository of a source build (default $OOTCI_TORCH_REPO or {torch_source.DEFAULT_REPO})")
    p.add_argument("--dry-run", action="store_true",
                   help="resolve only (index page, git ls-remote) and print every step; download and build nothing")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--out", type=Path, help="place the acquired wheel in this directory")
    torch_options.add_build(p, jobs_help="parallel compile jobs of a source build (default: all cores)", cache=False)
    p.add_argument("--python", type=Path, help="interpreter torch is for (default: the one running ootci)")
    p.add_argument("--log", type=Path, help="log of a source build (default: under $OOTCI_CACHE/logs)")
    p.set_defaults(func=cmd_torch)


def cmd_torch(args: argparse.Namespace) -> int:
    source = torch_options.from_args(args)
    if args.python is not None and not args.python.exists():
        raise UsageError(f"--python: no interpreter at {args.python}")
    spec = torchspec.parse(args.spec)
    plan = torch_acquire.plan(spec, dry_run=args.dry_run, index_url=source.index_url, python=args.python,
                              cache=cache_root(), jobs=source.jobs, torch_repo=source.torch_repo, log=args.log)
    if spec.kind == "installed" and not args.dry_run:
        # Nothing to acquire: say which torch that environment has (exit 7 if none), read as the
        # torch stage reads it for --torch installed, without importing it.
        assert plan.source is not None  # an installed torch's plan names its interpreter
        info = envs.torch_found(plan.source)
        plan.version, plan.commit = info["version"], info["git_version"]
    placed = None
    if args.out and not args.dry_run:
        placed = torch_acquire.place(plan, args.out, python=args.python, log=args.log)
    if args.json:
        data = plan.to_json()
        data["placed"] = str(placed) if placed else None
        print(json.dumps(data, indent=2))
        return 0
    print(f"torch {spec.raw} ({spec.kind}){' - dry run, nothing acquired' if args.dry_run else ''}")
    for step in plan.steps:
        print(f"  - {step}")
    print(f"install: {' '.join(plan.install_args) or '(nothing)'}")
    print(f"key:     {plan.key}")
    for label, value in (("version", plan.version), ("commit", plan.commit), ("wheel", placed or plan.wheel)):
        if value:
            print(f"{label + ':':<8} {value}")
    return 0
