"""Stage `upstream`: PyTorch's own device-generic test files on the device, judged by a baseline.

On for a manifest that names its files (`[suites.upstream] files = [...]`), or discovers them
(`files = "discover"`: runner/torch_supply/upstream_discovery.py, less the manifest's `exclude`),
or a run given `--upstream-files`; otherwise the record has no upstream stage. The files come from the exact
commit of the torch under test (runner/torch_supply/torch_tests.py), or from `--upstream-tests
DIR`, and run one process each (runner/suite_runs/upstream_runs.py). Where the torch repository
cannot be reached at all (no network), the stage is skipped and says so: the files are
PyTorch's, and their absence is no failure of the backend.
"""

from __future__ import annotations

import os
import time

from ootci.runner.core.errors import UpstreamTestsError, UpstreamUnreachable
from ootci.runner.manifests.manifest import Manifest, UpstreamSuite
from ootci.runner.models import RootCause, StageResult, Status
from ootci.runner.records.upstream_files import summarize
from ootci.runner.stages.base import RunContext, RunOptions, config_failure
from ootci.runner.suite_runs import junit, suite_runner
from ootci.runner.suite_runs.suite_runner import SuiteSpec, device_unusable
from ootci.runner.suite_runs.upstream_runs import UpstreamRunner
from ootci.runner.torch_supply import torch_tests, upstream_discovery

NAME = "upstream"


def wanted(manifest: Manifest, options: RunOptions) -> bool:
    """On where the manifest names upstream files or --upstream-files does."""
    return manifest.suites.upstream is not None or bool(options.upstream_files)


def suite_of(manifest: Manifest, options: RunOptions) -> UpstreamSuite:
    """The manifest's [suites.upstream], its files narrowed by --upstream-files (which, for a
    manifest without the table, makes one with the defaults)."""
    suite = manifest.suites.upstream
    if options.upstream_files:
        files = list(options.upstream_files)
        return suite.model_copy(update={"files": files}) if suite else UpstreamSuite(files=files)
    assert suite is not None, "wanted() keeps the stage off without files"
    return suite


def files_of(ctx: RunContext) -> torch_tests.UpstreamTests:
    torch = ctx.record.torch
    if ctx.options.upstream_tests is not None:
        return torch_tests.given(ctx.options.upstream_tests, torch_commit=torch.git_version)
    return torch_tests.for_torch(spec=torch.spec, version=torch.version, git_version=torch.git_version,
                                 cache=ctx.cache, torch_repo=ctx.options.torch_repo, log=ctx.log_path())


