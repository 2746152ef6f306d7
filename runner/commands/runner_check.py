"""`ootci runner-check`: the first step of a PR run's job on a self-hosted runner.

A runner that is not ephemeral, or that reaches the Docker socket, lets the PR's code reach what
the trusted runs after it use (runner/core/runner_host.py says how). The job stops here with one
line saying so, before any PR code runs, unless the caller passed --allow-pr-on-shared-runner
(backend.yml's input of that name): then the line is a warning and the job goes on. A trusted run,
or a GitHub-hosted runner, has nothing to check.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ootci.runner.core import runner_host
from ootci.runner.core.errors import TargetEnvironmentError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runner-check", help="refuse a PR run on a self-hosted runner that is not ephemeral or "
                                            "reaches the Docker socket")
    p.add_argument(f"--{runner_host.ALLOW_INPUT}", dest="allow", action="store_true",
                   help="go on anyway, with a warning: the vendor accepts that the PR's code can reach what the "
                        "trusted runs on this runner use")
    p.add_argument("--docker-socket", type=Path, default=runner_host.DOCKER_SOCKET, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_runner_check)


def cmd_runner_check(args: argparse.Namespace) -> int:
    result = runner_host.check(docker_socket=args.docker_socket)
    if not result.checked:
        print("ootci: runner check: nothing to check (a trusted run, or a GitHub-hosted runner)")
        return 0
    if result.safe:
        print("ootci: runner check: an ephemeral runner without a Docker socket")
        return 0
    name = os.environ.get("RUNNER_NAME", "")
    if args.allow:
        print(f"::warning::{runner_host.refusal(result, name, allowed=True)}")
        return 0
    raise TargetEnvironmentError(runner_host.refusal(result, name))
