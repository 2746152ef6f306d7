"""`ootci bisect --axis backend` where the vendor is: a repository onboarded with `ootci init`,
whose manifest says `[source] path = ".."`, bisected over its own git history.

The vendor's package is torch_pyd (tests/fixtures/backends/pyd: a PrivateUse1 device in pure
Python, so it builds in seconds). The planted regression breaks its build (a package listed
that the commit forgot to add), so each step runs only the torch and build stages; only the
good end goes through autoload.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ootci.runner.manifests import manifest as manifest_mod
from ootci.runner.models import BisectRecord, Verdict
from tests.support.bisect_repo import commit, git
from tests.support.cli import ootci

REPO = Path(__file__).resolve().parents[2]
PYD = REPO / "tests" / "fixtures" / "backends" / "pyd"
FIND = '[tool.setuptools.packages.find]\ninclude = ["torch_pyd*"]\n'
# The kernels moved into a package of their own, and the commit forgot the directory.
SPLIT = '[tool.setuptools]\npackages = ["torch_pyd", "torch_pyd_kernels"]\n'


@pytest.mark.slow  # builds the onboarded backend at several commits
def test_a_repository_onboarded_by_init_bisects_its_own_history_to_the_planted_commit(tmp_path, torch_layer):
    repo = tmp_path / "torch-pyd"
    shutil.copytree(PYD, repo, ignore=shutil.ignore_patterns("backend.toml", "__pycache__", "*.egg-info", "build"))
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    init = ootci("init", "--no-probe", "--device", "pyd", "--torch", "2.13.0", cwd=repo, timeout=600)
    assert init.returncode == 0, init.stdout + init.stderr
    assert manifest_mod.load(repo / "ci" / "backend.toml").source.path == ".."
    pyproject = repo / "pyproject.toml"
    assert FIND in pyproject.read_text()
    good = commit(repo, "Import torch_pyd, onboarded with ootci init")
    (repo / "README.md").write_text("torch_pyd: a device in Python.\n")
    commit(repo, "README")
    pyproject.write_text(pyproject.read_text().replace(FIND, SPLIT))
    planted = commit(repo, "Build the kernels as a package of their own")
    (repo / "README.md").write_text("torch_pyd: a device in Python, for torch 2.13.\n")
    commit(repo, "README: the torch it is built for")
    (repo / "scratch.txt").write_text("the vendor's uncommitted work\n")
    status_before = git(repo, "status", "--porcelain")

    out = tmp_path / "bisect"
    result = ootci("bisect", "ci/backend.toml", "--axis", "backend", "--good", good, "--bad", "main",
                   "--torch", "2.13.0", "--suites", "none", "--out", str(out), cwd=repo, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [path] = out.glob("*/bisect.json")
    record = BisectRecord.model_validate_json(path.read_text())
    assert record.predicate.stage == "build"
    [round_] = record.rounds
    assert round_.axis == "backend" and len(round_.candidates) == 4
    assert round_.result.kind == "found"
    assert round_.candidates[round_.result.first_bad].commit == planted
    assert f"torch-pyd broke at torch-pyd@{planted[:10]}" in result.stdout
    assert "Build the kernels as a package of their own" in round_.result.summary
    assert {round_.candidates[s.candidate].commit for s in round_.steps if s.verdict is Verdict.bad} == {planted}
    # Every commit was built from an export in the cache: the vendor's checkout is as it was.
    assert git(repo, "rev-parse", "HEAD") == git(repo, "rev-parse", "main")
    assert git(repo, "status", "--porcelain") == status_before
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    assert SPLIT in pyproject.read_text()


def test_a_path_outside_any_git_work_tree_is_refused_in_one_line(tmp_path):
    repo = tmp_path / "torch-pyd"
    shutil.copytree(PYD, repo, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    result = ootci("bisect", str(repo / "backend.toml"), "--axis", "backend", "--good", "HEAD~1", "--bad", "HEAD",
                   "--torch", "2.13.0", "--suites", "none", "--out", str(tmp_path / "bisect"), timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = [l for l in result.stderr.splitlines() if l.startswith("ootci: ")]
    assert "Traceback" not in result.stderr
    assert f"source.path {repo} is not in a git work tree" in line
