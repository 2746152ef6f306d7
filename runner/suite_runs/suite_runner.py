"""Run one pytest suite in the environment under test and classify every test.

A suite is ootci's own (runner/suites/<name>, run with its own ini and rootdir and
`--import-mode=importlib`, so the target interpreter never imports the `runner`
package) or a vendor's (a pytest path in the backend's sources, or a command that
writes JUnit XML to $OOTCI_JUNIT). Every pytest run loads runner/suites/ootci_plugin.py
(found through PYTHONPATH), which streams results to JUnit XML and records the test
in progress.

How one suite runs:
1. Attempt 1 runs everything. If the process dies in a test (segfault, abort, a hang
   in native code ended by faulthandler), that test is recorded `crashed` (or
   `timeout`, when it had run past the per-test limit), the results so far are kept,
   and pytest is started again on the tests that have no result yet, without the
   one that crashed. This repeats up to MAX_RESUMES times.
2. Tests that did not pass (failed, error, timeout, crashed) and are not expected failures
   (or are known failures that now fail with another cause) are run again, up to
   `manifest.retries` times: passing on a retry makes a test `flaky` (attempts > 1); failing
   every time keeps it failing. Retries are cheap by rule: a test that fails twice with the
   same error is deterministic and not run a third time; a test that crashed or timed out is
   re-run at most once; and all retries together get at most RETRY_SHARE of the first
   attempt's time (at least RETRY_FLOOR_S), cheap failures first. What was re-run, and what
   the budget left out, is in the stage's data (`suites.<name>.retries`).
3. Expected failures from the manifest become `xfailed`, or `xpassed` if they passed.
4. The classified results are written to `<junit dir>/<suite>.xml.gz`. The raw files
   of every attempt (under `<junit dir>/raw/<suite>/` while the suite runs) are deleted:
   everything they said is in the classified file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ootci.runner.core import procs, rootcause
from ootci.runner.manifests.known_failures import KnownFailure
from ootci.runner.manifests.manifest import Manifest, VendorSuite
from ootci.runner.models import SUITES, Outcome, RootCause, StageResult, Status, TestResult
from ootci.runner.suite_runs import classify, junit
from ootci.runner.suite_runs.junit import JUnitCase

SUITES_DIR = Path(__file__).resolve().parents[1] / "suites"
PROBES_DIR = Path(__file__).resolve().parents[1] / "probes"
PLUGIN = "ootci_plugin"
MAX_RESUMES = 25
XDIST_MIN_TESTS = 100
RETRY_SHARE = 0.5
RETRY_FLOOR_S = 30.0
# Outcomes that end the interpreter (or need it ended): each re-run costs a process start.
_EXPENSIVE = frozenset({Outcome.crashed, Outcome.timeout})
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_MISSING_MODULE = re.compile(r"ModuleNotFoundError|No module named")
# pytest exit codes after which the session ran to its end.
_SESSION_ENDED = {0, 1, 5}
_EXIT_MEANING = {2: "interrupted", 3: "internal error", 4: "usage error"}
NOT_REACHED = "not run: the suite process stopped before reaching it"
"""the message of a collected test the suite's process never got to (an error)"""


@dataclass
class SuiteSpec:
    """How to start one suite."""

    name: str
    cwd: Path
    pytest_args: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    workers: int = 0
    problem: str | None = None
    """Set when the suite cannot run at all (e.g. its path does not exist)."""
    requirements: list[str] = field(default_factory=list)
    """pip requirements its tests need, installed before it runs (a vendor suite's)"""
    part: str = ""
    """one of several runs that make up a suite (an upstream file): its raw files, and its
    classified JUnit, go under raw/<name>/<part>/; the caller writes the suite's"""
    env: dict[str, str] = field(default_factory=dict)
    """environment of its pytest runs, besides the runner's"""
    retries: int | None = None
    """re-runs of a failing test (None: the manifest's `retries`)"""
    expected: bool = True
    """apply expected and known failures; False leaves each test's own outcome (after retries),
    for a caller that classifies them itself"""
    missing_module_hint: str = ""
    """said after a ModuleNotFoundError in a test's message (where to list the package)"""
    import_backend: bool = True
    """import the backend before the tests (--ootci-import); False for a run that must not have it"""
    dtypes: list[str] | None = None
    """the dtypes it runs in (None: every dtype the manifest claims)"""
    retry_in_fork: bool = False
    """with crash isolation by fork: the tests that did not pass run once more in a fork of the same
    session (ootci_plugin's --ootci-retry-junit), at the cost of neither an interpreter nor a
    collection; their results are SuiteRun.retried, for the caller to judge"""
    retry_skip: list[str] = field(default_factory=list)
    """with retry_in_fork: ids the fork does not re-run (known failures whose baseline names their
    cause: the caller asks again only those that now fail otherwise)"""

    @property
    def is_command(self) -> bool:
        return bool(self.command)



