"""PyTorch's own test files on the device: one pytest process per file, then one process for the
second opinion on every failure.

Each file runs as PyTorch's runner would run it for the vendor's device: in a process of its
own, from a folder with no `torch/` in it, the device chosen by PyTorch's own mechanism
(`PYTORCH_TESTING_DEVICE_ONLY_FOR`), no disabled-tests or slow-tests file from anywhere, and
slow tests off unless the manifest asks for them. It goes through the same runner as every
suite (ootci_plugin: streamed JUnit, per-test time limits, crash isolation, shards), with ids
made stable (runner/suites/device_type_ids.py) and dtypes the backend does not claim skipped
(runner/suites/ootci_upstream.py). Each file has its own time limit on the device
(`[suites.upstream] timeout`); tests a file did not reach in it are skipped, saying so, so that
the test that took the time is the failure.

The second opinion: every test that failed on the device (failed, error, crashed, timed out) and
is new runs once more: a known failure that failed with the cause its baseline entry lists
(runner/core/causes.py) needs none, and costs nothing more each night; one that now fails with
another cause is asked like a new one, and stays a failure, known but now failing differently,
unless the second opinion says otherwise. Each runs once more, in two processes for all files,
side by side. One re-runs the failing tests on the device: flaky or failing, the retry every
suite gets (here at most one). The other runs the same tests and dtypes on CPU, with the backend
not loaded at all (no import, `TORCH_DEVICE_BACKEND_AUTOLOAD=0`: a backend that patches torch,
or breaks `import torch`, must not make CPU fail too), and collects again on CPU alone each file
that did not collect on the device. A test that fails on CPU too is `upstream`: not the
backend's, shown apart, and never its failure or regression (numpy 2 has no `np.msort`; a file
of another commit expects another exception). Only then are the manifest's expected failures and
the known-failures baseline applied, to what is left of the backend's.

Files run side by side, as PyTorch's own runner runs its test files (`parallel`, one per core
by default), each with its own log joined into the stage's in file order. That, and two processes
for all the second opinions instead of a re-run and a CPU run per file, is what keeps the stage
near the time of plain pytest on the same files (bench/upstream_speed.py): each process pays
for importing torch and PyTorch's test machinery, a few seconds.
"""

from __future__ import annotations

import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ootci.runner.manifests.known_failures import KnownFailure
from ootci.runner.manifests.manifest import Manifest, UpstreamSuite
from ootci.runner.models import Outcome, RootCause, Status, TestResult
from ootci.runner.records.upstream_files import SUITE, file_of
from ootci.runner.suite_runs import classify, junit
from ootci.runner.suite_runs.shard_plan import Part, Piece
from ootci.runner.suite_runs.suite_runner import (
    NOT_REACHED,
    SUITES_DIR,
    SuiteRun,
    SuiteRunner,
    SuiteSpec,
    first_failing_test,
    remove_empty,
)

CPU_TWIN = "@cpu"
"""how the CPU's opinion names a test's CPU copy; kept in step with runner/suites/device_type_ids.py,
which runs in the environment under test (a test checks the two)"""

NOT_STARTED = "not run: the job's time ran out before this file started"
INI = SUITES_DIR / "upstream" / "pytest.ini"
PLUGIN = "ootci_upstream"
CPU = "cpu"
RETRY, ON_CPU = "retry", "on-cpu"
"""the second opinion's two runs: the failing tests again on the device, and on CPU"""
MISSING_MODULE_HINT = "list its package in `requirements` of [suites.upstream] in the manifest"
# Before 2.5, PYTORCH_TESTING_DEVICE_ONLY_FOR knew a PrivateUse1 backend only as `privateuse1`
# (pytorch#133082 taught it the backend's own name).
NAMED_SELECTION_SINCE = Version("2.5")


def device_selection(device: str, torch_version: str | None) -> str:
    """What PYTORCH_TESTING_DEVICE_ONLY_FOR must say to pick the backend's tests on this torch."""
    try:
        old = Version(torch_version or "").release < NAMED_SELECTION_SINCE.release
    except InvalidVersion:
        old = False
    return "privateuse1" if old else device


