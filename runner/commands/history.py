"""`ootci history merge` and `ootci history push`: the run history kept on a data branch.

A run record never changes once written, so the history is a directory of run
directories (`<run_id>/record.json` with its logs and JUnit files) and merging new
runs into it is copying the directories it does not have yet. The records of the
shards of a sharded run (`shard` set) are not copied: `ootci shards merge` makes the
one record of that run, which is. `push` commits that
directory and pushes it to a branch (e.g. `ootci-data`), creating the branch on the
first push and replaying onto a newer tip when another job pushed first.

`fill-missing` runs before the merge: every entry of the matrix the backend jobs were
started from gets a record, a `missing` one when its job left none, so no backend
drops off the dashboard because its job never got as far as `ootci run`.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import ValidationError

from ootci.runner import __version__
from ootci.runner.core import atomic
from ootci.runner.history import history_store
from ootci.runner.records import record_files
from ootci.runner.manifests import registry
from ootci.runner.core.errors import GitError, OutputError, PublishError, UnknownBackendError, UsageError
from ootci.runner.core.git import git
from ootci.runner.manifests.manifest import Manifest
from ootci.runner.stages.pipeline import ci_run_url, new_run_id
from ootci.runner.models import BisectRecord, RootCause, RunRecord, StageResult, Status, TorchInfo, reproduce_command
from ootci.runner.commands import history_collect

PUSH_ATTEMPTS = 4
RUNS_DIR = "runs"
"""the history's run directories, in the data branch (the workflows merge into and build from it)"""
GIT_TIMEOUT_S = 300


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="merge run records into a history directory and push it to a branch")
    hsub = p.add_subparsers(dest="history_command", metavar="ACTION", required=True)

    m = hsub.add_parser("merge", help="copy run directories that the history does not have yet")
    m.add_argument("sources", nargs="+", type=Path, metavar="SOURCE",
                   help="directories searched for <run_id>/record.json (e.g. downloaded artifacts)")
    m.add_argument("--into", type=Path, required=True, metavar="DIR", help="the history directory")
    m.add_argument("--missing-ok", action="store_true",
                   help="a SOURCE that does not exist holds no runs (e.g. no job uploaded an artifact)")
    m.set_defaults(func=cmd_merge)

    f = hsub.add_parser("fill-missing", help="write a `missing` record for each matrix entry whose job left none")
    f.add_argument("--matrix", required=True, metavar="MATRIX",
                   help="the JSON `ootci matrix` printed ({\"include\": [...]}), or a file holding it")
    f.add_argument("--runs", type=Path, required=True, metavar="DIR",
                   help="the run directories of this workflow run (e.g. downloaded artifacts); "
                        "the missing records are written here")
    f.add_argument("--reason", metavar="TEXT",
                   help=f"why there is no record (default: {MISSING_WHY})")
    f.add_argument("--trigger", default="nightly", help="trigger of the records written (default nightly)")
    f.add_argument("--pr", type=int, metavar="N", help="PyTorch PR number, for --trigger pr")
    f.set_defaults(func=cmd_fill_missing)

    pr = hsub.add_parser("prune", help="apply the retention policy: headers stay, old test lists go")
    pr.add_argument("runs", type=Path, metavar="DIR", help="the history's runs directory (e.g. history/runs)")
    pr.add_argument("--keep-results-days", type=int, default=history_store.RESULTS_RETENTION_DAYS, metavar="N",
                    help="keep the test lists of runs started in the last N days "
                         f"(default {history_store.RESULTS_RETENTION_DAYS})")
    pr.add_argument("--now", metavar="ISO", help=argparse.SUPPRESS)  # tests: the moment retention counts from
    pr.set_defaults(func=cmd_prune)

    pl = hsub.add_parser("pull", help="clone the data branch, or start an empty history if it does not exist yet")
    pl.add_argument("checkout", type=Path, help="directory to clone into (must not exist or be empty)")
    pl.add_argument("--branch", default="ootci-data", help="branch to clone (default ootci-data)")
    pl.add_argument("--remote", help="remote URL (default: $GITHUB_SERVER_URL/$GITHUB_REPOSITORY)")
    fetch = pl.add_mutually_exclusive_group()
    fetch.add_argument("--latest", type=int, default=history_store.PAGED_RUNS, metavar="N",
                       help="fetch every header but only the newest N run directories of each backend "
                            f"(default {history_store.PAGED_RUNS}: the runs the dashboard gives a page)")
    fetch.add_argument("--full", action="store_true", help="fetch the whole tip (e.g. to prune it)")
    pl.set_defaults(func=cmd_pull)

    pu = hsub.add_parser("push", help="commit a history checkout and push it to a branch")
    pu.add_argument("checkout", type=Path, help="git checkout of the data branch (created if it is not one)")
    pu.add_argument("--branch", default="ootci-data", help="branch to push to (default ootci-data)")
    pu.add_argument("--remote", help="remote URL or name (default: origin, else "
                                     "$GITHUB_SERVER_URL/$GITHUB_REPOSITORY)")
    pu.add_argument("--message", default="ootci: add run records", help="commit message")
    pu.set_defaults(func=cmd_push)

    # `collect` (its own module): the records of a workflow's runs, from their artifacts.
    history_collect.register(hsub)


