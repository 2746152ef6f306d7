"""Finding the newest nightly torch wheel on a package index.

Reads the project page `<index>/torch/` of a "simple" repository in either form:
PEP 691 JSON (asked for first through the Accept header) or PEP 503 HTML (what
download.pytorch.org serves). A file qualifies when it is a torch wheel of a `.dev`
version, is not yanked, allows the target's Python version (requires-python), and
carries a tag the target interpreter supports. The newest version wins; among
wheels of that version, the one whose tag the interpreter prefers.

The target's tags come from `packaging.tags.sys_tags()`. By default that is the
orchestrator's interpreter, which is also the one that creates the torch venvs, so
the tags are exact. For another interpreter (`python=`), it is asked for its own tags
by running the orchestrator's `packaging` (pure Python) in that interpreter.

A project page that the network lost or that came back 429 or 5xx is asked for again
(runner.core.http's policy); what the last try got is what the error says.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

import packaging
import requests
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag, parse_tag, sys_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from ootci.runner.core import procs
from ootci.runner.core.errors import PackageIndexError, TargetEnvironmentError
from ootci.runner.core.http import GaveUp, Retry, TryAgain, send

DEFAULT_NIGHTLY_INDEX = "https://download.pytorch.org/whl/nightly/cpu"
INDEX_ENV = "OOTCI_TORCH_INDEX"
PEP691_JSON = "application/vnd.pypi.simple.v1+json"
ACCEPT = f"{PEP691_JSON}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
# A package index is a CDN: it answers at once or is down for longer than is worth waiting
# here, so fewer and shorter tries than the relay's and GitHub's; one request waits 60 s at most.
RETRY = Retry(attempts=3, backoff_s=1.0, timeout_s=60.0)


def nightly_index(index_url: str | None = None) -> str:
    return index_url or os.environ.get(INDEX_ENV) or DEFAULT_NIGHTLY_INDEX


@dataclass(frozen=True)
class Target:
    """What an interpreter can install: its tags, best first, and its version."""

    tags: tuple[Tag, ...]
    python_version: str

    @property
    def python_tag(self) -> str:
        return self.tags[0].interpreter

    @property
    def platform(self) -> str:
        # Newer `packaging` lists plain `linux_x86_64` first; the manylinux tag says more.
        specific = [t.platform for t in self.tags if not t.platform.startswith("linux_")]
        return specific[0] if specific else self.tags[0].platform

    def describe(self) -> str:
        return f"Python tag {self.python_tag}, platform {self.platform}"


_TAGS_SCRIPT = """
import json, platform, sys
sys.path.insert(0, sys.argv[1])
from packaging.tags import sys_tags
print("OOTCI-TAGS" + json.dumps({"version": platform.python_version(),
                                 "tags": [str(t) for t in sys_tags()]}))
