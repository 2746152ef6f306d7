"""GitHub's REST API for a workflow's runs and their artifacts, as far as `ootci history collect` uses it,
played by a real HTTP server (pytest-httpserver on 127.0.0.1).

It behaves as api.github.com does: a run names its event, head branch, head repository (a fork's
for a fork's pull request) and the workflow file it ran; lists paginated with a `Link: <...>; rel="next"` header (pages
of `page_size` items, smaller than GitHub's so a handful of runs spans pages), runs filtered by
`created=>=T`, every request of the API checked for `Authorization: Bearer <token>`, and an
artifact's `archive_download_url` answering 302 with a signed URL of the artifact storage on another
host (`localhost` instead of `127.0.0.1`). The storage records what reached it, so a test can
show that the token never did.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

from werkzeug import Request, Response

from ootci.runner.history.github_artifacts import ATTEST_TITLE
from ootci.runner.models import RunRecord, StageResult, Status, TorchInfo
from tests.support import act_stand_ins

REPOSITORY = "ootci/ootci"
TOKEN = "ghs_fake-token-0123456789"
STORAGE_HOST = "localhost"
DEFAULT_BRANCH = "main"


def zipped(files: dict[str, bytes | str]) -> bytes:
    """A zip archive holding `files` (name -> content), names exactly as given."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def run_artifact(run_id: str, backend: str, started: dt.datetime, *, trigger: str = "manual",
                 pr: int | None = None, shard: str | None = None, shard_group: str | None = None) -> bytes:
    """An `ootci-run-*` artifact as publish-results uploads it: the run directory at the zip's root (a
    shard's `ootci-shard-*` with `shard`; a merge of shards with `shard_group` alone)."""
    record = RunRecord(run_id=run_id, backend=backend, device=backend, torch=TorchInfo(spec="nightly"),
                       trigger=trigger, pr=pr, started_at=started, status=Status.passed, shard=shard,
                       shard_group=shard_group,
                       stages=[StageResult(name="build", status=Status.passed, summary="built")])
    return zipped({f"{run_id}/record.json": record.model_dump_json(indent=2), f"{run_id}/logs/build.log": "built\n"})


def backend_inside(artifact: bytes) -> str | None:
    """The backend of the first record in an artifact's zip, or None (no zip, no record)."""
    try:
        with zipfile.ZipFile(io.BytesIO(artifact)) as archive:
            names = [n for n in archive.namelist() if n.endswith("record.json")]
            return json.loads(archive.read(names[0])).get("backend") if names else None
    except (zipfile.BadZipFile, ValueError, KeyError):
        return None


def iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class StorageHit:
    artifact_id: int
    host: str
    authorization: str | None


