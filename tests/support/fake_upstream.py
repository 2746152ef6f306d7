"""A git repository posing as PyTorch for the upstream suite, and a torch that names its commits.

The repository's test/ holds device-generic test files written for ootci's tests in the form of
PyTorch's own (`torch.testing._internal.common_device_type`), at two commits, and a `torch/`
decoy at its root that must never be imported. It is served over file:// with what GitHub
allows and a local git serves only when asked: shallow fetches of a commit by id, with a blob
filter (`uploadpack.allowAnySHA1InWant`, `uploadpack.allowFilter`).

`torch_naming(commit)` makes an environment whose torch is the layer's own 2.13.0 but whose
`torch/version.py` names the given commit: the files the upstream suite takes are the ones
of the commit its torch was built from, and here that commit is one of the fake repository's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

HEADER = '''\
# A device-generic test file written for ootci's tests, in the form of PyTorch's test/ files.
import os
import signal

import numpy as np
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests, onlyCUDA
from torch.testing._internal.common_utils import TestCase, run_tests, slowTest

'''

OPS_CLASS = '''\
class TestUpOps(TestCase):
    @dtypes(torch.float32, torch.int64, torch.complex64)
    def test_add(self, device, dtype):
        x = torch.ones(3, device=device, dtype=dtype)
        self.assertEqual((x + x).cpu(), torch.full((3,), 2, dtype=dtype))

    def test_numpy_went_away(self, device):
        # As np.msort: numpy 2 has no such function, on any device.
        np.ootci_removed_in_numpy_2(torch.ones(2, device=device).cpu().numpy())

    def test_device_type_is_cpu(self, device):
        # The backend's own failure: true on CPU only.
        self.assertEqual(torch.ones(2, device=device).device.type, {device_type_is_cpu!r})

    def test_segfaults_off_cpu(self, device):
        if torch.device(device).type != "cpu":
            os.kill(os.getpid(), signal.SIGSEGV)

    @onlyCUDA
    def test_cuda_only(self, device):
        pass

    @slowTest
    def test_slow(self, device):
        pass
{extra}

'''

VIEWS_CLASS = '''\
class TestUpViews(TestCase):
    def test_view_shares_storage(self, device):
        x = torch.arange(6, device=device)
        y = x.view(2, 3)
        y[0, 0] = 7
        self.assertEqual(x[0].item(), 7)

'''

NEW_TEST = '''
    def test_new_at_second_commit(self, device):
        self.assertEqual(torch.zeros(1, device=device).device.type, "cpu")
'''

BROKEN = '''\
# Imports what this torch does not have, as a file of another commit does: fails on every device.
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_methods_invocations import ootci_binary_ufuncs_and_refs  # noqa: F401
from torch.testing._internal.common_utils import TestCase


class TestOfAnotherCommit(TestCase):
    def test_add(self, device):
        pass


instantiate_device_type_tests(TestOfAnotherCommit, globals())
'''

OPS = "test_up_ops.py"
BROKEN_FILE = "test_up_broken.py"
FILES = (OPS, BROKEN_FILE)


def ops_file(*, second: bool) -> str:
    """test_up_ops.py: at the second commit the classes are instantiated the other way round
    (the class suffixes swap), one test is new and fails on the device, and the backend's failure
    is fixed."""
    ops = OPS_CLASS.format(device_type_is_cpu=torch_type_expected(second), extra=NEW_TEST if second else "")
    order = ["TestUpViews", "TestUpOps"] if second else ["TestUpOps", "TestUpViews"]
    tail = "".join(f"instantiate_device_type_tests({name}, globals())\n" for name in order)
    return HEADER + ops + VIEWS_CLASS + tail + '\nif __name__ == "__main__":\n    run_tests()\n'


def torch_type_expected(second: bool) -> str:
    return "openreg" if second else "cpu"


def _git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@e", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@e", GIT_TERMINAL_PROMPT="0")
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip()


@dataclass(frozen=True)
class FakePyTorch:
    root: Path
    first: str
    second: str

    @property
    def url(self) -> str:
        return self.root.as_uri()


def make_repo(root: Path) -> FakePyTorch:
    (root / "test").mkdir(parents=True)
    (root / "torch").mkdir()
    (root / "torch" / "__init__.py").write_text('raise ImportError("the source tree\'s torch/ was imported")\n')
    (root / "setup.py").write_text("raise SystemExit('not a real PyTorch')\n")
    (root / "test" / BROKEN_FILE).write_text(BROKEN)
    (root / "test" / OPS).write_text(ops_file(second=False))
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "uploadpack.allowAnySHA1InWant", "true")
    _git(root, "config", "uploadpack.allowFilter", "true")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "first")
    first = _git(root, "rev-parse", "HEAD")
    _git(root, "tag", "v2.13.0")
    (root / "test" / OPS).write_text(ops_file(second=True))
    _git(root, "commit", "-qam", "second")
    return FakePyTorch(root, first, _git(root, "rev-parse", "HEAD"))


def torch_naming(torch_layer, where: Path, *, git_version: str, version: str | None = None):
    """An environment over the layer whose own site-packages has a copy of the layer's torch (hard
    links, else symbolic ones) with a version.py naming `git_version` (and `version`)."""
    from ootci.runner.torch_supply import envs

    env = envs.layered_env(torch_layer, where)
    layer_torch = torch_layer.site_packages / "torch"
    target = env.site_packages / "torch"
    try:
        shutil.copytree(layer_torch, target, copy_function=os.link)
    except OSError:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(layer_torch, target, copy_function=os.symlink)
    for info in torch_layer.site_packages.glob("torch-*.dist-info"):
        shutil.copytree(info, env.site_packages / info.name)
    text = (layer_torch / "version.py").read_text()
    text = re.sub(r"^git_version = .*$", f"git_version = {git_version!r}", text, flags=re.M)
    if version is not None:
        text = re.sub(r"^__version__ = .*$", f"__version__ = {version!r}", text, flags=re.M)
    (target / "version.py").unlink()
    (target / "version.py").write_text(text)
    return env
