"""A slowdown planted in one commit of a backend's history, found by the nightly's detector in
real bench timings and bisected to that commit: the performance path end to end, on OpenReg.

The nights are real `ootci run`s of the registered fixture (tests/support/slowdown_repo.py),
each timing the slowed measurement; the detector is the nightly's own (`ootci bisect
--turned-red`, nightly.yml's bisect-plan) and the bisection is the command bisect.yml runs,
with the plan's ends and measurement.

What the test leaves to others, because real timings make it a matter of chance here: that
steady nights report nothing. At the detector's p < 0.01, about 1 series of steady nights in
125 reads as a change (8 in 1000 replayed with the nights' noise), and every measurement timed
beside the slowed one would be another such draw on every night. The replay benchmark
(bench/perf_detection.py) measures that rate; tests/bisection/test_slowdown.py holds the
plan's choice of measurements and ends on fixed series.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ootci.runner.models import BisectRecord, RunRecord
from ootci.runner.performance import series
from tests.support import slowdown_repo
from tests.support.cli import ootci

# Timed in a priority slot (tests/conftest.py: TIMED, priority_slot): the other workers' files
# run beside it at the lowest CPU priority.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("priority_slot")]

NIGHTS_BEFORE = 7
"""nights at the good commit: with fewer, no step at the end of a series is significant at the
detector's p < 0.01 (its permutation test has too few orders to draw from)"""
NIGHTS_AFTER_AT_MOST = 5
"""nights at the slow commit before the detector must have said so (replayed with the nights'
noise, a fourfold step was found within three in 200 of 200 series; the planted one is eightfold)"""


def ratios_by_night(runs: Path) -> str:
    """Each night's device/CPU ratio of the slowed measurement, oldest first: what the detector saw."""
    found = series.of_directory(runs).get((slowdown_repo.NAME, slowdown_repo.SLOWED))
    return ", ".join(f"{p.ratio:.3g}" for p in found.points) if found else "none"


def test_a_planted_slowdown_is_found_by_the_nightly_and_bisected_to_its_commit(tmp_path):
    repo, commits = slowdown_repo.make(tmp_path)
    registry = tmp_path / "registry"
    slowdown_repo.register(registry, repo)
    env = {"OOTCI_REGISTRY": str(registry)}
    runs = tmp_path / "runs"

    def night(commit: str) -> None:
        """What a nightly of that day ran: the registered backend with source.ref at that commit."""
        pinned = slowdown_repo.register(tmp_path / "pinned" / commit[:10], repo, ref=commit)
        result = ootci("run", str(pinned), "--torch", "2.13.0", "--suites", "bench",
                       "--bench-only", slowdown_repo.SLOWED,
                       "--trigger", "nightly", "--out", str(runs), timeout=900)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]

    def plan() -> list[dict]:
        result = ootci("bisect", "--turned-red", "--runs", str(runs), env=env)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    for _ in range(NIGHTS_BEFORE):
        night(commits[0])
    for _ in range(NIGHTS_AFTER_AT_MOST):
        night(commits[-1])
        entries = plan()
        if entries:
            break
    assert entries, f"no slowdown found after {NIGHTS_AFTER_AT_MOST} slow nights: {ratios_by_night(runs)}"
    # The slowed measurement, once, with the last night before and the first night after.
    [entry] = entries
    assert (entry["backend"], entry["perf"]) == (slowdown_repo.NAME, slowdown_repo.SLOWED), entry
    nights = sorted(path.name for path in runs.iterdir())
    assert (entry["good"], entry["bad"]) == (nights[NIGHTS_BEFORE - 1], nights[NIGHTS_BEFORE]), \
        (entry, ratios_by_night(runs))

    # The nightly's bisection of it (bisect.yml): the plan's ends and measurement.
    out = tmp_path / "bisect"
    result = ootci("bisect", entry["backend"], "--good", entry["good"], "--bad", entry["bad"],
                   "--perf", entry["perf"], "--runs", str(runs), "--out", str(out), env=env, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    [path] = out.glob("*/bisect.json")
    record = BisectRecord.model_validate_json(path.read_text())
    assert record.predicate.stage == "bench" and record.predicate.measurement == slowdown_repo.SLOWED
    [walk] = record.rounds
    assert walk.axis == "backend" and [c.commit for c in walk.candidates] == commits
    verdict = walk.result
    assert verdict.kind == "found", verdict
    first_bad = slowdown_repo.FIRST_SLOW - 1
    assert (walk.candidates[verdict.last_good].commit, walk.candidates[verdict.first_bad].commit) == \
        (commits[first_bad - 1], commits[first_bad])
    assert "Repeat every add on the device" in verdict.summary
    assert verdict.cause.startswith(f"{slowdown_repo.SLOWED} ")
    # Each step's run travels with the bisection, and timed the one measurement.
    steps = [Path(path.parent, "steps", s.run_id, "record.json") for s in walk.steps if s.run_id]
    assert steps and all(p.is_file() for p in steps)
    for step in steps:
        timed = RunRecord.model_validate_json(step.read_text()).stage("bench").data["measurements"]
        assert set(timed) == {slowdown_repo.SLOWED}, (step, set(timed))
