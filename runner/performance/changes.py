"""Where a timing series changed, told from noise, and whether its last change is a slowdown.
(Instruction counts, all but free of noise, are judged by runner/performance/steps.py.)

Change points come from E-divisive means (Matteson and James, 2014), as MongoDB's
signal-processing-algorithms implements it for continuous performance testing: the series
is split where the energy distance between the two sides is largest, the split is kept
when a permutation test finds it significant (p below PVALUE), and each side is split
again. No threshold on the size of a change decides whether there is one; MIN_SLOWDOWN
only decides which found changes are worth a report. The permutations are drawn from a
fixed seed, so the same series gives the same answer every time.

The split search and its statistic are the library's; the permutation test is run here so
that it stops as soon as the split can no longer be significant: PVALUE allows 2 of 200
shuffles to score as high, so a series without a change is settled after a handful of
shuffles rather than all 200. The draws are the library's, in its order, so every answer
is the library's own (tests/performance/test_changes.py compares them); a dashboard
judging 1,600 series spent 54 s doing all 200 (docs/dashboard.md, "Scale").

A regression is *open* when the series' last change is a slowdown: a later change back
to the old level closes it. bench/perf_detection.py replays real series with planted steps
against these settings; what it measured, and that it falls short of the goals, is in
docs/performance.md.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from itertools import pairwise

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
    threshold: float = MIN_SLOWDOWN
    """how much slower (relative) the new level must be for the change to be a slowdown"""

    @property
    def relative(self) -> float:
        return self.after / self.before - 1

    @property
    def is_slowdown(self) -> bool:
        return self.relative >= self.threshold


MISSING_EXTRA = ("finding changes in timings needs the perf extra: pip install 'ootci[perf]' "
                 "(signal-processing-algorithms, with numpy and scipy)")


def _energy_statistics():
    try:
        import numpy  # noqa: F401  (the library's own dependency, imported first by change_points)
        from signal_processing_algorithms.energy_statistics import energy_statistics
    except ImportError:
        raise UsageError(MISSING_EXTRA) from None
    return energy_statistics


def available() -> bool:
    """Whether E-divisive can run here (the perf extra is installed)."""
    try:
        _energy_statistics()
    except UsageError:
        return False
    return True


def change_points(values: list[float], *, pvalue: float = PVALUE, permutations: int = PERMUTATIONS) -> list[int]:
    """Indices where a new level starts, ascending ([] for a series too short to judge)."""
    if len(values) < MIN_POINTS:
        return []
    energy = _energy_statistics()
    import numpy as np  # signal-processing-algorithms' own dependency, there when it is
    state = np.random.get_state()  # the library draws from numpy's global generator
    np.random.seed(SEED)
    try:
        return sorted(_e_divisive(energy, factor_scale(values), pvalue, permutations))
    finally:
        np.random.set_state(state)


def _e_divisive(energy, values: list[float], pvalue: float, permutations: int) -> list[int]:
    """The library's e_divisive, with the permutation test stopped once it cannot pass."""
    distances = energy._get_distance_matrix(energy._get_valid_input(values))
    found: list[int] = []
    best_by_window: dict[tuple[int, int], tuple[int, float]] = {}
    # As the library's loop: a split at 0 (every statistic zero, as for a constant series) ends it.
    while point := _next_change_point(energy, distances, found, best_by_window, pvalue, permutations):
        found.append(point)
    return found


def _next_change_point(energy, distances, found: list[int], best_by_window: dict, pvalue: float,
                       permutations: int) -> int | None:
    """The best split of any window between the points found so far, if significant."""
    import numpy as np

    bounds = [0, *sorted(found), len(distances)]
    windows = list(pairwise(bounds))
    for a, b in windows:
        if (a, b) not in best_by_window:
            stats = energy._calculate_t_stats(distances[a:b, a:b])
            index = int(np.argmax(stats))
            best_by_window[(a, b)] = (index + a, stats[index])
    candidate, statistic = max((best_by_window[w] for w in windows), key=lambda best: best[1])
    as_high = 0
    for _ in range(permutations):
        shuffled_best = []
        for a, b in windows:
            rows = np.arange(b - a) + a
            np.random.shuffle(rows)
            shuffled_best.append(max(energy._calculate_t_stats(distances[np.ix_(rows, rows)])))
        if max(shuffled_best) >= statistic:
            as_high += 1
            if as_high / (permutations + 1) > pvalue:
                return None  # more shuffles can only add to as_high
    return candidate


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
