"""`ootci bisect`: narrow a new failure to the first bad torch, torch commit or backend commit.

A bisection starts from a good and a bad end: two run records, or two specs that
are run first. What made the bad run bad is the predicate: its first failing stage
and, in a suite, the tests that passed in the good run and failed in the bad one.
Each step is an ordinary pipeline run (`runner.stages.pipeline.run_backend`) of one
candidate that stops after that stage and runs only those tests, so it costs what
the caches leave of a run. The BisectRecord is rewritten atomically after every
step; `--resume` replays it and goes on (runner.bisection.bisect_search decides from the steps
alone).
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ootci.runner.bisection import bisect_candidates, bisect_search, slowdown
from ootci.runner.core import atomic, causes
from ootci.runner.core.errors import BisectError, GitError, TorchSpecError, UsageError
from ootci.runner.core.git import git
from ootci.runner.manifests.manifest import Manifest
from ootci.runner.models import (
    SUITES,
    BisectCandidate,
    BisectRecord,
    BisectResult,
    BisectRound,
    BisectStep,
    Predicate,
    RunRecord,
    Status,
    Verdict,
)
from ootci.runner.records import record_files
from ootci.runner.stages import STAGES, RunOptions, sources
from ootci.runner.stages.pipeline import run_backend
from ootci.runner.stages.report import Reporter
from ootci.runner.torch_supply import torch_index, torchspec
from ootci.runner.torch_supply.envs import cache_root, digest
from ootci.runner.torch_supply.torch_source import torch_repo

BISECT_NAME = record_files.BISECT_NAME
STEPS_DIR = "steps"
DEFAULT_MAX_STEPS = 20
PYPI_SIMPLE = "https://pypi.org/simple"
RUN_ID = re.compile(r"^[a-z0-9][a-z0-9-]*-\d{8}T\d{6}Z-[0-9a-f]{6}$")
PYTORCH_COMMIT = "https://github.com/pytorch/pytorch/commit/{sha}"
PYTORCH_COMPARE = "https://github.com/pytorch/pytorch/compare/{good}...{bad}"
PYTORCH_PULL = "https://github.com/pytorch/pytorch/pull/{pr}"
_GITHUB_REPO = re.compile(r"^(?:https://github\.com/|git@github\.com:)([\w.-]+/[\w.-]+?)(?:\.git)?/?$")
_HEX = re.compile(r"^[0-9a-f]{7,40}$")
_SHA = re.compile(r"[0-9a-f]{40}")


@dataclass
class BisectOptions:
    manifest: Manifest
    good: str
    bad: str
    out: Path
    axis: str | None = None
    versions: list[str] | None = None
    commits: bool = False
    index_url: str | None = None
    torch_repo: str | None = None
    torch: str | None = None
    suites: tuple[str, ...] = SUITES
    runs: list[Path] = field(default_factory=list)
    cache: Path | None = None
    jobs: int | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    perf: str | None = None
    """a bench measurement that got slower: what the steps look for, instead of the first failing stage"""
    reporter: Reporter | None = None

    def to_json(self) -> dict:
        return {"manifest": str(self.manifest.path), "good": self.good, "bad": self.bad, "axis": self.axis,
                "versions": self.versions, "commits": self.commits, "index_url": self.index_url,
                "torch_repo": self.torch_repo, "torch": self.torch, "suites": list(self.suites),
                "runs": [str(p) for p in self.runs], "jobs": self.jobs, "max_steps": self.max_steps,
                "perf": self.perf}


@dataclass
class End:
    """One end of the bisection as given: a run record, or a spec (a torch, or a backend ref)."""

    given: str
    record: RunRecord | None = None


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# -- the ends -----------------------------------------------------------------------

def find_record(text: str, runs: list[Path]) -> RunRecord | None:
    """The run record `text` names (a record.json, its directory, or a run id under one of `runs`), or None."""
    path = Path(text)
    for candidate in (path, path / record_files.RECORD_NAME):
        if candidate.name == record_files.RECORD_NAME and candidate.is_file():
            return _read(candidate)
    if not RUN_ID.match(text):
        return None
    for root in runs:
        for candidate in (root / text, *root.glob(f"*/{text}")):
            if (candidate / record_files.RECORD_NAME).is_file():
                return _read(candidate / record_files.RECORD_NAME)
    where = ", ".join(str(r) for r in runs) or "no directory (give --runs DIR)"
    raise UsageError(f"no run {text} under {where}")


def _read(path: Path) -> RunRecord:
    try:
        return record_files.read(path)
    except (OSError, ValueError, ValidationError) as exc:
        raise UsageError(f"{path}: not a run record: {str(exc).splitlines()[0][:200]}") from None


def torch_spec_of(record: RunRecord) -> str:
    """The torch spec that installs again the torch a record tested: what the record says that torch
    *is* (a version, a PyTorch commit), never where it says it came from. A record is data anyone who
    could upload an artifact may have written (docs/workflows.md, "The trust boundary"): a wheel URL or
    an index URL in it would install the writer's wheel in the trusted job that bisects. The index is
    the bisection's own (--index-url, else ootci's default for the kind of version: `trusted_index`)."""
    t = record.torch
    if t.spec == "installed":
        raise BisectError(f"run {record.run_id} tested a torch installed by hand (--python): "
                          "a bisection cannot install it again")
    if t.spec.startswith(("git:", "pr:")) and t.git_version:
        if not _SHA.fullmatch(t.git_version):
            raise BisectError(f"run {record.run_id}: torch.git_version {t.git_version[:60]!r} is not a commit")
        return f"git:{t.git_version}"  # a commit of the PyTorch repository the bisection names itself
    try:
        kind = torchspec.parse(t.spec).kind
    except TorchSpecError:
        kind = ""
    if kind == "version":
        return t.spec  # as pinned: a plain version shares its cached torch layer
    spec = t.dist_version or t.version or (t.spec if kind in torchspec.KEYWORDS else "")
    try:
        kind = torchspec.parse(spec).kind if spec else ""
    except TorchSpecError:
        kind = ""
    if kind != "version" and kind not in torchspec.KEYWORDS:
        raise BisectError(f"run {record.run_id} tested torch {t.spec[:80]!r} and records no version of it: a "
                          "bisection installs no wheel a record names; give --good and --bad as torch versions")
    return spec


def backend_commit(record: RunRecord) -> str | None:
    """The backend commit a run built: its build stage's `commit` (a git source's, or the HEAD of the
    work tree a path source is in); older records of git sources have only `source`, `commit:subdir`."""
    build = record.stage("build")
    if build is None:
        return None
    sha = str(build.data.get("commit") or str(build.data.get("source", "")).split(":", 1)[0])
    return sha if re.fullmatch(r"[0-9a-f]{40}", sha) else None


def built_dirty(record: RunRecord) -> bool:
    """Whether the run built a work tree with uncommitted changes on top of its commit."""
    build = record.stage("build")
    return bool(build and build.data.get("dirty"))


def _torch_identity(record: RunRecord) -> str:
    return record.torch.git_version or record.torch.version or record.torch.spec


def _backend_identity(record: RunRecord) -> str:
    build = record.stage("build")
    return str(build.data.get("source", "")) if build else ""


def derive_predicate(good: RunRecord, bad: RunRecord) -> Predicate:
    """What made the bad run bad: its first failing stage, and the tests of it that passed in the good run;
    where the stage grouped its failures by cause, those of its largest new cause (the target is the cause:
    another break among the candidates is not this one)."""
    failing = next((s for s in bad.stages if s.status in (Status.failed, Status.crashed, Status.timeout)), None)
    if failing is None:
        raise BisectError(f"the bad run {bad.run_id} did not fail ({bad.status.value}): nothing to look for")
    stage = failing.name
    there = good.stage(stage)
    if there is None or there.status is not Status.passed:
        how = f"{there.status.value}: {there.summary}" if there else "not run"
        raise BisectError(f"the good run {good.run_id} did not pass stage {stage} either ({how[:200]}): "
                          "pick a good run that passed where the bad one failed")
    tests: dict[str, list[str]] = {}
    if stage in SUITES:
        passed = {(t.suite, t.id) for t in good.tests if t.outcome.value in ("passed", "flaky")}
        for t in bad.tests:
            if not t.outcome.ok and (t.suite, t.id) in passed:
                tests.setdefault(t.suite, []).append(t.id)
    target = next((c.text for c in failing.causes if c.novelty in ("new", "changed")), None)
    if target is not None and tests:
        red = {(t.suite, t.id) for t in bad.tests if causes.cause_of(t, bad.device) == target}
        mine = {suite: [i for i in ids if (suite, i) in red] for suite, ids in tests.items()}
        if any(mine.values()):
            return Predicate(stage=stage, tests={s: ids for s, ids in mine.items() if ids}, cause=bad.first_problem(),
                             failure_cause=target)
    return Predicate(stage=stage, tests=tests, cause=bad.first_problem())


def _line(text: str, limit: int = 300) -> str:
    """A reason as one line: a step's verdict is read in a table."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