def builtin_suite(name: str, *, workers: int = 0, extra_args: list[str] | None = None) -> SuiteSpec:
    directory = SUITES_DIR / name
    args = ["-c", str(directory / "pytest.ini"), "--rootdir", str(directory), "--import-mode=importlib",
            *(extra_args or []), str(directory)]
    return SuiteSpec(name=name, cwd=directory, pytest_args=args, workers=workers)


def vendor_suite(suite: VendorSuite, root: Path, index: int, manifest_path: Path | None = None) -> SuiteSpec:
    """A suite from the backend's own repository; `path` is relative to `root`."""
    hint = f"list its package in `requirements` of [[suites.vendor]] {suite.name!r} in the manifest"
    if suite.command:
        return SuiteSpec(name=suite.name, cwd=root, command=list(suite.command), requirements=list(suite.requirements),
                         missing_module_hint=hint)
    assert suite.path is not None  # VendorSuite validates: exactly one of path and command
    target = (root / suite.path).resolve()
    spec = SuiteSpec(name=suite.name, cwd=root, pytest_args=[str(target)], requirements=list(suite.requirements),
                     missing_module_hint=hint)
    if not target.exists():
        where = f"{manifest_path}: " if manifest_path else ""
        spec.problem = f"{where}suites.vendor[{index}].path {suite.path!r}: {target} does not exist"
    return spec


