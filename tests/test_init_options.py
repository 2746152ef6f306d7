"""`ootci init`'s options reach the run its stages make, as `ootci run`'s do (no build here)."""

from __future__ import annotations

from ootci.runner import cli
from ootci.runner.onboarding import onboard
from ootci.runner.torch_supply import torchspec
from ootci.runner.commands import init
from ootci.runner.stages.report import Reporter

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