# -- merge -------------------------------------------------------------------------

def merge(sources: list[Path], into: Path, missing_ok: bool = False) -> dict[str, list[str]]:
    """Add new run directories to the history `into` (see history_store: the header and packed
    tests, no logs); returns run ids by what happened to them."""
    outcome: dict[str, list[str]] = {"added": [], "present": [], "rejected": [], "shards": []}
    into.mkdir(parents=True, exist_ok=True)
    for source in sources:
        if missing_ok and not source.exists():
            continue
        if not source.is_dir():
            raise UsageError(f"history merge: {source} is not a directory")
        for run_dir, record in record_files.find_runs(source):
            if run_dir.resolve().is_relative_to(into.resolve()):
                continue
            if record is None or record.run_id != run_dir.name:
                # A directory named otherwise would shadow or collide with another run.
                outcome["rejected"].append(str(run_dir))
                continue
            if record.shard:
                # One shard of a sharded run: `ootci shards merge` makes the run's record of them.
                outcome["shards"].append(str(run_dir))
                continue
            target = into / record.run_id
            if target.exists():
                outcome["present"].append(record.run_id)
                continue
            try:
                history_store.add_run(run_dir, target)
            except (OSError, ValueError) as exc:
                # Its tests.json does not load: the run cannot be kept as the history keeps runs.
                outcome["rejected"].append(f"{run_dir} ({str(exc).splitlines()[0][:200]})")
                continue
            outcome["added"].append(record.run_id)
    return outcome


def copy_in(source: Path, target: Path) -> None:
    """`source` copied to `target` (replacing it) beside it first, then renamed into place:
    the history never holds half a run or half a bisection."""
    with atomic.directory(target) as staging:
        shutil.copytree(source, staging, dirs_exist_ok=True)


def merge_bisections(sources: list[Path], into: Path) -> dict[str, list[str]]:
    """Copy bisection directories (`<bisect_id>/bisect.json` and its steps) into `into`. A bisection
    is rewritten while it runs: a copy that has more steps, or has finished, replaces the one held."""
    outcome: dict[str, list[str]] = {"added": [], "updated": [], "present": [], "rejected": []}
    for source in sources:
        if not source.is_dir():
            continue
        for path in sorted(source.rglob(record_files.BISECT_NAME)):
            if path.parent.resolve().is_relative_to(into.resolve()):
                continue
            try:
                new = BisectRecord.model_validate_json(path.read_bytes())
            except (OSError, ValueError, ValidationError):
                new = None
            if new is None or new.bisect_id != path.parent.name:
                outcome["rejected"].append(str(path.parent))
                continue
            target = into / new.bisect_id
            held = None
            if (target / record_files.BISECT_NAME).is_file():
                try:
                    held = BisectRecord.model_validate_json((target / record_files.BISECT_NAME).read_bytes())
                except (OSError, ValueError, ValidationError):
                    held = None
                if held is not None and (held.state == "finished" or held.steps_taken() >= new.steps_taken()):
                    outcome["present"].append(new.bisect_id)
                    continue
            copy_in(path.parent, target)
            outcome["updated" if held is not None else "added"].append(new.bisect_id)
    return outcome