@dataclass
class SuiteRun:
    name: str
    status: Status
    results: list[TestResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    junit: Path | None = None
    summary: str = ""
    root_cause: RootCause | None = None
    duration_s: float = 0.0
    retries: dict | None = None
    """how the retries went: re-run, deterministic, left out by the budget, time spent and allowed"""
    retried: dict[str, TestResult] = field(default_factory=dict)
    """test id -> its result when run once more in a fork of the same session (SuiteSpec.retry_in_fork)"""

    @property
    def counts(self) -> dict[str, int]:
        return junit.count_by_outcome(self.results)


@dataclass
class _Attempt:
    cases: dict[str, JUnitCase] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    root_cause: RootCause | None = None
    suite_timed_out: bool = False
    not_reached: set[str] = field(default_factory=set)
    """Collected tests the process never got to (recorded as errors)."""
    retried: dict[str, JUnitCase] = field(default_factory=dict)
    """the re-runs of SuiteSpec.retry_in_fork"""
    cut_by_budget: bool = False
    """the retry budget ran out while this attempt ran (a retry only)"""


class SuiteRunner:
    """Runs suites for one backend in one environment under test."""

    def __init__(
        self,
        *,
        python: Path,
        manifest: Manifest,
        junit_dir: Path,
        log: Path | None,
        deadline: float,
        on_line: Callable[[str], None] | None = None,
        env: dict[str, str] | None = None,
        torch_version: str | None = None,
        shard: str | None = None,
    ):
        self.python = python
        self.shard = shard
        """"K/N": pytest suites run only the tests of shard K (the plugin's --ootci-shard)"""
        self.torch_version = torch_version
        """the torch under test, for expected failures scoped to torch versions"""
        self.manifest = manifest
        self.junit_dir = junit_dir
        self.log = log
        self.deadline = deadline
        self.on_line = on_line
        self.base_env = dict(os.environ if env is None else env)

    # -- the public entry ------------------------------------------------------------

    def run(self, spec: SuiteSpec, only: list[str] | None = None) -> SuiteRun:
        """Run the suite (only the test ids in `only`, when given) and classify its tests."""
        start = time.monotonic()
        if spec.problem:
            return SuiteRun(spec.name, Status.failed, problems=[spec.problem], summary=spec.problem,
                            root_cause=RootCause(kind="missing", summary=spec.problem))
        raw_dir = self.junit_dir / "raw" / spec.name / spec.part if spec.part else self.junit_dir / "raw" / spec.name
        shutil.rmtree(raw_dir, ignore_errors=True)
        raw_dir.mkdir(parents=True)
        retries = None
        if spec.is_command:
            first = self._run_command(spec, raw_dir)
            results = self._classify(spec, first.cases, {}, {})
        else:
            first = self._attempt(spec, raw_dir, attempt=1, only=only)
            results, retries = self._with_retries(spec, raw_dir, first, time.monotonic() - start)
        # What the processes wrote is in the results now: their raw files go (at 20,000 tests they
        # were 19 MB of a 26 MB junit/ folder). A part's caller writes the suite's file.
        shutil.rmtree(raw_dir, ignore_errors=True)
        if not spec.part:
            remove_empty(raw_dir.parent, self.junit_dir)
        out = None if spec.part else junit.suite_file(self.junit_dir, spec.name)
        if out is not None:
            junit.write(out, spec.name, results)
        run = SuiteRun(spec.name, Status.passed, results, list(first.problems), out,
                       duration_s=time.monotonic() - start, retries=retries,
                       retried={i: c.to_result(spec.name, attempts=2) for i, c in first.retried.items()})
        run.root_cause = first.root_cause
        self._judge(run, first)
        return run

    # -- retries and classification ---------------------------------------------------

    def _with_retries(self, spec: SuiteSpec, raw_dir: Path, first: _Attempt,
                      first_s: float) -> tuple[list[TestResult], dict | None]:
        cases = dict(first.cases)
        attempts = {test_id: 1 for test_id in cases}
        first_failure: dict[str, JUnitCase] = {}
        # Cheap failures first: a crash or a hang costs a process start (and maybe its time limit).
        failing = sorted((i for i, c in cases.items() if self._retriable(spec.name, c)),
                         key=lambda i: cases[i].outcome in _EXPENSIVE)
        if not failing:
            return self._classify(spec, cases, attempts, first_failure), None
        budget = max(RETRY_FLOOR_S, RETRY_SHARE * first_s)
        spent = 0.0
        rerun: set[str] = set()
        deterministic: set[str] = set()
        left_out: set[str] = set()
        retries = self.manifest.retries if spec.retries is None else spec.retries
        for attempt in range(2, retries + 2):
            if not failing or first.suite_timed_out or self._remaining() <= 1:
                break
            if budget - spent <= 1:
                left_out.update(failing)
                break
            t0 = time.monotonic()
            again = self._attempt(spec, raw_dir, attempt=attempt, only=failing, budget_s=budget - spent)
            spent += time.monotonic() - t0
            first.problems.extend(p for p in again.problems if p not in first.problems)
            still = []
            for test_id in failing:
                case = again.cases.get(test_id)
                if case is None or test_id in again.not_reached:
                    if again.cut_by_budget:
                        left_out.add(test_id)
                    continue  # the retry did not get to it: its last real result stands
                earlier = cases[test_id]
                first_failure.setdefault(test_id, earlier)
                attempts[test_id] = attempt
                cases[test_id] = case
                rerun.add(test_id)
                if case.outcome not in classify.NOT_PASSING:
                    continue
                if earlier.outcome in _EXPENSIVE or case.outcome in _EXPENSIVE or _same_failure(earlier, case):
                    deterministic.add(test_id)  # a crash is re-run once; the same error twice is no accident
                else:
                    still.append(test_id)
            failing = still
            if again.suite_timed_out:
                first.suite_timed_out = True
        left_out -= rerun
        summary = {"rerun": len(rerun), "deterministic": len(deterministic), "left_out_by_budget": len(left_out),
                   "spent_s": round(spent, 1), "budget_s": round(budget, 1)}
        return self._classify(spec, cases, attempts, first_failure), summary

    def _retriable(self, suite: str, case: JUnitCase) -> bool:
        """A failure that is new: not expected, or a known failure that now fails with another cause."""
        if case.outcome not in classify.NOT_PASSING:
            return False
        entry = classify.expected_failure(self.manifest, suite, case.id, self.torch_version)
        return entry is None or (isinstance(entry, KnownFailure)
                                 and classify.cause_changed(case.to_result(suite), entry, self.manifest.device))

    def _classify(self, spec: SuiteSpec, cases: dict[str, JUnitCase], attempts: dict[str, int],
                  first_failure: dict[str, JUnitCase]) -> list[TestResult]:
        suite = spec.name
        results = []
        for test_id, case in cases.items():
            result = case.to_result(suite, attempts=attempts.get(test_id, 1))
            earlier = first_failure.get(test_id)
            if earlier is not None and case.outcome is Outcome.passed:
                result = result.model_copy(update={
                    "outcome": Outcome.flaky,
                    "message": f"passed on attempt {result.attempts} after it "
                               f"{earlier.outcome.value}: {earlier.message}",
                    "log_tail": earlier.to_result(suite).log_tail,
                })
            if spec.missing_module_hint and _MISSING_MODULE.search(result.message or ""):
                result = result.model_copy(update={"message": f"{result.message} (a module the suite's tests need: "
                                                   f"{spec.missing_module_hint})"})
            if spec.expected:
                entry = classify.expected_failure(self.manifest, suite, test_id, self.torch_version)
                result = classify.apply_expected(result, entry, self.manifest.device)
            results.append(result)
        return results

    def _judge(self, run: SuiteRun, first: _Attempt) -> None:
        counts = run.counts
        bad = {k: v for k, v in counts.items() if not Outcome(k).ok}
        shown = ", ".join(f"{v} {k}" for k, v in counts.items()) or "no tests"
        run.summary = f"{run.name}: {shown}"
        # A shard of a small suite may hold none of its tests; the merge of the shards
        # judges a suite that reported no tests in any of them.
        empty_shard = bool(self.shard) and not run.results and not run.problems and run.root_cause is None
        if empty_shard:
            run.summary = f"{run.name}: no tests in shard {self.shard}"
        if first.suite_timed_out:
            run.status = Status.timeout
        elif bad or run.problems or (not run.results and not empty_shard):
            run.status = Status.failed
        if not run.results and not run.problems and not empty_shard:
            run.problems.append(f"suite {run.name!r} reported no tests")
        if run.root_cause is None and bad:
            run.root_cause = first_failing_test(run.results)
        if run.problems:
            run.summary += "; " + "; ".join(run.problems)

    def _remaining(self) -> float:
        return self.deadline - time.monotonic()

    # -- one attempt of a pytest suite, resumed after crashes ---------------------------

    def _env(self, spec: SuiteSpec | None = None) -> dict[str, str]:
        env = dict(self.base_env)
        if spec is not None:
            env.update(spec.env)
        # The plugin, and the probes' _probe module it shares (the source-tree check).
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SUITES_DIR), str(PROBES_DIR), env.get("PYTHONPATH", ""))
                                            if p)
        # The suites live in the ootci checkout (or its site-packages): keep them clean.
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["OOTCI_DEVICE"] = self.manifest.device
        return env

    def _backend_args(self, spec: SuiteSpec) -> list[str]:
        m = self.manifest
        # The backend is imported explicitly: the suites test the device, the autoload
        # stage tests autoload.
        return [
            "--ootci-device", m.device,
            "--ootci-capabilities", ",".join(c.value for c in m.capabilities),
            "--ootci-dtypes", ",".join(m.dtypes if spec.dtypes is None else spec.dtypes),
            "--ootci-test-timeout", f"{m.timeouts.test:g}",
            *(["--ootci-import", m.import_name] if spec.import_backend else []),
        ]

    def _attempt(self, spec: SuiteSpec, raw_dir: Path, *, attempt: int, only: list[str] | None,
                 budget_s: float | None = None) -> _Attempt:
        """One attempt, resumed after each crash; `budget_s` (a retry) bounds its time: when it
        runs out, the attempt stops and the tests it did not finish keep their earlier result."""
        result = _Attempt()
        budget_end = None if budget_s is None else time.monotonic() + budget_s
        dead: set[str] = set()
        collected: set[str] = set()
        progress_dir = raw_dir / f"progress-{attempt}"
        only_file = None
        if only is not None:
            only_file = raw_dir / f"only-{attempt}.txt"
            only_file.write_text("".join(f"{i}\n" for i in only))
        for round_no in range(MAX_RESUMES + 1):
            if self._remaining() <= 1:
                result.suite_timed_out = True
                break
            shutil.rmtree(progress_dir, ignore_errors=True)
            progress_dir.mkdir()
            xml = raw_dir / f"attempt-{attempt}-round-{round_no}.xml"
            # The runner's own paths go as `--option=PATH`: pytest finds its rootdir (and so the test ids)
            # from the paths on its command line, and would take a separate PATH for one of the tests'
            # (a vendor suite's ids then depended on where the run writes its results).
            argv = [*procs.python_argv(self.python, "-m", "pytest"), *spec.pytest_args,
                    "-p", PLUGIN, "-p", "no:cacheprovider", "--continue-on-collection-errors", "-q", "-rfE",
                    *self._backend_args(spec), "--ootci-suite", spec.name, f"--ootci-junit={xml}",
                    f"--ootci-progress={progress_dir}"]
            # A retry of a few tests is faster in one process than in workers that each
            # collect the whole suite first.
            parallel = spec.workers > 1 and (only is None or len(only) >= XDIST_MIN_TESTS)
            retry_xml = None
            if self.manifest.suites.crash_isolation == "fork":
                # One collection; each crash costs a fork of it (ootci_plugin's --ootci-fork).
                argv += ["-p", "no:xdist", "--ootci-fork", str(spec.workers if parallel else 1)]
                if spec.retry_in_fork and attempt == 1:
                    retry_xml = raw_dir / f"retry-{round_no}.xml"
                    argv += [f"--ootci-retry-junit={retry_xml}"]
                    if spec.retry_skip:
                        skip_file = raw_dir / f"retry-skip-{round_no}.txt"
                        skip_file.write_text("".join(f"{i}\n" for i in spec.retry_skip), encoding="utf-8")
                        argv += [f"--ootci-retry-skip={skip_file}"]
            elif parallel:
                argv += ["-n", str(spec.workers), "--max-worker-restart", str(MAX_RESUMES * spec.workers)]
            else:
                argv += ["-p", "no:xdist"]
            if only_file is not None:
                argv += [f"--ootci-only={only_file}"]
            if self.shard:
                argv += ["--ootci-shard", self.shard]
            skip = set(result.cases) | dead
            if round_no and not (set(only) if only is not None else collected) - skip:
                break  # the crash was the last test left
            if skip:
                exclude_file = raw_dir / f"exclude-{attempt}-{round_no}.txt"
                exclude_file.write_text("".join(f"{i}\n" for i in sorted(skip)))
                argv += [f"--ootci-exclude={exclude_file}"]
            # `python -m pytest` would put the working directory (a vendor's checkout) first on
            # sys.path; the installed backend must be the one imported.
            limit = self._remaining()
            left = None if budget_end is None else budget_end - time.monotonic()
            by_budget = left is not None and left < limit
            if left is not None and by_budget:
                limit = max(0.0, left)
            proc = procs.run(argv, timeout=limit, log=self.log, env=procs.target_env(self._env(spec)),
                             cwd=spec.cwd, on_line=self.on_line)
            ended_at = time.time()
            parsed = junit.parse(xml)
            for case in parsed.cases:
                result.cases[case.id] = case
            if retry_xml is not None and retry_xml.exists():
                result.retried.update((c.id, c) for c in junit.parse(retry_xml).cases)
            collected |= _read_lines(Path(f"{xml}.collected"))
            if not proc.timed_out and proc.returncode in _SESSION_ENDED and parsed.complete:
                break
            if proc.timed_out and by_budget:
                result.cut_by_budget = True  # the test in progress was not at fault: no result for it
                break
            victim = self._test_in_progress(progress_dir, result.cases)
            if victim is not None:
                case = self._died_in(victim, proc, ended_at)
                result.cases[case.id] = case
                dead.add(case.id)
                if proc.timed_out:
                    result.suite_timed_out = True
                    break
                continue
            # The process ended outside any test: nothing to resume from.
            result.root_cause = rootcause.from_proc(proc, what=f"pytest ({spec.name})") or RootCause(
                kind="error", summary=f"pytest ({spec.name}) ended without finishing its JUnit file")
            if proc.timed_out:
                result.suite_timed_out = True
            meaning = _EXIT_MEANING.get(proc.returncode or 0, "")
            result.problems.append(
                f"suite {spec.name!r}: pytest stopped outside any test"
                + (f" ({meaning})" if meaning else "") + f": {result.root_cause.summary}")
            break
        else:
            result.problems.append(f"suite {spec.name!r}: stopped resuming after {MAX_RESUMES} crashes")
        never_ran = collected - set(result.cases)
        if only is not None:
            never_ran &= set(only)
        result.not_reached = never_ran
        for test_id in sorted(never_ran):
            result.cases[test_id] = JUnitCase(test_id, Outcome.error,
                                              message=NOT_REACHED)
        return result

    def _test_in_progress(self, progress_dir: Path, finished: dict[str, JUnitCase]) -> dict | None:
        latest = None
        for path in progress_dir.glob("*.json"):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if data.get("nodeid") and data["nodeid"] not in finished:
                if latest is None or data.get("started", 0) > latest.get("started", 0):
                    latest = data
        return latest

    def _died_in(self, progress: dict, proc: procs.ProcResult, ended_at: float) -> JUnitCase:
        test_id = progress["nodeid"]
        elapsed = max(0.0, ended_at - float(progress.get("started", ended_at)))
        limit = float(progress.get("timeout") or 0)
        excerpt, frame = fatal_excerpt(proc.output_tail)
        at = f" at {frame}" if frame else ""
        if proc.timed_out:
            return JUnitCase(test_id, Outcome.timeout, elapsed,
                             f"the suite's time limit ran out while this test was running ({elapsed:.0f} s)", excerpt)
        if limit and elapsed >= limit:
            return JUnitCase(test_id, Outcome.timeout, elapsed,
                             f"test exceeded its {limit:g} s time limit in code that never returned to Python; "
                             f"faulthandler ended the process{at}", excerpt)
        cause = rootcause.from_proc(proc, what="the test process", culprit=test_id)
        summary = cause.summary if cause else f"the test process exited with code {proc.returncode}"
        return JUnitCase(test_id, Outcome.crashed, elapsed, f"crashed: {summary}{at}", excerpt)

    # -- vendor command suites ----------------------------------------------------------

    def _run_command(self, spec: SuiteSpec, raw_dir: Path) -> _Attempt:
        """A vendor's command, run once: its JUnit file is all there is to read."""
        result = _Attempt()
        xml = raw_dir / "command.xml"
        env = self._env(spec)
        env.update(OOTCI_JUNIT=str(xml), OOTCI_PYTHON=str(self.python),
                   OOTCI_CAPABILITIES=",".join(c.value for c in self.manifest.capabilities),
                   OOTCI_DTYPES=",".join(self.manifest.dtypes))
        env["PATH"] = os.pathsep.join([str(self.python.parent), env.get("PATH", "")])
        argv = [_substitute(arg, env) for arg in spec.command]
        proc = procs.run(argv, timeout=self._remaining(), log=self.log, env=env, cwd=spec.cwd, on_line=self.on_line)
        parsed = junit.parse(xml)
        result.cases = {c.id: c for c in parsed.cases}
        result.suite_timed_out = proc.timed_out
        if proc.returncode == 127 and not xml.exists():
            result.problems.append(f"suite {spec.name!r}: command not found: {argv[0]}")
        elif not xml.exists():
            result.problems.append(f"suite {spec.name!r}: the command wrote no JUnit XML to $OOTCI_JUNIT ({xml})")
        elif parsed.error and proc.ok:
            result.problems.append(f"suite {spec.name!r}: {parsed.error}")
        if not proc.ok:
            result.root_cause = rootcause.from_proc(proc, what=f"suite command {spec.name!r}")
            if proc.signal_name or proc.timed_out:
                outcome = Outcome.timeout if proc.timed_out else Outcome.crashed
                test_id = f"{spec.name}::(command)"
                message = result.root_cause.summary if result.root_cause else "the command died"
                result.cases[test_id] = JUnitCase(test_id, outcome, proc.duration_s, message,
                                                  "\n".join(proc.output_tail.splitlines()[-60:]))
        return result