def judge(record: RunRecord, predicate: Predicate) -> tuple[Verdict, str, str | None]:
    """(verdict, why, the stage whose log says it) of one step's run."""
    names = list(STAGES)
    for stage in record.stages:
        if names.index(stage.name) >= names.index(predicate.stage):
            break
        if stage.status in (Status.failed, Status.crashed, Status.timeout):
            cause = stage.root_cause.summary if stage.root_cause else stage.summary
            return Verdict.skip, _line(f"{stage.name} failed before {predicate.stage}: {cause}"), stage.name
        if stage.status is Status.skipped and stage.data.get("skip_rest"):
            return Verdict.skip, _line(f"{stage.name}: {stage.summary}"), stage.name
    result = record.stage(predicate.stage)
    if result is None or result.status is Status.blocked:
        return Verdict.skip, f"stage {predicate.stage} did not run ({record.interrupted or 'blocked'})", None
    if result.status is Status.crashed:
        return Verdict.skip, _line(f"ootci itself failed in {predicate.stage}: {result.summary}"), predicate.stage
    if predicate.measurement:
        verdict, why = slowdown.judge(result, predicate)
        return verdict, _line(why), predicate.stage
    cause = result.root_cause.summary if result.root_cause else result.summary
    if predicate.tests:
        ran = {(t.suite, t.id): t for t in record.tests}
        wanted = [(suite, i) for suite, ids in predicate.tests.items() for i in ids]
        found = [ran[w] for w in wanted if w in ran]
        failing = [t for t in found if not t.outcome.ok]
        if predicate.failure_cause is not None:
            elsewise = [t for t in failing if causes.cause_of(t, record.device) != predicate.failure_cause]
            failing = [t for t in failing if t not in elsewise]
            if elsewise and not failing:
                first = elsewise[0]
                return (Verdict.skip, _line(f"{len(elsewise)} of {len(wanted)} failing, but not with the cause "
                                            f"looked for ({predicate.failure_cause}): {first.id}: "
                                            f"{causes.cause_of(first, record.device)}"), predicate.stage)
        if failing:
            first = failing[0]
            message = (first.message.strip().splitlines() or [""])[0]
            return (Verdict.bad, _line(f"{len(failing)} of {len(wanted)} failing: {first.outcome.value}: {first.id}: "
                                       f"{message}"), predicate.stage)
        if not found:
            return Verdict.skip, _line(f"none of the {len(wanted)} tests ran ({cause})"), predicate.stage
        if result.status is Status.timeout:
            return Verdict.skip, _line(f"{predicate.stage} timed out: {cause}"), predicate.stage
        return Verdict.good, f"{len(found)} of {len(wanted)} tests passed", predicate.stage
    if result.status in (Status.failed, Status.timeout):
        return Verdict.bad, _line(f"{predicate.stage} {result.status.value}: {cause}"), predicate.stage
    if result.status is Status.passed:
        return Verdict.good, f"{predicate.stage} passed", predicate.stage
    return Verdict.skip, _line(f"{predicate.stage} {result.status.value}: {result.summary}"), predicate.stage


