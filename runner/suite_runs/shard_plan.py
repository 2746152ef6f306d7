"""A matrix of jobs planned from recorded times (`ootci shards plan`), and the part one job runs.

For the upstream suite the file is the unit: each job collects only its own files, so that no
job pays for importing and collecting another's. A file whose recorded time is longer than a
piece may be (the job's budget, or the file's own time limit) is cut into ranges of its stable
test ids (runner/suites/device_type_ids.py), balanced by the tests' recorded times:

    test_unary_ufuncs.py [start, "…::test_log_openreg_float32")   in job 1
    test_unary_ufuncs.py ["…::test_log_openreg_float32", end)      in job 2

A range is half-open on the ids' sort order, the first starts at the beginning and the last runs
to the end, so the ranges of a file cover every id it may hold tonight: a test added since the
recorded night falls in exactly one of them. A file the plan does not name at all (found since)
runs in the job its name hashes to (`unplanned_shard`), so every file runs exactly once.

The plan fills the jobs one after another, longest file first, each up to the mean (total / N):
a file that does not fit whole in the least loaded job is cut where that job is full, and the
rest goes on to the next, so the slowest job ends within about one test of the mean. The other
suites (smoke, integration, vendor) are still split by `--shard K/N`'s hash in every job; what
every job spends before and beside the upstream files (its `overhead_s`, from the recorded
stages) is added to each job's expectation. Times are test time, one file after another: where
a job runs its files side by side, it takes less.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ootci.runner.core import atomic
from ootci.runner.core.errors import UsageError
from ootci.runner.manifests.manifest import UpstreamSuite

PLAN_VERSION = 1
MAX_JOBS = 256
"""GitHub runs at most 256 jobs of one matrix"""
FILL_SLACK = 0.05
"""a file (or the rest of one) this far past a job's share of the mean still goes in whole: cutting
it would cost its collection twice for a balance nobody notices"""
MIN_PIECE = 0.10
"""no piece is cut smaller than this part of a job's share: where no job has that much room left,
the file goes whole to the least loaded job"""


@dataclass
class FileTimes:
    """One file's recorded times: per test id (stable ids), in seconds. Empty when never seen."""

    file: str
    tests: dict[str, float] = field(default_factory=dict)
    default_s: float | None = None
    """the time planned for a file with no recorded tests (None: it has some)"""

    @property
    def total_s(self) -> float:
        return self.default_s if self.default_s is not None else sum(self.tests.values())


@dataclass
class Piece:
    """A file, or the range [start, before) of its stable test ids (None: from its first / to its last)."""

    file: str
    start: str | None = None
    before: str | None = None
    expected_s: float = 0.0
    tests: list[str] = field(default_factory=list)
    """the ids of the recorded tests this piece holds (a test added since is in its range too)"""

    @property
    def whole(self) -> bool:
        return self.start is None and self.before is None

    def holds(self, test_id: str) -> bool:
        return (self.start is None or test_id >= self.start) and (self.before is None or test_id < self.before)

    def describe(self) -> str:
        if self.whole:
            return self.file
        return f"{self.file} [{self.start or 'start'} .. {self.before or 'end'})"

    def to_data(self) -> dict:
        data: dict = {"file": self.file, "expected_s": round(self.expected_s, 3), "tests": self.tests}
        if self.start is not None:
            data["start"] = self.start
        if self.before is not None:
            data["before"] = self.before
        return data

    @classmethod
    def from_data(cls, data: Mapping) -> Piece:
        return cls(file=str(data["file"]), start=data.get("start"), before=data.get("before"),
                   expected_s=float(data.get("expected_s") or 0), tests=[str(t) for t in data.get("tests", [])])


@dataclass
class Job:
    index: int
    pieces: list[Piece] = field(default_factory=list)
    expected_s: float = 0.0
    """the upstream pieces and the job's overhead"""

    @property
    def files_s(self) -> float:
        return sum(p.expected_s for p in self.pieces)


