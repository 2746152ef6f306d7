"""`ootci bisect --axis backend` where the vendor is: a repository onboarded with `ootci init`,
whose manifest says `[source] path = ".."`, bisected over its own git history.

The vendor's package is torch_pyd (tests/fixtures/backends/pyd: a PrivateUse1 device in pure
Python, so it builds in seconds). The planted regression breaks its build (a package listed
that the commit forgot to add), so each step runs only the torch and build stages; only the
good end goes through autoload.
"""

from __future__ import annotations

import json
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


def onboarded(tmp_path: Path) -> tuple[Path, str, str]:
    """torch_pyd in a repository of its own, onboarded by `ootci init` (`path = ".."`), with four
    commits, the third planting a broken build; (the repository, the good commit, the planted one)."""
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
    return repo, good, planted


@pytest.mark.slow  # builds the onboarded backend at several commits
def test_a_repository_onboarded_by_init_bisects_its_own_history_to_the_planted_commit(tmp_path, torch_layer):
    repo, good, planted = onboarded(tmp_path)
    pyproject = repo / "pyproject.toml"
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
    [line] = [text for text in result.stderr.splitlines() if text.startswith("ootci: ")]
    assert "Traceback" not in result.stderr
    assert f"source.path {repo} is not in a git work tree" in line


def test_a_path_source_in_a_work_tree_records_its_commit_and_whether_it_was_dirty(tmp_path):
    """Issue 43: a run of a path source inside a git work tree recorded no commit, so a vendor's
    nightly could not bisect its own backend from its records, and the page could not say which
    backend commit ran. The build stage records the work tree's HEAD, and whether the directory
    differed from it; build products in it (what the sources' hash leaves out) are no change."""
    from ootci.runner.stages import sources

    repo = tmp_path / "vendor"
    package = repo / "backend"
    package.mkdir(parents=True)
    (package / "setup.py").write_text("print('built')\n")
    (repo / "elsewhere.txt").write_text("not the backend's\n")
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    head = commit(repo, "a backend")
    assert sources.work_tree_commit(package) == (head, False)
    for product in ("build/lib/x.py", "torch_x.egg-info/PKG-INFO", "torch_x/_C.so", "__pycache__/m.pyc"):
        (package / product).parent.mkdir(parents=True, exist_ok=True)
        (package / product).write_text("made by a build\n")
    (repo / "elsewhere.txt").write_text("changed outside the backend's directory\n")
    assert sources.work_tree_commit(package) == (head, False)
    (package / "setup.py").write_text("print('changed, not committed')\n")
    assert sources.work_tree_commit(package) == (head, True)
    git(repo, "checkout", "-q", "--", ".")
    (package / "new_module.py").write_text("x = 1\n")  # untracked: part of what is built
    assert sources.work_tree_commit(package) == (head, True)
    outside = tmp_path / "plain"
    outside.mkdir()
    assert sources.work_tree_commit(outside) is None
    # A tree exported into a cache that lies, ignored, inside some checkout is not that checkout's.
    (repo / ".gitignore").write_text(".cache/\n")
    commit(repo, "a cache beside it")
    exported = repo / ".cache" / "ootci" / "src" / "backend-0123"
    exported.mkdir(parents=True)
    (exported / "setup.py").write_text("print('built')\n")
    assert sources.work_tree_commit(exported) is None


@pytest.mark.slow  # two runs of the onboarded backend, then a bisection from their records
def test_a_vendors_nightly_bisects_its_own_backend_from_two_run_records(tmp_path, torch_layer):
    """Issue 43, as a new user tried it: `ootci bisect ci/backend.toml --good RUN --bad RUN` stopped at
    once, "a run of ... built from a directory records no commit". The two nightly records now say
    which commit each built (the bad one from a dirty tree, which the bisection says), and the
    bisection walks the commits between them to the planted one."""
    repo, good, planted = onboarded(tmp_path)
    runs = tmp_path / "runs"
    git(repo, "checkout", "-q", good)
    green = ootci("run", "ci/backend.toml", "--torch", "2.13.0", "--suites", "none", "--trigger", "nightly",
                  "--out", str(runs / "good"), cwd=repo, timeout=600)
    assert green.returncode == 0, green.stdout[-3000:] + green.stderr[-3000:]
    git(repo, "checkout", "-q", "main")
    (repo / "scratch.txt").write_text("the vendor's uncommitted work\n")
    red = ootci("run", "ci/backend.toml", "--torch", "2.13.0", "--suites", "none", "--trigger", "nightly",
                "--out", str(runs / "bad"), cwd=repo, timeout=600)
    assert red.returncode == 1, red.stdout[-3000:] + red.stderr[-3000:]
    good_record, bad_record = (json.loads(next((runs / end).glob("*/record.json")).read_text())
                               for end in ("good", "bad"))
    builds = [{s["name"]: s for s in r["stages"]}["build"]["data"] for r in (good_record, bad_record)]
    assert [(b["commit"], b["dirty"]) for b in builds] == [(good, False), (git(repo, "rev-parse", "main"), True)]

    out = tmp_path / "bisect"
    result = ootci("bisect", "ci/backend.toml", "--good", good_record["run_id"], "--bad", bad_record["run_id"],
                   "--runs", str(runs), "--torch", "2.13.0", "--suites", "none", "--out", str(out), cwd=repo,
                   timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"uncommitted changes on top of {git(repo, 'rev-parse', 'main')[:10]}" in result.stdout + result.stderr
    [path] = out.glob("*/bisect.json")
    [round_] = BisectRecord.model_validate_json(path.read_text()).rounds
    assert round_.axis == "backend" and round_.result.kind == "found"
    assert round_.candidates[round_.result.first_bad].commit == planted
