"""Every HTTP request ootci makes, and the one retry policy they share.

A request is tried again when the answer cannot be the server's last word: no connection,
no answer in time, a connection that broke mid-body, HTTP 429 or 5xx, or a 403 that says
when to come back (`Retry-After`, GitHub's secondary rate limit). Any other answer, a 4xx
included, is the caller's to judge. Between tries the delay doubles from `backoff_s` up to
`max_delay_s`, and a longer `Retry-After` is waited out instead.

`send` is one request; `retrying` is for a caller whose attempt is more than one request's
headers (a download that streams the body, a JSON page that must parse): its attempt raises
`TryAgain` for an answer worth another try. When the tries are spent, `GaveUp` says what the
last one got; each caller turns that into its own error class and words.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import requests

T = TypeVar("T")


@dataclass(frozen=True)
class Retry:
    """How hard to try: attempts in all, the first delay (doubled after each try, capped), the time limit of one try."""

    attempts: int = 5
    backoff_s: float = 2.0
    max_delay_s: float = 60.0
    timeout_s: float = 30.0

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        delay = self.backoff_s * (2 ** (attempt - 1))
        if retry_after and retry_after.strip().isdigit():
            delay = max(delay, float(retry_after))
        return min(delay, self.max_delay_s)

    @property
    def timeouts(self) -> tuple[float, float]:
        """(connect, read) seconds for requests: a host that does not even connect is not waited on long."""
        return min(10.0, self.timeout_s), self.timeout_s


def retryable(response: requests.Response) -> bool:
    status = response.status_code
    return status == 429 or status >= 500 or (status == 403 and "Retry-After" in response.headers)


def excerpt(response: requests.Response, secret: str | None = None) -> str:
    """The server's reason in one short line: the `detail` or `message` of a JSON answer (the
    relay says `detail`, GitHub `message`), else the start of the body; `secret` masked."""
    try:
        data = response.json()
        if isinstance(data, dict):
            data = data.get("detail", data.get("message", data))
        text = data if isinstance(data, str) else json.dumps(data)
    except ValueError:
        text = response.text
    text = " ".join(text.split())
    if secret:
        text = text.replace(secret, "***")
    return text[:300] + ("..." if len(text) > 300 else "")


class TryAgain(Exception):
    """Raised by an attempt whose answer is worth another try (`retryable`)."""

    def __init__(self, response: requests.Response, secret: str | None = None):
        self.reason = f"HTTP {response.status_code}: {excerpt(response, secret)}"
        super().__init__(self.reason)
        self.response = response
        self.retry_after = response.headers.get("Retry-After")


class GaveUp(Exception):
    """Every attempt got an answer worth another try. `last` says what the last one got, and
    `cause` is it: a TryAgain (with its response) or the requests exception."""

    def __init__(self, attempts: int, last: str, cause: Exception):
        super().__init__(f"gave up after {attempts} attempt(s); last: {last}")
        self.attempts = attempts
        self.last = last
        self.cause = cause


@dataclass
class Tried(Generic[T]):
    """What an attempt returned, after how many attempts, and whether an earlier one may have
    reached the server (it timed out waiting for the answer, or got a 5xx): a request that must
    not be made twice (a relay report) needs to know."""

    value: T
    attempts: int
    may_have_landed: bool
    earlier: str = ""
    """what the last try before the answer got (a 5xx, no answer), '' when the first try answered"""


def retrying(attempt: Callable[[], T], *, retry: Retry, sleep: Callable[[float], None] = time.sleep) -> Tried[T]:
    """`attempt()` until it returns; TryAgain and the errors of a network that failed are tried
    again, any other exception is raised at once."""
    attempts = max(1, retry.attempts)
    may_have_landed = False
    cause: Exception
    last = ""
    for number in range(1, attempts + 1):
        retry_after = None
        try:
            return Tried(attempt(), number, may_have_landed, last)
        except TryAgain as again:
            last, cause, retry_after = again.reason, again, again.retry_after
            may_have_landed = may_have_landed or again.response.status_code >= 500
        except requests.ConnectTimeout as exc:
            last, cause = f"no connection within {retry.timeout_s:g} s", exc
        except requests.Timeout as exc:
            last, cause = f"no answer within {retry.timeout_s:g} s", exc
            may_have_landed = True
        except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
            last, cause = f"connection failed ({type(exc).__name__})", exc
            may_have_landed = True
        if number < attempts:
            sleep(retry.delay(number, retry_after))
    raise GaveUp(attempts, last, cause)


def send(session: requests.Session, method: str, url: str, *, retry: Retry,
         sleep: Callable[[float], None] = time.sleep, secret: str | None = None,
         timeout: float | tuple[float, float] | None = None, **kwargs) -> Tried[requests.Response]:
    """One request, tried again per the policy; the first answer that is not `retryable`.
    timeout: for requests (default retry.timeouts); kwargs go to Session.request."""

    def attempt() -> requests.Response:
        response = session.request(method, url, timeout=timeout or retry.timeouts, **kwargs)
        if retryable(response):
            again = TryAgain(response, secret)
            response.close()
            raise again
        return response

    return retrying(attempt, retry=retry, sleep=sleep)
