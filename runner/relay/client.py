"""Talking to the relay: an OIDC token for its audience, one POST per callback, and the pace.

What the relay answers (`callback/lambda_function.py`, `callback/callback_handler.py`,
`utils/redis_helper.py`, `utils/hud.py` at pytorch/test-infra a6cd5e731):

- 200 `{"ok": true, "status": <the status>}`: recorded (and forwarded to HUD);
- 200 `{"ok": true, "status": "ignored"}`: the repository is not listed at L2 or above;
- 400: bad JSON, `delivery_id`, `workflow.status`, `workflow.run_id` or `workflow.name`
  missing, an unknown status, no dispatch on record, a refused state transition, a nightly
  that is not `completed`; HUD's own 400 (no `job_name` or `check_run_id`) passed on;
- 401: the token; 413: HUD's limit of 2 MB on the body, passed on;
- 429: more than 100 callbacks a minute from one repository;
- 500: HUD failed after the relay had recorded the state ("Your update was not saved");
  503: the relay's store.

A 5xx, a 429 or no answer is retried. The state machine refuses the same state twice, so a
retry refused that way after a 5xx means the first try was recorded by the relay, while the
500 said HUD did not take it: that is a warning, never a success.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests

from ootci.runner.core.errors import RelayError
from ootci.runner.core.http import GaveUp, Retry, Tried, excerpt, send
from ootci.runner.relay.dispatch import shown

AUDIENCE = "pytorch-cross-repo-ci-relay"
"""The audience the relay verifies OIDC tokens for (utils/jwt_helper.py, AUDIENCE)."""

RATE_LIMIT = 100
"""Callbacks a minute the relay takes from one repository (RelayConfig.rate_limit_per_min)."""
RATE_WINDOW_S = 60.0

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass
class Delivery:
    """What the relay made of a report: `answer` is its `status` (in_progress, completed,
    ignored), or `already recorded` when a retry found the first try had landed; then
    `warning` says what HUD may lack."""

    http_status: int
    answer: str
    attempts: int
    detail: str = ""
    warning: str = ""

    @property
    def ignored(self) -> bool:
        return self.answer == "ignored"


class Pacer:
    """At most `limit` requests in any `window` seconds from this process: the relay counts a
    repository's callbacks in a sliding minute and answers 429 past 100. Other runs of the same
    repository count too; their share is what the retry of a 429 is for."""

    def __init__(self, limit: int = RATE_LIMIT, window: float = RATE_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.limit, self.window, self.clock, self.sleep = limit, window, clock, sleep
        self.sent: deque[float] = deque()

    def wait(self) -> None:
        now = self.clock()
        while self.sent and self.sent[0] <= now - self.window:
            self.sent.popleft()
        if len(self.sent) >= self.limit:
            self.sleep(self.sent[0] + self.window - now)
            self.sent.popleft()
            now = self.clock()
        self.sent.append(now)


def _send(http: requests.Session, method: str, url: str, what: str, retry: Retry, sleep: Callable[[float], None],
          secret: str, **kwargs) -> Tried[requests.Response]:
    """The first answer that is not worth retrying, with the attempts made and whether an earlier
    try may have landed (http.send); after the last attempt a RelayError says what happened."""
    try:
        return send(http, method, url, retry=retry, sleep=sleep, secret=secret, allow_redirects=False, **kwargs)
    except GaveUp as exc:
        raise RelayError(f"{what}: {exc}") from None
    except requests.RequestException as exc:  # not the network: a URL or a header requests refuses
        raise RelayError(f"{what}: request failed ({type(exc).__name__})") from None


def check_url(url: str, what: str) -> str:
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname in _LOOPBACK:
        return url
    raise RelayError(f"{what}: expected an https:// URL (http:// only on this machine), got {shown(url)}")


def id_token(audience: str = AUDIENCE, *, env: Mapping[str, str] | None = None, retry: Retry = Retry(),
             session: requests.Session | None = None, sleep: Callable[[float], None] = time.sleep) -> str:
    """A GitHub Actions OIDC token for `audience` (the job needs `permissions: id-token: write`)."""
    env = os.environ if env is None else env
    url = env.get("ACTIONS_ID_TOKEN_REQUEST_URL", "")
    request_token = env.get("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "")
    if not url or not request_token:
        missing = "ACTIONS_ID_TOKEN_REQUEST_URL" if not url else "ACTIONS_ID_TOKEN_REQUEST_TOKEN"
        raise RelayError(f"cannot get an OIDC token: ${missing} is not set "
                         "(the job needs `permissions: id-token: write`)")
    check_url(url, "$ACTIONS_ID_TOKEN_REQUEST_URL")
    http = session or requests.Session()
    full = f"{url}{'&' if '?' in url else '?'}audience={requests.utils.quote(audience, safe='')}"
    response = _send(http, "GET", full, "OIDC token", retry, sleep, request_token,
                     headers={"Authorization": f"Bearer {request_token}"}).value
    if response.status_code != 200:
        raise RelayError(f"OIDC token: HTTP {response.status_code}: {excerpt(response, request_token)}")
    try:
        value = response.json().get("value")
    except (ValueError, AttributeError):
        value = None
    if not isinstance(value, str) or not value:
        raise RelayError("OIDC token: the answer has no 'value'")
    return value


_HINTS = {
    400: "the relay refused the body",
    401: f"the relay refused the OIDC token: its audience must be {AUDIENCE!r} and the repository "
         "must be one the relay knows",
    403: "the relay does not accept reports from this repository",
    404: "no callback endpoint at this URL (the relay's is <function URL>/github/callback)",
    405: "no callback endpoint at this URL (the relay's is <function URL>/github/callback)",
    413: "HUD refused the body: over its 2 MB",
}


def _rejection(response: requests.Response, token: str) -> str:
    detail = excerpt(response, token)
    hint = _HINTS.get(response.status_code, "the relay refused the report")
    if "state transition" in detail:
        hint = ("the relay's state machine refused it: in_progress must come first and once, completed once, "
                "both with the same delivery_id, run_id, run_attempt and job_name")
    elif "no matching dispatch" in detail:
        hint = "the relay dispatched nothing with this delivery_id to this repository"
    elif "HUD rejected" in detail:
        hint = "HUD refused the record (the relay passes its answer on)"
    elif "nightly/periodic" in detail:
        hint = "the relay takes a nightly's result as one completed callback"
    elif 300 <= response.status_code < 400:
        hint = "the callback URL redirects: give the final URL"
    return f"HTTP {response.status_code}: {hint}: {detail or '(no body)'}"


def encode(body: dict[str, Any]) -> bytes:
    """The body as it goes on the wire (its size is what HUD's 2 MB limit counts)."""
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def post(url: str, body: dict[str, Any], token: str, *, retry: Retry = Retry(),
         session: requests.Session | None = None, sleep: Callable[[float], None] = time.sleep,
         pacer: Pacer | None = None) -> Delivery:
    """POST one callback body. A refusal raises RelayError with the relay's status and body, except
    the one refusal that means the report is there: a state the relay already holds, after a try
    that got no clear answer (timed out, 5xx) and so may have been recorded."""
    check_url(url, "callback URL")
    http = session or requests.Session()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if pacer is not None:
        pacer.wait()
    sent = _send(http, "POST", url, "relay callback", retry, sleep, token, data=encode(body), headers=headers)
    response, attempts = sent.value, sent.attempts
    if 200 <= response.status_code < 300:
        try:
            answer = response.json().get("status", "")
        except (ValueError, AttributeError):
            answer = ""
        return Delivery(http_status=response.status_code, answer=str(answer)[:40] or "accepted", attempts=attempts)
    detail = _rejection(response, token)
    if response.status_code == 400 and "state transition" in detail and sent.may_have_landed:
        # The relay refuses the same state twice: the try that got no clear answer was recorded by
        # the relay. Its 5xx came after that (HUD failed, "update was not saved"), so HUD may lack it,
        # and the relay's sweeper will not close a row HUD left in progress.
        return Delivery(http_status=400, answer="already recorded", attempts=attempts,
                        detail=f"the relay had recorded an earlier attempt (the retry got {detail})",
                        warning=f"the relay recorded it, but its first answer was {sent.earlier or 'lost'}: "
                                "HUD may not have this result")
    raise RelayError(f"relay callback: {detail}")