# faulthandler's first line; pytest's progress dots may precede it on the same line.
_FATAL = re.compile(r"(Fatal Python error: |Timeout \(\d+:\d\d:\d\d\)!)")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


def _same_failure(a: JUnitCase, b: JUnitCase) -> bool:
    """The same outcome with the same message, memory addresses aside."""
    return a.outcome is b.outcome and _ADDRESS.sub("0x?", a.message or "") == _ADDRESS.sub("0x?", b.message or "")


def first_failing_test(results: list[TestResult]) -> RootCause | None:
    """The root cause of suites whose tests failed: the first test that did not pass."""
    failing = next((t for t in results if not t.outcome.ok), None)
    if failing is None:
        return None
    return RootCause(kind="test", summary=f"{failing.outcome.value}: {failing.id}: {failing.message}"[:500],
                     culprit=failing.id, hint=rootcause.hint_for(failing.message))


def fatal_excerpt(output: str, lines: int = 40) -> tuple[str, str | None]:
    """faulthandler's report from a dead process, and the frame most likely to be the
    culprit: the innermost test function, else the innermost frame outside site-packages."""
    text = output.splitlines()
    starts = [i for i, line in enumerate(text) if _FATAL.search(line)]
    if not starts:
        return "\n".join(text[-lines:]), None
    first = text[starts[-1]]
    fatal = _FATAL.search(first)
    assert fatal is not None  # the line was chosen for it
    block = [first[fatal.start():]] + text[starts[-1] + 1:starts[-1] + lines]
    frames = [m for m in map(_FRAME.match, block) if m]
    chosen = next((m for m in frames if m.group("func").startswith("test")), None)
    chosen = chosen or next((m for m in frames if "site-packages" not in m.group("file")), None)
    frame = None
    if chosen:
        frame = f"{os.path.basename(chosen.group('file'))}:{chosen.group('line')} in {chosen.group('func')}"
    return "\n".join(_fold_library_frames(block)), frame


