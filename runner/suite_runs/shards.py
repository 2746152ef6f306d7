"""Shards of a suite run: `--shard K/N` and its group, and one record from the N shards' records.

`ootci run NAME --shard K/N` runs every stage up to autoload, then only the tests of
shard K (a stable hash of "suite::nodeid" mod N). N such records, one per machine, become
one record here, the one the dashboard shows:

- tests: the union of the shards' tests;
- torch, build, install, autoload: the worst shard's stage (longest duration);
- smoke, integration: counts, suites and status worked out again from the union;
- a shard that left no record fails the suite stages, naming it: its tests did not
  run, which is never a pass.

The shards are grouped by backend, shard group and torch spec; each group is one merged
record. Its run id is derived from the shards' run ids, so merging the same shards again
rewrites the same record instead of adding a second one.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ootci.runner.core import atomic, causes
from ootci.runner.core.errors import UsageError
from ootci.runner.models import (
    SEVERITY,
    SHARD_GROUP,
    SUITES,
    Outcome,
    RootCause,
    RunRecord,
    StageResult,
    Status,
    TestResult,
    overall_status,
    worst_of,
)
from ootci.runner.records import record_files
from ootci.runner.records.upstream_files import SUITE as UPSTREAM
from ootci.runner.records.upstream_files import file_of
from ootci.runner.suite_runs import junit
from ootci.runner.suite_runs.shard_plan import Plan
from ootci.runner.suite_runs.suite_runner import first_failing_test


def parse_shard(text: str | None, what: str = "--shard") -> tuple[int, int]:
    """(K, N) of "K/N" with 1 <= K <= N; a one-line UsageError otherwise."""
    m = re.fullmatch(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*", text or "")
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise UsageError(f"{what}: {(text or '')[:40]!r} is not K/N with 1 <= K <= N (e.g. 2/3)")
    return int(m.group(1)), int(m.group(2))


def job_index(text: str, n: int) -> int:
    """K of `--shard K` or `--shard K/N` with a plan of n jobs; one line for another N or a job it has not."""
    k_text, slash, n_text = text.partition("/")
    if not k_text.strip().isdigit() or (slash and not n_text.strip().isdigit()):
        raise UsageError(f"--shard {text[:40]!r}: with --shard-plan, K or K/N (e.g. 2 or 2/{n})")
    if slash and int(n_text) != n:
        raise UsageError(f"--shard {text}: the plan has {n} jobs, not {int(n_text)}")
    k = int(k_text)
    if not 1 <= k <= n:
        raise UsageError(f"--shard {text}: unknown job: the plan has jobs 1 to {n}")
    return k


def default_group(env: Mapping[str, str] | None = None, today: dt.date | None = None) -> str:
    """The shard group when `--shard-group` is not given: the N shard jobs of one GitHub
    Actions workflow run share its run id (a re-run of a failed shard too); elsewhere the
    UTC date, which the shards of one night on one machine share."""
    environ = os.environ if env is None else env
    run_id = environ.get("GITHUB_RUN_ID", "")
    if re.fullmatch(r"[0-9]{1,40}", run_id):
        return f"gh-{run_id}"
    today = today or dt.datetime.now(dt.UTC).date()
    return f"local-{today:%Y%m%d}"


def check_group(text: str) -> str:
    if not re.fullmatch(SHARD_GROUP, text):
        raise UsageError(f"--shard-group: {text[:60]!r} is not 1-64 letters, digits, '.', '_' and '-' "
                         "(starting with a letter or digit)")
    return text


@dataclass
class Group:
    backend: str
    shard_group: str
    torch: str
    n: int
    shards: dict[int, tuple[Path, RunRecord]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def collect(sources: list[Path], expect: int | None = None) -> tuple[list[Group], list[str]]:
    """The shard records under `sources`, by (backend, shard group, torch spec); and notes."""
    groups: dict[tuple[str, str, str], Group] = {}
    notes: list[str] = []
    for source in sources:
        if not source.is_dir():
            raise UsageError(f"shards merge: {source} is not a directory")
        for run_dir, header in record_files.find_runs(source):
            if header is None:
                notes.append(f"skipped {run_dir}: record.json does not load")
                continue
            if not header.shard:
                continue
            try:
                record = record_files.read(run_dir / record_files.RECORD_NAME)
            except (OSError, ValueError) as exc:
                notes.append(f"skipped {run_dir}: its tests do not load ({type(exc).__name__})")
                continue
            k, n = parse_shard(record.shard, what=f"{run_dir}: shard")
            key = (record.backend, record.shard_group or "", record.torch.spec)
            group = groups.get(key)
            if group is None:
                group = groups[key] = Group(*key, n=n)
            elif group.n != n:
                raise UsageError(f"shards merge: {record.backend} group {key[1] or '(none)'}: the records disagree "
                                 f"on N ({k}/{n} in {run_dir}, N = {group.n} in another)")
            held = group.shards.get(k)
            if held is not None:
                newer = max((held, (run_dir, record)), key=lambda r: r[1].started_at)
                older = held if newer is not held else (run_dir, record)
                group.notes.append(f"shard {k}/{n} has two records: kept {newer[1].run_id}, "
                                   f"the later one; ignored {older[1].run_id}")
                group.shards[k] = newer
            else:
                group.shards[k] = (run_dir, record)
    for group in groups.values():
        if expect is not None and expect != group.n:
            raise UsageError(f"shards merge: --expect {expect}, but the records of {group.backend} group "
                             f"{group.shard_group or '(none)'} are shards of {group.n}")
    return list(groups.values()), notes


def missing_message(k: int, n: int) -> str:
    return f"shard {k}/{n} left no record: its tests did not run"


def _worst(parts: dict[int, StageResult]) -> int:
    """The shard whose stage is the worst (the first such shard): the stage a merge keeps."""
    return min(parts, key=lambda k: (SEVERITY.index(parts[k].status), k))


def _timing(stage: StageResult, parts: dict[int, StageResult]) -> None:
    stage.duration_s = max(p.duration_s for p in parts.values())
    starts = [p.started_at for p in parts.values() if p.started_at is not None]
    stage.started_at = min(starts) if starts else None


def _plain_stage(name: str, parts: dict[int, StageResult], n: int) -> StageResult:
    """torch, build, install, autoload: the worst shard's result, with its data and checks."""
    k = _worst(parts)
    stage = parts[k].model_copy(deep=True)
    statuses = {p.status for p in parts.values()}
    if len(statuses) > 1:
        others = ", ".join(f"{j}/{n} {p.status.value}" for j, p in sorted(parts.items()) if j != k)
        stage.summary = f"shard {k}/{n}: {stage.summary} (other shards: {others})"
    _timing(stage, parts)
    return stage


