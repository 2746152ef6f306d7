"""The performance predicate of a bisection: which steps keep the bad run's slowdown of one
bench measurement.

On counts, where both ends counted the measurement's instructions with the same counter and
one of them moved: the device's count per call, or the device/CPU count ratio, whichever moved
more, by at least steps.FLOOR. A step counts the measurement once (no timing) and is bad when its
value lies nearer the bad end's than the good end's (as factors), good otherwise: a count has
no noise to refuse, so no step is skipped for it. A step counted by another counter, or not
counted at all, is skipped.

On time, where the ends have no counts to tell by: each end timed the measurement in several
rounds (runner/stages/bench.py: each round is device then CPU, and its device/CPU ratio). A
step's rounds are each nearer one end's median or the other's; the step is bad when at least
MAJORITY of them are nearer the bad end's, good when as many are nearer the good end's, and skip
otherwise: too noisy to decide is never guessed. The ends must tell apart: the bad run's median
at least MIN_SLOWDOWN above the good run's, and each end, judged as a step, judged as itself.
"""

from __future__ import annotations

import statistics

from ootci.runner.core.errors import BisectError
from ootci.runner.models import Predicate, RunRecord, StageResult, Status, Verdict
from ootci.runner.performance import changes, series, steps
from ootci.runner.performance.changes import MIN_SLOWDOWN

STAGE = "bench"
MAJORITY = 0.8
"""the share of a step's rounds that must lie nearer one end for a verdict"""


def rounds(stage: StageResult | None, measurement: str) -> list[float]:
    """The measurement's per-round device/CPU ratios in a bench stage's result ([] when absent)."""
    measured = stage.data.get("measurements", {}).get(measurement) if stage is not None else None
    found = measured.get("round_ratios") if isinstance(measured, dict) else None
    return [float(r) for r in found if isinstance(r, (int, float)) and r > 0] if isinstance(found, list) else []


def counted(stage: StageResult | None, measurement: str) -> tuple[str, dict[str, float]] | None:
    """(the counter, {count, count_ratio}) of the measurement in a bench stage's result, or None."""
    if stage is None:
        return None
    found = {metric: v.value for (name, metric, _), v in series.stage_values(stage).items()
             if name == measurement and metric in series.COUNTED}
    counter = stage.data.get("counter")
    return (counter, found) if isinstance(counter, str) and len(found) == len(series.COUNTED) else None


def derive(good: RunRecord, bad: RunRecord, measurement: str) -> Predicate:
    """The predicate for `measurement`: on counts where the ends have them, else on the time rounds;
    BisectError when the ends do not tell apart."""
    g, b = counted(good.stage(STAGE), measurement), counted(bad.stage(STAGE), measurement)
    if g is not None and b is not None and g[0] == b[0]:
        moved = {metric: b[1][metric] / g[1][metric] - 1 for metric in series.COUNTED}
        metric = max(moved, key=lambda m: moved[m])
        if moved[metric] < steps.FLOOR:
            raise BisectError(f"{measurement}: the bad run {bad.run_id} counts no {steps.FLOOR:.0%} more instructions "
                              f"than the good run {good.run_id} (device {moved[series.COUNT]:+.2%}, device/CPU "
                              f"{moved[series.COUNT_RATIO]:+.2%}, {g[0]}): nothing to look for")
        before, after = g[1][metric], b[1][metric]
        what = "instructions" if metric == series.COUNT else "device/CPU instructions"
        return Predicate(stage=STAGE, measurement=measurement, metric=metric, counter=g[0], good_value=before,
                         bad_value=after, cause=f"{measurement} {moved[metric]:+.1%} {what} "
                                                f"({before:.4g} -> {after:.4g}, {g[0]})")
    return _derive_on_time(good, bad, measurement)


def _derive_on_time(good: RunRecord, bad: RunRecord, measurement: str) -> Predicate:
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
    """A step's verdict from its bench stage: the predicate's counts, or its time rounds."""
    if predicate.metric is not None:
        return _judge_count(result, predicate)
    measurement = predicate.measurement or ""
    found = rounds(result, measurement)
    if result.status is not Status.passed and not found:
        return Verdict.skip, f"{STAGE} {result.status.value}: {result.summary}"
    if not found:
        return Verdict.skip, f"{measurement} was not measured"
    good, bad = statistics.median(predicate.good_ratios), statistics.median(predicate.bad_ratios)
    nearer_bad = _nearer_bad(found, good, bad)
    median = statistics.median(found)
    said = (f"{measurement} {median:.3g} (good {good:.3g}, bad {bad:.3g}; "
            f"{nearer_bad} of {len(found)} rounds nearer bad)")
    verdict = _verdict(nearer_bad, len(found))
    return verdict, (said if verdict is not Verdict.skip else f"too noisy to decide: {said}")


def _judge_count(result: StageResult, predicate: Predicate) -> tuple[Verdict, str]:
    measurement, metric = predicate.measurement or "", predicate.metric or series.COUNT
    good, bad = predicate.good_value or 0.0, predicate.bad_value or 0.0
    found = counted(result, measurement)
    if found is None:
        if result.status is not Status.passed:
            return Verdict.skip, f"{STAGE} {result.status.value}: {result.summary}"
        note = result.data.get("counter_note")
        return Verdict.skip, f"{measurement} was not counted" + (f" ({note})" if note else "")
    counter, values = found
    if counter != predicate.counter:
        return Verdict.skip, f"{measurement} was counted by {counter}, the ends by {predicate.counter}"
    value = values[metric]
    scaled_good, scaled_bad, scaled = changes.factor_scale([good, bad, value])
    verdict = Verdict.bad if abs(scaled - scaled_bad) < abs(scaled - scaled_good) else Verdict.good
    what = "instructions" if metric == series.COUNT else "device/CPU instructions"
    return verdict, f"{measurement} {value:.4g} {what} (good {good:.4g}, bad {bad:.4g})"


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
