"""A package index of torch nightlies for the tests that resolve one, served by pytest-httpserver:
fake wheels named for this interpreter and platform, decoys that must never be picked, and
the PEP 503 page that lists them (tests/torch_supply/test_nightly.py, tests/commands/test_cache_key.py).
"""

from __future__ import annotations

import hashlib
import sys

import pytest
from packaging.tags import sys_tags

OUR = next(iter(sys_tags()))
PY = OUR.interpreter  # e.g. cp311
OTHER_PY = f"cp3{sys.version_info.minor + 1}"
OTHER_ARCH = "aarch64" if OUR.platform.endswith("x86_64") else "x86_64"


def wheel_name(version: str, py: str = PY, plat: str = OUR.platform, abi: str | None = None) -> str:
    return f"torch-{version}-{py}-{abi or py}-{plat}.whl"


NEWEST_OURS = wheel_name("2.14.0.dev20261120+cpu")
# Newer than NEWEST_OURS but not installable here, or not a nightly: picking any of
# them would be a visible mistake.
DECOYS = [
    wheel_name("2.14.0.dev20261121+cpu", py=OTHER_PY),
    wheel_name("2.14.0.dev20261121+cpu", plat="win_amd64"),
    wheel_name("2.14.0.dev20261121", plat="macosx_11_0_arm64"),
    wheel_name("2.14.0.dev20261121+cpu", plat=f"manylinux_2_28_{OTHER_ARCH}"),
    wheel_name("2.15.0+cpu"),
]
OLDER_OURS = [wheel_name("2.14.0.dev20261118+cpu"), wheel_name("2.14.0.dev20261119+cpu")]


def payload(filename: str) -> bytes:
    return f"fake wheel bytes of {filename}\n".encode() * 50


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def html_page(entries: list[tuple[str, str]]) -> str:
    links = "\n".join(f'    <a href="{href}">{text}</a><br/>' for href, text in entries)
    return f"<!DOCTYPE html>\n<html><body>\n<h1>Links for torch</h1>\n{links}\n</body></html>\n"


def serve_wheels(httpserver, filenames: list[str], prefix: str = "/files") -> dict[str, str]:
    """Serve each fake wheel under prefix; returns {filename: path on the server (+ quoted)}."""
    paths = {}
    for name in filenames:
        path = f"{prefix}/{name.replace('+', '%2B')}"
        httpserver.expect_request(f"{prefix}/{name}").respond_with_data(payload(name),
                                                                       content_type="application/octet-stream")
        paths[name] = path
    return paths


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty ootci cache of the test's own, and no $OOTCI_TORCH_INDEX from outside."""
    root = tmp_path / "cache"
    monkeypatch.setenv("OOTCI_CACHE", str(root))
    monkeypatch.delenv("OOTCI_TORCH_INDEX", raising=False)
    return root