def _suite_stage(name: str, parts: dict[int, StageResult], n: int, missing: list[int],
                 tests: list[TestResult], last_suite_stage: bool) -> StageResult:
    """smoke, integration, upstream: worked out again from the union of the shards' tests."""
    ran = {k: p for k, p in parts.items() if p.status not in (Status.skipped, Status.blocked)}
    if not ran:
        # No shard ran it: as the shards say (blocked after a failure, or not selected)...
        k = _worst(parts) if parts else None
        stage = parts[k].model_copy(deep=True) if k else StageResult(name=name, status=Status.skipped,
                                                                      summary="no shard ran it")
        if parts:
            _timing(stage, parts)
        # ...unless a shard is missing and nothing else would say so.
        if missing and last_suite_stage and stage.status is not Status.blocked:
            message = "; ".join(missing_message(j, n) for j in missing)
            stage.status = Status.failed
            stage.summary = message
            stage.root_cause = RootCause(kind="missing", summary=message,
                                         hint="see the shard's job in the workflow run")
        return stage
    suite_names: list[str] = []
    for k in sorted(ran):
        for suite in ran[k].data.get("suites", {}):
            if suite not in suite_names:
                suite_names.append(suite)
    suites: dict[str, dict] = {}
    problems: list[str] = []
    for suite in suite_names:
        entries = [ran[k].data["suites"][suite] for k in sorted(ran) if suite in ran[k].data.get("suites", {})]
        results = [t for t in tests if t.suite == suite]
        counts = junit.count_by_outcome(results)
        status = worst_of(Status(e.get("status", "passed")) for e in entries)
        if not results and status is Status.passed:
            status = Status.failed
            problems.append(f"suite {suite!r} reported no tests in any shard")
        elif any(not t.outcome.ok for t in results) and status is Status.passed:
            status = Status.failed
        suites[suite] = {"status": status.value, "counts": counts,
                         "duration_s": max(float(e.get("duration_s") or 0) for e in entries),
                         "junit": f"junit/{suite}{junit.SUFFIX}"}
    stage_tests = [t for t in tests if t.suite in suites]
    lines = [f"{s}: " + (", ".join(f"{v} {o}" for o, v in d["counts"].items()) or "no tests")
             for s, d in suites.items()]
    cause = None
    for j in missing:
        problems.append(missing_message(j, n))
    for j, p in sorted(parts.items()):
        if p.status is Status.blocked:
            problems.append(f"shard {j}/{n}: {p.summary}: its tests did not run")
    if missing:
        message = "; ".join(missing_message(j, n) for j in missing)
        cause = RootCause(kind="missing", summary=message, hint="see the shard's job in the workflow run")
    if any(p.status is Status.timeout for p in ran.values()):
        status = Status.timeout
    elif (problems or any(not p.status.ok for p in ran.values())
          or any(d["status"] != Status.passed.value for d in suites.values())):
        status = Status.failed
    else:
        status = Status.passed
    if cause is None and status is not Status.passed:
        bad = next((j for j in sorted(ran) if not ran[j].status.ok and ran[j].root_cause), None)
        bad_cause = ran[bad].root_cause if bad is not None else None
        if bad_cause is not None:
            cause = bad_cause.model_copy()
            if cause.kind != "test":
                cause.summary = f"shard {bad}/{n}: {cause.summary}"
        elif problems:
            cause = RootCause(kind="error", summary=problems[0])
        else:
            cause = first_failing_test(stage_tests)
    data: dict = {"suites": suites}
    upstream = _upstream_data(ran)
    if upstream:
        data["upstream"] = upstream
    stage = StageResult(name=name, status=status, summary="; ".join(lines + problems),
                        counts=junit.count_by_outcome(stage_tests), root_cause=cause, data=data)
    _timing(stage, ran)
    return stage


