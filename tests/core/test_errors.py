"""Every error a user can see is one class in runner/core/errors.py, with an exit code the table lists once."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from ootci.runner.core import errors

REPO = Path(__file__).resolve().parents[2]
ERRORS_PY = REPO / "runner" / "core" / "errors.py"


def every_subclass(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *every_subclass(sub)]
    return found


def ootci_errors() -> list[type[errors.OotciError]]:
    return [errors.OotciError, *every_subclass(errors.OotciError)]


def test_every_exit_code_is_in_the_table_and_the_table_has_no_other():
    used = {cls.exit_code for cls in ootci_errors()} | {0, errors.EXIT_FAILED, errors.EXIT_INTERRUPTED}
    assert set(errors.EXIT_CODES) == used


def test_a_code_is_shared_only_where_the_table_says_why():
    # A class that declares its own exit code owns it; a subclass that only refines its parent's
    # meaning (TorchWheelNotFound is a TorchSpecError) inherits the code and declares nothing.
    owners = defaultdict(set)
    for cls in ootci_errors():
        if "exit_code" in vars(cls):
            owners[cls.exit_code].add(cls.__name__)
    for code, names in owners.items():
        names.discard("OotciError")  # the base's default is UsageError's code
        if len(names) > 1:
            described = errors.EXIT_CODES[code]
            assert all(name in described for name in names), f"exit code {code} is shared by {sorted(names)}"
    assert all(cls.__name__ in errors.EXIT_CODES[cls.exit_code]
               for cls in ootci_errors() if cls is not errors.OotciError)


def _error_names() -> set[str]:
    return {cls.__name__ for cls in ootci_errors()}


def test_no_ootci_error_is_defined_outside_errors_py():
    """The source, not the imported classes: a class in a module nothing imports counts too."""
    names = _error_names()
    elsewhere = []
    for path in sorted((REPO / "runner").rglob("*.py")) + sorted((REPO / "dashboard").rglob("*.py")):
        if path == ERRORS_PY:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases}
            if bases & names:
                elsewhere.append(f"{path.relative_to(REPO)}: {node.name}")
    assert elsewhere == []


def test_every_error_class_is_defined_in_errors_py():
    defined = {node.name for node in ast.walk(ast.parse(ERRORS_PY.read_text())) if isinstance(node, ast.ClassDef)}
    assert _error_names() <= defined


def test_a_git_failure_names_the_command_and_what_git_said():
    failed = errors.GitError("rev-parse", "/repo", "fatal: bad revision 'x'", 128)
    assert failed.message == "git rev-parse in /repo: fatal: bad revision 'x'"
    slow = errors.GitError("log", None, "took longer than 600 s")
    assert slow.message == "git log took longer than 600 s"


def test_git_raises_one_git_error_with_its_stderr(tmp_path):
    from ootci.runner.core import git

    try:
        git.git(tmp_path, "rev-parse", "--verify", "no-such-ref", config=[f"safe.directory={tmp_path}"], timeout=30)
    except errors.GitError as exc:
        assert exc.message.startswith(f"git rev-parse in {tmp_path}: fatal: ")
        assert exc.returncode == 128
    else:
        raise AssertionError("git rev-parse of a missing ref in no repository succeeded")