@dataclass
class FakeGitHub:
    server: object  # pytest_httpserver.HTTPServer
    workflow: str = "nightly.yml"
    page_size: int = 2
    runs: list[dict] = field(default_factory=list)
    artifacts: dict[int, list[dict]] = field(default_factory=dict)
    blobs: dict[int, bytes] = field(default_factory=dict)
    api_requests: list[Request] = field(default_factory=list)
    storage_hits: list[StorageHit] = field(default_factory=list)
    failures: dict[str, list[int]] = field(default_factory=dict)
    """path pattern -> HTTP statuses answered, one per request, before the real answer"""
    jobs: dict[int, list[dict]] = field(default_factory=dict)
    """run id -> its jobs, each with the annotations it printed"""
    before_each_request: Callable[[], None] | None = None
    """brings the run up to date before the API answers (`follow_act`: what the jobs of an act run uploaded)"""

    def __post_init__(self):
        base = f"/repos/{REPOSITORY}/actions"
        self.server.expect_request(f"/repos/{REPOSITORY}").respond_with_handler(self._repository)
        self.server.expect_request(f"{base}/workflows/{self.workflow}/runs").respond_with_handler(self._runs)
        self.server.expect_request(re.compile(rf"{base}/runs/\d+/artifacts")).respond_with_handler(self._artifacts)
        self.server.expect_request(re.compile(rf"{base}/artifacts/\d+/zip")).respond_with_handler(self._zip)
        self.server.expect_request(re.compile(rf"{base}/runs/\d+/jobs")).respond_with_handler(self._jobs)
        self.server.expect_request(re.compile(rf"/repos/{REPOSITORY}/check-runs/\d+/annotations")
                                   ).respond_with_handler(self._annotations)
        self.server.expect_request(re.compile(r"/storage/\d+\.zip")).respond_with_handler(self._storage)

    # -- what a test sets up ---------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return self.server.url_for("").rstrip("/")

    def env(self) -> dict[str, str]:
        return {"GITHUB_API_URL": self.api_url, "GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": REPOSITORY}

    def add_run(self, run_id: int, created_at: dt.datetime, status: str = "completed", *, event: str = "schedule",
                head_branch: str = DEFAULT_BRANCH, head_repository: str = REPOSITORY,
                path: str | None = None) -> None:
        """A run of the workflow; by default a night of this repository's default branch. A fork's pull
        request that edits the workflow file runs as event pull_request, of the fork's branch and code."""
        # GitHub lists runs newest first.
        self.runs.append({"id": run_id, "status": status, "created_at": iso(created_at), "run_attempt": 1,
                          "event": event, "head_branch": head_branch,
                          "head_repository": {"full_name": head_repository},
                          "path": path or f".github/workflows/{self.workflow}"})
        self.runs.sort(key=lambda run: run["created_at"], reverse=True)
        self.artifacts.setdefault(run_id, [])

    def add_artifact(self, run_id: int, artifact_id: int, name: str, content: bytes, expired: bool = False,
                     said_by: str | None = "") -> None:
        """An artifact of the run, and (said_by) the job that said it uploaded it, in an annotation as
        `ootci history attest` prints it: "" for the job of the backend of the record inside, as the
        nightly names it (`backend (<backend>) / <backend>`); None for no job."""
        digest = f"sha256:{hashlib.sha256(content).hexdigest()}"
        self.artifacts[run_id].append({
            "id": artifact_id, "name": name, "size_in_bytes": len(content), "expired": expired,
            "archive_download_url": f"{self.api_url}/repos/{REPOSITORY}/actions/artifacts/{artifact_id}/zip",
            "workflow_run": {"id": run_id}, "digest": digest,
        })
        self.blobs[artifact_id] = content
        if said_by == "":
            backend = backend_inside(content)
            said_by = f"backend ({backend}) / {backend}" if backend else None
        if said_by is not None:
            self.say(run_id, said_by, name, digest)

    def say(self, run_id: int, job_name: str, artifact: str, digest: str) -> None:
        """The job named `job_name` prints `ootci history attest`'s notice for `artifact`."""
        jobs = self.jobs.setdefault(run_id, [])
        job = next((j for j in jobs if j["name"] == job_name), None)
        if job is None:
            job = {"id": run_id * 100 + len(jobs) + 1, "name": job_name, "annotations": []}
            jobs.append(job)
        job["annotations"].append({"annotation_level": "notice", "title": ATTEST_TITLE,
                                   "message": f"{artifact} {digest}", "path": ".github"})

    def follow_act(self, act_dir: Path, run_id: int) -> Callable[[str], None]:
        """This API for the run act is running (run_act's `on_line`), as GitHub serves a run still in progress:
        its artifacts are what the stand-ins stored in `act_dir` so far (each zipped as GitHub serves it, with
        the digest upload-artifact reported), and each job's annotations are the `::notice` lines it printed.
        act names a called workflow's job `<caller>-<n>/<workflow>/<job>`; GitHub names it `<caller> (...) /
        <job>`. Returns the reader of act's lines."""
        self.artifacts.setdefault(run_id, [])
        ids: dict[str, int] = {}
        notice = re.compile(r"^\[(?P<job>[^\]]+?)\s*\]\s+\S+\s+::notice title=" + re.escape(ATTEST_TITLE)
                            + r"::(?P<name>\S+) (?P<digest>sha256:[0-9a-f]{64})\s*$")

        def uploaded() -> None:
            for meta in sorted((act_dir / ".artifacts").glob("*.json")):
                name = json.loads(meta.read_text())["name"]
                if name not in ids:
                    ids[name] = run_id * 100 + len(ids) + 1
                    self.add_artifact(run_id, ids[name], name, act_stand_ins.zip_of(act_dir / "artifacts" / name),
                                      said_by=None)

        def read(line: str) -> None:
            if (said := notice.match(line)) is not None:
                parts = said["job"].split("/")
                job = f"{parts[0].rsplit('-', 1)[0]} / {parts[-1]}" if len(parts) == 3 else parts[-1]
                self.say(run_id, job, said["name"], said["digest"])

        self.before_each_request = uploaded
        return read

    def fail(self, path_pattern: str, *statuses: int) -> None:
        self.failures.setdefault(path_pattern, []).extend(statuses)

    def downloads(self) -> list[int]:
        return [hit.artifact_id for hit in self.storage_hits]

    # -- the server ------------------------------------------------------------------------

    def _injected_failure(self, request: Request) -> Response | None:
        for pattern, statuses in self.failures.items():
            if statuses and re.search(pattern, request.path):
                status = statuses.pop(0)
                headers = {"Retry-After": "0"} if status in (403, 429) else {}
                return Response(json.dumps({"message": f"injected {status}"}), status=status, headers=headers,
                                content_type="application/json")
        return None

    def _api(self, request: Request) -> Response | None:
        self.api_requests.append(request)
        if self.before_each_request is not None:
            self.before_each_request()
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return Response(json.dumps({"message": "Bad credentials"}), status=401, content_type="application/json")
        return self._injected_failure(request)

    def _page(self, request: Request, key: str | None, items: list[dict], total: int | None = None) -> Response:
        """One page of `items`, under `key` beside a total_count (None: the bare list, as check-run annotations)."""
        page = int(request.args.get("page", "1"))
        chunk = items[(page - 1) * self.page_size: page * self.page_size]
        headers = {}
        if page * self.page_size < len(items):
            query = {**request.args.to_dict(), "page": str(page + 1)}
            headers["Link"] = f'<{self.server.url_for(request.path)}?{urlencode(query)}>; rel="next"'
        body = chunk if key is None else {"total_count": len(items) if total is None else total, key: chunk}
        return Response(json.dumps(body), headers=headers, content_type="application/json")

    def _repository(self, request: Request) -> Response:
        refused = self._api(request)
        if refused:
            return refused
        return Response(json.dumps({"full_name": REPOSITORY, "default_branch": DEFAULT_BRANCH}),
                        content_type="application/json")

    def _runs(self, request: Request) -> Response:
        refused = self._api(request)
        if refused:
            return refused
        created = request.args.get("created", "")
        match = re.fullmatch(r">=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)", created)
        runs = [run for run in self.runs if not match or run["created_at"] >= match.group(1)]
        return self._page(request, "workflow_runs", runs)

    def _artifacts(self, request: Request) -> Response:
        refused = self._api(request)
        if refused:
            return refused
        run_id = int(request.path.split("/")[-2])
        if run_id not in self.artifacts:
            return Response(json.dumps({"message": "Not Found"}), status=404, content_type="application/json")
        return self._page(request, "artifacts", self.artifacts[run_id])

    def _jobs(self, request: Request) -> Response:
        refused = self._api(request)
        if refused:
            return refused
        run_id = int(request.path.split("/")[-2])
        jobs = [{"id": j["id"], "name": j["name"], "run_id": run_id} for j in self.jobs.get(run_id, [])]
        return self._page(request, "jobs", jobs)

    def _annotations(self, request: Request) -> Response:
        refused = self._api(request)
        if refused:
            return refused
        job_id = int(request.path.split("/")[-2])
        found = [a for jobs in self.jobs.values() for j in jobs if j["id"] == job_id for a in j["annotations"]]
        return self._page(request, None, found)

    def _zip(self, request: Request) -> Response:
        refused = self._api(request)
        if refused:
            return refused
        artifact_id = int(request.path.split("/")[-2])
        port = self.server.port
        location = f"http://{STORAGE_HOST}:{port}/storage/{artifact_id}.zip?sig=signed-for-one-minute"
        return Response("", status=302, headers={"Location": location})

    def _storage(self, request: Request) -> Response:
        artifact_id = int(request.path.rsplit("/", 1)[-1].split(".")[0])
        self.storage_hits.append(StorageHit(artifact_id, request.host.split(":")[0],
                                            request.headers.get("Authorization")))
        failure = self._injected_failure(request)
        if failure:
            return failure
        return Response(self.blobs[artifact_id], content_type="application/zip")
