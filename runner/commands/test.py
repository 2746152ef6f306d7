"""`ootci test`: run one suite against an environment that already has the backend.

The same code as the smoke and integration stages of `ootci run`, without building
anything: useful to a vendor iterating on expected failures, and to ootci's tests.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from ootci.runner.commands import upstream_options
from ootci.runner.core import causes
from ootci.runner.core.errors import EXIT_FAILED, TargetEnvironmentError, UsageError
from ootci.runner.manifests import registry
from ootci.runner.models import RunRecord, Status, TorchInfo
from ootci.runner.records import record_files
from ootci.runner.stages import upstream
from ootci.runner.stages.base import RunContext, RunOptions
from ootci.runner.suite_runs import shard_plan, suite_runner
from ootci.runner.suite_runs.shards import check_group, default_group, job_index
from ootci.runner.torch_supply import envs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("test", help="run a test suite in an existing environment under test")
    p.add_argument("--python", required=True, type=Path, help="interpreter of the environment under test")
    p.add_argument("--backend", required=True, help="registered backend name or path of a backend.toml")
    p.add_argument("--suite", required=True,
                   help="smoke, integration (ootci's integration suite and the vendor suites), upstream "
                        "(PyTorch's own test files), or the name of one vendor suite")
    upstream_options.add_upstream(p)
    p.add_argument("--torch-repo", help="with --suite upstream: the PyTorch repository to fetch test/ from "
                                        "(default $OOTCI_TORCH_REPO or GitHub)")
    p.add_argument("--out", type=Path, default=Path("out/test"),
                   help="directory for junit/<suite>.xml.gz, logs/ and record.json (default: out/test)")
    p.add_argument("--jobs", type=int, help="pytest-xdist workers for the integration suite (default: CPUs, at most 4)")
    p.add_argument("--shard-plan", type=Path, metavar="PLAN",
                   help="with --suite upstream: run job K's part of the plan of `ootci shards plan` (--shard K); "
                        "the record is shard K/N, for `ootci shards merge`")
    p.add_argument("--shard", metavar="K", help="the job of --shard-plan this run is")
    p.add_argument("--shard-group", metavar="ID", help="id the jobs of one run share (as `ootci run --shard-group`)")
    p.add_argument("--verbose", "-v", action="store_true", help="stream the suites' output")
    p.set_defaults(func=cmd_test)


class _Reporter:
    def __init__(self, verbose: bool):
        self.verbose = verbose

    def line(self, text: str) -> None:
        if self.verbose:
            sys.stdout.write(text)
            sys.stdout.flush()


def cmd_test(args: argparse.Namespace) -> int:
    manifest = registry.resolve(args.backend)
    # Resolved once, here: the suites run in other working directories.
    args.out = args.out.absolute()
    python = args.python if args.python.is_absolute() else Path.cwd() / args.python
    if not python.exists():
        raise TargetEnvironmentError(f"--python {args.python}: no such interpreter")
    vendor_names = [v.name for v in manifest.suites.vendor]
    if args.suite not in suite_runner.SUITE_STAGES and args.suite not in vendor_names:
        known = ", ".join([*suite_runner.SUITE_STAGES, *vendor_names])
        raise UsageError(f"--suite {args.suite!r}: not a suite of {manifest.name} (known: {known})")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: must be at least 1")
    upstream_files, upstream_tests = upstream_options.from_args(args)
    if (upstream_files or upstream_tests) and args.suite != upstream.NAME:
        raise UsageError(f"--upstream-files and --upstream-tests go with --suite {upstream.NAME}")
    if args.suite == upstream.NAME and not upstream.wanted(manifest, RunOptions(upstream_files=upstream_files)):
        raise UsageError(f"--suite {upstream.NAME}: {manifest.path} has no [suites.upstream] files: add them, "
                         f"or name the files with --upstream-files")
    part = shard = group = None
    if args.shard_plan is not None or args.shard is not None:
        if args.shard_plan is None or args.shard is None or args.suite != upstream.NAME:
            raise UsageError(f"--shard-plan and --shard go together, with --suite {upstream.NAME}")
        planned = shard_plan.read(args.shard_plan)
        if planned.backend != manifest.name:
            raise UsageError(f"--shard-plan {args.shard_plan}: a plan for {planned.backend}, not {manifest.name}")
        part = planned.part(job_index(args.shard, planned.n), where=f"--shard {args.shard}")
        shard = f"{part.k}/{part.n}"
        group = check_group(args.shard_group) if args.shard_group is not None else default_group()
    # For the record only: whether that torch imports, the suite says (it imports it first).
    info = envs.torch_found(python)
    now = dt.datetime.now(dt.UTC)
    record = RunRecord(
        run_id=f"test-{manifest.name}-{now:%Y%m%dT%H%M%S}", backend=manifest.name, device=manifest.device,
        torch=TorchInfo(spec="installed", version=info.get("version"), git_version=info.get("git_version"),
                        dist_version=info.get("dist_version"), source=str(python)),
        python=str(python), started_at=now,
        command=" ".join(["ootci", "test", "--python", str(python), "--backend", args.backend, "--suite", args.suite]),
        shard=shard, shard_group=group,
    )
    stage = args.suite if args.suite in suite_runner.SUITE_STAGES else "integration"
    options = RunOptions(out=args.out, python=python, suites=(stage,), jobs=args.jobs, torch_repo=args.torch_repo,
                         upstream_files=upstream_files, upstream_tests=upstream_tests, shard=shard, shard_group=group,
                         shard_part=part)
    args.out.mkdir(parents=True, exist_ok=True)
    ctx = RunContext(manifest=manifest, options=options, record=record, run_dir=args.out,
                     cache=envs.cache_root(), reporter=_Reporter(args.verbose), stage_name=stage)
    specs = None
    if stage != args.suite:
        vendor = manifest.suites.vendor[vendor_names.index(args.suite)]
        root = suite_runner.vendor_root(ctx)
        specs = [suite_runner.vendor_suite(vendor, root, vendor_names.index(args.suite), manifest.path)]
    if stage == upstream.NAME:
        result = upstream.run(ctx)
    else:
        result = suite_runner.run_stage(ctx, stage, specs)
    causes.attach(result, record.tests, manifest.device)
    record.stages.append(result)
    record.status = result.status
    record.finished_at = dt.datetime.now(dt.UTC)
    record_files.write(args.out, record)
    _print(result, record)
    return 0 if result.status.ok else EXIT_FAILED


def _print(result, record: RunRecord) -> None:
    for test in record.tests:
        if not test.outcome.ok or test.outcome.value in ("flaky", "xfailed", "fixed"):
            attempts = f" (attempts {test.attempts})" if test.attempts > 1 else ""
            print(f"{test.outcome.value.upper():8} {test.suite}::{test.id}{attempts}: {test.message[:300]}")
    for problem in record.problems:
        print(f"PROBLEM  {problem}")
    print(f"{result.name}: {result.status.value} - {result.summary}")
    for novelty in causes.NOVELTY_ORDER:
        line = causes.summary_line(result.causes, novelty)
        if line:
            print(line)
    if result.status is not Status.passed and result.root_cause:
        print(f"root cause: {result.root_cause.summary}")
