"""Discovery of PyTorch's device-generic test files: a text scan of a test/ folder, less the exclusions."""

from __future__ import annotations

from pathlib import Path

from ootci.runner.manifests.manifest import UpstreamExclusion
from ootci.runner.torch_supply import upstream_discovery
from tests.support import fake_upstream

INSTANTIATES = fake_upstream.ops_file(second=False)
ACCELERATOR = '''\
from torch.testing._internal.common_utils import HardwareClassification, TestCase


class TestOnAccelerators(TestCase):
    hw_classification = HardwareClassification.ACCELERATOR
'''
GENERIC = '''\
from torch.testing._internal.common_utils import HardwareClassification, TestCase


class TestAnywhere(TestCase):
    hw_classification = HardwareClassification.GENERIC
'''
ONLY_SAID = '''\
# instantiate_device_type_tests(TestLater, globals()) once it is device-generic
"""Not yet: instantiate_device_type_tests is for later."""
'''


def folder(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_discovery_reads_the_files_and_keeps_what_each_exclusion_left_out(tmp_path):
    test = folder(tmp_path / "test", {
        "test_view_ops.py": INSTANTIATES,
        "test_on_accelerators.py": ACCELERATOR,
        "test_generic.py": GENERIC,               # a class for every machine, not per device
        "test_comment_only.py": ONLY_SAID,        # named in a comment and a docstring: not instantiated
        "nn/test_pooling.py": INSTANTIATES,
        "nn/attention/test_fa3.py": INSTANTIATES,
        "distributed/test_c10d.py": INSTANTIATES,
        "distributed/fsdp/test_fsdp.py": INSTANTIATES,
        "test_jit.py": INSTANTIATES,
        "common_helpers.py": INSTANTIATES,        # not a test file: test_*.py only
        "__pycache__/test_stale.py": INSTANTIATES,
        ".hidden/test_x.py": INSTANTIATES,
    })
    distributed = UpstreamExclusion(path="distributed/", reason="a subsystem of its own")
    jit = UpstreamExclusion(path="test_jit.py", reason="TorchScript")
    fa3 = UpstreamExclusion(path="nn/attention/test_fa3.py", reason="one kind of hardware")
    unused = UpstreamExclusion(path="onnx/", reason="exporters")
    found = upstream_discovery.discover(test, [distributed, jit, fa3, unused])
    assert found.files == ["nn/test_pooling.py", "test_on_accelerators.py", "test_view_ops.py"]
    assert found.excluded == {"distributed/fsdp/test_fsdp.py": distributed, "distributed/test_c10d.py": distributed,
                              "nn/attention/test_fa3.py": fa3, "test_jit.py": jit}
    assert found.unused([distributed, jit, fa3, unused]) == [unused]
    assert found.scanned == 9 and found.found == 7
    assert found.by_reason()["a subsystem of its own"] == ["distributed/fsdp/test_fsdp.py", "distributed/test_c10d.py"]
    assert found.describe() == "3 device-generic files discovered of 9 test files, 4 more excluded"
    assert found.to_data()["excluded"]["test_jit.py"] == {"path": "test_jit.py", "reason": "TorchScript"}


def test_a_folder_exclusion_covers_its_own_folder_only(tmp_path):
    test = folder(tmp_path / "test", {"distributed/test_a.py": INSTANTIATES,
                                      "distributed_extra/test_b.py": INSTANTIATES, "test_distributed.py": INSTANTIATES})
    found = upstream_discovery.discover(test, [UpstreamExclusion(path="distributed/", reason="r")])
    assert found.files == ["distributed_extra/test_b.py", "test_distributed.py"]
    assert list(found.excluded) == ["distributed/test_a.py"]
