"""`ootci init`'s options reach the run its stages make, as `ootci run`'s do (no build here)."""

from __future__ import annotations

from ootci.runner import cli
from ootci.runner.commands import init
from ootci.runner.onboarding import onboard
from ootci.runner.stages.report import Reporter
from ootci.runner.torch_supply import torchspec

FORK = "https://github.com/acme/pytorch"


def test_torch_repo_names_the_fork_a_git_spec_is_built_from(tmp_path):
    args = cli.build_parser().parse_args(["init", str(tmp_path), "--torch", "git:main", "--torch-repo", FORK,
                                          "--cache", str(tmp_path / "cache")])
    options = init.options_from(args)
    assert options.torch_repo == FORK
    ctx = onboard.run_context(tmp_path, torchspec.parse(options.torch), options, Reporter(summary_path=""))
    assert ctx.options.torch_repo == FORK and ctx.options.torch == "git:main"


def test_init_and_run_declare_torch_repo_alike():
    parser = cli.build_parser()
    helps = {}
    for command in ("init", "run"):
        sub = parser._subparsers._group_actions[0].choices[command]
        helps[command] = next(a.help for a in sub._actions if "--torch-repo" in a.option_strings)
    assert helps["init"] == helps["run"]


def test_without_torch_repo_the_default_repository_is_used(tmp_path):
    options = init.options_from(cli.build_parser().parse_args(["init", str(tmp_path)]))
    assert options.torch_repo is None


TORCH_COMMANDS = {  # every command that gets or builds a torch, with what it needs to get as far as --jobs
    "run": ["run", "openreg", "--torch", "2.13.0"],
    "init": ["init", "."],
    "bisect": ["bisect", "openreg", "--good", "2.13.0", "--bad", "2.14.0"],
    "torch": ["torch", "2.13.0", "--dry-run"],
}


def test_every_torch_command_declares_the_torch_source_options_once_with_the_same_meaning():
    """--index-url and --torch-repo come from runner/commands/torch_options.py for run, init,
    bisect, cache-key and torch: none of them can lose one again."""
    choices = cli.build_parser()._subparsers._group_actions[0].choices
    for command in ("run", "init", "bisect", "cache-key", "torch"):
        options = {o for a in choices[command]._actions for o in a.option_strings}
        assert {"--index-url", "--torch-repo"} <= options, command
    for command in ("run", "init", "bisect"):
        options = {o for a in choices[command]._actions for o in a.option_strings}
        assert {"--jobs", "--cache"} <= options, command


def test_a_bad_jobs_is_the_same_one_line_for_every_command_that_builds(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for command, argv in TORCH_COMMANDS.items():
        assert cli.main([*argv, "--jobs", "0"]) == 2, command
        assert capsys.readouterr().err == "ootci: --jobs 0: must be at least 1\n", command
