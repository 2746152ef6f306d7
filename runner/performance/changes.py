"""Where a timing series changed, told from noise, and whether its last change is a slowdown.

Change points come from E-divisive means (Matteson and James, 2014), as MongoDB's
signal-processing-algorithms implements it for continuous performance testing: the series
is split where the energy distance between the two sides is largest, the split is kept
when a permutation test finds it significant (p below PVALUE), and each side is split
again. No threshold on the size of a change decides whether there is one; MIN_SLOWDOWN
only decides which found changes are worth a report. The permutations are drawn from a
fixed seed, so the same series gives the same answer every time.

A regression is *open* when the series' last change is a slowdown: a later change back
to the old level closes it. bench/perf_detection.py replays real series with planted steps
against these settings; what it measured, and that it falls short of the goals, is in
docs/performance.md.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ootci.runner.core.errors import UsageError

PVALUE = 0.01
PERMUTATIONS = 200
MIN_SLOWDOWN = 0.05
"""a change must slow the measurement by this much (relative, of the medians) to be reported"""
MIN_POINTS = 6
"""fewer points than this say nothing: no change is looked for"""
SEED = 25


@dataclass(frozen=True)
class Change:
    index: int
    """the first point at the new level"""
    before: float
    """the median of the segment before it"""
    after: float
    """the median of the segment from it to the next change (or the end)"""

    @property
    def relative(self) -> float:
        return self.after / self.before - 1

    @property
    def is_slowdown(self) -> bool:
        return self.relative >= MIN_SLOWDOWN


def _e_divisive():
    try:
        from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive
    except ImportError:
        raise UsageError("finding performance changes needs the perf extra: pip install 'ootci[perf]' "
                         "(signal-processing-algorithms)") from None
    return e_divisive


def change_points(values: list[float], *, pvalue: float = PVALUE, permutations: int = PERMUTATIONS) -> list[int]:
    """Indices where a new level starts, ascending ([] for a series too short to judge)."""
    if len(values) < MIN_POINTS:
        return []
    import numpy as np  # signal-processing-algorithms' own dependency

    e_divisive = _e_divisive()
    state = np.random.get_state()  # the library draws from numpy's global generator
    np.random.seed(SEED)
    try:
        return sorted(e_divisive(factor_scale(values), pvalue=pvalue, permutations=permutations))
    finally:
        np.random.set_state(state)


def factor_scale(values: list[float]) -> list[float]:
    """The ratios as their logarithms, where changes are judged and distances measured: a ratio's
    noise grows with its level (a backend three times slower also varies three times as much), and
    a slowdown is a factor, the same step at any level. As they are when one is not positive."""
    return [math.log(v) for v in values] if all(v > 0 for v in values) else list(values)


def changes(values: list[float], **options) -> list[Change]:
    """Each change point with the medians of the segments on either side of it."""
    points = change_points(values, **options)
    bounds = [0, *points, len(values)]
    return [Change(index=bounds[i], before=statistics.median(values[bounds[i - 1]:bounds[i]]),
                   after=statistics.median(values[bounds[i]:bounds[i + 1]]))
            for i in range(1, len(bounds) - 1)]


def open_regression(values: list[float], **options) -> Change | None:
    """The last change, when it is a slowdown: what a backend's page and the nightly report."""
    return open_of(changes(values, **options))


def open_of(found: list[Change]) -> Change | None:
    """Of a series' changes, oldest first, the one that is an open regression (or None)."""
    return found[-1] if found and found[-1].is_slowdown else None
