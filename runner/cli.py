"""`ootci`: the command line. Each subcommand is a module of `runner.commands`."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from ootci.runner import __version__
from ootci.runner.core.errors import OotciError
from ootci.runner.manifests import registry

# Each command, and the module of `runner.commands` that registers it (`register(subparsers)`
# adds its parser and sets `func`), in the order `ootci --help` lists them. A call imports only
# its own command's module: importing all of them, and what they import, cost more than half of
# the interpreter's start (0.17 of 0.34 s measured for `ootci --version`), and CI calls ootci
# at every step. `ootci --help`, no command, or an unknown one still registers every module.
COMMANDS = {
    "init": "init",
    "list": "registry",
    "show": "registry",
    "schema": "registry",
    "matrix": "registry",
    "run": "run",
    "torch": "torch",
    "verify": "verify",
    "test": "test",
    "expect": "expect",
    "dashboard": "dashboard",
    "history": "history",
    "summary": "summary",
    "relay": "relay",
    "bisect": "bisect",
    "shards": "shards",
    "cache-key": "cache_key",
    "perf": "perf",
    "runner-check": "runner_check",
}


def command_modules(argv: list[str] | None) -> list[str]:
    """The modules of `runner.commands` a parser for argv needs: all of them for None (every
    command), the named command's own, none for a bare `--version`."""
    every = list(dict.fromkeys(COMMANDS.values()))
    if argv is None:
        return every
    words = iter(argv)
    for word in words:
        if word == "--registry":
            next(words, None)  # its value
        elif word.startswith("--registry="):
            continue
        elif word == "--version":
            return []
        elif word.startswith("-"):
            return every  # -h, or an option argparse will refuse with the full usage
        else:
            return [COMMANDS[word]] if word in COMMANDS else every
    return every  # no command: the full help


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of `ootci`: for argv's command alone when given, else for every command."""
    parser = argparse.ArgumentParser(
        prog="ootci",
        description="Continuous integration for PyTorch's out-of-tree accelerator backends.",
    )
    parser.add_argument("--version", action="version", version=f"ootci {__version__}")
    registry_help = (f"a directory of backend manifests (<dir>/<name>/backend.toml) to register besides "
                     f"the bundled ones; repeatable, and added to ${registry.ENV}")
    parser.add_argument("--registry", action="append", type=Path, default=[], metavar="DIR", help=registry_help)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in command_modules(argv):
        importlib.import_module(f".commands.{name}", __package__).register(sub)
    # Also accepted after the subcommand, where users put it (`ootci list --registry DIR`).
    for command in sub.choices.values():
        command.add_argument("--registry", action="append", type=Path, default=[], metavar="DIR",
                             dest="registry_after", help=registry_help)
    return parser


def chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the innermost (sub)command args chose (`history merge`'s for `ootci history
    merge ...`), or parser itself where none was chosen."""
    while True:
        subs = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = subs.choices.get(getattr(args, subs.dest, None) or "") if subs else None
        if chosen is None:
            return parser
        parser = chosen


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(argv)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # argparse hands a subcommand's unknown words up to `ootci` itself, whose usage lists only
        # COMMAND: refuse them with the usage of the command they were given to, which names its options.
        chosen_parser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
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