"""


def target(python: str | os.PathLike | None = None) -> Target:
    """The tags of `python` (default: this interpreter)."""
    if python is None or _same_interpreter(python):
        return Target(tuple(sys_tags()), platform.python_version())
    return interpreter_target(python)


def interpreter_target(python: str | os.PathLike) -> Target:
    """Ask the interpreter itself for its tags (with this orchestrator's `packaging`)."""
    packaging_parent = str(Path(packaging.__file__).resolve().parent.parent)
    result = procs.run(procs.python_argv(python, "-I", "-c", _TAGS_SCRIPT, packaging_parent), timeout=60)
    for line in result.output_tail.splitlines():
        if line.startswith("OOTCI-TAGS"):
            data = json.loads(line[len("OOTCI-TAGS"):])
            tags = tuple(Tag(*t.split("-", 2)) for t in data["tags"])
            return Target(tags, data["version"])
    detail = (result.output_tail.strip().splitlines() or ["no output"])[-1]
    raise TargetEnvironmentError(f"{python}: cannot determine its wheel tags: {detail}")


def _same_interpreter(python: str | os.PathLike) -> bool:
    # Venvs of one base interpreter resolve to the same binary, and share its tags.
    try:
        return Path(python).resolve() == Path(sys.executable).resolve()
    except OSError:
        return False


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None = None
    requires_python: str | None = None
    yanked: bool = False


@dataclass(frozen=True)
class NightlyWheel:
    filename: str
    url: str
    sha256: str | None
    version: Version
    index_url: str


def project_url(index_url: str, project: str = "torch") -> str:
    return index_url.rstrip("/") + f"/{project}/"


def fetch_project(index_url: str, project: str = "torch", *, session: requests.Session | None = None,
                  timeout: float | tuple[float, float] | None = None, retry: Retry = RETRY,
                  sleep: Callable[[float], None] = time.sleep) -> list[IndexFile]:
    """All files the index lists for `project`; unreachable or failing index -> PackageIndexError.
    timeout: of one request (default retry.timeouts)."""
    url = project_url(index_url, project)
    timeout = timeout or retry.timeouts
    try:
        response = _answer(session or requests.Session(), url, timeout, retry, sleep)
    except requests.Timeout:
        raise PackageIndexError(f"package index {index_url} did not answer within {_seconds(timeout)} s "
                                f"({url})") from None
    except requests.ConnectionError as exc:
        raise PackageIndexError(f"cannot reach package index {index_url}: {_connection_reason(exc)}") from None
    except requests.RequestException as exc:
        raise PackageIndexError(f"cannot read package index {index_url}: {exc}") from None
    if response.status_code == 404:
        raise PackageIndexError(f"package index {index_url} has no project '{project}' (HTTP 404 for {url})")
    if response.status_code >= 400:
        raise PackageIndexError(f"package index {index_url} failed: HTTP {response.status_code} {response.reason} "
                                f"for {url}")
    content_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
    base = response.url or url
    try:
        if content_type == PEP691_JSON or content_type.endswith("+json") or content_type == "application/json":
            return _files_from_json(response.json(), base)
        return _files_from_html(response.text, base)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PackageIndexError(f"package index {index_url}: unreadable project page {url} ({exc})") from None


def _answer(session: requests.Session, url: str, timeout: float | tuple[float, float], retry: Retry,
            sleep: Callable[[float], None]) -> requests.Response:
    """The index's answer, tried again per ootci's policy. Once the tries are spent, the last
    failure is returned or raised as it came, for fetch_project to say what it was."""
    try:
        return send(session, "GET", url, headers={"Accept": ACCEPT}, timeout=timeout, retry=retry, sleep=sleep).value
    except GaveUp as exc:
        if isinstance(exc.cause, TryAgain):
            return exc.cause.response
        raise exc.cause from None


def _seconds(timeout: float | tuple[float, float]) -> str:
    return f"{max(timeout) if isinstance(timeout, tuple) else timeout:g}"


def _connection_reason(exc: requests.ConnectionError) -> str:
    text = str(exc)
    for known in ("Connection refused", "Name or service not known", "No route to host",
                  "Temporary failure in name resolution", "Network is unreachable", "timed out"):
        if known in text:
            return known.lower()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _files_from_json(data: dict, base: str) -> list[IndexFile]:
    files = []
    for entry in data["files"]:
        url = urljoin(base, entry["url"])
        url, fragment = urldefrag(url)
        hashes = entry.get("hashes") or {}
        sha256 = hashes.get("sha256") or fragment_sha256(fragment)
        yanked = entry.get("yanked", False)
        files.append(IndexFile(entry["filename"], url, sha256, entry.get("requires-python"), bool(yanked)))
    return files


class _AnchorParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.base: str | None = None
        self.anchors: list[tuple[dict[str, str | None], str]] = []
        self._open: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "base" and self.base is None:
            self.base = dict(attrs).get("href")
        elif tag == "a":
            self._open, self._text = dict(attrs), []

    def handle_data(self, data):
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._open is not None:
            self.anchors.append((self._open, "".join(self._text).strip()))
            self._open = None


def _files_from_html(text: str, base: str) -> list[IndexFile]:
    parser = _AnchorParser()
    parser.feed(text)
    parser.close()
    if parser.base:
        base = urljoin(base, parser.base)
    files = []
    for attrs, label in parser.anchors:
        href = attrs.get("href")
        if not href:
            continue
        url, fragment = urldefrag(urljoin(base, href))
        filename = label or unquote(urlsplit(url).path.rsplit("/", 1)[-1])
        files.append(IndexFile(filename, url, fragment_sha256(fragment), attrs.get("data-requires-python"),
                               "data-yanked" in attrs))
    return files


def fragment_sha256(fragment: str) -> str | None:
    name, _, value = fragment.partition("=")
    return value.lower() if name == "sha256" and value else None


def newest_nightly(files: list[IndexFile], target_: Target, index_url: str) -> NightlyWheel:
    """The newest `.dev` torch wheel installable on target_; none -> PackageIndexError saying why."""
    rank = {tag: i for i, tag in enumerate(target_.tags)}
    interpreters = {t.interpreter for t in target_.tags}
    platforms = {t.platform for t in target_.tags}
    best: tuple[tuple[Version, int], IndexFile] | None = None
    skipped = {"another Python": 0, "another platform": 0, "another ABI": 0, "not a .dev build": 0,
               "requires another Python": 0, "yanked": 0}
    wheels = 0
    for f in files:
        # Tags first, from a cache: a nightly page lists thousands of wheels but only a
        # few dozen distinct tag triples, and most wheels are for other Pythons/platforms.
        tags = _wheel_tags(f.filename)
        if tags is None:
            continue
        wheels += 1
        if f.yanked:
            skipped["yanked"] += 1
            continue
        supported = [rank[t] for t in tags if t in rank]
        if not supported:
            if not any(t.interpreter in interpreters for t in tags):
                skipped["another Python"] += 1
            elif not any(t.platform in platforms for t in tags):
                skipped["another platform"] += 1
            else:
                skipped["another ABI"] += 1
            continue
        try:
            version = parse_wheel_filename(f.filename)[1]
        except InvalidWheelFilename:
            wheels -= 1
            continue
        if not version.is_devrelease:
            skipped["not a .dev build"] += 1
            continue
        if not _python_allowed(f.requires_python, target_.python_version):
            skipped["requires another Python"] += 1
            continue
        score = (version, -min(supported))
        if best is None or score > best[0]:
            best = (score, f)
    if best is None:
        looked_for = f"a nightly (.dev) torch wheel for {target_.describe()}"
        if not wheels:
            raise PackageIndexError(f"no torch wheels at {index_url}; looked for {looked_for}")
        reasons = ", ".join(f"{n} for {why}" if why.startswith("another") else f"{n} {why}"
                            for why, n in skipped.items() if n)
        raise PackageIndexError(f"no matching torch wheel at {index_url}: looked for {looked_for}; "
                          f"{wheels} torch wheels listed ({reasons})")
    (version, _), f = best
    return NightlyWheel(f.filename, f.url, f.sha256, version, index_url)


def _wheel_tags(filename: str) -> frozenset[Tag] | None:
    """The tags of a torch wheel's file name; None for anything else."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[:-4].split("-")
    if len(parts) not in (5, 6) or canonicalize_name(parts[0]) != "torch":
        return None
    return _parse_tags("-".join(parts[-3:]))


@functools.lru_cache(maxsize=1024)
def _parse_tags(triple: str) -> frozenset[Tag] | None:
    try:
        return parse_tag(triple)
    except ValueError:
        return None


@functools.lru_cache(maxsize=256)
def _python_allowed(requires_python: str | None, python_version: str) -> bool:
    if not requires_python:
        return True
    try:
        return SpecifierSet(requires_python).contains(python_version, prereleases=True)
    except InvalidSpecifier:
        return True


def resolve_nightly(index_url: str | None = None, *, python: str | os.PathLike | None = None,
                    timeout: float | tuple[float, float] | None = None,
                    session: requests.Session | None = None, retry: Retry = RETRY,
                    sleep: Callable[[float], None] = time.sleep) -> NightlyWheel:
    """The newest nightly torch wheel at the index for `python` (default: this interpreter)."""
    index = nightly_index(index_url)
    files = fetch_project(index, session=session, timeout=timeout, retry=retry, sleep=sleep)
    return newest_nightly(files, target(python), index)
