"""The performance predicate of a bisection: which steps keep the bad run's slowdown of one
bench measurement.

The good and the bad end each timed the measurement in several rounds (runner/stages/bench.py:
each round is device then CPU, and its device/CPU ratio). A step's rounds are each nearer one
end's median or the other's; the step is bad when at least MAJORITY of them are nearer the bad
end's, good when as many are nearer the good end's, and skip otherwise: too noisy to decide is
never guessed. The ends must tell apart: the bad run's median at least MIN_SLOWDOWN above the
good run's, and each end, judged as a step, judged as itself. (An earlier rule wanted no round
of one end inside the other's range: on a loaded machine one round in five can be off by a
factor of 2 or more, and a fourfold slowdown's ends were refused.)
"""

from __future__ import annotations

import statistics

from ootci.runner.core.errors import BisectError
from ootci.runner.models import Predicate, RunRecord, StageResult, Status, Verdict
from ootci.runner.performance import changes
from ootci.runner.performance.changes import MIN_SLOWDOWN

STAGE = "bench"
MAJORITY = 0.8
"""the share of a step's rounds that must lie nearer one end for a verdict"""


def rounds(stage: StageResult | None, measurement: str) -> list[float]:
    """The measurement's per-round device/CPU ratios in a bench stage's result ([] when absent)."""
    measured = stage.data.get("measurements", {}).get(measurement) if stage is not None else None
    found = measured.get("round_ratios") if isinstance(measured, dict) else None
    return [float(r) for r in found if isinstance(r, (int, float)) and r > 0] if isinstance(found, list) else []


def derive(good: RunRecord, bad: RunRecord, measurement: str) -> Predicate:
    """The predicate for `measurement`, from the two ends' rounds; BisectError when they do not tell apart."""
    g, b = rounds(good.stage(STAGE), measurement), rounds(bad.stage(STAGE), measurement)
    for run, found in ((good, g), (bad, b)):
        if not found:
            raise BisectError(f"the run {run.run_id} has no bench rounds of {measurement!r}: "
                              f"run the ends with the bench stage (ootci run NAME --suites bench)")
    before, after = statistics.median(g), statistics.median(b)
    if after < before * (1 + MIN_SLOWDOWN):
        raise BisectError(f"{measurement}: the bad run {bad.run_id} is not {MIN_SLOWDOWN:.0%} slower than the good run "
                          f"{good.run_id} (device/CPU {before:.3g} -> {after:.3g}): nothing to look for")
    good_toward_bad, bad_toward_bad = _nearer_bad(g, before, after), _nearer_bad(b, before, after)
    if (_verdict(good_toward_bad, len(g)), _verdict(bad_toward_bad, len(b))) != (Verdict.good, Verdict.bad):
        raise BisectError(f"{measurement}: the ends do not tell apart ({good_toward_bad} of {len(g)} good rounds "
                          f"and {bad_toward_bad} of {len(b)} bad rounds nearer the bad median; good "
                          f"{min(g):.3g}-{max(g):.3g}, bad {min(b):.3g}-{max(b):.3g}): too noisy to bisect")
    return Predicate(stage=STAGE, measurement=measurement, good_ratios=g, bad_ratios=b,
                     cause=f"{measurement} {after / before - 1:+.0%} slower (device/CPU {before:.3g} -> {after:.3g})")


def judge(result: StageResult, predicate: Predicate) -> tuple[Verdict, str]:
    """A step's verdict from its bench stage's rounds of the predicate's measurement."""
    measurement = predicate.measurement or ""
    found = rounds(result, measurement)
    if result.status is not Status.passed and not found:
        return Verdict.skip, f"{STAGE} {result.status.value}: {result.summary}"
    if not found:
        return Verdict.skip, f"{measurement} was not measured"
    good, bad = statistics.median(predicate.good_ratios), statistics.median(predicate.bad_ratios)
    nearer_bad = _nearer_bad(found, good, bad)
    median = statistics.median(found)
    said = f"{measurement} {median:.3g} (good {good:.3g}, bad {bad:.3g}; {nearer_bad} of {len(found)} rounds nearer bad)"
    verdict = _verdict(nearer_bad, len(found))
    return verdict, (said if verdict is not Verdict.skip else f"too noisy to decide: {said}")


def _nearer_bad(found: list[float], good: float, bad: float) -> int:
    """How many rounds lie nearer the bad median than the good one. Nearer as factors, on the
    detector's scale: with ends 1 and 28, a round at 5.5 (5.5 times the good end, 5.1 times below
    the bad one) is nearer the bad end."""
    scaled_good, scaled_bad, *scaled = changes.factor_scale([good, bad, *found])
    return sum(1 for r in scaled if abs(r - scaled_bad) < abs(r - scaled_good))


def _verdict(nearer_bad: int, rounds: int) -> Verdict:
    if nearer_bad >= MAJORITY * rounds:
        return Verdict.bad
    if rounds - nearer_bad >= MAJORITY * rounds:
        return Verdict.good
    return Verdict.skip

