"""The partly-red vendor repository (tests/fixtures/partly-red/README.md): OpenReg's own
sources as `torch_partreg` on device `partreg`, with the fixture's buggy files laid over them."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OPENREG = REPO / "backends" / "openreg"
OVERLAY = REPO / "tests" / "fixtures" / "partly-red"
# Not part of the vendor's repository: OpenReg's registry entry, its own tests, build output.
_LEFT_OUT = ("backend.toml", "tests", "build", "*.egg-info", "__pycache__", "*.so", "README.md")


def assemble(dest: Path) -> Path:
    """Write the repository into dest (a new directory) and return it."""
    shutil.copytree(OPENREG, dest, ignore=shutil.ignore_patterns(*_LEFT_OUT))
    (dest / "torch_openreg").rename(dest / "torch_partreg")
    for path in [dest / "setup.py", dest / "pyproject.toml", dest / "MANIFEST.in",
                 *(dest / "torch_partreg").glob("*.py")]:
        text = path.read_text().replace("torch_openreg", "torch_partreg").replace("OpenReg", "PartReg")
        # The device's name; the C++ library's op namespace (torch.ops.openreg) stays.
        text = re.sub(r'"openreg"', '"partreg"', text)
        path.write_text(text)
    shutil.copytree(OVERLAY, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def fix_circular_import(repo: Path) -> None:
    """What the circular-import hint says to do: define the hook before `import torch`."""
    init = repo / "torch_partreg" / "__init__.py"
    text = init.read_text()
    hook = text[text.index("_loaded = False"):text.index("_autoload()\n")]
    text = text.replace(hook, "").replace("import torch\n", hook + "\nimport torch  # noqa: E402\n", 1)
    init.write_text(text)
