"""Source builds (git:REF, pr:N) against a real local git repository.

The repository stands in for pytorch/pytorch: a few commits on main, a release branch,
an annotated tag, and pull request refs that no branch holds (as on GitHub), one with
a merge ref and one without. Cloning, fetching and checking out are real git; the
"build" is the same pip command a real one runs, on a tiny in-tree build backend
(tests/support/fake_pytorch) that stamps the commit into torch.version.git_version.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ootci.runner.core.errors import PackageIndexError, TorchBuildError, TorchSpecError
from ootci.runner.torch_supply import envs, torch_acquire, torch_source, torchspec

REPO = Path(__file__).resolve().parents[2]
OOTCI = REPO / ".venv" / "bin" / "ootci"
FAKE_PYTORCH = REPO / "tests" / "support" / "fake_pytorch"
GIT_ENV = {"GIT_AUTHOR_NAME": "ootci test", "GIT_AUTHOR_EMAIL": "test@ootci.invalid",
           "GIT_COMMITTER_NAME": "ootci test", "GIT_COMMITTER_EMAIL": "test@ootci.invalid",
           "GIT_CONFIG_NOSYSTEM": "1"}


BROKEN_BUILD = """

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError("simulated compile error in aten/src/ATen/native/Foo.cpp")
"""


def git(repo: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, **GIT_ENV), check=True)
    return result.stdout.strip()


def commit_file(repo: Path, name: str, text: str, message: str) -> str:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> dict:
    """A repository shaped like pytorch/pytorch on GitHub; returns its path and commits."""
    repo = tmp_path_factory.mktemp("upstream") / "pytorch"
    shutil.copytree(FAKE_PYTORCH, repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "build files")
    first = commit_file(repo, "STATE", "first\n", "first")
    git(repo, "tag", "-a", "v0.1", "-m", "release 0.1")
    git(repo, "branch", "release/0.1")
    second = commit_file(repo, "STATE", "second\n", "second")
    # Pull request 7: a commit on a fork branch, visible only as refs/pull/7/head, and
    # GitHub's test merge of it into main as refs/pull/7/merge.
    git(repo, "checkout", "-q", "-b", "fork", first)
    pr_head = commit_file(repo, "PR", "pull request 7\n", "PR 7")
    git(repo, "checkout", "-q", "--detach", second)
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge PR 7 into main", pr_head)
    pr_merge = git(repo, "rev-parse", "HEAD")
    # Pull request 8 has no merge ref (a conflicting PR).
    git(repo, "checkout", "-q", "-b", "fork8", first)
    pr8_head = commit_file(repo, "PR", "pull request 8\n", "PR 8")
    # Pull request 9 breaks the build.
    git(repo, "checkout", "-q", "-b", "fork9", second)
    backend = (repo / "fake_torch_backend.py").read_text() + BROKEN_BUILD
    pr9_head = commit_file(repo, "fake_torch_backend.py", backend, "PR 9")
    git(repo, "checkout", "-q", "main")
    git(repo, "update-ref", "refs/pull/7/head", pr_head)
    git(repo, "update-ref", "refs/pull/9/head", pr9_head)
    git(repo, "update-ref", "refs/pull/7/merge", pr_merge)
    git(repo, "update-ref", "refs/pull/8/head", pr8_head)
    git(repo, "branch", "-q", "-D", "fork", "fork8", "fork9")
    return {"path": repo, "url": str(repo), "first": first, "second": second, "pr_head": pr_head,
            "pr_merge": pr_merge, "pr8_head": pr8_head, "pr9_head": pr9_head}


@pytest.fixture
def cache(tmp_path) -> Path:
    return tmp_path / "cache"


def test_dry_run_of_a_pull_request_lists_every_command_and_touches_nothing(upstream, cache):
    plan = torch_acquire.plan(torchspec.parse("pr:7"), dry_run=True, torch_repo=upstream["url"], cache=cache,
                              jobs=3)
    layout = torch_source.Layout(cache, upstream["url"], sys.executable)
    merge = upstream["pr_merge"]
    assert plan.commit == merge
    assert plan.key == f"git:{merge}"
    assert plan.source == f"{upstream['url']} refs/pull/7/merge @ {merge}"
    venv_python = layout.build_venv / "bin" / "python"
    wheel_dir = cache / "wheels" / "source" / merge
    ccache = (f" CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_DIR={cache}/ccache"
              if shutil.which("ccache") else "")
    assert plan.steps == [
        f"source build of {upstream['url']} refs/pull/7/merge at commit {merge} "
        f"(pull request 7 merged into its base; head {upstream['pr_head']})",
        f"clone the repository (bare, reused by later builds): git clone --bare -- {upstream['url']} {layout.mirror}",
        f"fetch refs/pull/7/merge: git -C {layout.mirror} fetch --no-tags --no-auto-gc origin "
        "+refs/pull/7/merge:refs/pull/7/merge",
        f"create the build checkout (shares the clone's objects): git clone --shared --no-checkout {layout.mirror} "
        f"{layout.checkout}",
        f"check out the commit: git -C {layout.checkout} checkout --detach --force {merge}",
        f"sync submodule URLs: git -C {layout.checkout} submodule sync --recursive",
        f"fetch submodules: git -C {layout.checkout} submodule update --init --recursive --jobs=3",
        f"create the build venv: {sys.executable} -m venv {layout.build_venv}",
        f"install PyTorch's build requirements: cd {layout.checkout} && {venv_python} -m pip install "
        "--disable-pip-version-check -r requirements.txt",
        f"build the torch wheel: cd {layout.checkout} && PATH={layout.build_venv}/bin:$PATH USE_CUDA=0 USE_ROCM=0 "
        f"BUILD_TEST=0 MAX_JOBS=3{ccache} {venv_python} -m pip wheel --no-build-isolation --no-deps "
        f"--disable-pip-version-check -v -w {wheel_dir} .",
    ]
    assert plan.install_args == [str(wheel_dir / "torch-<version>.whl")]
    assert not cache.exists()


def test_a_pull_request_without_merge_ref_is_built_from_its_head(upstream, cache):
    plan = torch_acquire.plan(torchspec.parse("pr:8"), dry_run=True, torch_repo=upstream["url"], cache=cache)
    assert plan.commit == upstream["pr8_head"]
    assert "refs/pull/8/head" in plan.source
    assert "no merge ref" in plan.steps[0]


def test_checkouts_land_on_the_right_commit_and_reuse_the_clone(upstream, cache):
    def checkout(raw: str) -> tuple[str, torch_source.SourcePlan]:
        source_plan = torch_source.plan_source(torchspec.parse(raw), repo_url=upstream["url"], cache=cache)
        return torch_source.checkout(source_plan, log=cache / "git.log"), source_plan

    commit, first_plan = checkout("pr:7")
    work = first_plan.layout.checkout
    assert commit == upstream["pr_merge"] == git(work, "rev-parse", "HEAD")
    assert (work / "PR").read_text() == "pull request 7\n" and (work / "STATE").read_text() == "second\n"
    assert [c.role for c in first_plan.commands][:3] == ["new-mirror", "mirror", "new-checkout"]

    commit, plan = checkout("git:release/0.1")
    assert commit == upstream["first"] and not (work / "PR").exists()
    # The bare clone and the checkout already exist: only fetches and a checkout now.
    assert [c.role for c in plan.commands][:2] == ["mirror", "checkout"]

    assert checkout("git:v0.1")[0] == upstream["first"]  # annotated tag -> its commit
    assert checkout("git:main")[0] == upstream["second"]
    assert checkout(f"git:{upstream['pr_head'][:9]}")[0] == upstream["pr_head"]  # known after fetching pr:7
    assert checkout(f"git:{upstream['second']}")[0] == upstream["second"]
    assert (work / "STATE").read_text() == "second\n"
    # Pull request refs are fetched one by one, never all of them.
    mirror_refs = git(first_plan.layout.mirror, "for-each-ref", "--format=%(refname)", "refs/pull")
    assert mirror_refs.splitlines() == ["refs/pull/7/merge"]
    assert "$ git -C" in (cache / "git.log").read_text()


@pytest.mark.parametrize(("raw", "error", "text"), [
    ("pr:99", TorchSpecError, "pull request 99 not found at {url} (no refs/pull/99/head)"),
    ("git:no-such-branch", TorchSpecError, "git ref 'no-such-branch' not found at {url}: not a branch, tag or commit"),
])
def test_unknown_refs_are_spec_errors(upstream, cache, raw, error, text):
    with pytest.raises(error) as info:
        torch_acquire.plan(torchspec.parse(raw), dry_run=True, torch_repo=upstream["url"], cache=cache)
    assert info.value.message == text.format(url=upstream["url"])


def test_an_unreachable_repository_is_reported_via_the_cli(tmp_path):
    missing = tmp_path / "no-repo"
    result = subprocess.run([OOTCI, "torch", "git:main", "--torch-repo", str(missing), "--dry-run"],
                            capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, OOTCI_CACHE=str(tmp_path / "cache")))
    assert result.returncode == PackageIndexError.exit_code
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ootci: cannot read torch repository {missing}: ")


@pytest.fixture(scope="module")
def build_cache(tmp_path_factory) -> Path:
    """One cache for the build tests, so the build venv is made once."""
    return tmp_path_factory.mktemp("build") / "cache"


@pytest.mark.slow
def test_build_produces_a_wheel_whose_git_version_is_the_commit(upstream, build_cache, tmp_path):
    """ootci torch pr:7 --out dist/, as the build-torch workflow runs it, then import the result."""
    cache, dist = build_cache, tmp_path / "dist"
    env = dict(os.environ, OOTCI_CACHE=str(cache), OOTCI_TORCH_REPO=upstream["url"])
    result = subprocess.run([OOTCI, "torch", "pr:7", "--out", str(dist), "--jobs", "2", "--json"],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    merge = upstream["pr_merge"]
    wheel_name = f"torch-0.1.0+git{merge[:7]}-py3-none-any.whl"
    assert plan["commit"] == merge and plan["key"] == f"git:{merge}"
    assert plan["install_args"] == [str(cache / "wheels" / "source" / merge / wheel_name)]
    assert plan["placed"] == str(dist / wheel_name)

    target = envs.create_venv(tmp_path / "target")
    installed = subprocess.run([str(target.python), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                                plan["placed"]], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    info = envs.torch_info(target.python)
    assert (info["version"], info["git_version"]) == (f"0.1.0+git{merge[:7]}", merge)
    assert info["dist_version"] == f"0.1.0+git{merge[:7]}"
    seen = json.loads(subprocess.run(
        [str(target.python), "-c", "import importlib.resources as r; print(r.files('torch').joinpath("
                                   "'build_env.json').read_text())"],
        capture_output=True, text=True, timeout=60, check=True).stdout)
    assert seen["USE_CUDA"] == "0" and seen["BUILD_TEST"] == "0" and seen["MAX_JOBS"] == "2"
    if shutil.which("ccache"):
        assert seen["CMAKE_CXX_COMPILER_LAUNCHER"] == "ccache"
        assert seen["CCACHE_DIR"] == str(cache / "ccache")

    # Same commit again: the cached wheel is reused, nothing is fetched or built.
    again = subprocess.run([OOTCI, "torch", "pr:7", "--json"], capture_output=True, text=True, timeout=120,
                           env=env)
    assert again.returncode == 0, again.stderr
    again_plan = json.loads(again.stdout)
    assert again_plan["install_args"] == plan["install_args"]
    assert again_plan["commands"] == []
    assert any(step.startswith("reuse the wheel already built") for step in again_plan["steps"])


@pytest.mark.slow
def test_a_failing_build_is_one_line_with_its_root_cause(upstream, build_cache):
    with pytest.raises(TorchBuildError) as info:
        torch_acquire.plan(torchspec.parse("pr:9"), torch_repo=upstream["url"], cache=build_cache)
    error = info.value
    log = build_cache / "logs" / "torch-source-pr-9.log"
    assert error.exit_code == 1
    assert error.message == ("source build: build the torch wheel failed: RuntimeError: simulated compile error in "
                             f"aten/src/ATen/native/Foo.cpp (log: {log})")
    assert error.cause.exception_type == "RuntimeError" and error.result.returncode != 0
    assert "simulated compile error" in log.read_text()
    assert not list((build_cache / "wheels" / "source" / upstream["pr9_head"]).glob("*"))
