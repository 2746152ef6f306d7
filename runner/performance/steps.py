"""Where a count series stepped: a night that left its level by at least the larger of FLOOR and
SPREAD_FACTOR times the series' own night-to-night spread, reported on the first night it appears.

An instruction count is all but deterministic (the bench stage's counts of OpenReg move by
0.01-0.3 % between runs with the machine loaded), so no change-point statistic is needed to
tell a change from noise, and none would report a step before several nights at the new
level. The level is the median of the nights at it so far (the latest WINDOW); the spread is
the median of their relative changes from one night to the next, so one odd night neither
moves the level nor widens the threshold much. A series is judged once it has MIN_NIGHTS at
its level: a new level needs as many before the next step is looked for.

Standard library only: the page and `ootci perf` judge counts without the `perf` extra.
"""

from __future__ import annotations

import statistics

from ootci.runner.performance.changes import Change

FLOOR = 0.02
"""a count must move by this much (relative) at least to be a step"""
SPREAD_FACTOR = 3.0
MIN_NIGHTS = 3
"""nights at a level before a step from it is looked for"""
WINDOW = 10
"""the latest nights of a level that make its median and spread"""


def spread(level: list[float]) -> float:
    """The median relative change from one night to the next (0 with fewer than two nights)."""
    moves = [abs(b / a - 1) for a, b in zip(level, level[1:], strict=False) if a > 0]
    return statistics.median(moves) if moves else 0.0


def threshold(level: list[float]) -> float:
    """How far from the level's median a night must be to be a step."""
    return max(FLOOR, SPREAD_FACTOR * spread(level[-WINDOW:]))


def steps(values: list[float]) -> list[Change]:
    """Each step, oldest first, with the medians either side of it (after: up to the next step)."""
    found: list[tuple[int, float, float]] = []  # (index, level before, threshold)
    start = 0
    for i, value in enumerate(values):
        level = values[start:i][-WINDOW:]
        if len(level) < MIN_NIGHTS:
            continue
        before, limit = statistics.median(level), threshold(level)
        if before > 0 and abs(value / before - 1) >= limit:
            found.append((i, before, limit))
            start = i
    bounds = [index for index, _, _ in found] + [len(values)]
    return [Change(index=index, before=before, after=statistics.median(values[index:bounds[k + 1]]),
                   threshold=limit)
            for k, (index, before, limit) in enumerate(found)]


def open_regression(values: list[float]) -> Change | None:
    """The last step, when it is a slowdown (still above its threshold by the new level's median)."""
    found = steps(values)
    return found[-1] if found and found[-1].is_slowdown else None


def above(value: float, level: list[float]) -> float | None:
    """How much slower `value` (one PR run's count) is than `level` (the nightlies at their current
    level), when it is a step above it; None otherwise."""
    if not level:
        return None
    before = statistics.median(level)
    relative = value / before - 1 if before > 0 else 0.0
    return relative if relative >= threshold(level) else None


def current_level(values: list[float]) -> list[float]:
    """The values since the last step: the level a new value is judged against."""
    found = steps(values)
    return values[found[-1].index:] if found else values