def _fold_library_frames(lines: list[str]) -> list[str]:
    """pytest's and pluggy's frames say nothing about the crash: one line for each run of them."""
    out: list[str] = []
    folded = 0
    for line in lines:
        m = _FRAME.match(line)
        if m and "site-packages" in m.group("file"):
            folded += 1
            continue
        if folded:
            out.append(f"  ... {folded} frames in site-packages")
            folded = 0
        out.append(line)
    if folded:
        out.append(f"  ... {folded} frames in site-packages")
    return out


def _substitute(arg: str, env: dict[str, str]) -> str:
    for key in ("OOTCI_JUNIT", "OOTCI_PYTHON", "OOTCI_DEVICE"):
        arg = arg.replace(f"${{{key}}}", env[key]).replace(f"${key}", env[key])
    return arg


def remove_empty(folder: Path, junit_dir: Path) -> None:
    """Delete folder, and the folders above it up to junit_dir, as long as each is empty."""
    for each in (folder, *folder.parents):
        if each == junit_dir or junit_dir not in each.parents:
            break
        try:
            each.rmdir()
        except OSError:
            break  # not empty: what is left in it is someone else's


def _read_lines(path: Path) -> set[str]:
    try:
        return {line for line in path.read_text(encoding="utf-8").splitlines() if line}
    except OSError:
        return set()


