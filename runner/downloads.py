"""Downloading wheels into the cache: streamed, hash-checked, never half-written.

A download goes to a temporary file beside its destination and is renamed into place
only after its sha256 matched (when the index gave one), so an interrupted or
corrupted download never looks like a cached wheel. A lock per destination makes
parallel runs download a file once.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import requests
from filelock import FileLock

from .errors import IndexError_

CHUNK = 1 << 20
HTTP_TIMEOUT = (10.0, 120.0)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def fetch(url: str, dest: Path, *, sha256: str | None = None, session: requests.Session | None = None,
          timeout: float | tuple[float, float] = HTTP_TIMEOUT) -> Path:
    """dest, downloaded from url unless already there (and matching sha256 when given)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(os.fspath(dest) + ".lock"):
        if dest.is_file() and (sha256 is None or sha256_of(dest) == sha256.lower()):
            return dest
        _download(url, dest, sha256, session or requests.Session(), timeout)
    return dest


def _download(url: str, dest: Path, sha256: str | None, http: requests.Session,
              timeout: float | tuple[float, float]) -> None:
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            try:
                with http.get(url, stream=True, timeout=timeout) as response:
                    if response.status_code >= 400:
                        raise IndexError_(f"cannot download {url}: HTTP {response.status_code} {response.reason}")
                    for block in response.iter_content(CHUNK):
                        out.write(block)
                        h.update(block)
            except requests.Timeout:
                raise IndexError_(f"download of {url} timed out") from None
            except requests.RequestException as exc:
                raise IndexError_(f"cannot download {url}: {str(exc).splitlines()[0][:200]}") from None
        got = h.hexdigest()
        if sha256 and got != sha256.lower():
            raise IndexError_(f"sha256 mismatch for {url}: index says {sha256.lower()}, download has {got} "
                              "(corrupted download discarded)")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
