"""`ootci run NAME...`: every stage, for each backend, one RunRecord each."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path

from ootci.runner.commands import torch_options, upstream_options
from ootci.runner.core.errors import EXIT_FAILED, EXIT_INTERRUPTED, OutputError, UsageError
from ootci.runner.manifests import registry
from ootci.runner.models import COMMIT_SHA, DELIVERY_ID
from ootci.runner.stages import SUITE_STAGES, RunOptions, bench
from ootci.runner.stages.pipeline import Interrupted, interrupt_handlers, run_backend
from ootci.runner.stages.report import Reporter
from ootci.runner.suite_runs import shard_plan
from ootci.runner.suite_runs.shards import check_group, default_group, job_index, parse_shard
from ootci.runner.torch_supply import torch_acquire, torchspec
from ootci.runner.verification.verify import import_cost_runs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the whole pipeline for one or more backends")
    p.add_argument("names", nargs="+", metavar="NAME", help="registered backend, or path of a backend.toml")
    p.add_argument("--torch", default=None, metavar="SPEC",
                   help="installed, a version (2.13.0), a wheel path or URL, nightly, git:REF or pr:N "
                        "(default: nightly; installed with --python)")
    p.add_argument("--out", type=Path, default=Path("out/runs"), help="directory for run records (default out/runs)")
    p.add_argument("--python", type=Path, help="use this existing environment under test instead of a fresh venv")
    p.add_argument("--suites", default=None,
                   help="comma-separated stages that test: smoke, integration, upstream, bench, or none (default: "
                        "smoke and integration, upstream where the manifest names its files, bench where it turns "
                        "it on)")
    p.add_argument("--bench-only", metavar="NAME[,NAME...]",
                   help="the bench stage times only these measurements (e.g. add_tiny,matmul; default: every one)")
    upstream_options.add_upstream(p)
    torch_options.add_torch_source(p)
    p.add_argument("--dry-run", action="store_true", help="print what would run (the torch plan, the stages) and stop")
    p.add_argument("--trigger", default="manual", choices=["manual", "nightly", "pr"])
    p.add_argument("--pr", type=int, help="PyTorch PR number the run belongs to")
    p.add_argument("--pr-head-sha", metavar="SHA", help="the PR's head commit the run tests (40 hex digits)")
    p.add_argument("--delivery-id", metavar="ID", help="delivery id of PyTorch's relay dispatch that started the run")
    torch_options.add_build(p)
    p.add_argument("--shard", metavar="K/N",
                   help="run every stage, but only the tests of shard K of N in the suite stages "
                        "(merge the N records with `ootci shards merge`)")
    p.add_argument("--shard-plan", type=Path, metavar="PLAN",
                   help="the plan of `ootci shards plan`: the upstream suite runs job K's files and ranges of ids "
                        "(--shard K or K/N), the other suites shard K of N")
    p.add_argument("--shard-group", metavar="ID",
                   help="id the N shards of one run share (default: gh-$GITHUB_RUN_ID on GitHub Actions, "
                        "else local-<UTC date>)")
    p.set_defaults(func=cmd_run)


def options_from(args: argparse.Namespace) -> RunOptions:
    import_cost_runs()  # a bad OOTCI_IMPORT_COST_RUNS is refused before anything runs
    source = torch_options.from_args(args)
    named = SUITE_STAGES if args.suites is None else tuple(
        s.strip() for s in args.suites.split(",") if s.strip() and s.strip() != "none")
    known = (*SUITE_STAGES, bench.NAME)
    unknown = [s for s in named if s not in known]
    if unknown:
        raise UsageError(f"--suites: unknown suite {unknown[0]!r} (known: {', '.join(known)})")
    suites = tuple(s for s in named if s != bench.NAME)
    # --suites bench adds the stage where the manifest does not; --suites none runs no test stage at all.
    bench_stage = True if bench.NAME in named else False if args.suites is not None and not named else None
    bench_only = tuple(n.strip() for n in (args.bench_only or "").split(",") if n.strip())
    if args.bench_only is not None and bench_stage is False:
        raise UsageError("--bench-only: names the measurements of the bench stage (with --suites bench, or "
                         "[suites] bench = true in the manifest)")
    if args.bench_only is not None and not bench_only:
        raise UsageError("--bench-only: no measurement named")
    python = args.python
    if python is not None:
        python = python.absolute()
        if not python.is_file():
            raise UsageError(f"--python: {python} is not an interpreter")
    torch = args.torch or ("installed" if python else "nightly")
    if torch == "installed" and python is None:
        raise UsageError("--torch installed needs --python (the environment that has it), "
                         "or [ci] python in the manifest")
    if python is not None and torch != "installed":
        raise UsageError("--python uses the torch already installed there: drop --torch or pass --torch installed")
    spec = torchspec.parse(torch)
    if args.pr_head_sha is not None and not re.fullmatch(COMMIT_SHA, args.pr_head_sha):
        raise UsageError(f"--pr-head-sha: {args.pr_head_sha[:60]!r} is not 40 lowercase hexadecimal digits")
    if args.delivery_id is not None and not re.fullmatch(DELIVERY_ID, args.delivery_id):
        raise UsageError(f"--delivery-id: {args.delivery_id[:60]!r} is not 1-64 letters, digits and '-'")
    shard = shard_group = part = None
    if args.shard_plan is not None:
        if args.shard is None:
            raise UsageError("--shard-plan needs --shard K: the job of the plan this run is")
        planned = shard_plan.read(args.shard_plan)
        k = job_index(args.shard, planned.n)
        part = dataclasses.replace(planned.part(k, where=f"--shard {args.shard}"), path=str(args.shard_plan))
        args.shard = f"{k}/{planned.n}"
    if args.shard is not None:
        k, n = parse_shard(args.shard)
        shard = f"{k}/{n}"
        shard_group = check_group(args.shard_group) if args.shard_group is not None else default_group()
    elif args.shard_group is not None:
        raise UsageError("--shard-group names the shards of one run: it needs --shard K/N")
    upstream_files, upstream_tests = upstream_options.from_args(args)
    if args.out.exists() and not args.out.is_dir():
        raise OutputError(f"--out: {args.out} exists and is not a directory")
    # Absolute: stages run tools in other working directories.
    return RunOptions(torch=spec.raw, out=args.out.absolute(), python=python, index_url=source.index_url, suites=suites,
                      bench=bench_stage, bench_only=bench_only, trigger=args.trigger, pr=args.pr,
                      pr_head_sha=args.pr_head_sha or None,
                      relay_delivery_id=args.delivery_id or None, jobs=source.jobs, cache=source.cache,
                      torch_repo=source.torch_repo, dry_run=args.dry_run, shard=shard, shard_group=shard_group,
                      shard_part=part, upstream_files=upstream_files, upstream_tests=upstream_tests)


def preflight(options: RunOptions) -> torch_acquire.TorchPlan:
    """Resolve the torch read-only (index page, git ls-remote, pip's index for a version): an
    unreachable index, a missing PR or a version the index does not have is a one-line error
    before anything is written under --out."""
    spec = torchspec.parse(options.torch)
    plan = torch_acquire.plan(spec, dry_run=True, index_url=options.index_url,
                              python=options.python if spec.kind == "installed" else None,
                              cache=options.cache, jobs=options.jobs, torch_repo=options.torch_repo)
    # --torch 9.9.9: refused here, not by pip in a stage.
    torch_acquire.check_version_available(plan, cache=options.cache)
    return plan


def print_plan(manifests, options: RunOptions, plan: torch_acquire.TorchPlan) -> None:
    from ootci.runner.stages import STAGES
    from ootci.runner.stages.pipeline import skip_reason, wanted

    print(f"torch {options.torch}:")
    for step in plan.steps:
        print(f"  {step}")
    for m in manifests:
        print(f"{m.name} ({m.device}) from {m.path}:")
        for name in STAGES:
            if not wanted(name, m, options):
                print(f"  {name:<12} off ([suites] {name} = true in the manifest, or --suites {name})")
                continue
            reason = skip_reason(m, options, name)
            print(f"  {name:<12} {'skip: ' + reason if reason else 'run'}")
    if options.shard:
        print(f"shard {options.shard} (group {options.shard_group}): the suites run only this shard's tests")
    if options.shard_part is not None:
        for piece in options.shard_part.pieces:
            print(f"  upstream {piece.describe()}: {len(piece.tests)} recorded tests, {piece.expected_s:.0f} s")
    print(f"records: {options.out}/<run_id>/record.json")


def cmd_run(args: argparse.Namespace) -> int:
    # Everything that can be wrong with the input is checked before anything is written.
    manifests = [registry.resolve(name) for name in args.names]
    if args.python is None and args.torch == "installed":
        # The manifest names the interpreter of its image ([ci] python) when the caller does not.
        pythons = {m.ci.python for m in manifests}
        if len(pythons) == 1 and "" not in pythons:
            args.python = Path(pythons.pop())
    options = options_from(args)
    other = [m.name for m in manifests if options.shard_part and m.name != options.shard_part.backend]
    if other and options.shard_part:
        raise UsageError(f"--shard-plan {options.shard_part.path}: a plan for {options.shard_part.backend}, "
                         f"not {other[0]}")
    plan = preflight(options)
    if options.dry_run:
        print_plan(manifests, options, plan)
        return 0
    reporter = Reporter()
    failed = False
    with interrupt_handlers():
        try:
            for manifest in manifests:
                record = run_backend(manifest, options, reporter)
                failed |= not record.status.ok
        except (KeyboardInterrupt, Interrupted) as exc:
            name = exc.signame if isinstance(exc, Interrupted) else "SIGINT"
            print(f"ootci: interrupted by {name}; records written under {options.out}", file=sys.stderr)
            return EXIT_INTERRUPTED
    return EXIT_FAILED if failed else 0
