"""Downloading wheels into the cache: streamed, hash-checked, never half-written.

A download goes to a temporary file beside its destination and is renamed into place
only after its sha256 matched (when the index gave one), so an interrupted or
corrupted download never looks like a cached wheel. A lock per destination makes
parallel runs download a file once. A try that the network broke or that got a
429 or 5xx is made again (runner.core.http's policy), from the start of the file.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import requests
from filelock import FileLock

from ootci.runner.core.errors import PackageIndexError
from ootci.runner.core.http import GaveUp, Retry, TryAgain, retryable, retrying

CHUNK = 1 << 20
# Wheels come from the same CDNs as the index pages (torch_index.RETRY); a read may stall longer.
RETRY = Retry(attempts=3, backoff_s=1.0, timeout_s=120.0)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def fetch(url: str, dest: Path, *, sha256: str | None = None, session: requests.Session | None = None,
          timeout: float | tuple[float, float] | None = None, retry: Retry = RETRY,
          sleep: Callable[[float], None] = time.sleep) -> Path:
    """dest, downloaded from url unless already there (and matching sha256 when given).
    timeout: of one request (default retry.timeouts)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(os.fspath(dest) + ".lock"):
        if dest.is_file() and (sha256 is None or sha256_of(dest) == sha256.lower()):
            return dest
        http = session or requests.Session()
        try:
            retrying(lambda: _download(url, dest, sha256, http, timeout or retry.timeouts), retry=retry, sleep=sleep)
        except GaveUp as exc:
            raise _failure(url, exc.cause) from None
        except requests.RequestException as exc:
            raise _failure(url, exc) from None
    return dest


def _failure(url: str, cause: Exception) -> PackageIndexError:
    """What the last try got, in the words of a download that failed."""
    if isinstance(cause, TryAgain):
        response = cause.response
        return PackageIndexError(f"cannot download {url}: HTTP {response.status_code} {response.reason}")
    if isinstance(cause, requests.Timeout):
        return PackageIndexError(f"download of {url} timed out")
    return PackageIndexError(f"cannot download {url}: {str(cause).splitlines()[0][:200]}")


def _download(url: str, dest: Path, sha256: str | None, http: requests.Session,
              timeout: float | tuple[float, float]) -> None:
    """One try: the body streamed to a temporary file beside dest, renamed into place once its hash matched."""
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, http.get(url, stream=True, timeout=timeout) as response:
            if retryable(response):
                raise TryAgain(response)
            if response.status_code >= 400:
                raise PackageIndexError(f"cannot download {url}: HTTP {response.status_code} {response.reason}")
            for block in response.iter_content(CHUNK):
                out.write(block)
                h.update(block)
        got = h.hexdigest()
        if sha256 and got != sha256.lower():
            raise PackageIndexError(f"sha256 mismatch for {url}: index says {sha256.lower()}, download has {got} "
                              "(corrupted download discarded)")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