def _upstream_data(ran: dict[int, StageResult]) -> dict | None:
    """The upstream stage's data over its shards: where the files came from (every shard took the
    same torch's), and per file the worst status, the longest time and the sums of its counts."""
    parts = [ran[k].data["upstream"] for k in sorted(ran) if "tests" in ran[k].data.get("upstream", {})]
    if not parts:
        return None
    files: dict[str, dict] = {}
    for part in parts:
        for name, entry in part.get("files", {}).items():
            merged = files.setdefault(name, {"status": Status.passed.value, "duration_s": 0.0, "rerun": 0,
                                             "failed_on_cpu": 0, "tests": 0})
            merged["status"] = worst_of([Status(merged["status"]), Status(entry.get("status", "passed"))]).value
            merged["duration_s"] = max(merged["duration_s"], float(entry.get("duration_s") or 0))
            for key in ("rerun", "failed_on_cpu", "tests"):
                merged[key] += int(entry.get(key) or 0)
    return {**parts[0], "files": files,
            "second_opinion_s": max(float(p.get("second_opinion_s") or 0) for p in parts)}


def _not_reported(planned: Plan, k: int) -> list[TestResult]:
    """The upstream tests job k of the plan should have run, as not run: its shard left no record."""
    n = planned.n
    return [TestResult(id=test_id, suite=UPSTREAM, outcome=Outcome.skipped,
                       message=f"not run: shard {k}/{n} left no record (its job never reported)")
            for piece in planned.jobs[k - 1].pieces for test_id in piece.tests]


