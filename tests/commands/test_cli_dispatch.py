"""`ootci` imports only the module of the command it runs (runner/cli.py: COMMANDS)."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from ootci.runner import cli
from tests.support.cli import ootci


def registered_by(module: str) -> set[str]:
    """The commands a module of runner.commands registers, on a parser of its own."""
    sub = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(f"ootci.runner.commands.{module}").register(sub)
    return set(sub.choices)


def test_the_table_names_every_command_with_the_module_that_registers_it():
    every = cli.build_parser()._subparsers._group_actions[0].choices
    assert set(cli.COMMANDS) == set(every)
    for module in set(cli.COMMANDS.values()):
        assert registered_by(module) == {c for c, m in cli.COMMANDS.items() if m == module}, module


@pytest.mark.parametrize("argv, modules", [
    (["history", "merge", "--help"], ["history"]),
    (["--registry", "somewhere", "show", "openreg"], ["registry"]),
    (["--registry=somewhere", "cache-key", "openreg"], ["cache_key"]),
    (["--version"], []),
    (["--help"], None),
    (["nope"], None),
    ([], None),
])
def test_a_call_registers_its_own_command_only(argv, modules):
    every = cli.command_modules(None)  # what build_parser() registers: each module once, in order
    assert every == ["init", "registry", "run", "torch", "verify", "test", "expect", "dashboard", "history",
                     "summary", "relay", "bisect", "shards", "cache_key", "perf",
                     "runner_check"]
    assert cli.command_modules(argv) == (every if modules is None else modules)


def imported_commands(*argv: str) -> set[str]:
    """The runner.commands modules a fresh interpreter has imported after parsing argv."""
    code = ("import json, sys\nfrom ootci.runner import cli\ncli.build_parser(sys.argv[1:])\n"
            "print(json.dumps(sorted(m.rsplit('.', 1)[1] for m in sys.modules\n"
            "                        if m.startswith('ootci.runner.commands.'))))")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(out.stdout))


def test_one_command_imports_no_other_commands_module():
    # torch_options is the shared declaration of the torch options, not a command; relay plan
    # takes the matrix entries from the registry command's module (commands/relay.py imports it).
    assert imported_commands("relay", "plan") - {"torch_options", "registry"} == {"relay"}
    assert imported_commands("--version") == set()


def test_the_help_still_lists_every_command_and_each_command_parses_alone():
    listed = ootci("--help").stdout
    for command in cli.COMMANDS:
        assert command in listed, command
    assert ootci("history", "merge", "--help").returncode == 0
    bad = ootci("nope")
    assert bad.returncode == 2 and "invalid choice: 'nope'" in bad.stderr


@pytest.mark.parametrize("argv, command, unknown", [
    (["summary", "--runs", "out"], "ootci summary", "--runs"),
    (["history", "merge", "--bogus", "a", "--into", "b"], "ootci history merge", "--bogus"),
    (["dashboard", "--bogus"], "ootci dashboard", "--bogus"),
    (["list", "extra", "words"], "ootci list", "extra words"),
    (["--bogus"], "ootci", "--bogus"),
])
def test_an_unknown_word_is_refused_with_the_usage_of_the_command_it_was_given_to(argv, command, unknown):
    # A user who guesses an option (`--runs` for summary's OUT) needs that command's options,
    # not the top-level usage that lists only COMMAND.
    bad = ootci(*argv)
    assert bad.returncode == 2
    assert bad.stderr.startswith(f"usage: {command} ["), bad.stderr
    assert bad.stderr.rstrip().endswith(f"\n{command}: error: unrecognized arguments: {unknown}"), bad.stderr


def test_the_chosen_parser_is_the_innermost_command_given():
    parser = cli.build_parser()
    assert cli.chosen_parser(parser, parser.parse_args(["history", "merge", "a", "--into", "b"])).prog \
        == "ootci history merge"
    assert cli.chosen_parser(parser, parser.parse_args(["dashboard"])).prog == "ootci dashboard"
    assert cli.chosen_parser(parser, argparse.Namespace()) is parser
