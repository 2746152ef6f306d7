"""`ootci`: the command line. Each subcommand is a module of `runner.commands`."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from ootci.runner import __version__
from ootci.runner.manifests import registry
from ootci.runner.core.errors import OotciError

# Subcommand modules, in the order `ootci --help` lists them. Each has
# `register(subparsers)`, which adds its parser and sets `func`.
COMMANDS = [
    "init",
    "registry",
    "run",
    "torch",
    "verify",
    "test",
    "expect",
    "dashboard",
    "history",
    "summary",
    "relay",
    "bisect",
    "shards",
    "cache_key",
    "perf",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ootci",
        description="Continuous integration for PyTorch's out-of-tree accelerator backends.",
    )
    parser.add_argument("--version", action="version", version=f"ootci {__version__}")
    registry_help = (f"a directory of backend manifests (<dir>/<name>/backend.toml) to register besides "
                     f"the bundled ones; repeatable, and added to ${registry.ENV}")
    parser.add_argument("--registry", action="append", type=Path, default=[], metavar="DIR", help=registry_help)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f".commands.{name}", __package__).register(sub)
    # Also accepted after the subcommand, where users put it (`ootci list --registry DIR`).
    for command in sub.choices.values():
        command.add_argument("--registry", action="append", type=Path, default=[], metavar="DIR",
                             dest="registry_after", help=registry_help)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        registry.add_dirs([*args.registry, *getattr(args, "registry_after", [])])
        return int(args.func(args) or 0)
    except OotciError as exc:
        for line in exc.message.splitlines() or [""]:  # several problems (a manifest's): one a line
            print(f"ootci: {line}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("ootci: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