# -- the bisection ------------------------------------------------------------------

class Bisection:
    def __init__(self, options: BisectOptions, state: BisectRecord, directory: Path):
        self.options = options
        self.state = state
        self.dir = directory
        self.reporter = options.reporter or Reporter(summary_path="")
        self.good = End(options.good, find_record(options.good, options.runs))
        self.bad = End(options.bad, find_record(options.bad, options.runs))
        self._history: tuple[Path, str] | None = None

    # -- bookkeeping

    def save(self) -> None:
        atomic.write_text(self.dir / BISECT_NAME, self.state.model_dump_json(indent=2) + "\n")

    def say(self, text: str) -> None:
        self.reporter.note(f"ootci bisect: {text}")

    # -- running one candidate

    def run(self, manifest: Manifest, torch: str, index_url: str | None, predicate: Predicate | None) -> RunRecord:
        step = RunOptions(torch=torch, out=(self.dir / STEPS_DIR).absolute(), index_url=index_url,
                          torch_repo=self.options.torch_repo, cache=self.options.cache, jobs=self.options.jobs)
        if self.options.perf:  # the ends and every step measure the measurement, and a step only it
            step.bench = True
            step.bench_only = (self.options.perf,) if predicate is not None else ()
            # A step judged on counts only counts: its time would say nothing the verdict uses.
            step.bench_time = predicate is None or predicate.metric is None
        if predicate is None:  # an end: the whole run, as asked
            step.suites = self.options.suites
        else:
            step.suites = (predicate.stage,) if predicate.stage in SUITES else ()
            step.only_tests = (predicate.tests or None) if predicate.stage in SUITES else None
            step.last_stage = predicate.stage
        return run_backend(manifest, step, self.reporter)

    def manifest_at(self, commit: str | None) -> Manifest:
        """The manifest with its source at `commit` (None: as it is): a git source's ref, or a path
        source's directory as that commit of its work tree has it (exported into the cache)."""
        m = self.options.manifest
        if commit is None:
            return m
        if m.source.kind == "git":
            source = m.source.model_copy(update={"ref": commit})
        else:
            repo, subdir = self.history()
            tree = sources.export(repo, bisect_candidates.resolve_commit(repo, commit),
                                  self.options.cache or cache_root(), log=self.dir / "git.log",
                                  timeout=m.timeouts.build)
            source = m.source.model_copy(update={"path": str(tree / subdir if subdir else tree)})
        copy = m.model_copy(update={"source": source})
        copy.path = m.path
        return copy

    def history(self) -> tuple[Path, str]:
        """(repository, the backend's directory in it) whose commits the backend axis walks: the
        cache's clone of source.git, or the git work tree a source.path is in (`ootci init`
        writes path = ".."), read in place."""
        if self._history is None:
            m = self.options.manifest
            if m.source.kind == "git":
                self._history = (sources.clone(m, self.options.cache or cache_root(), log=self.dir / "git.log",
                                               timeout=m.timeouts.build), m.source.subdir)
            elif (directory := m.source_dir()) is not None and (found := sources.work_tree(directory)) is not None:
                self._history = found
            else:
                where = (f"source.path {m.source_dir()} is not in a git work tree" if m.source.kind == "path"
                         else "source.requirement has no history")
                raise UsageError(f"{m.path}: field 'source': the backend axis walks git history, and {where} "
                                 "(give source.git, or a source.path inside a git checkout)")
        return self._history

    # -- the ends and the predicate

    def end_runs(self) -> tuple[RunRecord, RunRecord]:
        """The good and bad ends as records: given, or run now (and kept for --resume)."""
        records: list[RunRecord] = []
        for end, attr in ((self.good, "good_run"), (self.bad, "bad_run")):
            if end.record is None and getattr(self.state, attr):
                end.record = find_record(str(self.dir / STEPS_DIR / getattr(self.state, attr)), [])
            if end.record is None:
                manifest, torch, index = self.end_setup(end.given)
                self.say(f"running the {attr[:-4]} end: {end.given}")
                ran = self.run(manifest, torch, index, None)
                # Reload: the tests live beside the record on disk.
                end.record = find_record(str(self.dir / STEPS_DIR / ran.run_id), [])
                assert end.record is not None, f"the {attr[:-4]} end's record is not under {self.dir / STEPS_DIR}"
            setattr(self.state, attr, end.record.run_id)
            records.append(end.record)
        self.save()
        return records[0], records[1]

    def end_setup(self, given: str) -> tuple[Manifest, str, str | None]:
        axis = self.options.axis or "torch"
        if axis == "backend":
            return (self.manifest_at(given), *self.fixed_torch())
        return self.options.manifest, given, self.options.index_url

    def trusted_index(self, spec: str) -> str | None:
        """The index a torch of a record is installed from: --index-url (the registry's or the workflow's
        input), else PyTorch's nightly index for a nightly's version, else pip's own; never the record's."""
        if self.options.index_url:
            return self.options.index_url
        version = bisect_candidates.version_of(spec)
        return torch_index.nightly_index() if version is not None and version.is_devrelease else None

    def fixed_torch(self) -> tuple[str, str | None]:
        """The torch a backend axis holds: --torch, else the bad run's, else the manifest's."""
        if self.options.torch:
            return self.options.torch, self.options.index_url
        if self.bad.record is not None:
            spec = torch_spec_of(self.bad.record)
            return spec, self.trusted_index(spec)
        return self.options.manifest.ci.torch, self.options.index_url

    def choose_axes(self, good: RunRecord, bad: RunRecord) -> str:
        if self.options.axis:
            return self.options.axis
        torch_changed = _torch_identity(good) != _torch_identity(bad)
        backend_changed = _backend_identity(good) != _backend_identity(bad)
        if torch_changed and backend_changed:
            return "both"
        if torch_changed:
            return "torch"
        if backend_changed:
            return "backend"
        raise BisectError(f"runs {good.run_id} and {bad.run_id} tested the same torch and the same backend sources: "
                          "nothing changed to bisect (a flaky test, or the machine?)")

    # -- rounds

    def torch_round(self, good: RunRecord, bad: RunRecord, backend_commit_: str | None,
                    check_bad_end: bool = False) -> BisectRound:
        good_spec, bad_spec = torch_spec_of(good), torch_spec_of(bad)
        index = self.trusted_index(bad_spec)
        ends = [BisectCandidate(label=_torch_label(good_spec, good), spec=good_spec, commit=good.torch.git_version),
                BisectCandidate(label=_torch_label(bad_spec, bad), spec=bad_spec, commit=bad.torch.git_version)]
        fixed = f"backend at {backend_commit_}" if backend_commit_ else "backend as in the manifest"
        notes: list[str] = []
        if good_spec.startswith("git:") and bad_spec.startswith("git:"):
            return self.commit_round(ends[0], ends[1], fixed, backend_commit_)
        if self.options.versions:
            inner = bisect_candidates.explicit(self.options.versions, good_spec, bad_spec)
        else:
            g, b = bisect_candidates.version_of(good_spec), bisect_candidates.version_of(bad_spec)
            if g is None or b is None:
                raise UsageError(f"torch {good_spec} .. {bad_spec}: list the torches between them with --versions")
            target = torch_index.target()
            if g.is_devrelease and b.is_devrelease:
                index = torch_index.nightly_index(index)
                listing = bisect_candidates.nightlies_between(torch_index.fetch_project(index), target, g, b)
            else:
                index = index or PYPI_SIMPLE
                listing = bisect_candidates.releases_between(torch_index.fetch_project(index), target, g, b)
            inner, notes = listing.candidates, listing.notes()
        return BisectRound(axis="torch", fixed=fixed, candidates=[ends[0], *inner, ends[1]], index_url=index,
                           backend_commit=backend_commit_, check_bad_end=check_bad_end, notes=notes)

    def commit_round(self, good: BisectCandidate, bad: BisectCandidate, fixed: str,
                     backend_commit_: str | None) -> BisectRound:
        if not (good.commit and bad.commit):
            raise BisectError(f"--commits needs the commits of {good.label} and {bad.label}; "
                              "their runs did not record torch.git_version")
        repo = self.torch_history()
        inner = bisect_candidates.commits_between(repo, good.commit, bad.commit, label="pytorch",
                                                  spec="git:{sha}")[:-1]
        first = BisectCandidate(label=f"{good.label} (pytorch@{good.commit[:10]})", spec=f"git:{good.commit}",
                                commit=good.commit)
        last = BisectCandidate(label=f"{bad.label} (pytorch@{bad.commit[:10]})", spec=f"git:{bad.commit}",
                               commit=bad.commit)
        return BisectRound(axis="torch-commits", fixed=fixed, candidates=[first, *inner, last],
                           backend_commit=backend_commit_)

    def torch_history(self) -> Path:
        """A local git repository of PyTorch: --torch-repo when it is a directory, else a blobless mirror."""
        if self.options.torch_repo and Path(self.options.torch_repo).is_dir():
            return Path(self.options.torch_repo)
        url = torch_repo(self.options.torch_repo)
        mirror = (self.options.cache or cache_root()) / "git" / f"history-{digest(url, length=10)}.git"
        try:
            if mirror.is_dir():
                git(mirror, "fetch", "--quiet", "origin", "+refs/heads/*:refs/heads/*", timeout=3600)
            else:
                git(None, "clone", "--quiet", "--bare", "--filter=blob:none", url, mirror, timeout=3600)
        except GitError as exc:
            raise UsageError(f"cannot read PyTorch's history from {url}: {exc.detail}") from None
        return mirror

    def backend_round(self, good_ref: str, bad_ref: str, torch: tuple[str, str | None]) -> BisectRound:
        m = self.options.manifest
        repo, subdir = self.history()
        for ref in (good_ref, bad_ref) if m.source.kind == "path" else ():
            if not ref or RUN_ID.match(ref) or ref.endswith(record_files.RECORD_NAME):
                raise UsageError(f"{ref or 'a run'}: a run of {m.name} built from a directory outside a git work "
                                 f"tree (or by an ootci that did not record it) records no commit, so the backend axis "
                                 f"cannot start there: give --good and --bad as commits of {repo}")
        # The cache's clone is only fetched: its branches are origin/<name>. A work tree's are its own.
        named = (lambda ref: _origin(repo, ref)) if m.source.kind == "git" else (lambda ref: ref)
        good_sha = bisect_candidates.resolve_commit(repo, named(good_ref))
        walk = bisect_candidates.commits_between(repo, good_sha, named(bad_ref), label=m.name, subdir=subdir)
        first = BisectCandidate(label=f"{m.name}@{good_sha[:10]}", spec=good_sha, commit=good_sha)
        return BisectRound(axis="backend", fixed=f"torch {torch[0]}", candidates=[first, *walk], torch=torch[0],
                           index_url=torch[1])

    def walk(self, round_: BisectRound, predicate: Predicate, step_run) -> None:
        """Judge candidates until the search ends, the budget is spent, or (check_bad_end) the axis is cleared."""
        size = len(round_.candidates)
        while True:
            if round_.check_bad_end and not any(s.candidate == size - 1 for s in round_.steps):
                probe = bisect_search.Probe(size - 1)
            else:
                # A count is all but deterministic: its verdicts are not judged twice.
                ended_or_probe = bisect_search.next_probe(
                    size, [bisect_search.Step(s.candidate, s.verdict, s.rerun) for s in round_.steps
                           if s.candidate != size - 1], recheck=predicate.metric is None)
                if isinstance(ended_or_probe, bisect_search.Ended):
                    round_.result = self.result_of(round_, ended_or_probe)
                    self.save()
                    return
                probe = ended_or_probe
            if self.state.steps_taken() >= self.options.max_steps:
                last_good, first_bad = bisect_search.bounds(size, {s.candidate: s.verdict for s in round_.steps
                                                                   if not s.rerun and s.candidate != size - 1})
                round_.result = BisectResult(
                    kind="budget", last_good=last_good, first_bad=first_bad,
                    summary=f"the step budget ({self.options.max_steps}) is spent: the first bad one is after "
                            f"{round_.candidates[last_good].label}, up to {round_.candidates[first_bad].label}")
                self.save()
                return
            candidate = round_.candidates[probe.candidate]
            what = "re-judging" if probe.rerun else "judging"
            self.say(f"{what} {candidate.label} ({round_.axis} axis, step {self.state.steps_taken() + 1})")
            started, t0 = now(), time.monotonic()
            record = step_run(candidate)
            verdict, reason, stage = judge(record, predicate)
            if round_.axis.startswith("torch") and record.torch.git_version and not candidate.commit:
                candidate.commit = record.torch.git_version
            log = None
            if stage and record.stage(stage) and record.stage(stage).log:
                log = f"{STEPS_DIR}/{record.run_id}/{record.stage(stage).log}"
            round_.steps.append(BisectStep(candidate=probe.candidate, verdict=verdict, reason=reason,
                                           rerun=probe.rerun, started_at=started,
                                           duration_s=round(time.monotonic() - t0, 3), run_id=record.run_id, log=log))
            self.say(f"{candidate.label}: {verdict.value} ({reason[:200]})")
            self.save()
            if round_.check_bad_end and probe.candidate == size - 1 and verdict is Verdict.good:
                round_.result = BisectResult(
                    kind="cleared", last_good=size - 1,
                    summary=f"{candidate.label} passes with the {round_.fixed}: the {round_.axis} change "
                            "is not the cause")
                self.save()
                return

    def result_of(self, round_: BisectRound, ended: bisect_search.Ended) -> BisectResult:
        c = round_.candidates
        good, bad = c[ended.last_good], c[ended.first_bad]
        bad_step = next((s for s in round_.steps if s.candidate == ended.first_bad and s.verdict is Verdict.bad), None)
        cause = bad_step.reason if bad_step else (self.state.predicate.cause if self.state.predicate else "")
        links = self.links(round_.axis, good, bad)
        if ended.kind == "flaky" and ended.flaky is not None:  # a flaky end names the candidate
            flaky = c[ended.flaky]
            verdicts = [s.verdict.value for s in round_.steps if s.candidate == ended.flaky]
            summary = (f"the failure is flaky at {flaky.label} (judged {' then '.join(verdicts)}): "
                       "no culprit is named")
        elif ended.kind == "range":
            summary = (f"{self.options.manifest.name} broke after {good.label}, at one of "
                       f"{', '.join(c[i].label for i in ended.skipped)} or {bad.label} "
                       f"(the ones before {bad.label} could not be judged)")
        else:
            summary = f"{self.options.manifest.name} broke at {bad.label}" + (f" (PR #{bad.pr})" if bad.pr else "")
            summary += f", last good {good.label}"
            if bad.subject:
                summary += f": {bad.subject}"
        return BisectResult(kind=ended.kind, summary=summary, last_good=ended.last_good, first_bad=ended.first_bad,
                            cause=cause, links=links)

    def links(self, axis: str, good: BisectCandidate, bad: BisectCandidate) -> dict[str, str]:
        links: dict[str, str] = {}
        commit_url = compare_url = None
        if axis.startswith("torch"):
            commit_url, compare_url = PYTORCH_COMMIT, PYTORCH_COMPARE
        else:
            m = _GITHUB_REPO.match(self.options.manifest.source.git or "")
            if m:
                commit_url = f"https://github.com/{m.group(1)}/commit/{{sha}}"
                compare_url = f"https://github.com/{m.group(1)}/compare/{{good}}...{{bad}}"
        # Only commit ids go into a link: everything else in a record is untrusted text.
        g, b = good.commit or "", bad.commit or ""
        if compare_url and _HEX.match(g) and _HEX.match(b) and g != b:
            links["compare"] = compare_url.format(good=g, bad=b)
        if commit_url and axis != "torch" and _HEX.match(b):
            links["commit"] = commit_url.format(sha=b)
        if bad.pr and axis.startswith("torch"):
            links["pr"] = PYTORCH_PULL.format(pr=bad.pr)
        return links

    # -- the whole

    def search(self) -> BisectRecord:
        good, bad = self.end_runs()
        if self.state.predicate is None:
            self.state.predicate = (slowdown.derive(good, bad, self.options.perf) if self.options.perf
                                    else derive_predicate(good, bad))
            self.save()
        predicate = self.state.predicate
        self.say(f"predicate: stage {predicate.stage}"
                 + (f", {sum(len(v) for v in predicate.tests.values())} test(s)" if predicate.tests else ""))
        axis = self.choose_axes(good, bad)
        if not self.state.rounds:
            self.state.rounds.append(self.first_round(axis, good, bad))
            self.save()
        while True:
            round_ = self.state.rounds[-1]
            self.walk(round_, predicate, self.step_runner(round_))
            following = self.next_round(round_, axis, good, bad)
            if following is None:
                break
            self.state.rounds.append(following)
            self.save()
        return self.state

    def first_round(self, axis: str, good: RunRecord, bad: RunRecord) -> BisectRound:
        for name, end in (("good", good), ("bad", bad)):
            if built_dirty(end) and (commit := backend_commit(end)):
                self.say(f"the {name} run built {self.options.manifest.name} with uncommitted changes on top of "
                         f"{commit[:10]}: the backend axis walks the commits, without them")
        if axis == "backend":
            return self.backend_round(backend_commit(good) or self.options.good,
                                      backend_commit(bad) or self.options.bad,
                                      self.fixed_torch())
        return self.torch_round(good, bad, backend_commit(good), check_bad_end=(axis == "both"))

    def next_round(self, done: BisectRound, axis: str, good: RunRecord, bad: RunRecord) -> BisectRound | None:
        result = done.result
        if result is None or result.kind == "budget":
            return None
        if done.axis == "torch" and result.kind == "cleared":
            spec = torch_spec_of(bad)
            return self.backend_round(backend_commit(good) or "", backend_commit(bad) or "",
                                      (spec, self.trusted_index(spec)))
        if (done.axis == "torch" and result.kind == "found" and self.options.commits
                and result.last_good is not None and result.first_bad is not None):  # a found end names both
            last_good, first_bad = done.candidates[result.last_good], done.candidates[result.first_bad]
            if last_good.commit and first_bad.commit and last_good.commit != first_bad.commit:
                return self.commit_round(last_good, first_bad, done.fixed, done.backend_commit)
        return None

    def step_runner(self, round_: BisectRound):
        if round_.axis == "backend":
            torch = round_.torch or self.fixed_torch()[0]
            return lambda c: self.run(self.manifest_at(c.commit or c.spec), torch, round_.index_url,
                                      self.state.predicate)
        commit = round_.backend_commit
        at_commit = commit and self.options.manifest.source.kind == "git"
        manifest = self.manifest_at(commit) if at_commit else self.options.manifest
        return lambda c: self.run(manifest, c.spec, round_.index_url, self.state.predicate)


