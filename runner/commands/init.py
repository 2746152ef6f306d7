"""`ootci init [DIR]`: write ci/backend.toml, .github/workflows/ootci.yml and the baseline of a first run
(ci/known-failures.toml) for a backend's repository."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ootci.runner.commands import torch_options, upstream_options
from ootci.runner.core.errors import EXIT_FAILED, UsageError
from ootci.runner.models import SUITES
from ootci.runner.onboarding import first_run, onboard, upstream_proposal
from ootci.runner.stages.report import Reporter

UPSTREAM_TESTS_HELP = ("take PyTorch's test files from DIR (its test/ folder, or a checkout that has one) to collect "
                       "the upstream candidates, instead of fetching them at the torch's commit")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "init", help="onboard a backend's repository: write ci/backend.toml, .github/workflows/ootci.yml and the "
                     "baseline of a first run (ci/known-failures.toml)",
        description="Read what the repository declares (its torch.backends entry point), build and install the "
                    "backend over a torch, probe what its device supports at all, propose PyTorch's test files that "
                    "collect for it, write the manifest and a one-job workflow, then run the suites once and "
                    "record their failures as the backend's known failures (ci/known-failures.toml).")
    p.add_argument("dir", nargs="?", type=Path, default=Path("."), metavar="DIR",
                   help="the repository's root (default: the current directory)")
    p.add_argument("--torch", default=onboard.DEFAULT_TORCH, metavar="SPEC",
                   help=f"the torch to build and probe against, as for ootci run (default {onboard.DEFAULT_TORCH})")
    p.add_argument("--force", action="store_true",
                   help="overwrite ci/backend.toml, .github/workflows/ootci.yml and ci/known-failures.toml")
    p.add_argument("--device", help="the torch device type, when the probe cannot find it (with --no-probe)")
    p.add_argument("--no-probe", dest="probe", action="store_false",
                   help="build nothing; write what the repository declares and --device, the rest to fill in by hand")
    p.add_argument("--pytorch-prs", action="store_true",
                   help="also write .github/workflows/ootci-pytorch-pr.yml: PyTorch pull requests that PyTorch's "
                        "relay dispatches to this repository, tested on this backend")
    p.add_argument("--suites", default=None, metavar="SUITE[,SUITE...]|none",
                   help="the suites init runs once to record the baseline: smoke, integration, upstream (with the "
                        "files it proposes), or none for no run and no baseline (default: all three)")
    upstream_options.add_upstream_tests(p, UPSTREAM_TESTS_HELP)
    torch_options.add_torch_source(p)
    torch_options.add_build(p)
    p.set_defaults(func=cmd_init)


def suites_from(text: str | None) -> tuple[str, ...]:
    if text is None:
        return SUITES
    named = tuple(s.strip() for s in text.split(",") if s.strip())
    if named == ("none",):
        return ()
    unknown = [s for s in named if s not in SUITES]
    if unknown or not named:
        what = f"unknown suite {unknown[0]!r}" if unknown else "no suite named"
        raise UsageError(f"--suites: {what} (known: {', '.join(SUITES)}, or none)")
    return tuple(s for s in SUITES if s in named)


def options_from(args: argparse.Namespace) -> onboard.InitOptions:
    source = torch_options.from_args(args)
    return onboard.InitOptions(repo=args.dir, torch=args.torch, force=args.force, probe=args.probe,
                               device=args.device, index_url=source.index_url, torch_repo=source.torch_repo,
                               jobs=source.jobs, cache=source.cache,
                               pytorch_prs=args.pytorch_prs, suites=suites_from(args.suites),
                               upstream_tests=upstream_options.folder_from(args))


def cmd_init(args: argparse.Namespace) -> int:
    options = options_from(args)
    result = onboard.init(options, Reporter())
    if not result.written:
        print(f"ootci init: nothing written: {result.failure}", file=sys.stderr)
        print(f"  logs: {result.log_dir}", file=sys.stderr)
        print("  Fix that and run `ootci init` again, or give the device and skip the probe:\n"
              "    ootci init --no-probe --device NAME\n"
              "  then fill in capabilities and dtypes in ci/backend.toml by hand.", file=sys.stderr)
        return EXIT_FAILED
    _print_done(result, options)
    beyond = result.first_run.beyond_baseline if result.first_run else []
    return EXIT_FAILED if result.failure or beyond else 0


def _print_done(result: onboard.InitResult, options: onboard.InitOptions) -> None:
    o = result.onboarding
    assert o is not None and result.ref is not None
    for path in result.written:
        print(f"wrote {path.relative_to(o.repo)}")
    print(f"  {o.name}: distribution {o.declared.name}, entry point {o.entry_point}")
    if o.findings is not None:
        capabilities, dtypes = o.findings
        print(f"  device {o.device} (probed), capabilities: "
              f"{', '.join(n for n, f in capabilities.items() if f.works) or 'none'}")
        print(f"  dtypes: {', '.join(n for n, f in dtypes.items() if f.works) or 'none'}")
        skips = onboard.smoke_skips(o)
        if skips:
            print("  the smoke suite will skip what the device does not do:")
            for line in skips:
                print(f"    {line}")
    else:
        print(f"  device {o.device} ({o.device_source})")
    if o.upstream is not None and o.findings is not None:
        for line in upstream_proposal.terminal_lines(o.upstream, o.device):
            print(f"  {line}")
    run = result.first_run
    if run is not None:
        for line in first_run.summary_lines(run, onboard.smoke_tests_by_capability(), o.repo):
            print(f"  {line}")
        if run.beyond_baseline:
            print("ootci init: the first run failed where a baseline of tests cannot help; `ootci run` stays red "
                  "until this is fixed:", file=sys.stderr)
            for line in run.beyond_baseline:
                print(f"  {line}", file=sys.stderr)
    for note in o.probed.notes if o.probed else []:
        print(f"note: {note}", file=sys.stderr)
    if result.failure:
        print(f"ootci init: {o.not_probed}", file=sys.stderr)
        print(f"  logs: {result.log_dir}", file=sys.stderr)
        print("  Fill in capabilities and dtypes in ci/backend.toml by hand (its comments say which), "
              "or fix that and run `ootci init --force`.", file=sys.stderr)
    if not result.ref.is_commit:
        print(f"warning: the workflow uses ootci {result.ref.ref}, a tag, not a commit SHA ({result.ref.source}); "
              "pin it to the commit of that release", file=sys.stderr)
    print("Next:")
    if run is not None:
        given = f" --suites {','.join(options.suites)}" if options.suites != SUITES else ""
        given += f" --upstream-tests {options.upstream_tests}" if options.upstream_tests else ""
        verdict = ("red until what is said above is fixed" if run.beyond_baseline
                   else "green on that baseline: only new failures fail it")
        print(f"  ootci run ci/backend.toml --torch {options.torch}{given}      # {verdict}")
    else:
        print(f"  ootci run ci/backend.toml --torch {options.torch} --suites smoke      # a first run on this machine")
    print("  edit runs-on in .github/workflows/ootci.yml and [ci] runs_on: runners with your device")
    if onboard.PR_WORKFLOW in (p.relative_to(o.repo) for p in result.written):
        print(f"  edit torch-build-runs-on in {onboard.PR_WORKFLOW}; join PyTorch's relay (its allow-list and "
              "GitHub App): ootci's docs/workflows.md, \"Joining PyTorch's relay\"")
    print(f"  git add {' '.join(str(p.relative_to(o.repo)) for p in result.written)} "
          "&& git commit -m 'ci: test the backend with ootci'")
