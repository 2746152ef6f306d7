"""What a backend's latest nights took, test by test: the times `ootci shards plan` plans from.

The runs are read from any directory of run records: the history pulled from the data branch
(`ootci history pull`, packed results included) or a folder of `ootci run` outputs. A backend's
latest nights are its newest main-line runs (not a PR's, not one shard of a run: a merged record
holds them all) that ran the upstream suite. Per test the plan takes the mean of its times over
those nights; a test that did not run in a night (its file's time ran out, or it was skipped
as not reached) adds nothing to that night.

A test that no night reached has no time of its own, yet it is there: left out, the file would look
as short as the part that ran, and its last range, which holds every unreached test, would run out
of time again, night after night (PyTorch's test_ops_gradients.py on OpenReg reached 2,570 of its
5,350 tests in its 600 s). It is planned at the mean of its file's tests that did run.

Besides the upstream files, every job of a plan spends the time of the stages before them
(torch, build, install, autoload: each job runs them) and its share of the other suites (which
`--shard K/N` splits by hash): `overhead_s`, from the newest of those runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ootci.runner.models import Outcome, RunRecord
from ootci.runner.records import record_files
from ootci.runner.records.upstream_files import SUITE, file_of

EVERY_JOB = ("torch", "build", "install", "autoload")
"""stages every job of a sharded run runs whole"""
SPLIT = ("smoke", "integration", "bench")
"""suite stages `--shard K/N` splits between the jobs"""
NOT_RUN = "not run:"
"""how a test that never ran in its night begins its message (upstream_runs, suite_runner)"""


@dataclass
class RecordedTimes:
    runs: list[str] = field(default_factory=list)
    tests: dict[str, dict[str, float]] = field(default_factory=dict)
    """file -> stable test id -> seconds (the mean over the nights it ran in; for a test no night
    reached, the mean of its file's tests that ran)"""
    unreached: dict[str, int] = field(default_factory=dict)
    """file -> how many of its tests no night reached (their times in `tests` are that mean)"""
    every_job_s: float = 0.0
    split_s: float = 0.0


def latest_nights(source: Path, backend: str, nights: int) -> list[Path]:
    """The record files of the backend's newest `nights` main-line runs with an upstream stage."""
    found: list[tuple[RunRecord, Path]] = []
    for run_dir, header in record_files.find_runs(source):
        if header is None or header.backend != backend or header.trigger == "pr" or header.shard:
            continue
        stage = header.stage(SUITE)
        if stage is None or not stage.counts:
            continue
        found.append((header, run_dir / record_files.RECORD_NAME))
    found.sort(key=lambda pair: pair[0].started_at, reverse=True)
    return [path for _, path in found[:nights]]


def recorded_times(source: Path, backend: str, nights: int = 3) -> RecordedTimes:
    """The upstream tests' times over the backend's latest nights under `source` (none: empty)."""
    times = RecordedTimes()
    sums: dict[tuple[str, str], list[float]] = {}
    not_reached: set[tuple[str, str]] = set()
    for n, path in enumerate(latest_nights(source, backend, nights)):
        try:
            record = record_files.read(path)
        except (OSError, ValueError):
            continue  # a run whose tests do not load has nothing to plan from
        times.runs.append(record.run_id)
        for test in record.tests:
            if test.suite != SUITE:
                continue  # a file that did not collect is one result under its path: its time is kept too
            if test.outcome is Outcome.skipped and test.message.startswith(NOT_RUN):
                not_reached.add((file_of(test.id), test.id))
                continue
            sums.setdefault((file_of(test.id), test.id), []).append(test.duration_s)
        if n == 0:
            times.every_job_s = sum(s.duration_s for s in record.stages if s.name in EVERY_JOB)
            times.split_s = sum(s.duration_s for s in record.stages if s.name in SPLIT)
    for (file, test_id), seconds in sorted(sums.items()):
        times.tests.setdefault(file, {})[test_id] = sum(seconds) / len(seconds)
    file_means = {file: sum(ran.values()) / len(ran) for file, ran in times.tests.items()}
    for file, test_id in sorted(not_reached):
        if file in file_means and test_id not in times.tests[file]:
            times.tests[file][test_id] = file_means[file]
            times.unreached[file] = times.unreached.get(file, 0) + 1
    return times
