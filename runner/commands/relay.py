"""`ootci relay plan` and `ootci relay report`: PyTorch's cross-repository CI relay (see runner/relay.py).

`plan` reads the relay's dispatch (the `repository_dispatch` event file) and says what it
starts; `report` tells the relay how the run is going, once `in_progress` and once
`completed`. Both only read: run records are never written or removed here.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from ootci.runner import relay
from ootci.runner.commands.registry import matrix_entries
from ootci.runner.core.errors import OotciError, RelayError, UsageError
from ootci.runner.core.http import Retry
from ootci.runner.manifests import registry
from ootci.runner.models import COMMIT_SHA, DELIVERY_ID
from ootci.runner.stages.report import append_to_github_file, escape_workflow_command


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("relay", help="PyTorch's cross-repository CI relay: plan a dispatch, report back")
    rsub = p.add_subparsers(dest="relay_command", metavar="ACTION", required=True)

    pl = rsub.add_parser("plan", help="what a relay dispatch starts: run (and which backends), cancel or ignore")
    pl.add_argument("event", type=Path, metavar="EVENT_JSON",
                    help="the dispatch: $GITHUB_EVENT_PATH of a repository_dispatch, or the envelope itself")
    pl.add_argument("--default", metavar="NAME",
                    help="what a PR without the gate label runs: 'none' or a backend name "
                         f"(default: ${relay.DEFAULT_ENV}, else none)")
    pl.add_argument("--label", metavar="LABEL",
                    help=f"the gate label: it runs every backend that takes PRs, LABEL/<backend> runs one "
                         f"(default: ${relay.LABEL_ENV}, else {relay.GATE_LABEL})")
    pl.add_argument("--manifest", type=Path, action="append", metavar="PATH",
                    help="plan over this backend.toml (repeatable; a vendor's repository) instead of the registry; "
                         "the matrix names it by its path, as backend.yml takes it")
    pl.add_argument("--github-output", action="store_true",
                    help="also write action, pr, head_sha, base_sha, delivery_id and matrix to $GITHUB_OUTPUT")
    pl.set_defaults(func=cmd_plan)

    rp = rsub.add_parser("report", help="report a run's status to the relay (sent once; retried only when "
                                        "the relay cannot have taken it)")
    rp.add_argument("event", type=Path, metavar="EVENT_JSON", help="the dispatch the run answers")
    rp.add_argument("--status", required=True, choices=relay.STATUSES)
    rp.add_argument("--conclusion", choices=relay.CONCLUSIONS,
                    help="for --status completed (default: from --records: success when every run passed)")
    rp.add_argument("--in-progress-first", action="store_true",
                    help="with --status completed: send in_progress first, for an attempt that no in_progress "
                         "opened (a re-run of only this job); the relay refuses a second in_progress")
    rp.add_argument("--records", type=Path, metavar="DIR", help="run records to summarise as test_results")
    rp.add_argument("--baseline", type=Path, metavar="DIR",
                    help="run history to compare with: failures not in the latest nightly of a backend are new")
    rp.add_argument("--page-url", metavar="URL", help="the page showing this run (in test_results)")
    rp.add_argument("--torch-instead", metavar="SPEC",
                    help="the torch that ran instead of the PR's build (a repository's OOTCI_PR_TORCH): named in "
                         "the check's name, in test_results and in the log, so that no report passes it off as "
                         "the PR's")
    rp.add_argument("--url", metavar="URL", help=f"the relay's callback URL (default: ${relay.CALLBACK_URL_ENV}; "
                                                 "without one nothing is sent)")
    rp.add_argument("--check-run-id", metavar="ID", help="default: $OOTCI_CHECK_RUN_ID, else "
                                                         "$GITHUB_RUN_ID-$GITHUB_RUN_ATTEMPT")
    rp.add_argument("--job-name", metavar="NAME", help="default: $OOTCI_RELAY_JOB_NAME, else $GITHUB_JOB")
    rp.add_argument("--workflow-name", metavar="NAME", help="default: $GITHUB_WORKFLOW")
    rp.add_argument("--audience", default=relay.AUDIENCE, help=f"of the OIDC token (default {relay.AUDIENCE})")
    rp.add_argument("--attempts", type=int, default=_env_number("OOTCI_RELAY_ATTEMPTS", 5, int),
                    help="tries in all (default 5, or $OOTCI_RELAY_ATTEMPTS)")
    rp.add_argument("--backoff", type=float, default=_env_number("OOTCI_RELAY_BACKOFF", 2.0, float),
                    help="seconds before the first retry, doubled after each (default 2, or $OOTCI_RELAY_BACKOFF)")
    rp.add_argument("--timeout", type=float, default=_env_number("OOTCI_RELAY_TIMEOUT", 30.0, float),
                    help="seconds one try may take (default 30, or $OOTCI_RELAY_TIMEOUT)")
    rp.set_defaults(func=cmd_report)


def _env_number(name: str, default, kind):
    value = os.environ.get(name, "").strip()
    try:
        return kind(value) if value else default
    except ValueError:
        return default


def _on_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


# -- plan --------------------------------------------------------------------------

_OUTPUT_VALUES = {
    "action": re.compile(r"(run|cancel|ignore)"),
    "pr": re.compile(r"[0-9]{0,8}"),
    "head_sha": re.compile(f"({COMMIT_SHA})?"),
    "base_sha": re.compile(f"({COMMIT_SHA})?"),
    "delivery_id": re.compile(DELIVERY_ID),
    "matrix": re.compile(r"\{[^\r\n]*\}"),
}


def output_lines(plan: relay.Plan, matrix: dict) -> str:
    """`name=value` lines for $GITHUB_OUTPUT, each value checked against what it may be."""
    values = {
        "action": plan.action, "pr": str(plan.pr or ""), "head_sha": plan.head_sha or "",
        "base_sha": plan.base_sha or "", "delivery_id": plan.delivery_id,
        "matrix": json.dumps(matrix, separators=(",", ":")),
    }
    for name, value in values.items():
        if not _OUTPUT_VALUES[name].fullmatch(value):  # validated on the way in: this is the last guard
            raise RelayError(f"relay plan: output {name} is not what it may be: {value[:60]!r}")
    return "".join(f"{name}={value}\n" for name, value in values.items())


def cmd_plan(args: argparse.Namespace) -> int:
    dispatch = relay.read_event(args.event)
    manifests = [registry.resolve(str(p)) for p in args.manifest] if args.manifest else registry.load_all()
    default = relay.default_choice(args.default, manifests)
    result = relay.plan(dispatch, manifests, default, relay.gate_label(args.label))
    by_name = {m.name: m for m in manifests}
    chosen = [by_name[n] for n in result.backends]
    entries = matrix_entries(chosen, None, for_pr=True)
    if args.manifest:  # backend.yml resolves a path, not the name of a manifest outside the registry
        entries = [{**entry, "name": registry.reference(by_name[entry["name"]])} for entry in entries]
    matrix = {"include": entries}
    for name, why in result.left_out.items():
        print(f"ootci relay plan: {name} left out: {why}", file=sys.stderr)
    print(f"ootci relay plan: {result.action}: {result.reason}", file=sys.stderr)
    if args.github_output:
        if not os.environ.get("GITHUB_OUTPUT"):
            raise UsageError("--github-output: $GITHUB_OUTPUT is not set")
        append_to_github_file("GITHUB_OUTPUT", output_lines(result, matrix))
    print(json.dumps({**result.as_dict(), "matrix": matrix}, indent=2))
    return 0


# -- report ------------------------------------------------------------------------


def cmd_report(args: argparse.Namespace) -> int:
    """A report that fails fails this command alone: one line (an annotation on Actions), exit code 11."""
    try:
        return _report(args)
    except OotciError as exc:
        error = exc
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, the job's other steps and records stay
        error = RelayError(f"relay report: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
    if _on_actions():
        print(f"::error title=ootci relay report::{escape_workflow_command(error.message)}", flush=True)
    raise error from None


def _report(args: argparse.Namespace) -> int:
    if args.status == "in_progress" and args.conclusion:
        raise UsageError("--conclusion: only --status completed has one")
    if args.status == "completed" and not args.conclusion and args.records is None:
        raise UsageError("--status completed needs --conclusion or --records to take it from")
    if args.in_progress_first and args.status != "completed":
        raise UsageError("--in-progress-first: only with --status completed")
    if args.attempts < 1 or args.backoff < 0 or args.timeout <= 0:
        raise UsageError("--attempts must be at least 1, --backoff at least 0 and --timeout more than 0")
    url = (args.url or os.environ.get(relay.CALLBACK_URL_ENV, "")).strip()
    if not url:
        line = (f"ootci relay: no callback URL (--url or ${relay.CALLBACK_URL_ENV}): "
                f"the {args.status} report was not sent")
        print(line)
        append_to_github_file("GITHUB_STEP_SUMMARY", line + "\n\n")
        return 0

    dispatch = relay.read_event(args.event)
    torch_instead = relay.torch_instead(args.torch_instead)
    workflow = relay.Workflow.from_env(name=args.workflow_name, job_name=args.job_name,
                                       check_run_id=args.check_run_id)
    if torch_instead:
        workflow = relay.not_the_prs_torch(workflow, torch_instead)
    test_results = None
    conclusion = args.conclusion
    if args.records is not None:
        records, rejected = relay.read_records(args.records)
        if dispatch.pr is not None:  # records of another PR in the same directory are not this run's
            records = [r for r in records if r.pr in (None, dispatch.pr)]
        baseline = relay.read_records(args.baseline)[0] if args.baseline else None
        page_url = (args.page_url or "")[:500] or None
        test_results = relay.summarize(records, page_url=page_url, baseline=baseline, rejected=rejected)
        if args.status == "completed" and not conclusion:
            conclusion = relay.conclusion_of(records)
    elif args.page_url:
        test_results = {"schema": "ootci/1", "page_url": args.page_url[:500]}
    if args.status == "in_progress":
        conclusion = None
    if torch_instead:
        test_results = {**(test_results or {"schema": "ootci/1"}), "torch_instead_of_pr": torch_instead}

    retry = Retry(attempts=args.attempts, backoff_s=args.backoff, timeout_s=args.timeout)
    delivery = relay.report(dispatch.envelope, args.status, conclusion, url=url, workflow=workflow,
                            test_results=test_results, audience=args.audience,
                            in_progress_first=args.in_progress_first, retry=retry)

    what = args.status + (f" ({conclusion})" if conclusion else "")
    subject = f"PR #{dispatch.pr}" if dispatch.pr is not None else f"delivery {dispatch.delivery_id}"
    if delivery.ignored:
        line = (f"ootci relay: the relay ignored the {what} report for {subject}: it takes reports only "
                "from repositories it lists at L2 or above")
        print(f"::warning title=ootci relay report::{escape_workflow_command(line)}" if _on_actions() else line)
    else:
        line = (f"ootci relay: reported {what} for {subject} (job {workflow.job_name}, check run "
                f"{workflow.check_run_id}): HTTP {delivery.http_status} {delivery.answer}"
                + (f" after {delivery.attempts} attempts" if delivery.attempts > 1 else "")
                + (f"; {delivery.detail}" if delivery.detail else "")
                + (f"; torch {torch_instead} ran, not the PR's build" if torch_instead else ""))
        print(line)
    append_to_github_file("GITHUB_STEP_SUMMARY", line + "\n\n")
    return 0
