"""A slowdown planted in one commit of a backend's history, found by the nightly's detector in
real instruction counts on the first night it appears, and bisected to that commit: the
performance path end to end, on OpenReg.

The nights are real `ootci run`s of the registered fixture (tests/support/slowdown_repo.py),
each measuring the slowed measurement (its time and, under Callgrind, its instructions); the
detector is the nightly's own (`ootci bisect --turned-red`, nightly.yml's bisect-plan) and the
bisection is the command bisect.yml runs, with the plan's ends and measurement. Every verdict
rests on counts, which the machine's load does not move: no priority slot, no timing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ootci.runner.models import BisectRecord, RunRecord
from ootci.runner.performance import series, steps
from tests.support import slowdown_repo
from tests.support.cli import ootci

pytestmark = pytest.mark.slow

NIGHTS_BEFORE = steps.MIN_NIGHTS
"""nights at the good commit: the fewest after which a step is looked for"""


def counts_by_night(runs: Path) -> str:
    """Each night's device instructions per call of the slowed measurement, oldest first."""
    every = series.of_directory(runs)
    found = next((one for key, one in every.items()
                  if key[:3] == (slowdown_repo.NAME, slowdown_repo.SLOWED, series.COUNT)), None)
    return ", ".join(f"{p.value:.0f}" for p in found.points) if found else "none"


def test_a_planted_slowdown_is_found_on_its_first_night_and_bisected_to_its_commit(tmp_path):
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
    assert plan() == [], counts_by_night(runs)  # steady counts: nothing to report
    night(commits[-1])
    entries = plan()
    # The slowed measurement, once, on the first slow night, with the last night before and it.
    assert len(entries) == 1, (entries, counts_by_night(runs))
    [entry] = entries
    assert (entry["backend"], entry["perf"]) == (slowdown_repo.NAME, slowdown_repo.SLOWED), entry
    nights = sorted(path.name for path in runs.iterdir())
    assert (entry["good"], entry["bad"]) == (nights[NIGHTS_BEFORE - 1], nights[NIGHTS_BEFORE]), \
        (entry, counts_by_night(runs))

    # The nightly's bisection of it (bisect.yml): the plan's ends and measurement.
    out = tmp_path / "bisect"
    result = ootci("bisect", entry["backend"], "--good", entry["good"], "--bad", entry["bad"],
                   "--perf", entry["perf"], "--runs", str(runs), "--out", str(out), env=env, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    [path] = out.glob("*/bisect.json")
    record = BisectRecord.model_validate_json(path.read_text())
    predicate = record.predicate
    assert (predicate.stage, predicate.measurement, predicate.counter) == ("bench", slowdown_repo.SLOWED, "callgrind")
    assert predicate.metric in series.COUNTED and predicate.bad_value > predicate.good_value * (1 + steps.FLOOR)
    [walk] = record.rounds
    assert walk.axis == "backend" and [c.commit for c in walk.candidates] == commits
    verdict = walk.result
    assert verdict.kind == "found", verdict
    first_bad = slowdown_repo.FIRST_SLOW - 1
    assert (walk.candidates[verdict.last_good].commit, walk.candidates[verdict.first_bad].commit) == \
        (commits[first_bad - 1], commits[first_bad])
    assert "Use the stock copying fallback" in verdict.summary
    assert verdict.cause.startswith(f"{slowdown_repo.SLOWED} ") and "instructions" in verdict.cause
    # Each step's run travels with the bisection, and counted the one measurement, timing nothing.
    steps_run = [Path(path.parent, "steps", s.run_id, "record.json") for s in walk.steps if s.run_id]
    assert steps_run and all(p.is_file() for p in steps_run)
    for step in steps_run:
        measured = RunRecord.model_validate_json(step.read_text()).stage("bench").data["measurements"]
        assert set(measured) == {slowdown_repo.SLOWED}, (step, set(measured))
        assert set(measured[slowdown_repo.SLOWED]) == {"counts"}, (step, measured)
