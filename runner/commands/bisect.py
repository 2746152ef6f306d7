"""`ootci bisect NAME --good X --bad Y`: the first bad nightly, torch commit or backend commit."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ootci.runner.bisection import bisect, bisect_search, slowdown
from ootci.runner.commands import torch_options
from ootci.runner.core.errors import EXIT_FAILED, EXIT_INTERRUPTED, OotciError, OutputError, UsageError
from ootci.runner.manifests import registry
from ootci.runner.models import SUITES, RunRecord, Status
from ootci.runner.records.record_files import find_runs
from ootci.runner.stages.pipeline import Interrupted, interrupt_handlers
from ootci.runner.verification.verify import import_cost_runs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bisect", help="narrow a new failure to the first bad torch, torch commit or backend commit")
    p.add_argument("name", nargs="?", metavar="NAME", help="registered backend, or path of a backend.toml")
    p.add_argument("--good", metavar="X", help="the good end: a run id, a record.json (or its directory), "
                   "a torch spec (torch axis) or a git ref (backend axis)")
    p.add_argument("--bad", metavar="Y", help="the bad end, the same kinds as --good")
    p.add_argument("--axis", choices=["torch", "backend"],
                   help="what to walk (default: what changed between the two runs; torch first when both did)")
    p.add_argument("--versions", metavar="A,B,...", help="torch axis: the torches to walk, oldest first "
                   "(default: the nightlies or releases the index lists between the ends)")
    p.add_argument("--commits", action="store_true",
                   help="torch axis: then walk the PyTorch commits between the two adjacent torches found")
    torch_options.add_torch_source(
        p, index_help="package index of the torches (nightlies: default PyTorch's nightly index)",
        repo_help="PyTorch git repository for --commits (a local directory is read as it is)")
    p.add_argument("--torch", metavar="SPEC", help="backend axis: the torch every step uses "
                   "(default: the bad run's, else the manifest's [ci] torch)")
    p.add_argument("--suites", default="smoke,integration",
                   help="suites of the end runs, when an end is a spec and not a run (default: both)")
    p.add_argument("--runs", type=Path, action="append", default=[], metavar="DIR",
                   help="where run ids are looked up (default out/runs); repeatable")
    p.add_argument("--out", type=Path, default=Path("out/bisect"), help="directory for bisections (default out/bisect)")
    p.add_argument("--max-steps", type=int, default=bisect.DEFAULT_MAX_STEPS,
                   help=f"most steps to run, re-runs and skips included (default {bisect.DEFAULT_MAX_STEPS})")
    p.add_argument("--dry-run", action="store_true", help="print the plan (ends, predicate, candidates) and stop")
    p.add_argument("--resume", type=Path, metavar="DIR", help="go on with the bisection in DIR (its bisect.json)")
    p.add_argument("--perf", metavar="MEASUREMENT",
                   help="bisect a slowdown of this bench measurement instead of a failure: a step is bad when its "
                        "rounds lie nearer the bad run's than the good run's, skip when too noisy to tell; "
                        "without --good/--bad, the ends are the open regression `ootci perf` finds under --runs")
    p.add_argument("--turned-red", action="store_true",
                   help="print, as JSON, each backend whose latest run under --runs is red after a green one "
                        "(good and bad run ids), and stop: what the nightly bisects")
    torch_options.add_build(p)
    p.set_defaults(func=cmd_bisect)


def _suites(text: str) -> tuple[str, ...]:
    suites = tuple(s.strip() for s in text.split(",") if s.strip() and s.strip() != "none")
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise UsageError(f"--suites: unknown suite {unknown[0]!r} (known: {', '.join(SUITES)})")
    return suites


def options_from(args: argparse.Namespace, saved: dict | None = None) -> bisect.BisectOptions:
    import_cost_runs()  # a bad OOTCI_IMPORT_COST_RUNS is refused before anything runs
    if saved is not None:  # --resume: the arguments the bisection started with
        args = argparse.Namespace(**{**vars(args), **saved, "name": saved["manifest"],
                                     "versions": ",".join(saved["versions"]) if saved.get("versions") else None,
                                     "suites": ",".join(saved.get("suites") or []) or "none",
                                     "runs": [Path(p) for p in saved.get("runs", [])]})
    source = torch_options.from_args(args)
    if not args.name:
        raise UsageError("give the backend: ootci bisect NAME --good X --bad Y")
    manifest = registry.resolve(args.name)
    runs = [p.absolute() for p in (args.runs or [Path("out/runs")])]
    if not (args.good and args.bad) and args.perf:
        args.good, args.bad = _slowdown_from_history(manifest.name, runs, args.good, args.bad, args.perf)
    elif not (args.good and args.bad):
        args.good, args.bad = _from_history(manifest.name, runs, args.good, args.bad)
    if _same_end(args.good, args.bad):
        raise bisect.BisectError(f"--good and --bad are the same ({args.good}): nothing lies between them to bisect")
    if args.max_steps < 1:
        raise UsageError("--max-steps: give at least 1")
    versions = [v.strip() for v in args.versions.split(",") if v.strip()] if args.versions else None
    if args.out.exists() and not args.out.is_dir():
        raise OutputError(f"--out: {args.out} exists and is not a directory")
    return bisect.BisectOptions(
        manifest=manifest, good=args.good, bad=args.bad, out=args.out.absolute(), axis=args.axis, versions=versions,
        commits=args.commits, index_url=source.index_url, torch_repo=source.torch_repo, torch=args.torch,
        suites=_suites(args.suites), runs=runs, cache=source.cache, jobs=source.jobs, max_steps=args.max_steps,
        perf=args.perf)


def _mainline(backend: str, runs: list[Path]) -> list[tuple[RunRecord, Path]]:
    """The backend's finished runs under `runs` that are not PR runs, oldest first. A `missing`
    run (its job left no record) says nothing of the backend: it neither turns it red nor green."""
    found = [(record, run_dir) for root in runs if root.is_dir() for run_dir, record in find_runs(root)
             if record is not None and record.backend == backend and record.trigger != "pr"
             and record.finished_at is not None and record.status is not Status.missing]
    return sorted(found, key=lambda pair: pair[0].started_at)


def _from_history(backend: str, runs: list[Path], good: str | None, bad: str | None) -> tuple[str, str]:
    """The last green run and the first red run after it, where --good/--bad were not given."""
    history = _mainline(backend, runs)
    pair = turned_red(history, latest_only=False)
    if pair is None:
        missing = [flag for flag, given in (("--good X", good), ("--bad Y", bad)) if not given]
        raise UsageError(f"{' and '.join(f.split()[0] for f in missing)} not given, and no red run after a green one "
                         f"of {backend} under {', '.join(map(str, runs))} to take "
                         f"{'it' if len(missing) == 1 else 'them'}"
                         f" from: give {' '.join(missing)}")
    return good or pair[0].run_id, bad or pair[1].run_id


def _slowdown_from_history(backend: str, runs: list[Path], good: str | None, bad: str | None,
                           measurement: str) -> tuple[str, str]:
    """The runs either side of the open regression of `measurement` (`ootci perf`), where --good/--bad were
    not given."""
    from ootci.runner.performance import regressions

    found = [r for root in runs if root.is_dir() for r in regressions.find(root, {backend}).regressions
             if r.measurement == measurement]
    if not found:
        raise UsageError(f"--good/--bad not given, and no open regression of {backend} {measurement} under "
                         f"{', '.join(map(str, runs))} to take them from (ootci perf --runs DIR lists them)")
    return good or found[0].last_good.run_id, bad or found[0].first_bad.run_id


def _same_end(good: str, bad: str) -> bool:
    """Both ends name the same run, spec or ref (a record.json and its directory are one run)."""
    def key(end: str) -> str:
        path = Path(end.strip())
        if path.exists():
            path = path.resolve()
            return str(path.parent if path.name == "record.json" else path)
        return end.strip()
    return key(good) == key(bad)


def turned_red(history: list[tuple[RunRecord, Path]], latest_only: bool = True) -> tuple[RunRecord, RunRecord] | None:
    """(last green, first red) of the red streak the history ends in; latest_only: only when the
    streak is one run long (it turned red with the latest run)."""
    records = [r for r, _ in history]
    if not records or records[-1].status.ok:
        return None
    first_red = len(records) - 1
    while first_red > 0 and not records[first_red - 1].status.ok:
        first_red -= 1
    if first_red == 0 or (latest_only and first_red != len(records) - 1):
        return None
    return records[first_red - 1], records[first_red]


def print_turned_red(runs: list[Path]) -> int:
    """Each backend that turned red with its latest run, and each bench measurement whose slowdown
    was found with it (`perf`: the measurement; `ootci[perf]` is needed to look for those)."""
    manifests = registry.load_all()
    pairs = []
    for manifest in manifests:
        pair = turned_red(_mainline(manifest.name, runs))
        if pair:
            pairs.append((manifest, pair[0].run_id, pair[1].run_id, None))
    planned = set()
    for found in new_slowdowns(runs, {m.name for m in manifests}):
        # A backend's own step moves both its count and its count ratio: one bisection of it.
        if (found.backend, found.measurement) in planned:
            continue
        planned.add((found.backend, found.measurement))
        manifest = next(m for m in manifests if m.name == found.backend)
        pairs.append((manifest, found.last_good.run_id, found.first_bad.run_id, found.measurement))
    entries = []
    for manifest, good, bad, measurement in pairs:
        # The vendor's runner and, on it, the vendor's container (bisect.yml's inputs as they are):
        # a bisect job on the bare host has no device runtime.
        entries.append({"backend": manifest.name, "good": good, "bad": bad,
                        "runs_on": manifest.ci.runs_on, "container": manifest.ci.container_input(),
                        "login_shell": manifest.ci.login_shell,
                        "use_image_python": manifest.ci.use_image_python, "perf": measurement or ""})
    print(json.dumps(entries))
    return 0


def new_slowdowns(runs: list[Path], backends: set[str]):
    """The open regressions that the latest run of their backend revealed: not open without it.
    Counts are judged with what any install has; device time needs the perf extra (said, once)."""
    from ootci.runner.performance import regressions

    for root in runs:
        if root.is_dir():
            found = regressions.newly_found(root, backends)
            if found.not_judged:
                print(f"ootci bisect: {found.not_judged}", file=sys.stderr)
            yield from found.regressions


def dry_run(b: bisect.Bisection) -> int:
    options = b.options
    print(f"bisect {options.manifest.name}: good {options.good}, bad {options.bad} (a dry run writes nothing; "
          f"the bisection would be written under {options.out})")
    for end in (b.good, b.bad):
        if end.record is None:
            print(f"  would first run {end.given} (suites: {','.join(options.suites) or 'none'})")
    if b.good.record is None or b.bad.record is None:
        return 0
    predicate = (slowdown.derive(b.good.record, b.bad.record, options.perf) if options.perf
                 else bisect.derive_predicate(b.good.record, b.bad.record))
    print(f"predicate: stage {predicate.stage}: {predicate.cause}")
    for suite, ids in predicate.tests.items():
        for test_id in ids:
            print(f"  {suite}::{test_id}")
    axis = b.choose_axes(b.good.record, b.bad.record)
    b.state.predicate = predicate
    round_ = b.first_round(axis, b.good.record, b.bad.record)
    rounds = [round_]
    inner = round_.candidates[1:-1]
    if options.commits and round_.axis == "torch" and not inner:
        rounds.append(b.commit_round(round_.candidates[0], round_.candidates[-1], round_.fixed,
                                     round_.backend_commit))
    for r in rounds:
        size = len(r.candidates)
        print(f"{r.axis} axis ({r.fixed}): {size - 2} candidate(s) between "
              f"{r.candidates[0].label} and {r.candidates[-1].label}; "
              f"at most {bisect_search.most_judged_steps(size)} judged step(s) without skips")
        for c in r.candidates[1:-1]:
            extra = "".join(f" {k}={v}" for k, v in (("date", c.date), ("pr", c.pr)) if v)
            print(f"  {c.label}  {c.spec}{extra}" + (f"  {c.subject}" if c.subject else ""))
        for note in r.notes:
            print(f"  note: {note}")
    if options.commits and round_.axis == "torch" and inner:
        print("then: the PyTorch commits between the two adjacent torches found (git: source builds)")
    return 0


def cmd_bisect(args: argparse.Namespace) -> int:
    if args.turned_red:
        return print_turned_red([p.absolute() for p in (args.runs or [Path("out/runs")])])
    if args.resume:
        state = bisect.load(args.resume)
        if state.state == "finished":
            print(f"ootci bisect: {args.resume} is finished: {state.result.summary if state.result else state.error}")
            return 0 if state.result and state.result.kind == "found" else EXIT_FAILED
        options = options_from(args, state.options)
        options.out = args.resume.absolute().parent
        state.state, state.error, state.finished_at = "running", None, None
        b = bisect.Bisection(options, state, args.resume.absolute())
    else:
        options = options_from(args)
        if args.dry_run:
            state = bisect.BisectRecord(bisect_id="dry-run", backend=options.manifest.name,
                                        started_at=bisect.now(), good=options.good, bad=options.bad)
            return dry_run(bisect.Bisection(options, state, options.out / "dry-run"))
        b, _ = bisect.start(options, ["ootci", "bisect", *sys.argv[2:]])
    print(f"ootci bisect: {b.options.manifest.name}, good {b.options.good}, bad {b.options.bad} "
          f"-> {b.dir}/{bisect.BISECT_NAME}")
    with interrupt_handlers():
        try:
            b.search()
        except (KeyboardInterrupt, Interrupted) as exc:
            name = exc.signame if isinstance(exc, Interrupted) else "SIGINT"
            bisect.finish(b, interrupted=name)
            print(f"ootci: interrupted by {name}; go on with: ootci bisect --resume {b.dir}", file=sys.stderr)
            return EXIT_INTERRUPTED
        except OotciError as exc:
            bisect.finish(b, error=exc.message)
            raise
    bisect.finish(b)
    result = b.state.result
    print(f"ootci bisect: {result.summary if result else 'no result'}")
    if result and result.cause:
        print(f"ootci bisect: cause: {result.cause}")
    for name, url in (result.links.items() if result else ()):
        print(f"ootci bisect: {name}: {url}")
    return 0 if result and result.kind == "found" else EXIT_FAILED