@dataclass
class Plan:
    backend: str
    budget_s: float
    overhead_s: float
    jobs: list[Job]
    runs: list[str] = field(default_factory=list)
    """the recorded runs the times come from"""
    default_s: float = 0.0
    unseen: list[str] = field(default_factory=list)
    """the files planned at default_s: no recorded time"""
    notes: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.jobs)

    def matrix(self) -> dict:
        """The GitHub Actions `strategy.matrix`: one small entry a job (its part is in the plan file)."""
        return {"include": [{"shard": job.index, "shards": self.n, "expected_min": round(job.expected_s / 60, 1)}
                            for job in self.jobs]}

    def to_data(self) -> dict:
        return {"version": PLAN_VERSION, "backend": self.backend, "budget_s": self.budget_s,
                "overhead_s": round(self.overhead_s, 3), "runs": self.runs, "default_s": self.default_s,
                "unseen": self.unseen, "notes": self.notes,
                "jobs": [{"shard": f"{job.index}/{self.n}", "expected_s": round(job.expected_s, 3),
                          "pieces": [p.to_data() for p in job.pieces]} for job in self.jobs]}

    def part(self, k: int, where: str = "--shard-plan") -> Part:
        """The part job k runs; a one-line UsageError for a job the plan does not have."""
        if not 1 <= k <= self.n:
            raise UsageError(f"{where}: no job {k} in a plan of {self.n} (1..{self.n})")
        return Part(k, self.n, self.jobs[k - 1].pieces, frozenset(p.file for j in self.jobs for p in j.pieces),
                    self.digest, backend=self.backend)

    @property
    def digest(self) -> str:
        """Names the plan (its pieces and bounds, not their ids or times) in the records of its jobs."""
        text = json.dumps([[(p.file, p.start, p.before) for p in job.pieces] for job in self.jobs])
        return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


@dataclass(frozen=True)
class Part:
    """What job K of a plan runs of the upstream suite."""

    k: int
    n: int
    pieces: list[Piece]
    planned_files: frozenset[str]

    plan: str = ""
    """the plan's digest"""
    backend: str = ""
    """the backend it was planned for"""
    path: str = ""
    """the plan file it was read from (the record's reproduce command names it)"""

    def files(self, available: Sequence[str]) -> list[str]:
        """The files of `available` this job runs: its pieces' files, and the unplanned files whose
        name hashes to it."""
        mine = {p.file for p in self.pieces}
        return [f for f in available
                if f in mine or (f not in self.planned_files and unplanned_shard(f, self.n) == self.k)]

    def piece(self, file: str) -> Piece | None:
        return next((p for p in self.pieces if p.file == file), None)


def unplanned_shard(file: str, n: int) -> int:
    """The job (1..n) that runs a file the plan does not name: a stable hash of its path."""
    return int.from_bytes(hashlib.blake2b(file.encode(), digest_size=8).digest(), "big") % n + 1


def plan(backend: str, files: Sequence[FileTimes], *, budget_s: float, file_limit_s: float,
         overhead_s: float = 0.0, jobs: int | None = None) -> Plan:
    """Jobs for these files: as few as keep every job within budget_s (or exactly `jobs`), each file
    whole where it fits, else cut into ranges of its ids; no piece longer than file_limit_s (the time
    one file may take on the device)."""
    room = budget_s - overhead_s
    if room <= 0:
        raise UsageError(f"--minutes {budget_s / 60:g}: every job spends {overhead_s / 60:.1f} min before and beside "
                        "the upstream files (recorded torch, build, install, autoload and suites): no time is left")
    piece_cap = min(room, file_limit_s)
    for times in files:
        if times.tests:
            slowest = max(times.tests, key=lambda i: times.tests[i])
            if times.tests[slowest] > piece_cap:
                raise UsageError(f"--minutes {budget_s / 60:g}: {slowest} took {times.tests[slowest]:.0f} s, more than "
                                f"one job can give a piece ({piece_cap:.0f} s): the budget is smaller than one test")
    total = sum(t.total_s for t in files)
    n = jobs if jobs is not None else max(1, math.ceil(total / room))
    while True:
        if n > MAX_JOBS:
            raise UsageError(f"--minutes {budget_s / 60:g}: {n} jobs or more, more than the {MAX_JOBS} "
                            "of a GitHub matrix")
        planned = _fill(files, n, piece_cap)
        worst = max(j.files_s for j in planned)
        longest = max((p.expected_s for j in planned for p in j.pieces if p.tests), default=0.0)
        if jobs is not None or (worst <= room and longest <= piece_cap):
            break
        n += 1  # the fill could not meet the budget with n jobs (whole pieces left over): one more
    for job in planned:
        job.expected_s = job.files_s + overhead_s
    return Plan(backend=backend, budget_s=budget_s, overhead_s=overhead_s, jobs=planned)


