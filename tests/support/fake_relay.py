"""PyTorch's relay, as its code behaves, on a local HTTP server (pytest-httpserver): the
callback endpoint with its state machine, and a runner's OIDC token endpoint.
Used by tests/relay/test_relay.py and, under act, by tests/workflows/test_workflows_act_vendor.py."""

from __future__ import annotations

import json

from werkzeug import Request, Response

AUDIENCE = "pytorch-cross-repo-ci-relay"
REQUEST_TOKEN = "runner-request-token-5c1f"


class FakeRelay:
    """The relay's callback endpoint and a runner's OIDC token endpoint on one local server."""

    def __init__(self, server, dispatched=(), level: str = "L4"):
        self.server = server
        self.dispatched = set(dispatched)
        self.level = level
        self.states: dict[tuple, str] = {}
        self.received: list[dict] = []  # every callback body, in order
        self.accepted: list[dict] = []  # the ones the state machine took
        self.auth: list[str] = []
        self.token_requests: list[Request] = []
        self.answers: list = []  # what to do with the next callbacks: an HTTP status, or ("after", status)
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
        body = json.loads(request.get_data(as_text=True))
        self.received.append(body)
        self.auth.append(request.headers.get("Authorization", ""))
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, int):
            headers = {"Retry-After": "0"} if answer == 429 else None
            return self.reply(answer, {"detail": "Internal server error" if answer >= 500 else "rate limit exceeded"},
                              headers)
        response = self.handle(request, body)
        if isinstance(answer, tuple):  # recorded, but the answer is lost
            return self.reply(answer[1], {"detail": "Internal server error"})
        return response

    def handle(self, request: Request, body: dict) -> Response:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith(f"Bearer jwt.{AUDIENCE}."):
            return self.reply(401, {"detail": "Invalid authorization token"})
        if self.level in ("L1",):
            return self.reply(200, {"ok": True, "status": "ignored"})
        try:
            workflow = body["workflow"]
            key = (body["delivery_id"], workflow["check_run_id"], workflow["run_id"], workflow.get("run_attempt"),
                   workflow["job_name"])
            status = workflow["status"]
        except (KeyError, TypeError) as exc:
            return self.reply(400, {"detail": f"callback body missing required field: {exc}"})
        if body["delivery_id"] not in self.dispatched:
            return self.reply(400, {"detail": "callback rejected: no matching dispatch record"})
        current = self.states.get(key)
        if (status == "in_progress" and current is not None) or (status == "completed" and current != "in_progress"):
            return self.reply(400, {"detail": f"callback rejected: invalid state transition "
                                              f"delivery_id={body['delivery_id']} repo=ootci/ootci status={status}"})
        self.states[key] = status
        self.accepted.append(body)
        return self.reply(200, {"ok": True, "status": status})

    def env(self) -> dict[str, str]:
        return {
            "ACTIONS_ID_TOKEN_REQUEST_URL": self.server.url_for("/oidc/token") + "?api-version=2.0",
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN,
            "OOTCI_RELAY_CALLBACK_URL": self.server.url_for("/github/callback"),
        }
