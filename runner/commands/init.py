"""`ootci init [DIR]`: write ci/backend.toml and .github/workflows/ootci.yml for a backend's repository."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ootci.runner.onboarding import onboard
from ootci.runner.commands import torch_options
from ootci.runner.core.errors import EXIT_FAILED
from ootci.runner.stages.report import Reporter


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "init", help="onboard a backend's repository: write ci/backend.toml and .github/workflows/ootci.yml",
        description="Read what the repository declares (its torch.backends entry point), build and install the "
                    "backend over a torch, probe its device, and write the manifest and a one-job workflow.")
    p.add_argument("dir", nargs="?", type=Path, default=Path("."), metavar="DIR",
                   help="the repository's root (default: the current directory)")
    p.add_argument("--torch", default=onboard.DEFAULT_TORCH, metavar="SPEC",
                   help=f"the torch to build and probe against, as for ootci run (default {onboard.DEFAULT_TORCH})")
    p.add_argument("--force", action="store_true", help="overwrite ci/backend.toml and .github/workflows/ootci.yml")
    p.add_argument("--device", help="the torch device type, when the probe cannot find it (with --no-probe)")
    p.add_argument("--no-probe", dest="probe", action="store_false",
                   help="build nothing; write what the repository declares and --device, the rest to fill in by hand")
    p.add_argument("--pytorch-prs", action="store_true",
                   help="also write .github/workflows/ootci-pytorch-pr.yml: PyTorch pull requests that PyTorch's "
                        "relay dispatches to this repository, tested on this backend")
    torch_options.add_torch_source(p)
    torch_options.add_build(p)
    p.set_defaults(func=cmd_init)


def options_from(args: argparse.Namespace) -> onboard.InitOptions:
    source = torch_options.from_args(args)
    return onboard.InitOptions(repo=args.dir, torch=args.torch, force=args.force, probe=args.probe,
                               device=args.device, index_url=source.index_url, torch_repo=source.torch_repo,
                               jobs=source.jobs, cache=source.cache,
                               pytorch_prs=args.pytorch_prs)


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
    _print_done(result, args.torch)
    return EXIT_FAILED if result.failure else 0


def _print_done(result: onboard.InitResult, torch: str) -> None:
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
    print(f"  ootci run ci/backend.toml --torch {torch} --suites smoke      # a first run on this machine")
    print("  edit runs-on in .github/workflows/ootci.yml and [ci] runs_on: runners with your device")
    if onboard.PR_WORKFLOW in (p.relative_to(o.repo) for p in result.written):
        print(f"  edit torch-build-runs-on in {onboard.PR_WORKFLOW}; join PyTorch's relay (its allow-list and "
              "GitHub App): ootci's docs/workflows.md, \"Joining PyTorch's relay\"")
    print(f"  git add {' '.join(str(p.relative_to(o.repo)) for p in result.written)} "
          "&& git commit -m 'ci: test the backend with ootci'")
