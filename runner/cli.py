"""`ootci`: the command line. Each subcommand is a module of `runner.commands`."""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from .errors import OotciError

# Subcommand modules, in the order `ootci --help` lists them. Each has
# `register(subparsers)`, which adds its parser and sets `func`.
COMMANDS = [
    "registry",
    "run",
    "torch",
    "verify",
    "test",
    "dashboard",
    "history",
    "summary",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ootci",
        description="Continuous integration for PyTorch's out-of-tree accelerator backends.",
    )
    parser.add_argument("--version", action="version", version=f"ootci {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f".commands.{name}", __package__).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except OotciError as exc:
        print(f"ootci: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("ootci: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
