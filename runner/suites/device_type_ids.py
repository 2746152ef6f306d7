"""Stable ids for PyTorch's device-type tests (stdlib only: runs in the environment under test,
and in an xdist controller that imports no torch).

`instantiate_device_type_tests` writes a test class once and copies it per device type: the
copy's name is the class name plus the device type in capitals, and each test method gets the
device as a suffix before its dtypes (`TestViewOps` -> `TestViewOpsCPU.test_flip_cpu_float32`).
For a PrivateUse1 backend the class suffix is not stable: the shared `PrivateUse1TestBase`
only learns the backend's name when its `setUpClass` runs, which the first instantiation that
needs a device does, so one process names `TestViewOpsPRIVATEUSE1` and then
`TestOldViewOpsOPENREG`. The method suffix is always the backend's name.

A stable id drops the class suffix and names the device under test in the method, whichever
device the process instantiated for:

    test_view_ops.py::TestViewOpsPRIVATEUSE1::test_flip_openreg_float32
    test_view_ops.py::TestViewOpsOPENREG::test_flip_openreg_float32
        -> test_view_ops.py::TestViewOps::test_flip_openreg_float32

so that a baseline, the flaky detection and the history match a test from night to night. A
process that instantiates the tests for the CPU to give its opinion on the device's failures
names each CPU copy after its device twin, marked `@cpu`:

    test_view_ops.py::TestViewOpsCPU::test_flip_cpu_float32
        -> test_view_ops.py::TestViewOps::test_flip_openreg_float32@cpu

Ids of other tests are unchanged.
"""

from __future__ import annotations

PRIVATEUSE1 = "PRIVATEUSE1"
CPU = "cpu"
CPU_TWIN = "@cpu"
"""the mark of a CPU copy's id, after the id of its device twin"""


class DeviceTypeIds:
    """Maps pytest node ids of one process to stable ids.

    device: the backend's device name (`openreg`); cpu_twins: the process instantiated the
    tests for the CPU too, and names each CPU copy after its device twin, marked CPU_TWIN.
    """

    def __init__(self, device: str, *, cpu_twins: bool = False):
        self.device = device
        self.cpu_twins = cpu_twins
        self.suffixes = (PRIVATEUSE1, device.upper())

    def __call__(self, nodeid: str) -> str:
        parts = nodeid.split("::")
        if len(parts) != 3 or not self.device:
            return nodeid
        path, cls, method = parts
        generic = self.generic_class(cls, self.suffixes)
        if generic is not None:
            return f"{path}::{generic}::{method}"
        generic = self.generic_class(cls, (CPU.upper(),)) if self.cpu_twins else None
        if generic is not None:
            return f"{path}::{generic}::{swap_device(method, CPU, self.device)}{CPU_TWIN}"
        return nodeid

    @staticmethod
    def generic_class(cls: str, suffixes: tuple[str, ...]) -> str | None:
        """The class as written in the file, or None when `cls` ends in none of the suffixes."""
        for suffix in suffixes:
            if cls.endswith(suffix) and len(cls) > len(suffix):
                return cls[: -len(suffix)]
        return None


def swap_device(method: str, old: str, new: str) -> str:
    """`test_flip_cpu_float32` -> `test_flip_openreg_float32`: the device suffix is the last
    `_<device>` of the name (only dtypes follow it, and no dtype name contains a device's)."""
    token = f"_{old}"
    at = method.rfind(token)
    while at > 0:
        end = at + len(token)
        if end == len(method) or method[end] == "_":
            return method[:at] + f"_{new}" + method[end:]
        at = method.rfind(token, 0, at)
    return method