def plan_suite(backend: str, suite: UpstreamSuite, recorded: Mapping[str, Mapping[str, float]] | None, *,
               budget_s: float, jobs: int | None = None, runs: Sequence[str] = (), every_job_s: float = 0.0,
               split_s: float = 0.0, unreached: Mapping[str, int] | None = None) -> Plan:
    """The plan of a backend's upstream suite: its files (the manifest's list; where it has none, the
    files of the recorded nights) at their recorded times, a file never seen at its time limit.
    `unreached`: per file, how many of its recorded times are its mean for tests no night reached."""
    recorded = recorded or {}
    names = list(suite.files) if isinstance(suite.files, list) else sorted(recorded)
    default_s = float(suite.timeout)
    files = [FileTimes(name, dict(recorded[name])) if recorded.get(name) else FileTimes(name, default_s=default_s)
             for name in names]
    total = sum(f.total_s for f in files)
    # Every job runs torch..autoload; the other suites are split between the jobs.
    guess = jobs or max(1, math.ceil((total + split_s) / max(budget_s - every_job_s, 1.0)))
    planned = plan(backend, files, budget_s=budget_s, file_limit_s=default_s,
                   overhead_s=every_job_s + split_s / guess, jobs=jobs)
    planned.runs, planned.default_s = list(runs), default_s
    planned.unseen = [f.file for f in files if f.default_s is not None]
    if not names and suite.discovers:
        # Discovery finds the files in the fetched test/ at run time; a plan made before any night has
        # no names to place, so its jobs hash the files they find between them (the next plan has times).
        planned.notes.append(f"no recorded night of {backend}, whose upstream files are discovered: the plan cannot "
                             f"name them yet, so its {planned.n} job(s) share whatever discovery finds by hash")
    elif not runs:
        planned.notes.append(f"no recorded times for {backend}: every file planned at its {default_s:g} s time limit "
                             "(the default for a file never seen: the most it may take before it is cut)")
    elif planned.unseen:
        shown = ", ".join(planned.unseen[:5]) + (" ..." if len(planned.unseen) > 5 else "")
        planned.notes.append(f"{len(planned.unseen)} files never seen in those runs, planned at their {default_s:g} s "
                             f"time limit: {shown}")
    for file, count in sorted((unreached or {}).items()):
        if file in names:
            mean = sum(recorded[file].values()) / len(recorded[file])
            planned.notes.append(f"{file}: {count} of its tests were not reached before its time limit ran out, "
                                 f"planned at the {mean:.2f} s mean of its tests that ran")
    too_long = [(j, p) for j in planned.jobs for p in j.pieces if p.expected_s > default_s]
    for job, piece in too_long:
        planned.notes.append(f"{piece.file}: {piece.expected_s / 60:.1f} min in job {job.index}, longer than its "
                             f"{default_s:g} s time limit: the tests past it will not run (more jobs, or a longer "
                             "[suites.upstream] timeout)")
    over = [j for j in planned.jobs if j.expected_s > budget_s]
    if over:
        planned.notes.append(f"{len(over)} of the {planned.n} jobs expect more than the {budget_s / 60:g} min budget "
                             f"(job {over[0].index}: {over[0].expected_s / 60:.1f} min)")
    return planned


def describe(planned: Plan) -> list[str]:
    """What the plan says on the terminal: where its times come from, and each job."""
    source = (f"times of {len(planned.runs)} recorded runs ({', '.join(planned.runs)})" if planned.runs
              else "no recorded times")
    lines = [f"{planned.backend}: {planned.n} jobs of at most {planned.budget_s / 60:g} min, from {source}; "
             f"every job also spends {planned.overhead_s / 60:.1f} min before and beside the upstream files"]
    for job in planned.jobs:
        parts = ", ".join(p.describe() if p.whole else f"{p.file} ({len(p.tests)} tests)" for p in job.pieces)
        lines.append(f"job {job.index}/{planned.n}: {job.expected_s / 60:.1f} min expected: "
                     f"{parts or 'no upstream file named (discovered ones by hash)'}")
    return lines + planned.notes


