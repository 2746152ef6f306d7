"""The vendor repositories of tests/fixtures/init, assembled where a test (or bench/onboarding.py) wants them.

The C++ fixtures are real PrivateUse1 backends built from OpenReg's C++ runtime under
their own device names: `materialize` copies the fixture, OpenReg's `csrc/` and the
shared Python half of the device (tests/fixtures/init/shared/device_runtime.py, as the
package's `_runtime.py`), then makes the copy a git repository, as a vendor's
checkout is.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "init"
OPENREG_CSRC = REPO / "backends" / "openreg" / "csrc"
RUNTIME = FIXTURES / "shared" / "device_runtime.py"

# fixture -> (distribution, package, device) of the C++ backends
BACKENDS = {
    "pyproject": ("acme-accel", "torch_acme", "acme"),
    "setup-py": ("torch_nova", "torch_nova", "nova"),
    "scikit-build": ("torch-vela", "torch_vela", "vela"),
}


UNITY_PARTS = ("runtime", "aten")
SETUPTOOLS_FIXTURES = ("pyproject", "setup-py")
"""the fixtures whose setup.py compiles OpenReg's csrc/ exactly as OpenReg's setup.py does"""


def unity_unit(root: Path, part: str) -> str:
    """What build/unity/<part>.cpp must hold under a checkout `root` of OpenReg's csrc/: only relative
    includes of csrc/<part>/*.cpp, sorted. The same text under the same name, with the same flags,
    is the same unit to ccache, so the fixtures' builds find OpenReg's (and each other's)."""
    return "".join(f'#include "../../csrc/{part}/{src.name}"\n' for src in sorted((root / "csrc" / part).glob("*.cpp")))


def materialize(name: str, dest: Path, *, git: bool = True) -> Path:
    """A working copy of fixture `name` at dest (which must not exist yet)."""
    shutil.copytree(FIXTURES / name, dest, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    if name in BACKENDS:
        shutil.copytree(OPENREG_CSRC, dest / "csrc")
        shutil.copy(RUNTIME, dest / BACKENDS[name][1] / "_runtime.py")
    if git:
        subprocess.run(["git", "init", "-q", str(dest)], check=True, capture_output=True, timeout=60)
    return dest
