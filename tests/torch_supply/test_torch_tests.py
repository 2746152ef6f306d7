"""Where the upstream suite's files come from: PyTorch's test/ at the torch's commit, fetched for
real with git over file:// from a repository posing as PyTorch (tests/support/fake_upstream.py)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from ootci.runner.core.errors import UpstreamTestsError, UpstreamUnreachable
from ootci.runner.torch_supply import torch_source, torch_tests
from tests.support import fake_upstream


@pytest.fixture(scope="module")
def pytorch(tmp_path_factory) -> fake_upstream.FakePyTorch:
    return fake_upstream.make_repo(tmp_path_factory.mktemp("pytorch") / "pytorch")


@pytest.mark.parametrize("version, git_version, ref", [
    ("2.13.0+cpu", "cf30153c4c131c8164ee7798e5022d810682e2cb", "cf30153c4c131c8164ee7798e5022d810682e2cb"),
    ("2.13.0", "Unknown", "v2.13.0"),
    ("2.14.0+cu130", None, "v2.14.0"),
    ("2.15.0rc2", "", "v2.15.0rc2"),
])
def test_the_files_are_taken_at_the_torchs_commit_else_its_release_tag(version, git_version, ref):
    assert torch_tests.torch_ref(version, git_version) == ref


@pytest.mark.parametrize("version", ["2.16.0.dev20261122+cpu", "2.16.0a0+gitfeedfee", None])
def test_a_torch_with_neither_commit_nor_release_tag_is_refused_in_one_line(version):
    with pytest.raises(UpstreamTestsError) as refused:
        torch_tests.torch_ref(version, "Unknown")
    assert "records no commit" in refused.value.message and "--upstream-tests DIR" in refused.value.message
    assert "\n" not in refused.value.message


def test_only_test_is_fetched_at_the_commit_and_kept_for_the_next_run(pytorch, tmp_path):
    got = torch_tests.fetch(pytorch.url, pytorch.first, tmp_path / "cache", torch_commit=pytorch.first)
    assert (got.commit, got.origin, got.own_commit, got.repository) == (pytorch.first, "fetched", True, pytorch.url)
    checkout = got.test_dir.parent
    assert sorted(p.name for p in checkout.iterdir() if p.name != ".git") == [torch_tests.MARKER, "test"]
    assert (got.test_dir / fake_upstream.OPS).read_text() == fake_upstream.ops_file(second=False)
    # No torch/ and no root file of the repository: nothing there can shadow the installed torch.
    assert not (checkout / "torch").exists() and not (checkout / "setup.py").exists()
    shallow = subprocess.run(["git", "-C", str(checkout), "rev-list", "--count", "HEAD"], capture_output=True,
                             text=True, check=True)
    assert shallow.stdout.strip() == "1"
    # The next run of any backend on this torch finds it in the cache: the repository is not asked.
    moved = pytorch.root.with_name("gone")
    pytorch.root.rename(moved)
    try:
        again = torch_tests.fetch(pytorch.url, pytorch.first, tmp_path / "cache", torch_commit=pytorch.first)
    finally:
        moved.rename(pytorch.root)
    assert again == got


def test_a_release_without_commit_is_fetched_at_its_tag(pytorch, tmp_path):
    got = torch_tests.for_torch(spec="2.13.0", version="2.13.0", git_version="Unknown", cache=tmp_path,
                                torch_repo=pytorch.url)
    assert (got.ref, got.commit, got.own_commit) == ("v2.13.0", pytorch.first, True)
    assert "(v2.13.0)" in got.describe()


def test_a_source_build_takes_test_from_its_own_mirror_at_the_commit_it_built(pytorch, tmp_path):
    repo = "https://example.invalid/pytorch/pytorch"  # never asked: the mirror has the commit
    mirror = torch_source.Layout(tmp_path, repo, "").mirror
    mirror.parent.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", "--mirror", str(pytorch.root), str(mirror)], check=True)
    got = torch_tests.for_torch(spec="pr:1234", version="2.16.0a0+git" + pytorch.second[:7],
                                git_version=pytorch.second, cache=tmp_path, torch_repo=repo)
    assert (got.origin, got.commit, got.own_commit) == ("source build", pytorch.second, True)
    assert "test_new_at_second_commit" in (got.test_dir / fake_upstream.OPS).read_text()


def test_a_fetch_that_fails_names_the_url_and_the_commit(pytorch, tmp_path):
    missing = "1" * 40
    with pytest.raises(UpstreamTestsError) as failed:
        torch_tests.fetch(pytorch.url, missing, tmp_path, torch_commit=missing)
    assert not isinstance(failed.value, UpstreamUnreachable)
    assert failed.value.message.startswith(f"cannot fetch PyTorch's test files at {missing} from {pytorch.url}: ")
    with pytest.raises(UpstreamUnreachable) as offline:
        torch_tests.fetch("https://pytorch.invalid/pytorch", missing, tmp_path, torch_commit=missing)
    assert "cannot be reached" in offline.value.message
    assert not list((tmp_path / "upstream-tests").glob("*/*.part-*")), "a failed fetch leaves nothing half-made"


def test_a_given_folder_says_which_commit_it_holds_and_whether_it_is_the_torchs(pytorch, tmp_path):
    clean = torch_tests.given(pytorch.root, torch_commit=pytorch.second)
    assert (clean.test_dir, clean.commit, clean.changed, clean.own_commit) == (
        pytorch.root / "test", pytorch.second, False, True)
    other = torch_tests.given(pytorch.root / "test", torch_commit=pytorch.first)
    assert other.commit == pytorch.second and not other.own_commit
    assert "not the torch's own commit" in other.describe()
    plain = tmp_path / "copies"
    shutil.copytree(pytorch.root / "test", plain)
    unknown = torch_tests.given(plain, torch_commit=pytorch.second)
    assert (unknown.commit, unknown.own_commit) == (None, False)
    assert "of an unknown commit" in unknown.describe()
    patched = tmp_path / "patched"
    subprocess.run(["git", "clone", "-q", str(pytorch.root), str(patched)], check=True)
    (patched / "test" / fake_upstream.OPS).write_text("# patched\n")
    changed = torch_tests.given(patched, torch_commit=pytorch.second)
    assert (changed.commit, changed.changed, changed.own_commit) == (pytorch.second, True, False)
    assert "with local changes" in changed.describe()
    fetched = torch_tests.fetch(pytorch.url, pytorch.first, tmp_path / "cache", torch_commit=None)
    handed_on = torch_tests.given(fetched.test_dir, torch_commit=pytorch.first)
    assert (handed_on.commit, handed_on.own_commit) == (pytorch.first, True), "a folder ootci fetched says its commit"


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@e", *args], check=True,
                   capture_output=True)


def test_a_folder_inside_another_work_tree_is_that_repositorys_commit_only_where_it_tracks_the_files(
        pytorch, tmp_path):
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "src" / "app.py").write_text("print('not PyTorch')\n")
    (work / ".gitignore").write_text("pytorch-tests/\n")
    _git(work, "init", "-q", "-b", "main")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "other")
    copies = work / "pytorch-tests"
    shutil.copytree(pytorch.root / "test", copies)
    inside = torch_tests.given(copies, torch_commit=pytorch.second)
    assert (inside.commit, inside.changed, inside.own_commit) == (None, False, False)
    assert "of an unknown commit" in inside.describe()
    # Tracked files with an ignored test file beside them: the commit, with changes of its own; byte code is none.
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(pytorch.root), str(clone)], check=True)
    (clone / ".git" / "info" / "exclude").write_text("test_extra.py\n__pycache__/\n")
    (clone / "test" / "__pycache__").mkdir()
    (clone / "test" / "__pycache__" / "test_up_ops.cpython-311.pyc").write_bytes(b"\0")
    assert torch_tests.given(clone, torch_commit=pytorch.second).own_commit
    (clone / "test" / "test_extra.py").write_text("# ignored, yet it would run\n")
    extra = torch_tests.given(clone, torch_commit=pytorch.second)
    assert (extra.commit, extra.changed, extra.own_commit) == (pytorch.second, True, False)