# -- a pipeline stage made of suites ------------------------------------------------------

SUITE_STAGES = SUITES


def stage_specs(ctx, stage: str) -> list[SuiteSpec]:
    """The suites a stage runs: smoke runs ootci's smoke suite; integration runs ootci's
    integration suite and then every vendor suite of the manifest."""
    manifest = ctx.manifest
    specs = []
    if getattr(manifest.suites, stage):
        workers = 0
        if stage == "integration":
            workers = ctx.options.jobs or min(os.cpu_count() or 1, 4)
        specs.append(builtin_suite(stage, workers=workers))
        if stage == "integration":
            specs[-1].dtypes = manifest.suites.integration_dtypes
    if stage == "integration":
        root = vendor_root(ctx)
        specs += [vendor_suite(v, root, i, manifest.path) for i, v in enumerate(manifest.suites.vendor)]
    return specs


_BARE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Prints the names of the distributions that are not installed; run in the environment under test.
_MISSING = "import importlib.metadata as m, sys\nfor n in sys.argv[1:]:\n    try: m.version(n)\n" \
           "    except m.PackageNotFoundError: print(n)\n"


def _installed(ctx, requirements: list[str]) -> bool:
    """True when every requirement is a bare name (no version, extra or URL) of a distribution the
    environment has: pip would only say so, at a second of CPU (the upstream stage asks every run)."""
    if not all(_BARE_NAME.fullmatch(r) for r in requirements):
        return False
    proc = procs.run(procs.python_argv(ctx.python, "-I", "-c", _MISSING, *requirements), timeout=60,
                     env=procs.target_env(ctx.pip_env()))
    return proc.ok and not proc.output_tail.strip()


