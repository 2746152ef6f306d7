"""The one vocabulary of ootci results.

The runner writes these models as JSON and the dashboard reads them back; nothing
else crosses between the two. Every field added here must have a default so that
records written by older versions still load.
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

# Shapes of identifiers that arrive from outside (a relay dispatch, a command line),
# checked with re.fullmatch wherever they come in.
COMMIT_SHA = r"[0-9a-f]{40}"
DELIVERY_ID = r"[A-Za-z0-9-]{1,64}"
SHARD_GROUP = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"


class Status(str, Enum):
    """Outcome of a stage or of a check."""

    passed = "passed"
    failed = "failed"
    crashed = "crashed"
    timeout = "timeout"
    blocked = "blocked"
    skipped = "skipped"
    missing = "missing"
    """a run of which nothing came back: its CI job never started, was cancelled, lost its
    runner or failed before ootci ran (`ootci history fill-missing` writes its record)"""

    @property
    def ok(self) -> bool:
        return self in (Status.passed, Status.skipped)


class Outcome(str, Enum):
    """Outcome of one test, after retries and expected failures are applied."""

    passed = "passed"
    failed = "failed"
    error = "error"
    skipped = "skipped"
    xfailed = "xfailed"
    xpassed = "xpassed"
    flaky = "flaky"
    timeout = "timeout"
    crashed = "crashed"
    fixed = "fixed"
    """a known failure (the backend's baseline, `ootci expect`) that passed"""
    upstream = "upstream"
    """an upstream test that failed on the device and failed again on CPU: not the backend's"""

    @property
    def ok(self) -> bool:
        return self in (Outcome.passed, Outcome.skipped, Outcome.xfailed, Outcome.flaky, Outcome.fixed,
                        Outcome.upstream)


class _Model(BaseModel):
    # Unknown keys are kept out rather than rejected, so a newer record still loads.
    model_config = ConfigDict(extra="ignore")


class RootCause(_Model):
    """Why something did not pass, reduced to what a person needs to act on it."""

    kind: str = Field(
        description="exception, signal, exit_code, timeout, missing or error"
    )
    summary: str = Field(description="one line, e.g. 'OSError: libhccl.so: cannot open shared object file'")
    exception_type: str | None = None
    message: str | None = None
    signal: str | None = None
    exit_code: int | None = None
    timeout_s: float | None = None
    hint: str | None = None
    culprit: str | None = Field(
        default=None, description="what caused it: an entry point, a test id, a package"
    )


class CheckResult(_Model):
    """One probe of the autoload verification."""

    name: str
    status: Status
    detail: str = ""
    duration_s: float = 0.0
    root_cause: RootCause | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class TestResult(_Model):
    """One test of a suite, as ingested from JUnit XML."""

    id: str
    suite: str
    outcome: Outcome
    duration_s: float = 0.0
    message: str = ""
    log_tail: str = ""
    attempts: int = 1
    op: str | None = Field(default=None, description="OpInfo operator name, for op coverage")
    dtype: str | None = None


class Cause(_Model):
    """The failures of one stage that share a cause (runner/core/causes.py), for the terminal,
    the page and the relay: hundreds of failing tests read as the few things that broke."""

    text: str = Field(description="the signature: the innermost exception's type and first line, with numbers, "
                                  "addresses, shapes, dtypes and the device's name masked; or `SIGSEGV in fft`")
    novelty: str = Field(default="new", description="new, changed (a known failure now failing differently), "
                                                    "known or upstream (fails on CPU too)")
    count: int = 0
    tests: list[str] = Field(default_factory=list,
                             description="its tests, the first 20 (count is exact; the run's tests hold them all)")
    ops: list[str] = Field(default_factory=list)
    dtypes: list[str] = Field(default_factory=list)
    masked: list[str] = Field(default_factory=list, description="what was masked or looked through to get the text")
    was: str | None = Field(default=None, description="changed: the cause the baseline listed")


class StageResult(_Model):
    name: str
    status: Status
    duration_s: float = 0.0
    started_at: dt.datetime | None = None
    log: str | None = Field(default=None, description="log file, relative to the record's directory")
    summary: str = ""
    root_cause: RootCause | None = None
    checks: list[CheckResult] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    data: dict[str, Any] = Field(default_factory=dict)
    causes: list[Cause] = Field(default_factory=list, description="its failing tests grouped by cause, new ones "
                                "first, largest first (suite stages)")


class TorchInfo(_Model):
    """The torch a run tested: `spec` as given, `version` and `git_version` as the
    environment under test's own `import torch` reported them."""

    spec: str
    version: str | None = None
    git_version: str | None = None
    dist_version: str | None = Field(default=None, description="the version pip knows it by (2.14.0 for 2.14.0+cu130)")
    source: str | None = Field(default=None, description="wheel file, URL or source checkout")
    index_url: str | None = Field(default=None, description="package index torch came from, besides pip's default")


class RunRecord(_Model):
    """Everything one run of one backend produced. Immutable once written."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    backend: str
    device: str
    trigger: str = "manual"
    pr: int | None = None
    pr_head_sha: str | None = Field(default=None, pattern=f"^{COMMIT_SHA}$",
                                    description="the PyTorch PR's head commit the run tested (trigger pr)")
    relay_delivery_id: str | None = Field(default=None, pattern=f"^{DELIVERY_ID}$",
                                          description="the delivery id of PyTorch's relay dispatch that started it")
    torch: TorchInfo
    python: str = ""
    platform: str = ""
    host: str = ""
    ootci_version: str = ""
    started_at: dt.datetime
    finished_at: dt.datetime | None = None
    status: Status = Status.blocked
    interrupted: str | None = Field(default=None, description="signal or reason when the run was cut short")
    stages: list[StageResult] = Field(default_factory=list)
    tests: list[TestResult] = Field(
        default_factory=list,
        description="every test; on disk they live in `tests_file` (see runner/records/record_files.py)"
    )
    tests_file: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9_-][A-Za-z0-9._-]*$",
        description="file beside record.json that holds `tests`; None: `tests` is inline (older records)",
    )
    test_counts: dict[Outcome, int] = Field(default_factory=dict, description="outcome -> number of tests")
    test_ids_hash: str | None = Field(
        default=None, description="fingerprint of the set of test ids (runner.records.record_files.ids_hash): "
        "runs with equal hashes ran the same tests"
    )
    notable_tests: dict[str, Outcome] = Field(
        default_factory=dict, description="test id -> outcome, for every test that neither passed nor was skipped"
    )
    problems: list[str] = Field(default_factory=list, description="configuration problems found on the way")
    command: str = Field(default="", description="command that reproduces this run locally")
    shard: str | None = Field(default=None, pattern=r"^[1-9][0-9]*/[1-9][0-9]*$",
                              description="'K/N': this run ran only shard K of N of its suites "
                                          "(`ootci run --shard`); None: all of them, or a merge of the shards")
    shard_group: str | None = Field(default=None, pattern=f"^{SHARD_GROUP}$",
                                    description="the id shared by the shards of one run (`--shard-group`); "
                                                "a merged record keeps it")
    ci_run_url: str | None = Field(
        default=None, pattern=r"^https?://[^\s\"'<>]+$",
        description="the CI run that made this record (a GitHub Actions run page): its logs and JUnit "
                    "files are kept there as artifacts, not in the history")
    tests_pruned_at: dt.datetime | None = Field(
        default=None, description="when `ootci history prune` removed this run's test list "
                                  "(its counts and notable tests stay in the header)")

    def stage(self, name: str) -> StageResult | None:
        return next((s for s in self.stages if s.name == name), None)

    @property
    def missing_reason(self) -> str:
        """Why a `missing` run has no results ('' for any other run)."""
        if self.status is not Status.missing:
            return ""
        stage = next((s for s in self.stages if s.status is Status.missing), None)
        if stage is None:
            return "no record from the backend job"
        return stage.root_cause.summary if stage.root_cause else stage.summary

    def first_problem(self) -> str:
        """`<stage>: <root cause>` of the first stage that did not pass (blocked ones only follow), or ''."""
        for stage in self.stages:
            if not stage.status.ok and stage.status is not Status.blocked:
                cause = stage.root_cause.summary if stage.root_cause else stage.summary
                return f"{stage.name}: {cause}"
        return ""

    def novelty(self) -> dict[str, list[str]]:
        """The tests that did not pass, by what the morning needs to know: `new` (failed and
        not expected: these make the run red), `known` (expected failures that failed again),
        `fixed` (known failures that passed) and `upstream` (failed on the device and on CPU
        too: not the backend's). Without the test list (a pruned record, a header), from
        notable_tests."""
        found: dict[str, list[str]] = {"new": [], "known": [], "fixed": [], "upstream": []}
        outcomes = {t.id: t.outcome for t in self.tests} if self.tests else self.notable_tests
        for test_id, outcome in sorted(outcomes.items()):
            kind = NOVELTY.get(outcome)
            if kind:
                found[kind].append(test_id)
        return found

    def reproduce(self) -> str:
        """The command that reproduces this run (records older than `command` get one built)."""
        return self.command or reproduce_command(self.backend, self.torch)


NOVELTY = {Outcome.failed: "new", Outcome.error: "new", Outcome.crashed: "new", Outcome.timeout: "new",
           Outcome.xpassed: "new", Outcome.xfailed: "known", Outcome.fixed: "fixed", Outcome.upstream: "upstream"}
"""What a test's outcome says of its news (RunRecord.novelty)."""

SUITES = ("smoke", "integration", "upstream")
"""The test suites and their stages, in the order they run: the one place their names are spelled.
`upstream` (PyTorch's own test files) runs only for a manifest that names its files."""


PYTORCH_VARIANT = re.compile(r"cpu|cu\d+|rocm\d+(?:\.\d+)*|xpu")
PYTORCH_INDEX = "https://download.pytorch.org/whl/"


def variant_index(version: str) -> str | None:
    """PyTorch's package index of a release build's variant (2.13.0+cpu: .../whl/cpu), or None."""
    local = version.partition("+")[2]
    return PYTORCH_INDEX + local if PYTORCH_VARIANT.fullmatch(local) else None


def reproduce_command(backend: str, torch: TorchInfo, suites: tuple[str, ...] | list[str] = SUITES,
                      shard: str | None = None, bench: bool | None = None, bench_only: tuple[str, ...] = (),
                      upstream_files: tuple[str, ...] = (), upstream_tests: str | None = None,
                      shard_plan: str | None = None) -> str:
    """`ootci run ...` that tests the same backend against the same torch, on any machine.

    The torch is named as resolved, never as asked for: `nightly` becomes the version
    that ran (with its index), a wheel path (a runner's temporary file) becomes the
    version or, for a source build, the commit. A version with a variant (2.13.0+cpu) and no
    recorded index names PyTorch's index of that variant, where any machine can install it.
    """
    argv = ["ootci", "run", backend]
    spec = torch.spec
    local = (torch.dist_version or torch.version or "").partition("+")[2]
    if spec == "installed":
        argv += ["--python", torch.source or "PYTHON"]
    elif torch.git_version and (spec.startswith(("git:", "pr:")) or local.startswith("git")):
        argv += ["--torch", f"git:{torch.git_version}"]
    elif resolved := torch.dist_version or torch.version:
        argv += ["--torch", resolved]
        # 2.13.0+cpu from a machine's own wheel directory installs elsewhere from PyTorch's index of
        # that variant; a version without a local part is PyPI's.
        if index := torch.index_url or variant_index(resolved):
            argv += ["--index-url", index]
    else:
        argv += ["--torch", spec]
    # bench: True when --suites named it; otherwise the manifest decided, and decides again.
    if tuple(suites) != SUITES or bench:
        named = [*suites, *(["bench"] if bench else [])]
        argv += ["--suites", ",".join(named) or "none"]
    if bench_only:
        argv += ["--bench-only", ",".join(bench_only)]
    if upstream_files:
        argv += ["--upstream-files", ",".join(upstream_files)]
    if upstream_tests:
        argv += ["--upstream-tests", upstream_tests]
    if shard_plan:
        argv += ["--shard-plan", shard_plan]
    if shard:
        argv += ["--shard", shard]
    return shlex.join(argv)


SEVERITY = (Status.crashed, Status.missing, Status.timeout, Status.failed, Status.blocked, Status.passed,
            Status.skipped)
"""Statuses worst first. A run that left no record (missing) is as bad as a crash: nothing is known of it."""


def worst_of(statuses) -> Status:
    """The worst of some statuses (at least one), by SEVERITY."""
    return min(statuses, key=SEVERITY.index)


def overall_status(stages: list[StageResult]) -> Status:
    """A run is as bad as its worst stage; blocked stages only follow a failure."""
    status = worst_of(s.status for s in stages) if stages else Status.blocked
    if not status.ok and status is not Status.blocked:
        return status
    if stages and all(s.status is Status.skipped for s in stages):
        return Status.skipped
    return Status.passed if stages else Status.blocked


# -- bisection ------------------------------------------------------------------------------

class Verdict(str, Enum):
    """What one bisection step says of its candidate."""

    good = "good"
    bad = "bad"
    skip = "skip"
    """the candidate cannot be judged (its torch does not install, its build broke for another reason)"""


class BisectCandidate(_Model):
    """One point on the axis: a torch (a nightly, a release, a commit) or a backend commit."""

    label: str = Field(description="how people name it: 2.14.0, 2.16.0.dev20261122, pytorch@abc1234, openreg@def5678")
    spec: str = Field(description="torch spec of the step (torch axis) or backend commit (backend axis)")
    commit: str | None = Field(default=None, description="the commit it is, when known")
    date: str | None = Field(default=None, description="nightly date, YYYY-MM-DD")
    pr: int | None = Field(default=None, description="PyTorch PR the commit's message names")
    subject: str = Field(default="", description="first line of the commit message")


class BisectStep(_Model):
    candidate: int = Field(description="index into the round's candidates")
    verdict: Verdict
    reason: str = Field(default="", description="why: the failing tests, the stage, or why it was skipped")
    rerun: bool = Field(default=False, description="a re-run of a boundary verdict, to catch a flaky predicate")
    started_at: dt.datetime | None = None
    duration_s: float = 0.0
    run_id: str | None = None
    log: str | None = Field(default=None, description="the deciding stage's log, relative to the bisection's directory")


class BisectResult(_Model):
    kind: str = Field(description="found (one first bad candidate), range (skipped candidates leave several), "
                                  "flaky (a boundary verdict changed on its re-run), none (no candidate between) "
                                  "or budget (the step budget ran out)")
    summary: str = Field(description="the verdict in one line")
    last_good: int | None = None
    first_bad: int | None = None
    cause: str = Field(default="", description="why the first bad candidate failed (its root cause)")
    links: dict[str, str] = Field(default_factory=dict, description="compare, commit, pr: links to the culprit")


class Predicate(_Model):
    """What made the bad run bad, and all a step tests."""

    stage: str = Field(description="the first stage that failed in the bad run")
    tests: dict[str, list[str]] = Field(default_factory=dict,
                                        description="suite -> test ids that passed in the good run and failed in "
                                                    "the bad one")
    cause: str = Field(default="", description="the bad run's root cause, for people")
    failure_cause: str | None = Field(default=None, description="the cause (runner/core/causes.py) the bisection looks "
                                      "for: the bad run's largest new one; `tests` are its tests, and a step is bad "
                                      "when one of them fails with it. None: any failure of `tests`")
    measurement: str | None = Field(default=None, description="a bench measurement that got slower: a step is bad when "
                                    "its rounds lie nearer the bad run's than the good run's (stage is then bench)")
    good_ratios: list[float] = Field(default_factory=list, description="the good run's device/CPU ratio per round")
    bad_ratios: list[float] = Field(default_factory=list, description="the bad run's device/CPU ratio per round")
    metric: str | None = Field(default=None, description="a slowdown judged on instruction counts: 'count' (the "
                               "device's per call) or 'count_ratio' (device over CPU); None: on the time rounds")
    counter: str | None = Field(default=None, description="the counter both ends counted with (a step must too)")
    good_value: float | None = Field(default=None, description="the good run's value of `metric`")
    bad_value: float | None = Field(default=None, description="the bad run's value of `metric`")


class BisectRound(_Model):
    """One walk along one axis between a good and a bad candidate (the first and the last)."""

    axis: str = Field(description="torch, torch-commits or backend")
    fixed: str = Field(default="", description="what stays the same, for people: the torch or the backend commit")
    torch: str | None = Field(default=None, description="backend axis: the torch spec every step uses")
    index_url: str | None = Field(default=None, description="the package index the steps' torches come from")
    backend_commit: str | None = Field(default=None, description="torch axes: the backend commit every step builds")
    candidates: list[BisectCandidate]
    steps: list[BisectStep] = Field(default_factory=list)
    result: BisectResult | None = None
    check_bad_end: bool = Field(default=False, description="judge the bad end first: with the other axis held at "
                                "its good value it may pass, and then this axis is not the cause")
    notes: list[str] = Field(default_factory=list, description="what the listing left out (missing days, yanked files)")


class BisectRecord(_Model):
    """A bisection of one backend between a good and a bad run, rewritten after every step."""

    schema_version: int = SCHEMA_VERSION
    bisect_id: str
    backend: str
    device: str = ""
    started_at: dt.datetime
    finished_at: dt.datetime | None = None
    state: str = Field(default="running", description="running, finished or failed")
    good: str = Field(description="the good end as given: a run id or a spec")
    bad: str
    good_run: str | None = None
    bad_run: str | None = None
    predicate: Predicate | None = None
    rounds: list[BisectRound] = Field(default_factory=list)
    error: str | None = None
    command: str = ""
    options: dict[str, Any] = Field(default_factory=dict, description="the arguments, for --resume")

    @property
    def result(self) -> BisectResult | None:
        """The verdict: that of the last round that has one."""
        return next((r.result for r in reversed(self.rounds) if r.result is not None), None)

    def steps_taken(self) -> int:
        return sum(len(r.steps) for r in self.rounds)