def cmd_merge(args: argparse.Namespace) -> int:
    if args.into.exists() and not args.into.is_dir():
        raise OutputError(f"--into: {args.into} exists and is not a directory")
    outcome = merge(args.sources, args.into, missing_ok=args.missing_ok)
    for run_dir in outcome["rejected"]:
        print(f"ootci: history: skipped {run_dir}: record.json does not load, names another run, "
              "or its tests do not load")
    print(f"ootci: history {args.into}: {len(outcome['added'])} added, "
          f"{len(outcome['present'])} already present, {len(outcome['rejected'])} skipped")
    if outcome["shards"]:
        print(f"ootci: history: {len(outcome['shards'])} shard record(s) not added: "
              "`ootci shards merge` makes one record of the shards of a run, and that one is added")
    bisections = merge_bisections(args.sources, args.into)
    for directory in bisections["rejected"]:
        print(f"ootci: history: skipped {directory}: bisect.json does not load or names another bisection")
    if any(bisections.values()):
        print(f"ootci: history {args.into}: bisections: {len(bisections['added'])} added, "
              f"{len(bisections['updated'])} updated, {len(bisections['present'])} already present")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    if not args.runs.is_dir():
        raise UsageError(f"history prune: {args.runs} is not a directory")
    if args.keep_results_days < 1:
        raise UsageError(f"--keep-results-days: must be at least 1, not {args.keep_results_days}")
    now = dt.datetime.fromisoformat(args.now) if args.now else dt.datetime.now(dt.timezone.utc)
    if now.tzinfo is None:
        now = now.replace(tzinfo=dt.timezone.utc)
    pruned = history_store.prune(args.runs, keep_results_days=args.keep_results_days, now=now)
    print(f"ootci: history {args.runs}: test lists of {len(pruned.results)} run(s) older than "
          f"{args.keep_results_days} days removed, {len(pruned.testsets)} unused test set(s), "
          f"{pruned.leftovers} log or JUnit file(s) of an older layout, {len(pruned.repacked)} test list(s) "
          f"packed; {pruned.bytes / 1e6:.1f} MB freed")
    return 0


# -- fill-missing --------------------------------------------------------------------

MISSING_STAGE = "job"
MISSING_WHY = "it never started, was cancelled, lost its runner or failed before ootci ran"


def read_matrix(text: str) -> tuple[str, list[dict]]:
    """(how to name it in errors, the entries) of a matrix given as JSON text or as a file."""
    where = "--matrix"
    if not text.lstrip().startswith(("{", "[")):
        where = f"--matrix {text}"
        try:
            text = Path(text).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{where}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})") from None
    entries = data.get("include") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise UsageError(f'{where}: expected {{"include": [...]}} as `ootci matrix` prints it')
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise UsageError(f"{where}: include[{i}]: expected an object, got {json.dumps(entry)[:80]}")
        for key in ("name", "torch"):
            value = entry.get(key)
            if (key == "name" or value is not None) and (not isinstance(value, str) or not value.strip()):
                shown = "missing" if value is None else f"expected a non-empty string, got {json.dumps(value)[:80]}"
                raise UsageError(f"{where}: include[{i}].{key}: {shown}")
    return where, entries


def missing_record(manifest: Manifest, torch_spec: str, reason: str, *, trigger: str, pr: int | None,
                   now: dt.datetime) -> RunRecord:
    """The record of a run that left none: status missing, one stage saying why."""
    summary = f"no record from the backend job: {reason}"
    url = ci_run_url()
    hint = f"see the backend job in {url}" if url else "see the backend job's log in the workflow run"
    torch = TorchInfo(spec=torch_spec)
    stage = StageResult(name=MISSING_STAGE, status=Status.missing, started_at=now, summary=summary,
                        root_cause=RootCause(kind="missing", summary=summary, hint=hint))
    return RunRecord(
        run_id=new_run_id(manifest.name, now), backend=manifest.name,
        device=manifest.device, trigger=trigger, pr=pr, torch=torch, ootci_version=__version__,
        started_at=now, finished_at=now, status=Status.missing, stages=[stage], ci_run_url=url,
        command=reproduce_command(registry.reference(manifest), torch))


