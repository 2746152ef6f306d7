"""The artifacts of a workflow's recent runs, read from GitHub's REST API: listed, downloaded, unpacked.

`ootci history collect` takes the run records that the backend jobs of a nightly
uploaded as soon as each job has finished, without waiting for the whole workflow run:
a backend whose runners are offline can keep its job queued for a day. Three endpoints:

- `GET /repos/{repo}/actions/workflows/{workflow}/runs?created=>=T`: the runs of a
  workflow created since T, whatever their status (a run still in progress lists the
  artifacts its finished jobs have uploaded);
- `GET /repos/{repo}/actions/runs/{run_id}/artifacts`: the artifacts of one run;
- `GET /repos/{repo}/actions/runs/{run_id}/jobs` and `GET /repos/{repo}/check-runs/{job_id}/annotations`:
  the jobs of a run and what each said in its annotations (a job's digest of the artifact it
  uploaded: `ootci history attest`);
- an artifact's `archive_download_url`, which answers 302 with a short-lived URL of the
  artifact storage, on another host. The token must not reach that host: requests drops
  the Authorization header when a redirect leaves the host (tests/history/test_collect.py proves it).

Lists are paginated (the `Link` header's `next`). Connection errors, timeouts, 429, 5xx
and a 403 that says when to come back (a secondary rate limit) are retried with ootci's
one policy (runner.core.http: doubling, capped, `Retry-After` honoured); any other answer is one
GitHubError line saying what was refused and why.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import requests

from ootci.runner.core.errors import GitHubError, UsageError
from ootci.runner.core.http import GaveUp, Retry, TryAgain, excerpt, retryable, retrying

API_URL_ENV = "GITHUB_API_URL"
DEFAULT_API_URL = "https://api.github.com"
TOKEN_ENV = "GITHUB_TOKEN"
REPOSITORY_ENV = "GITHUB_REPOSITORY"
API_VERSION = "2022-11-28"
PAGE_SIZE = 100
MAX_PAGES = 100
"""GitHub serves at most 1,000 results of a filtered list; a server that never stops paging is a bug."""
CHUNK = 1 << 20

REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
WORKFLOW = re.compile(r"[A-Za-z0-9_.-]+")  # a file name under .github/workflows, or the workflow's id
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

T = TypeVar("T")


@dataclass(frozen=True)
class WorkflowRun:
    id: int
    created_at: dt.datetime
    event: str = ""
    head_branch: str = ""
    head_repository: str = ""
    """owner/name of the repository the run's code came from: a fork for a fork's pull request"""
    path: str = ""
    """the workflow file the run ran, `.github/workflows/<name>` (a PR's run of it runs the PR's copy)"""


@dataclass(frozen=True)
class Artifact:
    id: int
    name: str
    expired: bool
    download_url: str
    run_id: int
    digest: str = ""
    """`sha256:<hex>` of the artifact's zip, as GitHub lists it"""


@dataclass(frozen=True)
class Claim:
    """What a job said it uploaded, in an annotation only that job can write."""

    job: str
    """the job's name, as GitHub lists it (`backend (openreg, ...) / openreg`)"""
    digest: str


ATTEST_TITLE = "ootci artifact"
"""the title of the notice `ootci history attest` prints: `<artifact name> sha256:<hex>`"""


class RefusedArchive(Exception):
    """An artifact's zip that is not unpacked: it is no zip, or a member would land outside its directory."""


_HINTS = {
    401: f"the token was refused (${TOKEN_ENV})",
    403: "the token may not read this repository's Actions (the job needs `permissions: actions: read`)",
    404: "no such repository, workflow, run or artifact, or the token cannot see it",
    410: "the artifact has expired",
}


