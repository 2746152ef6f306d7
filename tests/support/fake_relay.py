"""PyTorch's relay, as its code behaves, on a local HTTP server (pytest-httpserver): the
callback endpoint with its state machine and rate limit, HUD behind it, and a runner's OIDC
token endpoint. Read from pytorch/test-infra at a6cd5e731: callback/lambda_function.py,
callback/callback_handler.py, utils/redis_helper.py, utils/hud.py, torchci/lib/crcr/crcrUtils.ts.
Used by tests/relay/ and, under act, by tests/workflows/."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable

from werkzeug import Request, Response

AUDIENCE = "pytorch-cross-repo-ci-relay"
REQUEST_TOKEN = "runner-request-token-5c1f"
REPOSITORY = "ootci/ootci"
"""The repository every token of this server says it was minted for (its `repository` claim)."""
NIGHTLY = ("nightly", "periodic")
HUD_LIMIT = 2 * 1024 * 1024
HUD_FAILED = ("An internal failure occurred. Your update was not saved, but the CI run is still valid. "
              "You can attempt progressive retries after 1 seconds or ignore this failure.")


class Refused(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


class FakeRelay:
    """The relay's callback endpoint, HUD's store behind it and a runner's OIDC token endpoint."""

    def __init__(self, server, dispatched=(), level: str = "L4", rate_limit: int = 100,
                 clock: Callable[[], float] = time.monotonic):
        self.server = server
        self.dispatched = set(dispatched)
        self.level = level
        self.rate_limit = rate_limit
        self.clock = clock
        self.calls: deque[float] = deque()
        self.states: dict[tuple, str] = {}
        self.received: list[dict] = []  # every callback body, in order
        self.accepted: list[dict] = []  # the ones the relay took (200)
        self.sizes: list[int] = []  # bytes of each callback body as it came
        self.hud: dict[str, dict] = {}  # HUD's rows by its key, as extractDynamoRecord and UpdateItem leave them
        self.check_runs: list[str] = []  # the names of the check runs created on the PR, in order
        self.auth: list[str] = []
        self.token_requests: list[Request] = []
        self.answers: list = []  # what to do with the next callbacks: an HTTP status, or ("after", status)
        self.hud_down = False
        server.expect_request("/oidc/token", method="GET").respond_with_handler(self.token)
        server.expect_request("/github/callback", method="POST").respond_with_handler(self.callback)

    @staticmethod
    def reply(status: int, body: dict, headers: dict | None = None) -> Response:
        return Response(json.dumps(body), status=status, content_type="application/json", headers=headers)

    def token(self, request: Request) -> Response:
        self.token_requests.append(request)
        if request.headers.get("Authorization") != f"Bearer {REQUEST_TOKEN}":
            return self.reply(401, {"message": "bad request token"})
        return self.reply(200, {"count": 1, "value": f"jwt.{request.args['audience']}.{len(self.token_requests)}"})

    def callback(self, request: Request) -> Response:
        raw = request.get_data()
        self.sizes.append(len(raw))
        try:
            body = json.loads(raw)
        except ValueError:
            return self.reply(400, {"detail": "Invalid JSON body"})
        self.received.append(body)
        self.auth.append(request.headers.get("Authorization", ""))
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, int):
            headers = {"Retry-After": "0"} if answer == 429 else None
            return self.reply(answer, {"detail": "Internal server error" if answer >= 500 else "rate limit exceeded"},
                              headers)
        self.hud_down = isinstance(answer, tuple)  # HUD fails after the relay recorded the state
        try:
            result = self.handle(request, body)
        except Refused as refused:
            return self.reply(refused.status, {"detail": refused.detail})
        if isinstance(answer, tuple):  # recorded, then HUD failed: the relay's own 500
            return self.reply(answer[1], {"detail": HUD_FAILED})
        if result.get("status") != "ignored":
            self.accepted.append(body)
        return self.reply(200, result)

    # -- callback_handler.handle ---------------------------------------------------------

    def handle(self, request: Request, body: dict) -> dict:
        if not request.headers.get("Authorization", "").startswith(f"Bearer jwt.{AUDIENCE}."):
            raise Refused(401, "Invalid authorization token")
        if self.level == "L1":
            return {"ok": True, "status": "ignored"}
        now = self.clock()
        while self.calls and self.calls[0] <= now - 60:
            self.calls.popleft()
        self.calls.append(now)
        if len(self.calls) > self.rate_limit:
            raise Refused(429, f"rate limit exceeded for {REPOSITORY}")
        if body.get("event_type", "") in NIGHTLY:
            delivery_id, status, *_ = self.parse(body)
            if status != "completed":
                raise Refused(400, f"nightly/periodic callbacks must have status 'completed', got {status!r}")
            self.forward(body)
            return {"ok": True, "status": status}
        delivery_id, status, run_id, attempt, name, job = self.parse(body)
        if delivery_id not in self.dispatched:
            raise Refused(400, "callback rejected: no matching dispatch record")
        if status not in ("in_progress", "completed"):
            raise Refused(400, f"unknown callback status: {status!r}")
        key = (delivery_id, REPOSITORY, run_id, attempt, job)
        current = self.states.get(key)
        if (status == "in_progress" and current is not None) or (status == "completed" and current != "in_progress"):
            raise Refused(400, f"callback rejected: invalid state transition delivery_id={delivery_id} "
                               f"repo={REPOSITORY} status={status}")
        self.states[key] = status
        head = ((body.get("payload") or {}).get("pull_request") or {}).get("head") or {}
        if self.level in ("L3", "L4") and head.get("sha"):
            self.check_runs.append(f"crcr/{REPOSITORY}/{name}/{job}")
        self.forward(body)
        return {"ok": True, "status": status}

    @staticmethod
    def parse(body: dict) -> tuple:
        try:
            workflow = body["workflow"]
            return (body["delivery_id"], workflow["status"], int(workflow["run_id"]),
                    int(workflow.get("run_attempt", 1)), workflow["name"], workflow.get("job_name"))
        except (KeyError, TypeError, ValueError) as exc:
            raise Refused(400, f"callback body missing required field: {exc}") from None

    # -- utils/hud.py and HUD's crcrUtils.ts -----------------------------------------------

    def forward(self, body: dict) -> None:
        payload = json.dumps({"trusted": {"verified_repo": REPOSITORY, "downstream_repo_level": self.level},
                              "untrusted": {"callback_payload": body}})
        if len(payload.encode("utf-8")) > HUD_LIMIT:
            raise Refused(413, "HUD rejected callback: HTTP 413: Payload Too Large")
        workflow = body["workflow"]
        if not workflow.get("job_name") or workflow.get("check_run_id") is None:
            raise Refused(400, "HUD rejected callback: HTTP 400: Bad Request")
        key = f"{REPOSITORY}/{body['delivery_id']}/{workflow['name']}/{workflow['job_name']}/{workflow['check_run_id']}"
        pr = (body.get("payload") or {}).get("pull_request") or {}
        row = {"status": workflow["status"], "delivery_id": body["delivery_id"], "event_type": body.get("event_type"),
               "pytorch_head_sha": (pr.get("head") or {}).get("sha") or (body.get("payload") or {}).get("head_sha")
               or body["delivery_id"], "job_name": workflow["job_name"], "started_at": workflow.get("started_at"),
               "artifact_url": workflow.get("artifact_url")}
        if workflow["status"] == "completed":
            row.update(conclusion=workflow.get("conclusion"), completed_at=workflow.get("completed_at"))
            results = workflow.get("test_results")
            if isinstance(results, dict):
                numbers = {k: results[k] for k in ("passed", "failed", "skipped") if isinstance(results.get(k), int)}
                row.update({f"{k}_tests": n for k, n in numbers.items()})
                total = results.get("total")
                row["total_tests"] = total if isinstance(total, int) else sum(numbers.values())
            detail = workflow.get("failed_tests_detail")
            if isinstance(detail, list):
                row["failed_tests_json"] = [{**t, "message": str(t.get("message") or "")[:1024],
                                             "stacktrace": str(t.get("stacktrace") or "")[:4096]}
                                            for t in detail[:1000]]
            if "triage_verdict" in workflow:
                row["triage_verdict"] = workflow["triage_verdict"]
        if self.hud_down:
            return
        held = self.hud.setdefault(key, {})
        held.update({k: v for k, v in row.items() if v is not None})  # UpdateItem: only what is set

    def env(self) -> dict[str, str]:
        return {
            "ACTIONS_ID_TOKEN_REQUEST_URL": self.server.url_for("/oidc/token") + "?api-version=2.0",
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN,
            "OOTCI_RELAY_CALLBACK_URL": self.server.url_for("/github/callback"),
        }