def fill_missing(entries: list[dict], runs: Path, reason: str, *, trigger: str, pr: int | None = None,
                 where: str = "--matrix") -> tuple[list[RunRecord], int]:
    """Write a missing record under `runs` for every entry whose backend has no record there;
    returns the records written and how many record files under `runs` did not load."""
    manifests: dict[str, tuple[Manifest, dict]] = {}
    for i, entry in enumerate(entries):
        try:
            manifest = registry.resolve(entry["name"])
        except UnknownBackendError as exc:
            raise UnknownBackendError(f"{where}: include[{i}].name: {exc.message}") from None
        manifests.setdefault(manifest.name, (manifest, entry))
    found = record_files.find_runs(runs) if runs.is_dir() else []
    present = {record.backend for _, record in found if record is not None}
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    written = []
    for name, (manifest, entry) in manifests.items():
        if name in present:
            continue
        record = missing_record(manifest, entry.get("torch") or manifest.ci.torch, reason, trigger=trigger,
                                pr=pr, now=now)
        record_files.write(runs / record.run_id, record)
        written.append(record)
    return written, sum(1 for _, record in found if record is None)


def cmd_fill_missing(args: argparse.Namespace) -> int:
    if args.runs.exists() and not args.runs.is_dir():
        raise OutputError(f"--runs: {args.runs} exists and is not a directory")
    if args.pr is not None and args.pr <= 0:
        raise UsageError(f"--pr: expected a PR number, got {args.pr}")
    reason = " ".join((args.reason or "").split()) or MISSING_WHY
    where, entries = read_matrix(args.matrix)
    written, unreadable = fill_missing(entries, args.runs, reason, trigger=args.trigger, pr=args.pr, where=where)
    for record in written:
        print(f"ootci: history: {record.backend}: no record; wrote {record.run_id} (missing: {reason})")
    if unreadable:
        print(f"ootci: history: {unreadable} record file(s) under {args.runs} did not load")
    print(f"ootci: history {args.runs}: {len(entries)} matrix entries, {len(written)} without a record")
    return 0


# -- pull and push -----------------------------------------------------------------

# Commits of the data branch are ootci's, whoever runs it: the runner may have no git identity.
IDENTITY = ("user.name=ootci", "user.email=ootci@users.noreply.github.com")