def install_requirements(ctx, spec: SuiteSpec) -> str | None:
    """pip-install a vendor suite's requirements into the environment under test, torch pinned
    (the constraint file); why that failed, or None. Nothing to do where they are all there."""
    if _installed(ctx, spec.requirements):
        return None
    argv = procs.python_argv(ctx.python, "-m", "pip", "install", "--disable-pip-version-check",
                             *ctx.constraint_args(), *spec.requirements)
    proc = procs.run(argv, timeout=ctx.manifest.timeouts.install, log=ctx.log_path(), env=ctx.pip_env(),
                     on_line=getattr(ctx.reporter, "line", None))
    if proc.ok:
        return None
    cause = rootcause.from_proc(proc, what="pip install")
    return (f"suite {spec.name!r}: installing its requirements ({', '.join(spec.requirements)}) failed: "
            f"{cause.summary if cause else f'pip exited with code {proc.returncode}'}")


def device_unusable(results: list[TestResult]) -> bool:
    """True when no test that ran passed: the device cannot even make a tensor and copy it back,
    and every later suite would only repeat that. A suite that ran nothing says nothing."""
    ran = [t for t in results if t.outcome is not Outcome.skipped]
    return bool(ran) and not any(t.outcome in (Outcome.passed, Outcome.flaky, Outcome.xpassed) for t in ran)


