"""What a relay dispatch asks for: the envelope read and validated, and the plan it starts.

The relay (pytorch/test-infra, `aws/lambda/cross_repo_ci_relay`) forwards PyTorch
pull-request webhooks for the actions `opened`, `reopened`, `synchronize` and `closed`
to every allow-listed repository as a `repository_dispatch` whose event type is the
webhook's (`pull_request`) and whose `client_payload` is an envelope
`{event_type, delivery_id, payload}`, `payload` being the raw webhook.

Everything in the envelope comes from outside: the PR number, the SHAs, the delivery
id and the labels are validated before they are used, and nothing else of it (title,
branch, body) is ever read.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ootci.runner.core.errors import RelayError, UsageError
from ootci.runner.manifests.manifest import Manifest
from ootci.runner.models import COMMIT_SHA, DELIVERY_ID

EVENT_TYPE = "pull_request"
RUN_ACTIONS = frozenset({"opened", "reopened", "synchronize"})
CANCEL_ACTIONS = frozenset({"closed"})

GATE_LABEL = "ciflow/oot"
"""On a PyTorch PR: run every backend that takes pull requests; `ciflow/oot/<backend>` runs one."""
LABEL_ENV = "OOTCI_PR_LABEL"
"""Another gate label, e.g. the relay's own `ciflow/crcr/<device>` of an L3 listing."""
DEFAULT_ENV = "OOTCI_PR_DEFAULT"
"""What an unlabelled PR runs: `none`, or the name of one backend (e.g. `openreg`)."""

# Always used with fullmatch: with re.match, a `$` would let a trailing newline through.
_DELIVERY_ID = re.compile(DELIVERY_ID)
_SHA = re.compile(COMMIT_SHA)
_PR_NUMBER = re.compile(r"[0-9]{1,8}")
_WORD = re.compile(r"[a-z_]{1,64}")
_BACKEND_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9/_.:-]{0,49}")


def shown(value: Any, limit: int = 60) -> str:
    """A value from outside, quoted for a one-line message: repr escapes newlines and quotes."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- the dispatch ------------------------------------------------------------------


@dataclass(frozen=True)
class Dispatch:
    """What one relay dispatch says, validated. `envelope` is kept exactly as received."""

    envelope: dict[str, Any]
    event_type: str
    delivery_id: str
    action: str | None = None
    pr: int | None = None
    head_sha: str | None = None
    base_sha: str | None = None
    labels: tuple[str, ...] = ()


def load_envelope(path: Path) -> tuple[dict[str, Any], str]:
    """The envelope in a JSON file, and the prefix naming where it was in it.

    `$GITHUB_EVENT_PATH` of a `repository_dispatch` holds the envelope under
    `client_payload`; a file holding the envelope itself is read as it is.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RelayError(f"relay event {path}: cannot read: {exc.strerror}") from None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RelayError(f"relay event {path}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RelayError(f"relay event {path}: expected a JSON object, got {type(data).__name__}")
    if "client_payload" in data:
        envelope, where = data["client_payload"], "client_payload."
        if not isinstance(envelope, dict):
            raise RelayError(f"relay event {path}: field 'client_payload': expected the relay's envelope "
                             f"(an object), got {shown(envelope)}")
        return envelope, where
    return data, ""


def read_event(path: Path) -> Dispatch:
    envelope, where = load_envelope(path)
    return parse(envelope, where=where, source=str(path))


def parse(envelope: dict[str, Any], *, where: str = "", source: str | None = None) -> Dispatch:
    """Validate an envelope; a bad field is one RelayError naming it (`where` prefixes its path)."""

    def fail(path: str, expected: str, value: Any = None, *, missing: bool = False) -> RelayError:
        got = "missing" if missing else f"got {shown(value)}"
        prefix = f"relay event {source}" if source else "relay event"
        return RelayError(f"{prefix}: field '{where}{path}': expected {expected}, {got}")

    def get(obj: Any, path: str, expected: str) -> Any:
        node = obj
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                raise fail(path, expected, missing=True)
            node = node[part]
        return node

    def text(obj: Any, path: str, pattern: re.Pattern[str], expected: str) -> str:
        value = get(obj, path, expected)
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise fail(path, expected, value)
        return value

    event_type = text(envelope, "event_type", _WORD, "a webhook event name such as 'pull_request'")
    delivery_id = text(envelope, "delivery_id", _DELIVERY_ID, "a delivery id (1-64 letters, digits, '-')")
    payload = get(envelope, "payload", "the webhook payload (an object)")
    if not isinstance(payload, dict):
        raise fail("payload", "the webhook payload (an object)", payload)
    if event_type != EVENT_TYPE:
        return Dispatch(envelope=envelope, event_type=event_type, delivery_id=delivery_id)

    action = text(envelope, "payload.action", _WORD, "a pull_request action such as 'opened'")
    number = get(envelope, "payload.pull_request.number", "a PR number (1-8 digits)")
    if isinstance(number, bool) or not isinstance(number, (int, str)) or not _PR_NUMBER.fullmatch(str(number)) \
            or int(number) == 0:
        raise fail("payload.pull_request.number", "a PR number (1-8 digits)", number)
    head = text(envelope, "payload.pull_request.head.sha", _SHA, "a commit SHA (40 lowercase hex digits)")
    base = text(envelope, "payload.pull_request.base.sha", _SHA, "a commit SHA (40 lowercase hex digits)")
    raw_labels = get(envelope, "payload.pull_request.labels", "a list of labels")
    if not isinstance(raw_labels, list):
        raise fail("payload.pull_request.labels", "a list of labels", raw_labels)
    labels = []
    for i, label in enumerate(raw_labels):
        if not isinstance(label, dict) or not isinstance(label.get("name"), str):
            raise fail(f"payload.pull_request.labels.{i}", "a label (an object with a string 'name')", label)
        labels.append(label["name"])
    return Dispatch(envelope=envelope, event_type=event_type, delivery_id=delivery_id, action=action,
                    pr=int(number), head_sha=head, base_sha=base, labels=tuple(labels))


# -- the plan ----------------------------------------------------------------------


@dataclass
class Plan:
    """What a dispatch starts: `run` the backends, `cancel` (the PR was closed) or `ignore`."""

    action: str
    reason: str
    event_type: str
    delivery_id: str
    pr: int | None = None
    head_sha: str | None = None
    base_sha: str | None = None
    backends: list[str] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "pr": self.pr, "head_sha": self.head_sha, "base_sha": self.base_sha,
                "delivery_id": self.delivery_id, "event_type": self.event_type, "backends": self.backends,
                "left_out": self.left_out, "reason": self.reason}