def _git(checkout: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    """git in the history checkout; a failure there means the history was not published (PublishError)."""
    try:
        return git(checkout, *args, config=IDENTITY, env=env, input_text=stdin, timeout=GIT_TIMEOUT_S)
    except GitError as exc:
        raise PublishError(exc.message) from None


def _git_or_none(checkout: Path, *args: str, env: dict[str, str] | None = None) -> str | None:
    """git's stdout in the history checkout, or None when git says no (a remote or a work tree
    that is not there, nothing staged): for the questions whose failure is an answer."""
    try:
        return git(checkout, *args, config=IDENTITY, env=env, timeout=GIT_TIMEOUT_S)
    except GitError:
        return None


def _default_remote() -> str:
    server, repository = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_REPOSITORY")
    if server and repository:
        return f"{server}/{repository}.git"
    raise UsageError("history: no --remote, no 'origin' and no $GITHUB_REPOSITORY to use")


def _remote_url(checkout: Path, remote: str | None) -> str:
    if remote:
        if "://" in remote or os.path.isabs(remote):
            return remote
        found = _git_or_none(checkout, "remote", "get-url", remote)
        if found is None:
            raise UsageError(f"--remote: no remote named {remote!r} in {checkout}")
        return found.strip()
    found = _git_or_none(checkout, "remote", "get-url", "origin")
    if found is not None:
        return found.strip()
    return _default_remote()


def _auth_env(url: str) -> dict[str, str]:
    """Environment for git that carries $GITHUB_TOKEN as an HTTP header.

    Passed through GIT_CONFIG_* variables, so the token is never on a command line
    nor written to .git/config (the checkout was made with persist-credentials: false).
    """
    env = dict(os.environ)
    token = env.get("GITHUB_TOKEN")
    parts = urlsplit(url)
    if token and parts.scheme == "https":
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        index = int(env.get("GIT_CONFIG_COUNT", "0"))
        env["GIT_CONFIG_COUNT"] = str(index + 1)
        env[f"GIT_CONFIG_KEY_{index}"] = f"http.{parts.scheme}://{parts.netloc}/.extraheader"
        env[f"GIT_CONFIG_VALUE_{index}"] = f"AUTHORIZATION: basic {basic}"
    return env


def pull(checkout: Path, branch: str, remote: str | None, latest: int | None = history_store.PAGED_RUNS) -> str:
    """Clone the tip of `branch` into `checkout`; an empty repository if the branch is new.

    latest: check out every header and test set, but only the newest `latest` run directories
    of each backend (a partial clone: other files are not even downloaded); None: everything.
    """
    url = remote or _default_remote()
    if checkout.exists() and any(checkout.iterdir()):
        raise OutputError(f"history pull: {checkout} exists and is not empty")
    checkout.mkdir(parents=True, exist_ok=True)
    env = _auth_env(url)
    heads = _git(checkout, "ls-remote", "--heads", url, branch, env=env)
    if heads.strip() and latest is None:
        # Only the tip: records are immutable, their history is not needed to add more.
        _git(checkout, "clone", "-q", "--depth", "1", "--branch", branch, "--single-branch", url, ".", env=env)
        return f"cloned {branch}"
    if heads.strip():
        _git(checkout, "clone", "-q", "--depth", "1", "--filter=blob:none", "--no-checkout", "--branch", branch,
             "--single-branch", url, ".", env=env)
        # Headers first; they tell which runs get a page, and only those are then fetched whole.
        # Git downloads the blobs of what each step checks out, and nothing else.
        headers = history_store.sparse_patterns(RUNS_DIR, [])
        _git(checkout, "sparse-checkout", "set", "--no-cone", "--stdin", stdin="\n".join(headers) + "\n")
        _git(checkout, "checkout", "-q", branch, env=env)
        runs = checkout / RUNS_DIR
        fetched = history_store.runs_with_pages(runs, latest) if runs.is_dir() else []
        patterns = history_store.sparse_patterns(RUNS_DIR, fetched)
        _git(checkout, "sparse-checkout", "set", "--no-cone", "--stdin", stdin="\n".join(patterns) + "\n", env=env)
        held = sum(1 for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else 0
        return (f"cloned {branch}: every header, and the {len(fetched)} run(s) of the {held} directories "
                f"that get a page (each backend's newest {latest}, and the culprit pair)")
    _git(checkout, "init", "-q", "-b", branch)
    _git(checkout, "remote", "add", "origin", url)
    return f"{branch} does not exist yet: starting an empty history"


def cmd_pull(args: argparse.Namespace) -> int:
    if args.latest < 1:
        raise UsageError(f"--latest: must be at least 1, not {args.latest}")
    latest = None if args.full else args.latest
    print(f"ootci: history {args.checkout}: {pull(args.checkout, args.branch, args.remote, latest)}")
    return 0


def push(checkout: Path, branch: str, remote: str | None, message: str) -> str:
    """Commit everything in `checkout` and push it to `branch`; returns what was done."""
    checkout.mkdir(parents=True, exist_ok=True)
    inside = _git_or_none(checkout, "rev-parse", "--show-toplevel")
    if inside is None or Path(inside.strip()).resolve() != checkout.resolve():
        _git(checkout, "init", "-q", "-b", branch)
    url = _remote_url(checkout, remote)
    env = _auth_env(url)
    # --sparse: after a partial pull, new run directories lie outside the sparse patterns.
    _git(checkout, "add", "-A", "--sparse")
    if _git_or_none(checkout, "diff", "--cached", "--quiet") is not None:  # exit 0: nothing staged
        return "nothing new to commit"
    _git(checkout, "commit", "-q", "-m", message)
    refused = ""
    for _ in range(PUSH_ATTEMPTS):
        try:
            git(checkout, "push", "-q", url, f"HEAD:refs/heads/{branch}", config=IDENTITY, env=env,
                timeout=GIT_TIMEOUT_S)
            return f"pushed to {branch}"
        except GitError as exc:
            refused = exc.detail
        # Someone else pushed first. Records are new files, so replaying ours on top of
        # theirs cannot conflict.
        if _git_or_none(checkout, "fetch", "-q", url, branch, env=env) is None:
            break
        _git(checkout, "rebase", "-q", "FETCH_HEAD")
    raise PublishError(f"git push to {branch} failed: {refused}")


def cmd_push(args: argparse.Namespace) -> int:
    print(f"ootci: history {args.checkout}: {push(args.checkout, args.branch, args.remote, args.message)}")
    return 0
