"""PyTorch's cross-repository CI relay (RFC-0050), from ootci's side.

Owns what a dispatch asks for (dispatch: the envelope validated, the plan), the body of a
callback (envelope: `workflow` and a nightly's own envelope), the relay's jobs and their
numbers (results), the failing tests HUD shows (detail), the triage verdict (verdict), the
callbacks of a run (reporting) and the HTTP side (client: OIDC token, POST, pace).

May import core, manifests, performance, records and models; never stages or commands.
"""

from ootci.runner.relay.client import AUDIENCE, RATE_LIMIT, Delivery, Pacer, check_url, id_token, post
from ootci.runner.relay.dispatch import (
    DEFAULT_ENV,
    EVENT_TYPE,
    GATE_LABEL,
    LABEL_ENV,
    Dispatch,
    Plan,
    default_choice,
    gate_label,
    load_envelope,
    parse,
    plan,
    read_event,
    select,
)
from ootci.runner.relay.envelope import (
    CONCLUSIONS,
    NIGHTLY_EVENT_TYPES,
    STATUSES,
    Extras,
    Workflow,
    callback_body,
    job_name,
    nightly_envelope,
    not_the_prs_torch,
    torch_instead,
)
from ootci.runner.relay.reporting import BODY_LIMIT, Callback, Sender, completed, opening, plan_completed
from ootci.runner.relay.results import Job, jobs_of, latest_nightlies, read_records, tested_commit, totals

CALLBACK_URL_ENV = "OOTCI_RELAY_CALLBACK_URL"

__all__ = [
    "AUDIENCE", "BODY_LIMIT", "CALLBACK_URL_ENV", "CONCLUSIONS", "DEFAULT_ENV", "EVENT_TYPE", "GATE_LABEL",
    "LABEL_ENV", "NIGHTLY_EVENT_TYPES", "RATE_LIMIT", "STATUSES", "Callback", "Delivery", "Dispatch", "Extras", "Job",
    "Pacer", "Plan", "Sender", "Workflow", "callback_body", "check_url", "completed", "default_choice", "gate_label",
    "id_token", "job_name", "jobs_of", "latest_nightlies", "load_envelope", "nightly_envelope", "not_the_prs_torch",
    "opening", "parse", "plan", "plan_completed", "post", "read_event", "read_records", "select", "tested_commit",
    "torch_instead", "totals",
]