def default_choice(given: str | None, manifests: list[Manifest]) -> str:
    """The backend an unlabelled PR runs (`none` for nothing): the option, else $OOTCI_PR_DEFAULT."""
    choice = (given if given is not None else os.environ.get(DEFAULT_ENV, "")).strip() or "none"
    names = [m.name for m in manifests]
    if choice != "none" and choice not in names:
        source = "--default" if given is not None else f"${DEFAULT_ENV}"
        raise UsageError(f"{source}: expected 'none' or a registered backend ({', '.join(names)}), "
                         f"got {shown(choice)}")
    return choice


def gate_label(given: str | None) -> str:
    """The gate label: the option, else $OOTCI_PR_LABEL, else ciflow/oot."""
    label = (given if given is not None else os.environ.get(LABEL_ENV, "")).strip() or GATE_LABEL
    if not _LABEL.fullmatch(label) or label.endswith("/"):
        source = "--label" if given is not None else f"${LABEL_ENV}"
        raise UsageError(f"{source}: expected a label such as {GATE_LABEL!r} (letters, digits, '/', '_', '.', "
                         f"':', '-'), got {shown(label)}")
    return label


def select(labels: Iterable[str], manifests: list[Manifest], default: str,
           gate: str = GATE_LABEL) -> tuple[list[str], dict[str, str], str]:
    """(backends to run, {backend: why it does not run}, how they were chosen) for a PR's labels.

    Labels are compared as strings, never interpreted: `gate` (ciflow/oot) selects every
    backend that takes pull requests, `<gate>/<name>` that backend; without either, `default`.
    """
    gates = {m.name: m.pull_request_gate() for m in manifests}
    labels = list(labels)
    prefix = gate + "/"
    named = list(dict.fromkeys(label[len(prefix):] for label in labels if label.startswith(prefix)))
    known = [n for n in named if n in gates]
    # A label naming no backend is reported only when it could be a backend's name at all.
    unknown = [n for n in named if n not in gates and _BACKEND_NAME.fullmatch(n)]
    if gate in labels:
        asked, how = list(gates), f"label {gate}"
    elif known:
        asked, how = known, "label " + ", ".join(prefix + n for n in known)
    elif default != "none":
        asked, how = [default], f"no {gate} label: the default for unlabelled PRs is {default}"
    else:
        asked, how = [], f"no {gate} label, and the default for unlabelled PRs is none"
    chosen = [n for n in asked if gates[n] is None]
    left_out = {n: why for n in asked if (why := gates[n]) is not None}
    for name in unknown:
        left_out[name] = f"label {prefix}{name}: no backend of that name is registered"
    return chosen, left_out, how


def plan(dispatch: Dispatch, manifests: list[Manifest], default: str = "none", gate: str = GATE_LABEL) -> Plan:
    base: dict[str, Any] = dict(event_type=dispatch.event_type, delivery_id=dispatch.delivery_id, pr=dispatch.pr,
                                head_sha=dispatch.head_sha, base_sha=dispatch.base_sha)
    if dispatch.event_type != EVENT_TYPE:
        return Plan(action="ignore", reason=f"event {dispatch.event_type!r} is not a pull request", **base)
    if dispatch.action in CANCEL_ACTIONS:
        return Plan(action="cancel", reason=f"PR #{dispatch.pr} was {dispatch.action}: runs of it stop, "
                    "nothing new starts", **base)
    if dispatch.action not in RUN_ACTIONS:
        return Plan(action="ignore", reason=f"pull_request action {dispatch.action!r} starts nothing "
                    f"(only {', '.join(sorted(RUN_ACTIONS))} do)", **base)
    chosen, left_out, how = select(dispatch.labels, manifests, default, gate)
    if not chosen:
        return Plan(action="ignore", reason=f"nothing to run: {how}", left_out=left_out, **base)
    return Plan(action="run", reason=how, backends=chosen, left_out=left_out, **base)
