"""Real torch wheel files for tests that serve them from a local package index.

The machine has exactly one CPU torch wheel (2.13.0+cpu, found through pip's own
configuration), and nightlies cannot be downloaded here. `as_nightly` makes a
nightly of it: the same binaries, with the version in the file name, the
dist-info, the METADATA, RECORD and torch/version.py rewritten to a `.dev`
version, so pip installs it as that nightly and `torch.__version__` reports it.
The git commit stays the real one.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from filelock import FileLock

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "real-wheels"
RELEASE = "2.13.0"


def cpu_release_wheel() -> Path:
    """The local torch 2.13.0 CPU wheel, copied by pip into the test cache (pip finds it, not a path we guess)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(os.fspath(CACHE / "release.lock")):
        found = sorted(CACHE.glob(f"torch-{RELEASE}*.whl"))
        if not found:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
                            "-d", os.fspath(CACHE), f"torch=={RELEASE}"], check=True, capture_output=True)
            found = sorted(CACHE.glob(f"torch-{RELEASE}*.whl"))
    assert found, f"pip download torch=={RELEASE} left no wheel in {CACHE}"
    return found[0]


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def as_nightly(release: Path, version: str) -> Path:
    """`release` re-versioned as `version` (e.g. 2.16.0.dev20261122+cpu), cached by name."""
    name_version, _, tags = release.name[len("torch-"):-len(".whl")].partition("-")
    out = CACHE / f"torch-{version}-{tags}.whl"
    with FileLock(os.fspath(out) + ".lock"):
        if out.is_file():
            return out
        old_info, new_info = f"torch-{name_version}.dist-info", f"torch-{version}.dist-info"
        tmp = out.with_suffix(".part")
        changed: dict[str, bytes] = {}
        # Stored, not deflated: rewriting a gigabyte of members compressed takes minutes.
        with zipfile.ZipFile(release) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as zout:
            for info in zin.infolist():
                name = info.filename.replace(old_info + "/", new_info + "/", 1)
                data = zin.read(info)
                if name == f"{new_info}/RECORD":
                    continue  # written last, with the new hashes
                if name == f"{new_info}/METADATA":
                    data = data.replace(f"Version: {name_version}\n".encode(), f"Version: {version}\n".encode(), 1)
                elif name == "torch/version.py":
                    data = data.replace(f"__version__ = '{name_version}'".encode(),
                                        f"__version__ = '{version}'".encode(), 1)
                if name in (f"{new_info}/METADATA", "torch/version.py"):
                    changed[name] = data
                zout.writestr(zipfile.ZipInfo(name, info.date_time), data)
            record_lines = []
            for line in zin.read(f"{old_info}/RECORD").decode().splitlines():
                path, _, rest = line.partition(",")
                path = path.replace(old_info + "/", new_info + "/", 1)
                if path in changed:
                    rest = f"{_record_hash(changed[path])},{len(changed[path])}"
                record_lines.append(f"{path},{rest}")
            zout.writestr(f"{new_info}/RECORD", "\n".join(record_lines) + "\n")
        os.replace(tmp, out)
    return out


NIGHTLY = "2.16.0.dev20261122+cpu"


def serve_nightly_index(httpserver) -> tuple[str, Path, Path]:
    """A PEP 503 index on `httpserver` (pytest-httpserver) listing the real 2.13.0 CPU wheel,
    a nightly made of it (NIGHTLY: same binaries, new version) and an older nightly whose
    file does not exist. Returns (index URL, release wheel, nightly wheel)."""
    from werkzeug.wrappers import Response
    from werkzeug.wsgi import FileWrapper

    release = cpu_release_wheel()
    nightly = as_nightly(release, NIGHTLY)
    tags = nightly.name.split("-", 2)[2]
    older = f"torch-2.16.0.dev20261121+cpu-{tags}"
    files = {release.name: release, nightly.name: nightly}
    links = "".join(f'<a href="/files/{name}">{name}</a>\n' for name in [release.name, older, nightly.name])
    httpserver.expect_request("/simple/torch/").respond_with_data(f"<html><body>{links}</body></html>",
                                                                   content_type="text/html")
    for name, path in files.items():
        httpserver.expect_request(f"/files/{name}").respond_with_handler(
            lambda request, path=path: Response(FileWrapper(open(path, "rb"), 1 << 20), direct_passthrough=True,
                                                mimetype="application/octet-stream",
                                                headers={"Content-Length": str(path.stat().st_size)}))
    httpserver.expect_request(re.compile(r"^/.*")).respond_with_data("", status=404)  # anything else: not here
    return httpserver.url_for("/simple"), release, nightly