def environment(selection: str, suite: UpstreamSuite) -> dict[str, str]:
    """The variables PyTorch's test files read, set for this run and nothing inherited."""
    return {
        "PYTORCH_TESTING_DEVICE_ONLY_FOR": selection,
        "PYTORCH_TESTING_DEVICE_EXCEPT_FOR": "",
        "PYTORCH_TESTING_DEVICE_FOR_CUSTOM": "",
        "TORCH_TEST_DEVICES": "",
        # A baseline replaces PyTorch's lists: neither file is read, from anywhere.
        "DISABLED_TESTS_FILE": "",
        "SLOW_TESTS_FILE": "",
        "PYTORCH_TEST_WITH_SLOW": "1" if suite.slow else "0",
        "PYTORCH_TEST_SKIP_FAST": "0",
        # ootci's own reproduce command names the test; PyTorch's repro line names the unstable class.
        "PYTORCH_PRINT_REPRO_ON_FAILURE": "0",
    }


def part_name(file: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", file)


def spec(test_dir: Path, files: list[str], *, device: str, cwd: Path, env: dict[str, str], workers: int,
         part: str, cpu_twins: bool = False, piece: Piece | None = None) -> SuiteSpec:
    """A pytest run of some upstream files (paths under test_dir, PyTorch's test/): one file on the
    device (or a piece of it: a range of its stable ids), or the second opinion."""
    bounds = [] if piece is None else [
        *([f"--ootci-id-from={piece.start}"] if piece.start is not None else []),
        *([f"--ootci-id-before={piece.before}"] if piece.before is not None else [])]
    args = ["-c", str(INI), "--rootdir", str(test_dir), "--noconftest", "-p", PLUGIN,
            "--ootci-device-type-ids", device, *(["--ootci-cpu-twins"] if cpu_twins else []), *bounds,
            *(str(test_dir / f) for f in files)]
    return SuiteSpec(name=SUITE, cwd=cwd, pytest_args=args, workers=workers, part=part, env=env, expected=False,
                     retries=0, missing_module_hint=MISSING_MODULE_HINT)


@dataclass
class FileRun:
    """One upstream file: its tests, classified, and how its run went."""

    file: str
    results: list[TestResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    status: Status = Status.passed
    duration_s: float = 0.0
    rerun: int = 0
    """its tests the second opinion re-ran"""
    failed_on_cpu: int = 0
    root_cause: RootCause | None = None


@dataclass
class UpstreamRun:
    files: list[FileRun]
    junit: Path
    second_opinion_s: float = 0.0

    @property
    def results(self) -> list[TestResult]:
        return [r for f in self.files for r in f.results]

    @property
    def problems(self) -> list[str]:
        return [p for f in self.files for p in f.problems]


def _failing(result: TestResult) -> bool:
    return result.outcome in classify.NOT_PASSING and result.message != NOT_REACHED


class UpstreamRunner:
    """Runs the upstream files of one backend in one environment under test."""

    def __init__(self, *, python: Path, manifest: Manifest, suite: UpstreamSuite, test_dir: Path,
                 junit_dir: Path, cwd: Path, log: Path | None, deadline: float, env: dict[str, str],
                 torch_version: str | None, workers: int, parallel: int = 1, shard: str | None = None,
                 part: Part | None = None, on_line=None):
        self.python = python
        self.manifest = manifest
        self.suite = suite
        self.test_dir = test_dir
        self.junit_dir = junit_dir
        self.cwd = cwd
        self.log = log
        self.deadline = deadline
        self.base_env = env
        self.torch_version = torch_version
        self.workers = workers
        """forked children per file (crash isolation by fork), or 0"""
        self.parallel = max(1, parallel)
        """files run at once"""
        self.shard = shard
        self.part = part
        """a planned shard's files and ranges (`--shard-plan`): the files are not hashed by test then"""
        self.on_line = on_line
        self.device = manifest.device
        self.selection = device_selection(self.device, torch_version)

    def run(self, files: list[str], only: list[str] | None = None) -> UpstreamRun:
        """Every file in turn (only the test ids in `only`, when given: a bisection step), then
        the second opinion on their failures."""
        self.cwd.mkdir(parents=True, exist_ok=True)
        selected = {file: None if only is None else [i for i in only if file_of(i) == file] for file in files}
        selected = {file: ids for file, ids in selected.items() if ids is None or ids}
        # The biggest files first, so that the last to finish is a short one.
        order = sorted(selected, key=lambda f: -self._size(f))
        with ThreadPoolExecutor(max_workers=self.parallel) as pool:
            done = dict(zip(order, pool.map(lambda f: self._on_device(f, selected[f]), order), strict=True))
        on_device = {file: done[file] for file in selected}
        start = time.monotonic()
        again, on_cpu = self._second_opinion({f: run for f, (run, _) in on_device.items()})
        second_s = time.monotonic() - start
        self._join_logs([*selected, RETRY, ON_CPU])
        runs = [self._file_run(file, run, took, again, on_cpu) for file, (run, took) in on_device.items()]
        # Each part deleted its raw files; the folder that held them goes too.
        remove_empty(self.junit_dir / "raw" / SUITE, self.junit_dir)
        out = junit.suite_file(self.junit_dir, SUITE)
        junit.write(out, SUITE, [r for f in runs for r in f.results])
        return UpstreamRun(runs, out, round(second_s, 3))

    def _size(self, file: str) -> int:
        try:
            return (self.test_dir / file).stat().st_size
        except OSError:
            return 0

    def _on_device(self, file: str, only: list[str] | None) -> tuple[SuiteRun, float]:
        start = time.monotonic()
        runner = self._runner(min(self.deadline, start + self.suite.timeout), log=self._file_log(file))
        on_device = spec(self.test_dir, [file], device=self.device, cwd=self.cwd,
                         env=environment(self.selection, self.suite), workers=self.workers, part=part_name(file),
                         piece=self._piece(file))
        on_device.retry_in_fork = self.manifest.retries > 0
        # Known failures with a listed cause are not re-run blindly in the fork: the second opinion
        # asks again only those whose cause changed (issue 51: cost that grows with what is new).
        on_device.retry_skip = sorted(i for i, e in self.manifest.known.get(SUITE, {}).items() if e.cause)
        run = runner.run(on_device, only)
        return run, time.monotonic() - start

    def _piece(self, file: str) -> Piece | None:
        return self.part.piece(file) if self.part is not None else None

    def _file_log(self, part: str) -> Path | None:
        if self.log is None:
            return None
        return self.log.with_suffix("") / f"{part_name(part)}.log"

    def _join_logs(self, parts: list[str]) -> None:
        """The own logs of the files and of the second opinion (they ran side by side) into the
        stage's, one after the other."""
        if self.log is None:
            return
        with open(self.log, "ab") as log:
            for part in parts:
                own = self._file_log(part)
                if own is not None and own.is_file():
                    log.write(f"==== ootci: upstream {part} ====\n".encode())
                    with open(own, "rb") as text:
                        shutil.copyfileobj(text, log)

    def _runner(self, deadline: float, log: Path | None = None) -> SuiteRunner:
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
        return SuiteRunner(python=self.python, manifest=self.manifest, junit_dir=self.junit_dir,
                           log=log or self.log, deadline=deadline, on_line=self.on_line, env=self.base_env,
                           torch_version=self.torch_version, shard=None if self.part is not None else self.shard)

    def _second_opinion(self, on_device: dict[str, SuiteRun]) -> tuple[dict[str, TestResult], dict[str, TestResult]]:
        """(test id -> its re-run on the device, test id -> its failure on CPU) for the failing tests;
        a file that did not collect on the device is under its own id in the second when it does not
        collect on CPU either."""
        failing = {f: [r.id for r in run.results if _failing(r) and r.id != f and not self._known_alike(r)]
                   for f, run in on_device.items()}
        not_collected = [f for f, run in on_device.items()
                         if any(r.id == f and _failing(r) and not self._known_alike(r) for r in run.results)]
        ids = [i for ids in failing.values() for i in ids]
        files = [f for f, ids in failing.items() if ids]
        # A file run in forks re-ran its failures in a fork of its own session already.
        retried = {r.id: r for run in on_device.values() for r in run.retried.values() if r.message != NOT_REACHED}
        not_retried = [i for i in ids if i not in retried]
        runs: dict[str, tuple[SuiteSpec, list[str]]] = {}
        if not_retried and self.manifest.retries > 0:
            runs[RETRY] = (spec(self.test_dir, sorted({file_of(i) for i in not_retried}), device=self.device,
                                cwd=self.cwd, workers=0, part=RETRY, env=environment(self.selection, self.suite)),
                           not_retried)
        if ids or not_collected:
            cpu = spec(self.test_dir, sorted({*files, *not_collected}), device=self.device, cwd=self.cwd, workers=0,
                       part=ON_CPU, env={**environment(CPU, self.suite), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
                       cpu_twins=True)
            cpu.import_backend = False
            runs[ON_CPU] = (cpu, [i + CPU_TWIN for i in ids] + not_collected)
        if not runs or self.deadline - time.monotonic() <= 1:
            return retried, {}
        # Side by side: each process imports torch and the failing files, and neither needs the other.
        with ThreadPoolExecutor(max_workers=len(runs)) as pool:
            done = dict(zip(runs, pool.map(
                lambda part: self._runner(self.deadline, log=self._file_log(part)).run(*runs[part]), runs),
                strict=True))
        again = {r.id: r for r in done[RETRY].results if r.message != NOT_REACHED} if RETRY in done else {}
        again.update(retried)
        on_cpu: dict[str, TestResult] = {}
        for r in done[ON_CPU].results if ON_CPU in done else ():
            if r.id in not_collected or r.id.endswith(CPU_TWIN):
                on_cpu[r.id.removesuffix(CPU_TWIN)] = r
        return again, {i: r for i, r in on_cpu.items() if _failing(r)}

    def _known_alike(self, result: TestResult) -> bool:
        """A known failure that failed with the cause its baseline entry lists: nothing new to ask
        the second opinion (an entry without a cause, from an older file, is asked as before)."""
        entry = classify.expected_failure(self.manifest, SUITE, result.id, self.torch_version)
        return isinstance(entry, KnownFailure) and bool(entry.cause) and \
            not classify.cause_changed(result, entry, self.device)

    def _file_run(self, file: str, on_device: SuiteRun, took: float, again: dict[str, TestResult],
                  on_cpu: dict[str, TestResult]) -> FileRun:
        timed_out = on_device.status is Status.timeout
        results = [self._classify(r, again.get(r.id), on_cpu.get(r.id), timed_out=timed_out)
                   for r in on_device.results]
        piece = self._piece(file)
        if timed_out and not results and piece is not None:
            # The time ran out before the file collected: the plan names the tests it did not reach.
            results = [TestResult(id=i, suite=SUITE, outcome=Outcome.skipped, message=NOT_STARTED) for i in piece.tests]
        # A range of a split file may hold no test tonight; a whole file must hold some.
        empty_ok = bool(self.shard) if self.part is None else piece is not None and not piece.whole
        run = FileRun(file, results, [f"upstream {file}: {p.removeprefix(f'suite {SUITE!r}: ')}"
                                      for p in on_device.problems],
                      duration_s=round(took, 3), rerun=sum(1 for r in on_device.results if r.id in again),
                      failed_on_cpu=sum(1 for r in on_device.results if r.id in on_cpu))
        bad = [r for r in results if not r.outcome.ok]
        if timed_out and not bad:
            run.status = Status.timeout
        elif bad or run.problems or (not results and not empty_ok):
            run.status = Status.failed
        if not results and not run.problems and not empty_ok:
            run.problems.append(f"upstream {file}: reported no tests")
        # pytest stopping outside any test says more than the tests it left unrun.
        run.root_cause = on_device.root_cause if run.problems else first_failing_test(results)
        return run

    def _classify(self, result: TestResult, again: TestResult | None, on_cpu: TestResult | None, *,
                  timed_out: bool) -> TestResult:
        if result.outcome is Outcome.error and result.message == NOT_REACHED and timed_out:
            return result.model_copy(update={
                "outcome": Outcome.skipped,
                "message": f"not run: the file's {self.suite.timeout:g} s time limit ran out before this test"})
        if again is not None:
            if again.outcome in (Outcome.passed, Outcome.flaky):
                return result.model_copy(update={
                    "outcome": Outcome.flaky, "attempts": 2,
                    "message": f"passed on attempt 2 after it {result.outcome.value}: {result.message}"})
            result = result.model_copy(update={"attempts": 2})
        if on_cpu is not None:
            return result.model_copy(update={
                "outcome": Outcome.upstream,
                "message": f"fails on CPU too: not the backend's ({result.outcome.value} on {self.device}: "
                           f"{result.message} | {on_cpu.outcome.value} on cpu: {on_cpu.message})"[:2000]})
        entry = classify.expected_failure(self.manifest, SUITE, result.id, self.torch_version)
        return classify.apply_expected(result, entry, self.device)