def _fill(files: Sequence[FileTimes], n: int, piece_cap: float) -> list[Job]:
    """Longest file first, each into the least loaded job: whole where it fits that job's share of the
    mean, else cut where the job is full and the rest on to the next. One piece of a file per job."""
    jobs = [Job(index=k) for k in range(1, n + 1)]
    share = sum(t.total_s for t in files) / n
    for times in sorted(files, key=lambda t: (-t.total_s, t.file)):
        if not times.tests:
            job = min(jobs, key=lambda j: (j.files_s, j.index))
            job.pieces.append(Piece(times.file, expected_s=times.total_s))
            continue
        ids = sorted(times.tests)
        cumulative = [0.0]
        for test_id in ids:
            cumulative.append(cumulative[-1] + times.tests[test_id])
        at = 0  # the first id not yet placed
        held: set[int] = set()
        while at < len(ids):
            left = cumulative[-1] - cumulative[at]
            free = [j for j in jobs if j.index not in held]
            job = min(free or jobs, key=lambda j: (j.files_s, j.index))
            room = share - job.files_s
            if not free or (left <= piece_cap and (left <= room + FILL_SLACK * share or room < MIN_PIECE * share)):
                end = len(ids)  # the rest whole: it fits, or no job has room worth a cut
            else:
                take = min(max(room, MIN_PIECE * share), piece_cap)
                end = bisect.bisect_right(cumulative, cumulative[at] + take) - 1
                end = min(max(end, at + 1), len(ids))  # at least one test
            piece = Piece(times.file, start=ids[at] if at else None, before=ids[end] if end < len(ids) else None,
                          expected_s=cumulative[end] - cumulative[at], tests=ids[at:end])
            if not free:  # every job holds a piece of it: the last piece grows
                job = _holding(jobs, times.file, piece.start) or job
            _add(job, piece)
            held.add(job.index)
            at = end
    return jobs


def _holding(jobs: list[Job], file: str, start: str | None) -> Job | None:
    """The job whose piece of `file` ends where `start` begins (it grows: a job runs a file once)."""
    return next((j for j in jobs for p in j.pieces if p.file == file and p.before == start), None)


def _add(job: Job, piece: Piece) -> None:
    held = next((p for p in job.pieces if p.file == piece.file and p.before == piece.start), None)
    if held is None:
        job.pieces.append(piece)
    else:
        held.before, held.expected_s = piece.before, held.expected_s + piece.expected_s
        held.tests = held.tests + piece.tests


# -- the plan file -------------------------------------------------------------------------------

def write(path: Path, planned: Plan) -> None:
    atomic.write_text(path, json.dumps(planned.to_data(), separators=(",", ":")) + "\n")


def read(path: Path, where: str = "--shard-plan") -> Plan:
    """The plan in a file `ootci shards plan --out` wrote; one line naming the file otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{where} {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{where} {path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("version") != PLAN_VERSION or not isinstance(data.get("jobs"), list):
        raise UsageError(f"{where} {path}: not a plan of `ootci shards plan` (field 'version' {PLAN_VERSION} "
                        "and a list 'jobs')")
    try:
        jobs = [Job(index=k, pieces=[Piece.from_data(p) for p in job["pieces"]], expected_s=float(job["expected_s"]))
                for k, job in enumerate(data["jobs"], start=1)]
        return Plan(backend=str(data["backend"]), budget_s=float(data["budget_s"]),
                    overhead_s=float(data.get("overhead_s") or 0), jobs=jobs, runs=list(data.get("runs", [])),
                    default_s=float(data.get("default_s") or 0), unseen=list(data.get("unseen", [])),
                    notes=list(data.get("notes", [])))
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{where} {path}: field {exc} is missing or malformed") from None