def run(ctx: RunContext) -> StageResult:
    manifest, options = ctx.manifest, ctx.options
    suite = suite_of(manifest, options)
    only = None if options.only_tests is None else options.only_tests.get(NAME)
    if options.only_tests is not None and only is None:
        return StageResult(name=NAME, status=Status.skipped, summary="no suites: none of its suites is selected")
    selected = [] if suite.discovers else list(suite.files)
    if options.dry_run:
        what = (f"the device-generic files discovered in PyTorch's test/ ({len(suite.exclude)} exclusions)"
                if suite.discovers else "upstream files " + ", ".join(selected))
        return StageResult(name=NAME, status=Status.skipped, summary="dry run: would run " + what)
    try:
        tests = files_of(ctx)
    except UpstreamUnreachable as exc:
        summary = f"not run: {exc.message}; --upstream-tests DIR runs them from a folder"
        return StageResult(name=NAME, status=Status.skipped, summary=summary,
                           data={"upstream": {"not_run": exc.message, "files_selected": selected,
                                              "discover": suite.discovers}})
    except UpstreamTestsError as exc:
        return config_failure(NAME, exc.message)
    discovery = None
    if suite.discovers:
        discovery = upstream_discovery.discover(tests.test_dir, suite.exclude)
        _note(ctx, [f"upstream: {discovery.describe()} in {tests.test_dir}",
                    *(f"  excluded ({reason}): {', '.join(left_out)}"
                      for reason, left_out in discovery.by_reason().items())])
        selected = discovery.files
        problems = [] if selected else [f"upstream: no device-generic test file in {tests.test_dir} "
                                        f"({discovery.describe()})"]
    else:
        problems = [f"upstream {name}: not in {tests.test_dir} ({tests.describe()})"
                    for name in torch_tests.missing_files(tests, selected)]
    files = [name for name in selected if (tests.test_dir / name).is_file()]
    part = options.shard_part
    if part is not None:
        # A planned shard: its own files and ranges of ids only (an unplanned file where its name hashes).
        files = part.files(files)
    requirements = SuiteSpec(name=NAME, cwd=ctx.run_dir, requirements=list(suite.requirements))
    if files and requirements.requirements:
        failure = suite_runner.install_requirements(ctx, requirements)
        if failure:
            problems.append(failure)
            files = []  # every file imports what failed to install: nothing would say more than this line
    limit = float(manifest.timeouts.upstream)
    # One file per core at once, as PyTorch's runner runs its files; a file forks the cores left to it.
    cores = options.jobs or min(os.cpu_count() or 1, 4)
    parallel = max(1, min(cores, len(files)))
    workers = max(1, cores // parallel) if manifest.suites.crash_isolation == "fork" else 0
    runner = UpstreamRunner(
        python=ctx.python, manifest=manifest, suite=suite, test_dir=tests.test_dir, junit_dir=ctx.run_dir / "junit",
        cwd=ctx.run_dir / "upstream-cwd", log=ctx.log_path(NAME), deadline=time.monotonic() + limit,
        env=ctx.pip_env(), torch_version=ctx.record.torch.version, workers=workers, parallel=parallel,
        shard=options.shard, part=part,
        on_line=getattr(ctx.reporter, "line", None))
    upstream = runner.run(files, only)
    results = upstream.results
    ctx.record.tests.extend(results)
    problems += upstream.problems
    for problem in problems:
        if problem not in ctx.record.problems:
            ctx.record.problems.append(problem)
    stage = result_of(tests, upstream, results, problems, discovery)
    if part is not None:
        stage.data["shard_plan"] = {"plan": part.plan, "job": f"{part.k}/{part.n}",
                                    "pieces": [{"file": p.file, "start": p.start, "before": p.before}
                                               for p in part.pieces if p.file in files]}
    return stage


def _note(ctx: RunContext, lines: list[str]) -> None:
    """Lines of ootci's own at the head of the stage's log, and on the terminal where it shows output."""
    with open(ctx.log_path(NAME), "a", encoding="utf-8") as log:
        log.writelines(line + "\n" for line in lines)
    on_line = getattr(ctx.reporter, "line", None)
    if on_line is not None:
        for line in lines:
            on_line(line + "\n")


def result_of(tests: torch_tests.UpstreamTests, upstream, results, problems: list[str],
              discovery: upstream_discovery.Discovery | None = None) -> StageResult:
    """The stage's record of files that ran: its status, summary, counts, root cause and data."""
    counts = junit.count_by_outcome(results)
    timed_out = any(f.status is Status.timeout for f in upstream.files)
    status = Status.passed
    if any(not f.status.ok for f in upstream.files) or problems:
        status = Status.timeout if timed_out and not any(f.status is Status.failed for f in upstream.files) \
            else Status.failed
    shown = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no tests"
    found = f" ({discovery.describe()})" if discovery else ""
    summary = f"upstream: {len(upstream.files)} files{found}, {shown}; {tests.describe()}"
    if problems:
        summary += "; " + "; ".join(problems)
    cause = next((f.root_cause for f in upstream.files if not f.status.ok and f.root_cause), None)
    if cause is None and problems:
        cause = RootCause(kind="error", summary=problems[0])
    per_file = summarize(results)
    data: dict = {
        "suites": {NAME: {"status": status.value, "counts": counts,
                          "duration_s": round(sum(f.duration_s for f in upstream.files)
                                              + upstream.second_opinion_s, 3),
                          "junit": os.path.relpath(upstream.junit, upstream.junit.parent.parent)}},
        "upstream": {
            "tests": tests.to_data(),
            "describe": tests.describe(),
            "files": {f.file: {"status": f.status.value, "duration_s": f.duration_s, "rerun": f.rerun,
                               "failed_on_cpu": f.failed_on_cpu,
                               "tests": per_file[f.file].tests if f.file in per_file else 0}
                      for f in upstream.files},
            "second_opinion_s": upstream.second_opinion_s,
        },
    }
    if discovery is not None:
        data["upstream"]["discovery"] = discovery.to_data()
    if status is Status.failed:
        data["blocks_later_stages"] = device_unusable(results)
    return StageResult(name=NAME, status=status, summary=summary, counts=counts, root_cause=cause, data=data)