def _unfinished(stage: StageResult, parts: dict[int, StageResult], n: int, tests: list[TestResult]) -> list[str]:
    """One line per upstream file whose time ran out in its shard, with how many of its tests it did not reach."""
    lines = []
    for k, part in sorted(parts.items()):
        for file, entry in part.data.get("upstream", {}).get("files", {}).items():
            if entry.get("status") != Status.timeout.value:
                continue
            left = [t.id for t in tests if t.suite == UPSTREAM and file_of(t.id) == file
                    and t.outcome is Outcome.skipped and t.message.startswith("not run:")]
            lines.append(f"upstream {file} did not finish in shard {k}/{n}: {len(left)} tests not reached"
                         + (f" ({left[0]}, ...)" if left else ""))
    return lines


def merge_group(group: Group, planned: Plan | None = None) -> tuple[RunRecord, dict[str, list[tuple[int, Path]]]]:
    """The merged record of one group, and for each stage the shard logs to put together; with the
    plan the shards ran, the tests of a shard that left no record are in it, as not run."""
    n = group.n
    records = {k: rec for k, (_, rec) in sorted(group.shards.items())}
    dirs = {k: d for k, (d, _) in group.shards.items()}
    present = sorted(records)
    missing = [k for k in range(1, n + 1) if k not in records]
    first = records[present[0]]

    tests: list[TestResult] = []
    index: dict[tuple[str, str], int] = {}
    problems: list[str] = []
    for k in present:
        for t in records[k].tests:
            key = (t.suite, t.id)
            if key in index:
                i = index[key]
                if tests[i].outcome.ok and not t.outcome.ok:
                    tests[i] = t
                # A file that does not collect is one result under its path in every job that has a range of it.
                if not (t.suite == UPSTREAM and t.id == file_of(t.id)):
                    problems.append(f"test {t.suite}::{t.id} ran in more than one shard (shard {k}/{n} among them)")
                continue
            index[key] = len(tests)
            tests.append(t)
    for k in missing:
        for t in _not_reported(planned, k) if planned is not None else ():
            if (t.suite, t.id) not in index:
                index[(t.suite, t.id)] = len(tests)
                tests.append(t)

    names: list[str] = []
    for k in present:
        for s in records[k].stages:
            if s.name not in names:
                names.append(s.name)
    suite_stages = [s for s in names if s in SUITES]
    stages: list[StageResult] = []
    logs: dict[str, list[tuple[int, Path]]] = {}
    for name in names:
        parts = {k: part for k in present if (part := records[k].stage(name)) is not None}
        if name in SUITES:
            stage = _suite_stage(name, parts, n, missing, tests, name == suite_stages[-1])
            causes.attach(stage, [t for t in tests if t.suite in stage.data.get("suites", {})],
                          records[present[0]].device)
        else:
            stage = _plain_stage(name, parts, n)
        stage.data["shards"] = [
            {"shard": f"{k}/{n}", "run_id": records[k].run_id if k in records else None,
             "status": parts[k].status.value if k in parts else Status.missing.value,
             "duration_s": parts[k].duration_s if k in parts else None}
            for k in range(1, n + 1)]
        stage.data.pop("shard", None)
        stage.data.pop("unmatched_expected_failures", None)
        if name == UPSTREAM:
            problems += _unfinished(stage, parts, n, tests)
            if planned is not None:
                stage.data["shard_plan"] = {"plan": planned.digest, "jobs": n}
                files = stage.data.setdefault("upstream", {}).setdefault("files", {})
                for k in missing:
                    for piece in planned.jobs[k - 1].pieces:
                        entry = files.setdefault(piece.file, {"status": Status.missing.value, "duration_s": 0.0,
                                                              "rerun": 0, "failed_on_cpu": 0, "tests": 0})
                        entry["status"] = Status.missing.value
                        entry["tests"] += len(piece.tests)
        shard_logs = [(k, dirs[k] / p.log) for k, p in sorted(parts.items()) if p.log]
        if shard_logs:
            logs[name] = shard_logs
            stage.log = f"logs/{name}.log"
        else:
            stage.log = None
        stages.append(stage)

    # An expected failure is unmatched when no shard matched it (known only with every shard).
    if not missing:
        seen = [s.data["unmatched_expected_failures"] for k in present for s in records[k].stages
                if "unmatched_expected_failures" in s.data]
        if seen and len(seen) == len(present):
            problems += [line for line in seen[0] if all(line in other for other in seen[1:])]
    for k in present:
        problems += records[k].problems
    problems += [missing_message(k, n) for k in missing]
    for k in missing:
        pieces = planned.jobs[k - 1].pieces if planned is not None else []
        if pieces:
            problems.append(f"shard {k}/{n} should have run upstream " + ", ".join(p.describe() for p in pieces)
                            + f": {sum(len(p.tests) for p in pieces)} tests, in the record as not run")
    problems = list(dict.fromkeys(problems))

    if records and all(r.status is Status.skipped for r in records.values()) and not missing:
        status = Status.skipped
    else:
        status = overall_status(stages)
    digest = hashlib.blake2b("\n".join(sorted(r.run_id for r in records.values())).encode(),
                             digest_size=3).hexdigest()
    started = min(r.started_at for r in records.values())
    finished = [r.finished_at for r in records.values() if r.finished_at is not None]
    interrupted = [f"shard {k}/{n}: {records[k].interrupted}" for k in present if records[k].interrupted]
    hosts = list(dict.fromkeys(r.host for r in records.values() if r.host))
    merged = first.model_copy(deep=True, update={
        "run_id": f"{first.backend}-{started:%Y%m%dT%H%M%SZ}-{digest}",
        "started_at": started,
        "finished_at": max(finished) if len(finished) == len(records) else None,
        "status": status,
        "interrupted": "; ".join(interrupted) or None,
        "stages": stages,
        "tests": tests,
        "tests_file": None, "test_counts": {}, "test_ids_hash": None, "notable_tests": {},
        "problems": problems,
        "host": ", ".join(hosts),
        "command": _without_shard(first.command),
        "shard": None,
        "shard_group": first.shard_group,
    })
    return merged, logs


