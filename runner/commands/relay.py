"""`ootci relay plan|report|nightly`: PyTorch's cross-repository CI relay (see runner/relay/).

`plan` reads the relay's dispatch (the `repository_dispatch` event file) and says what it
starts; `report` tells the relay how a PR run is going, `in_progress` for each job when it
starts and `completed` for each when it ends; `nightly` reports a night's results, one
`completed` per backend under the pytorch/pytorch commit it tested. None of them writes:
run records are never written or removed here.
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
from ootci.runner.core import git
from ootci.runner.core.errors import GitError, OotciError, RelayError, UpstreamTestsError, UsageError
from ootci.runner.core.http import Retry
from ootci.runner.manifests import registry
from ootci.runner.models import COMMIT_SHA, DELIVERY_ID
from ootci.runner.stages.report import append_to_github_file, escape_workflow_command
from ootci.runner.torch_supply import torch_source, torch_tests


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

    rp = rsub.add_parser("report", help="report a PR run's status to the relay, per job (sent once; retried only "
                                        "when the relay cannot have taken it)")
    rp.add_argument("event", type=Path, metavar="EVENT_JSON", help="the dispatch the run answers")
    rp.add_argument("--status", required=True, choices=relay.STATUSES)
    rp.add_argument("--conclusion", choices=relay.CONCLUSIONS,
                    help="for --status completed (default: from --records, per job: success when its runs passed)")
    rp.add_argument("--jobs", metavar="NAMES",
                    help="comma-separated job names, one per backend (relay plan's `jobs`): in_progress opens each; "
                         "completed closes each, a job without records as lost (default: one job, --job-name)")
    rp.add_argument("--in-progress-first", action="store_true",
                    help="with --status completed: no in_progress of this attempt opened the jobs (a re-run of only "
                         "the reporting job): open each right before its completed")
    rp.add_argument("--records", type=Path, metavar="DIR", help="run records: one completed per backend found")
    rp.add_argument("--baseline", type=Path, metavar="DIR",
                    help="run history to compare with: failures not in the latest nightly of a backend are new")
    _common(rp)
    rp.add_argument("--torch-instead", metavar="SPEC",
                    help="the torch that ran instead of the PR's build (a repository's OOTCI_PR_TORCH): named in "
                         "the check's name, in test_results and in the log, so that no report passes it off as "
                         "the PR's")
    rp.set_defaults(func=cmd_report)

    ng = rsub.add_parser("nightly", help="report a night's results to the relay (RFC-0056): one completed per "
                                         "backend, under the pytorch/pytorch commit its torch was built from")
    ng.add_argument("records", type=Path, metavar="DIR", help="the night's run records")
    ng.add_argument("--all", action="store_true",
                    help="every backend (the workflow's `relay` input); default: those whose manifest says "
                         "[ci] relay = true")
    ng.add_argument("--manifest", type=Path, action="append", metavar="PATH",
                    help="a vendor's backend.toml whose [ci] relay decides (repeatable); default: the registry")
    ng.add_argument("--event-type", default="nightly", choices=relay.NIGHTLY_EVENT_TYPES)
    ng.add_argument("--matrix", metavar="JSON",
                    help="the run's matrix (ootci matrix): only the backends it ran are reported")
    ng.add_argument("--trigger", metavar="TRIGGER",
                    help="report only records of this trigger (nightly, or manual for a run by hand), as publish "
                         "takes them")
    _common(ng)
    ng.set_defaults(func=cmd_nightly)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--page-url", metavar="URL",
                   help="report: the run's page on the status site, each job's artifact_url; nightly: the status "
                        "site, each job's artifact_url its backend's page there (default: the workflow run)")
    p.add_argument("--no-verdict", action="store_true",
                   help="send no triage_verdict (for a relay that does not take one)")
    p.add_argument("--url", metavar="URL", help=f"the relay's callback URL (default: ${relay.CALLBACK_URL_ENV}; "
                                                "without one nothing is sent)")
    p.add_argument("--check-run-id", metavar="ID", help="default: $OOTCI_CHECK_RUN_ID, else "
                                                        "$GITHUB_RUN_ID-$GITHUB_RUN_ATTEMPT")
    p.add_argument("--job-name", metavar="NAME", help="default: $OOTCI_RELAY_JOB_NAME, else $GITHUB_JOB")
    p.add_argument("--workflow-name", metavar="NAME", help="default: $GITHUB_WORKFLOW")
    p.add_argument("--audience", default=relay.AUDIENCE, help=f"of the OIDC token (default {relay.AUDIENCE})")
    p.add_argument("--attempts", type=int, default=_env_number("OOTCI_RELAY_ATTEMPTS", 5, int),
                   help="tries in all (default 5, or $OOTCI_RELAY_ATTEMPTS)")
    p.add_argument("--backoff", type=float, default=_env_number("OOTCI_RELAY_BACKOFF", 2.0, float),
                   help="seconds before the first retry, doubled after each (default 2, or $OOTCI_RELAY_BACKOFF)")
    p.add_argument("--timeout", type=float, default=_env_number("OOTCI_RELAY_TIMEOUT", 30.0, float),
                   help="seconds one try may take (default 30, or $OOTCI_RELAY_TIMEOUT)")


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
    "jobs": re.compile(r"[A-Za-z0-9_.,-]*"),
}


def output_lines(plan: relay.Plan, matrix: dict, jobs: list[str] | None = None) -> str:
    """`name=value` lines for $GITHUB_OUTPUT, each value checked against what it may be. `jobs`: the
    relay's job names, one per backend (each its own check run), for the reports to open and close."""
    values = {
        "action": plan.action, "pr": str(plan.pr or ""), "head_sha": plan.head_sha or "",
        "base_sha": plan.base_sha or "", "delivery_id": plan.delivery_id,
        "matrix": json.dumps(matrix, separators=(",", ":")), "jobs": ",".join(jobs or []),
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
    jobs = [relay.job_name(entry["name"]) for entry in entries]
    if args.manifest:  # backend.yml resolves a path, not the name of a manifest outside the registry
        entries = [{**entry, "name": registry.reference(by_name[entry["name"]])} for entry in entries]
    matrix = {"include": entries}
    for name, why in result.left_out.items():
        print(f"ootci relay plan: {name} left out: {why}", file=sys.stderr)
    print(f"ootci relay plan: {result.action}: {result.reason}", file=sys.stderr)
    if args.github_output:
        if not os.environ.get("GITHUB_OUTPUT"):
            raise UsageError("--github-output: $GITHUB_OUTPUT is not set")
        append_to_github_file("GITHUB_OUTPUT", output_lines(result, matrix, jobs))
    print(json.dumps({**result.as_dict(), "matrix": matrix, "jobs": jobs}, indent=2))
    return 0


# -- report ------------------------------------------------------------------------


def _fail_alone(run) -> int:
    """A report that fails fails this command alone: one line (an annotation on Actions), exit code 11."""
    try:
        return run()
    except OotciError as exc:
        error = exc
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, the job's other steps and records stay
        error = RelayError(f"relay report: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
    if _on_actions():
        print(f"::error title=ootci relay report::{escape_workflow_command(error.message)}", flush=True)
    raise error from None


def cmd_report(args: argparse.Namespace) -> int:
    return _fail_alone(lambda: _report(args))


def cmd_nightly(args: argparse.Namespace) -> int:
    return _fail_alone(lambda: _nightly(args))


def _say(line: str, *, warning: bool = False) -> None:
    print(f"::warning title=ootci relay report::{escape_workflow_command(line)}" if warning and _on_actions()
          else line, flush=True)
    append_to_github_file("GITHUB_STEP_SUMMARY", line + "\n\n")


def _names(text: str | None) -> list[str]:
    return [relay.job_name(n.strip(), "--jobs") for n in (text or "").split(",") if n.strip()]


def _check_options(args: argparse.Namespace) -> str | None:
    """The callback URL, or None (nothing is sent: said, exit 0)."""
    if args.attempts < 1 or args.backoff < 0 or args.timeout <= 0:
        raise UsageError("--attempts must be at least 1, --backoff at least 0 and --timeout more than 0")
    url = (args.url or os.environ.get(relay.CALLBACK_URL_ENV, "")).strip()
    return relay.check_url(url, "callback URL") if url else None


def _sender(args: argparse.Namespace, url: str) -> relay.Sender:
    return relay.Sender(url=url, audience=args.audience,
                        retry=Retry(attempts=args.attempts, backoff_s=args.backoff, timeout_s=args.timeout))


def _send_all(sender: relay.Sender, callbacks: list[relay.Callback], subject: str, extra: str = "") -> None:
    """Each callback in turn; one refused stops none of the others, and fails the command at the end."""
    errors: list[RelayError] = []
    for callback in callbacks:
        report = callback.body["workflow"]
        what = report["status"] + (f" ({report['conclusion']})" if report["conclusion"] else "")
        try:
            delivery = sender.send(callback)
        except RelayError as exc:
            errors.append(exc)
            continue
        if delivery.ignored:
            _say(f"ootci relay: the relay ignored the {what} report for {subject}: it takes reports only "
                 "from repositories it lists at L2 or above", warning=True)
            continue
        line = (f"ootci relay: reported {what} for {subject} (job {report['job_name']}): "
                f"HTTP {delivery.http_status} {delivery.answer}"
                + (f" after {delivery.attempts} attempts" if delivery.attempts > 1 else "")
                + (f"; {delivery.detail}" if delivery.detail else "") + extra)
        if delivery.warning:
            _say(f"{line}. Warning: {delivery.warning}", warning=True)
        else:
            _say(line)
    if errors:
        more = f" (and {len(errors) - 1} more refused)" if len(errors) > 1 else ""
        raise RelayError(errors[0].message + more)


def _report(args: argparse.Namespace) -> int:
    if args.status == "in_progress" and args.conclusion:
        raise UsageError("--conclusion: only --status completed has one")
    if args.status == "completed" and not args.conclusion and args.records is None:
        raise UsageError("--status completed needs --conclusion or --records to take it from")
    if args.in_progress_first and args.status != "completed":
        raise UsageError("--in-progress-first: only with --status completed")
    url = _check_options(args)
    if url is None:
        _say(f"ootci relay: no callback URL (--url or ${relay.CALLBACK_URL_ENV}): the {args.status} report was "
             "not sent")
        return 0

    dispatch = relay.read_event(args.event)
    torch_instead = relay.torch_instead(args.torch_instead)
    workflow = relay.Workflow.from_env(name=args.workflow_name, job_name=args.job_name,
                                       check_run_id=args.check_run_id)
    if torch_instead:
        workflow = relay.not_the_prs_torch(workflow, torch_instead)
    named = _names(args.jobs)
    subject = f"PR #{dispatch.pr}" if dispatch.pr is not None else f"delivery {dispatch.delivery_id}"
    extra = f"; torch {torch_instead} ran, not the PR's build" if torch_instead else ""
    stand_in = {"schema": "ootci/1", "torch_instead_of_pr": torch_instead} if torch_instead else None
    page_url = (args.page_url or "")[:500] or None
    # The jobs an in_progress of this attempt opened: those named, else the one job of --job-name.
    opened = set() if args.in_progress_first else set(named or [workflow.job_name])

    if args.status == "in_progress":
        callbacks = [relay.Callback(relay.callback_body(dispatch.envelope, "in_progress", None, workflow.for_job(name),
                                                        extras=relay.Extras(test_results=stand_in)))
                     for name in named or [workflow.job_name]]
    elif args.records is None:
        bodies = [relay.callback_body(dispatch.envelope, "completed", args.conclusion, workflow.for_job(name),
                                      extras=relay.Extras(test_results=stand_in, artifact_url=page_url or workflow.url))
                  for name in named or [workflow.job_name]]
        callbacks = relay.plan_completed(bodies, opened)
    else:
        records, rejected = relay.read_records(args.records, with_tests=True)
        if rejected:
            print(f"ootci relay: {rejected} record(s) under {args.records} do not load: left out", file=sys.stderr)
        if dispatch.pr is not None:  # records of another PR in the same directory are not this run's
            records = [r for r in records if r.pr in (None, dispatch.pr)]
        baseline = relay.read_records(args.baseline)[0] if args.baseline else None
        nightlies = relay.latest_nightlies(baseline or [])
        # Every job named is closed, one that left no record as lost; without names, the records' jobs.
        bodies = [relay.completed(dispatch.envelope, workflow, job, conclusion=args.conclusion,
                                  nightly=nightlies.get(job.name), baseline=baseline, page_url=page_url,
                                  torch_instead=torch_instead, with_verdict=not args.no_verdict)
                  for job in relay.jobs_of(records, named)]
        callbacks = relay.plan_completed(bodies, opened)
    _send_all(_sender(args, url), callbacks, subject, extra)
    return 0


# -- nightly -----------------------------------------------------------------------


def resolve_release(version: str) -> str | None:
    """The commit of a release's tag in PyTorch's repository (git ls-remote), or None."""
    try:
        tag = torch_tests.torch_ref(version, None)
    except UpstreamTestsError:
        return None
    try:
        listed = git.git(None, "ls-remote", torch_source.torch_repo(), f"refs/tags/{tag}", f"refs/tags/{tag}^{{}}")
    except GitError:
        return None
    found: dict[str, str] = {}
    for line in listed.splitlines():
        commit, _, ref = line.partition("\t")
        found[ref.strip()] = commit.strip()
    return found.get(f"refs/tags/{tag}^{{}}") or found.get(f"refs/tags/{tag}")


def _matrix_names(text: str) -> set[str]:
    """The backend names of a matrix as `ootci matrix` prints it ({"include": [{"name": ...}]})."""
    try:
        entries = json.loads(text).get("include")
        names = {e["name"] for e in entries}
    except (ValueError, AttributeError, TypeError, KeyError):
        raise UsageError(f"--matrix: expected the JSON of `ootci matrix`, got {text[:60]!r}") from None
    return {str(n) for n in names}


def _opted_in(args: argparse.Namespace) -> set[str] | None:
    """The backends whose manifest asks for the relay; None: every backend (--all)."""
    if args.all:
        return None
    manifests = [registry.resolve(str(p)) for p in args.manifest] if args.manifest else registry.load_all()
    return {m.name for m in manifests if m.ci.relay}


def _nightly(args: argparse.Namespace) -> int:
    url = _check_options(args)
    if url is None:
        _say(f"ootci relay: no callback URL (--url or ${relay.CALLBACK_URL_ENV}): the night was not reported")
        return 0
    records, rejected = relay.read_records(args.records, with_tests=True)
    if rejected:
        print(f"ootci relay: {rejected} record(s) under {args.records} do not load: left out", file=sys.stderr)
    if args.trigger:
        for r in records:
            if r.trigger != args.trigger:
                _say(f"ootci relay: {r.backend}: run {r.run_id} not reported: its trigger is {r.trigger!r}, "
                     f"this run's is {args.trigger!r}")
        records = [r for r in records if r.trigger == args.trigger]
    if args.matrix is not None:
        ran = _matrix_names(args.matrix)
        for r in records:
            if r.backend not in ran:
                _say(f"ootci relay: {r.backend}: run {r.run_id} not reported: this run's matrix has no such backend")
        records = [r for r in records if r.backend in ran]
    wanted = _opted_in(args)
    workflow = relay.Workflow.from_env(name=args.workflow_name, job_name=args.job_name,
                                       check_run_id=args.check_run_id)
    site = (args.page_url or "")[:400].rstrip("/")
    callbacks: list[relay.Callback] = []
    for job in relay.jobs_of(records):
        if wanted is not None and job.name not in wanted:
            _say(f"ootci relay: {job.name}: not reported: its manifest does not say [ci] relay = true")
            continue
        commit, how = relay.tested_commit(job.records[0], resolve_release)
        if commit is None:
            _say(f"ootci relay: {job.name}: not reported: {how}")
            continue
        envelope = relay.nightly_envelope(commit, args.event_type)
        page_url = f"{site}/backends/{job.name}.html" if site else None  # the backend's page on the status site
        callbacks.append(relay.Callback(relay.completed(envelope, workflow, job, page_url=page_url,
                                                        with_verdict=not args.no_verdict)))
    if not callbacks:
        _say("ootci relay: nothing of this night was reported")
        return 0
    _send_all(_sender(args, url), callbacks, f"the {args.event_type} results")
    return 0
