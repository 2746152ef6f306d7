"""PEP 517 backend (stdlib only) standing in for PyTorch's build in ootci's tests.

Like PyTorch's own build, it stamps the checkout's commit into torch/version.py as
`git_version`; it also records the build environment ootci passed (USE_CUDA, MAX_JOBS,
compiler launcher), so the tests can check what a real build would have seen.
"""

import base64
import hashlib
import json
import os
import subprocess
import zipfile

BASE_VERSION = "0.1.0"
ENV_SEEN = ("USE_CUDA", "BUILD_TEST", "MAX_JOBS", "CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER",
            "CCACHE_DIR")


def _commit():
    return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    commit = _commit()
    version = f"{BASE_VERSION}+git{commit[:7]}"
    dist_info = f"torch-{version}.dist-info"
    seen = {k: os.environ.get(k) for k in ENV_SEEN}
    files = {
        "torch/__init__.py": b"from .version import __version__\nfrom . import version\n",
        "torch/version.py": f"__version__ = {version!r}\ngit_version = {commit!r}\n".encode(),
        "torch/build_env.json": json.dumps(seen).encode(),
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: fake_torch_backend\nRoot-Is-Purelib: true\n"
                              b"Tag: py3-none-any\n",
    }
    record = [_record_line(name, data) for name, data in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    filename = f"torch-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    return filename