def vendor_root(ctx) -> Path:
    """Where vendor suite paths and commands start: the backend's source checkout."""
    checkout = ctx.source_dir
    if checkout:
        return Path(checkout)
    return ctx.manifest.source_dir() or ctx.manifest.directory


def run_stage(ctx, stage: str, specs: list[SuiteSpec] | None = None) -> StageResult:
    """Run a stage's suites, append their TestResults and problems to the record."""
    manifest = ctx.manifest
    if stage not in ctx.options.suites:
        return StageResult(name=stage, status=Status.skipped, summary=f"{stage} not selected")
    specs = stage_specs(ctx, stage) if specs is None else specs
    only = ctx.options.only_tests
    if only is not None:
        specs = [s for s in specs if s.name in only]  # a command suite runs whole: it takes no ids
    shard = ctx.options.shard
    elsewhere = []
    if shard and not shard.startswith("1/"):
        # A command suite writes its own JUnit and takes no selection: it runs whole, in shard 1.
        elsewhere = [s.name for s in specs if s.is_command]
        specs = [s for s in specs if not s.is_command]
    if not specs:
        why = "none of its suites is selected" if only is not None else f"suites.{stage} = false in the manifest"
        if elsewhere:
            why = f"its command suites ({', '.join(elsewhere)}) run in shard 1/{shard.partition('/')[2]}"
        return StageResult(name=stage, status=Status.skipped, summary=f"no suites: {why}")
    if ctx.options.dry_run:
        return StageResult(name=stage, status=Status.skipped,
                           summary="dry run: would run suites " + ", ".join(s.name for s in specs))
    limit = float(getattr(manifest.timeouts, stage))
    runner = SuiteRunner(
        python=ctx.python, manifest=manifest, junit_dir=ctx.run_dir / "junit", log=ctx.log_path(stage),
        deadline=time.monotonic() + limit, on_line=getattr(ctx.reporter, "line", None),
        env=ctx.pip_env(), torch_version=ctx.record.torch.version, shard=shard,
    )
    runs = []
    for spec in specs:
        if spec.requirements and not spec.problem:
            spec.problem = install_requirements(ctx, spec)
        run = runner.run(spec, None if only is None else only[spec.name])
        runs.append(run)
        ctx.record.tests.extend(run.results)
    problems = [p for run in runs for p in run.problems]
    selected = [s for s in SUITE_STAGES if s in ctx.options.suites]
    unmatched = None
    if selected and stage == selected[-1] and only is None:
        suites_run = sorted({t.suite for t in ctx.record.tests})
        unmatched = classify.unmatched_expected_failures(manifest, ctx.record.tests, suites_run,
                                                         ctx.record.torch.version)
        if not shard:
            problems += unmatched
        # A shard sees a part of the tests: the merge keeps the entries no shard matched.
    for problem in problems:
        if problem not in ctx.record.problems:
            ctx.record.problems.append(problem)
    results = [r for run in runs for r in run.results]
    if any(run.status is Status.timeout for run in runs):
        status = Status.timeout
    elif any(run.status is not Status.passed for run in runs):
        status = Status.failed
    else:
        status = Status.passed
    summary = "; ".join(run.summary for run in runs)
    if elsewhere:
        summary += f"; command suites {', '.join(elsewhere)} run in shard 1/{shard.partition('/')[2]}"
    extra = [p for p in problems if p not in summary]
    if extra:
        summary += "; " + "; ".join(extra)
    cause = next((run.root_cause for run in runs if run.status is not Status.passed and run.root_cause), None)
    if status is Status.timeout and cause is None:
        cause = RootCause(kind="timeout", summary=f"the {stage} suites exceeded their {limit:g} s time limit",
                          timeout_s=limit)
    data: dict[str, Any] = {"suites": {run.name: {
        "status": run.status.value,
        "counts": run.counts,
        "duration_s": round(run.duration_s, 3),
        "junit": os.path.relpath(run.junit, ctx.run_dir) if run.junit else None,
        **({"retries": run.retries} if run.retries else {}),
    } for run in runs}}
    if shard:
        data["shard"] = shard
        if unmatched is not None:
            data["unmatched_expected_failures"] = unmatched
    if status is Status.failed:
        # Failing tests do not make later suites meaningless; a device that passes nothing does.
        data["blocks_later_stages"] = device_unusable(results)
    return StageResult(
        name=stage, status=status, summary=summary, counts=junit.count_by_outcome(results), root_cause=cause,
        data=data,
    )