def _parse_time(value: Any, where: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise GitHubError(f"{where}: expected a time, got {str(value)[:40]!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def _field(item: Any, key: str, kind: type, where: str) -> Any:
    value = item.get(key) if isinstance(item, dict) else None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise GitHubError(f"{where}: expected {kind.__name__} {key!r}, got {str(value)[:40]!r}")
    return value


class GitHub:
    """The few Actions endpoints the collector reads, for one repository."""

    def __init__(self, repository: str, *, api_url: str | None = None, token: str | None = None,
                 retry: Retry = Retry(), session: requests.Session | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        if not REPOSITORY.fullmatch(repository or ""):
            raise UsageError(f"--repo: expected OWNER/NAME, got {repository!r}")
        self.repository = repository
        self.api_url = (api_url or os.environ.get(API_URL_ENV) or DEFAULT_API_URL).rstrip("/")
        parts = urlsplit(self.api_url)
        if not (parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOOPBACK)):
            # The token goes with every request: never in clear text over a network.
            raise UsageError(f"${API_URL_ENV}: expected an https:// URL (http:// only on this machine), "
                             f"got {self.api_url!r}")
        self.token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self.retry = retry
        self.sleep = sleep
        self.http = session or requests.Session()
        self.http.headers.update({"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION})
        if self.token:
            self.http.headers["Authorization"] = f"Bearer {self.token}"

    # -- what the collector asks ------------------------------------------------------

    def workflow_runs(self, workflow: str, created_since: dt.datetime) -> list[WorkflowRun]:
        """The runs of `workflow` created at or after `created_since`, newest first, in any status."""
        if not WORKFLOW.fullmatch(workflow):
            raise UsageError(f"--workflow: expected a workflow file name (nightly.yml) or id, got {workflow!r}")
        since = created_since.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        url = f"{self.api_url}/repos/{self.repository}/actions/workflows/{quote(workflow)}/runs"
        params = {"created": f">={since}", "per_page": PAGE_SIZE, "exclude_pull_requests": "true"}
        runs: dict[int, WorkflowRun] = {}
        for item in self._pages(url, params, "workflow_runs", f"runs of {workflow}"):
            where = f"runs of {workflow}"
            head = item.get("head_repository")
            run = WorkflowRun(id=_field(item, "id", int, where),
                              created_at=_parse_time(item.get("created_at"), f"{where}: run {item.get('id')}"),
                              event=str(item.get("event") or ""), head_branch=str(item.get("head_branch") or ""),
                              head_repository=str(head.get("full_name") or "") if isinstance(head, dict) else "",
                              path=str(item.get("path") or ""))
            # A run created while we page shifts the list: the same run may come twice.
            runs.setdefault(run.id, run)
        return list(runs.values())

    def default_branch(self) -> str:
        """The repository's default branch: the only branch whose runs a trusted reader takes."""
        what = f"repository {self.repository}"
        page, _ = self._retrying(what, partial(self._get_json, f"{self.api_url}/repos/{self.repository}", None, what))
        return _field(page, "default_branch", str, what)

    def artifacts(self, run_id: int) -> list[Artifact]:
        """The artifacts of one workflow run (of every attempt), expired ones included."""
        url = f"{self.api_url}/repos/{self.repository}/actions/runs/{run_id}/artifacts"
        where = f"artifacts of run {run_id}"
        found: dict[int, Artifact] = {}
        for item in self._pages(url, {"per_page": PAGE_SIZE}, "artifacts", where):
            artifact = Artifact(id=_field(item, "id", int, where), name=_field(item, "name", str, where),
                                expired=bool(item.get("expired")),
                                download_url=_field(item, "archive_download_url", str, where), run_id=run_id,
                                digest=str(item.get("digest") or ""))
            found.setdefault(artifact.id, artifact)
        return list(found.values())

    def claims(self, run_id: int) -> dict[str, list[Claim]]:
        """By artifact name, what the jobs of a run (every attempt) said they uploaded in their annotations."""
        where = f"jobs of run {run_id}"
        url = f"{self.api_url}/repos/{self.repository}/actions/runs/{run_id}/jobs"
        found: dict[str, list[Claim]] = {}
        for job in self._pages(url, {"per_page": PAGE_SIZE, "filter": "all"}, "jobs", where):
            job_id, name = _field(job, "id", int, where), _field(job, "name", str, where)
            notes = f"annotations of job {job_id}"
            annotations = f"{self.api_url}/repos/{self.repository}/check-runs/{job_id}/annotations"
            for note in self._pages(annotations, {"per_page": PAGE_SIZE}, None, notes):
                if not isinstance(note, dict) or note.get("title") != ATTEST_TITLE:
                    continue
                said = str(note.get("message") or "").split()
                if len(said) == 2 and re.fullmatch(r"sha256:[0-9a-f]{64}", said[1]):
                    found.setdefault(said[0], []).append(Claim(job=name, digest=said[1]))
        return found

    def download(self, artifact: Artifact, dest: Path) -> Path:
        """The artifact's zip at `dest`, written beside it and renamed: never half a file."""
        if not artifact.download_url.startswith(f"{self.api_url}/"):
            # The token is sent there: only to the API it came from.
            raise GitHubError(f"artifact {artifact.name} ({artifact.id}): its download URL is not on "
                              f"{self.api_url}: {artifact.download_url[:120]!r}")
        what = f"download of artifact {artifact.name} ({artifact.id})"
        dest.parent.mkdir(parents=True, exist_ok=True)

        def once() -> Path:
            fd, part = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
            try:
                with os.fdopen(fd, "wb") as out, self.http.get(artifact.download_url, stream=True,
                                                               timeout=self.retry.timeouts) as response:
                    self._check(response, what)
                    for block in response.iter_content(CHUNK):
                        out.write(block)
                os.replace(part, dest)
            finally:
                Path(part).unlink(missing_ok=True)
            return dest

        return self._retrying(what, once)

    # -- HTTP ---------------------------------------------------------------------------

    def _pages(self, url: str, params: dict[str, Any] | None, key: str | None, what: str) -> Iterator[dict]:
        """The items under `key` of every page (key None: each page is the list itself), following the
        `Link: <...>; rel="next"` header."""
        seen: set[str] = set()
        next_url: str | None = url
        while next_url:
            if next_url in seen or len(seen) >= MAX_PAGES:
                raise GitHubError(f"{what}: the pages do not end (page {len(seen) + 1}: {next_url[:120]})")
            seen.add(next_url)
            page, links = self._retrying(what, partial(self._get_json, next_url, params, what))
            items = page if key is None else page.get(key) if isinstance(page, dict) else None
            if not isinstance(items, list):
                raise GitHubError(f"{what}: the answer has no list {key or ''!r}")
            yield from items
            # The next link carries the query (and the page number) itself.
            next_url, params = links.get("next", {}).get("url"), None

    def _get_json(self, url: str, params: dict[str, Any] | None, what: str) -> tuple[Any, dict]:
        with self.http.get(url, params=params, timeout=self.retry.timeouts) as response:
            self._check(response, what)
            try:
                return response.json(), response.links
            except ValueError:
                raise GitHubError(f"{what}: the answer is not JSON: {excerpt(response, self.token)}") from None

    def _check(self, response: requests.Response, what: str) -> None:
        status = response.status_code
        if retryable(response):
            raise TryAgain(response, self.token)
        if status == 200:
            return
        hint = _HINTS.get(status, "GitHub refused the request")
        if status == 403 and response.headers.get("X-RateLimit-Remaining") == "0":
            reset = response.headers.get("X-RateLimit-Reset", "")
            until = (dt.datetime.fromtimestamp(int(reset), dt.UTC).strftime("%H:%M:%SZ")
                     if reset.isdigit() else "later")
            hint = f"the API rate limit is spent until {until}"
        raise GitHubError(f"{what}: HTTP {status}: {hint}: {excerpt(response, self.token) or '(no body)'}")

    def _retrying(self, what: str, once: Callable[[], T]) -> T:
        try:
            return retrying(once, retry=self.retry, sleep=self.sleep).value
        except GaveUp as exc:
            raise GitHubError(f"{what}: {exc}") from None
        except requests.RequestException as exc:
            raise GitHubError(f"{what}: request failed ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:200] if str(exc) else ''})") from None


# -- unpacking ------------------------------------------------------------------------

def _unsafe(name: str) -> str | None:
    """Why a zip member's name could write outside the directory it is unpacked into, or None."""
    if not name or name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "an absolute path"
    if ".." in re.split(r"[/\\]", name):
        return "a '..' component"
    if "\0" in name:
        return "a NUL byte"
    return None


def extract(archive: Path, into: Path) -> int:
    """Unpack the zip `archive` into the new directory `into` (staged beside it, then renamed);
    returns the number of files. The whole archive is refused, and nothing written, when any
    member has an absolute path or a `..` component, or when it is no zip."""
    if into.exists():
        raise RefusedArchive(f"{into} exists already")
    try:
        with zipfile.ZipFile(archive) as zipped:
            members = zipped.infolist()
            for member in members:
                why = _unsafe(member.filename)
                if why:
                    raise RefusedArchive(f"member {member.filename[:120]!r} has {why}")
            staging = Path(tempfile.mkdtemp(prefix=f".{into.name}.", dir=into.parent))
            try:
                root = staging.resolve()
                files = 0
                for member in members:
                    target = staging / PurePosixPath(member.filename)
                    if not target.resolve().is_relative_to(root):  # the checks above already say so
                        raise RefusedArchive(f"member {member.filename[:120]!r} leaves the directory")
                    if member.is_dir():
                        target.mkdir(parents=True, exist_ok=True)
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with zipped.open(member) as source, open(target, "wb") as out:
                        shutil.copyfileobj(source, out, CHUNK)
                    files += 1
                staging.rename(into)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
    except zipfile.BadZipFile as exc:
        raise RefusedArchive(f"not a zip archive ({exc})") from None
    return files