def _origin(repo: Path, ref: str) -> str:
    """A branch name as the clone knows it (origin/<name>); commits and tags as given."""
    try:
        bisect_candidates.resolve_commit(repo, f"refs/remotes/origin/{ref}")
    except UsageError:
        return ref
    return f"origin/{ref}"


def _torch_label(spec: str, record: RunRecord) -> str:
    version = record.torch.version
    if spec.startswith("git:"):
        return f"pytorch@{spec[4:14]}"
    return "torch " + (version or spec).split("+", 1)[0]


def new_id(backend: str) -> str:
    return f"bisect-{backend}-{now():%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def start(options: BisectOptions, command: list[str]) -> tuple[Bisection, Path]:
    bisect_id = new_id(options.manifest.name)
    directory = options.out / bisect_id
    directory.mkdir(parents=True)
    state = BisectRecord(bisect_id=bisect_id, backend=options.manifest.name, device=options.manifest.device,
                         started_at=now(), good=options.good, bad=options.bad, command=shlex.join(command),
                         options=options.to_json())
    bisection = Bisection(options, state, directory)
    bisection.save()
    return bisection, directory


def load(directory: Path) -> BisectRecord:
    path = directory / BISECT_NAME
    try:
        return BisectRecord.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise UsageError(f"--resume: {path}: cannot read: {exc.strerror}") from None
    except (ValueError, ValidationError) as exc:
        raise UsageError(f"--resume: {path}: not a bisection record: {str(exc).splitlines()[0][:200]}") from None


def finish(bisection: Bisection, error: str | None = None, interrupted: str | None = None) -> None:
    state = bisection.state
    state.finished_at = now()
    state.state = "interrupted" if interrupted else "failed" if error else "finished"
    state.error = error or (f"interrupted by {interrupted}: `ootci bisect --resume {bisection.dir}` goes on"
                            if interrupted else None)
    bisection.save()