def _without_shard(command: str) -> str:
    try:
        argv = shlex.split(command)
    except ValueError:
        return command
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--shard", "--shard-plan"):
            skip = True
        elif not arg.startswith(("--shard=", "--shard-plan=")):
            out.append(arg)
    return shlex.join(out)


def write_merged(out: Path, record: RunRecord, logs: dict[str, list[tuple[int, Path]]], n: int,
                 shard_ids: dict[int, str]) -> Path:
    """The merged run directory: logs and JUnit first, the record last (atomically)."""
    run_dir = out / record.run_id
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    for name, parts in logs.items():
        chunks = []
        for k, path in parts:
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                text = "(the shard's log is missing)\n"
            chunks.append(f"==== ootci: shard {k}/{n} ({shard_ids[k]}) ====\n{text}"
                          + ("" if text.endswith("\n") else "\n"))
        atomic.write_text(run_dir / "logs" / f"{name}.log", "".join(chunks))
    for stage in record.stages:
        for suite in stage.data.get("suites", {}) if stage.name in SUITES else ():
            junit.write(junit.suite_file(run_dir / "junit", suite), suite,
                        [t for t in record.tests if t.suite == suite])
    return record_files.write(run_dir, record)


def merge(sources: list[Path], out: Path, expect: int | None = None,
          planned: Plan | None = None) -> tuple[list[RunRecord], list[str]]:
    groups, notes = collect(sources, expect)
    written = []
    for group in groups:
        record, logs = merge_group(group, planned if planned is not None and planned.backend == group.backend else None)
        write_merged(out, record, logs, group.n, {k: r.run_id for k, (_, r) in group.shards.items()})
        notes += [f"{group.backend}: {note}" for note in group.notes]
        written.append(record)
    return written, notes
