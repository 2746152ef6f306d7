"""Steps in instruction-count series (runner/performance/steps.py): a night that leaves its level by
max(2 %, 3 x the series' own night-to-night spread) is a step on that very night; the spread is
the series' own, so a noisier count needs a larger step; no perf extra is needed."""

from __future__ import annotations

import random

import pytest

from ootci.runner.performance import steps


def nights(levels: list[tuple[float, int]], spread: float = 0.001, seed: int = 1) -> list[float]:
    """`count` nights at each level, each off by up to `spread` (relative): a count's noise."""
    rng = random.Random(seed)
    return [level * (1 + rng.uniform(-spread, spread)) for level, count in levels for _ in range(count)]


def test_a_three_percent_step_is_reported_on_its_first_night():
    before = nights([(18_400, 7)])
    for night in range(len(before)):
        assert steps.open_regression(before[:night + 1]) is None, night
    found = steps.open_regression([*before, 18_400 * 1.03])
    assert found is not None and found.index == 7
    assert found.relative == pytest.approx(0.03, abs=0.002) and found.threshold == steps.FLOOR


def test_a_step_needs_three_nights_at_the_level_before_it():
    assert steps.steps([100.0, 100.0, 110.0]) == []
    [found] = steps.steps([100.0, 100.0, 100.0, 110.0])
    assert (found.index, found.before, found.after) == (3, 100.0, 110.0)


def test_below_the_floor_nothing_is_a_step():
    assert steps.steps(nights([(1e6, 10), (1.019e6, 5)], spread=0.0005)) == []


def test_a_noisy_count_needs_three_times_its_own_spread():
    """A count that moves about 1.5 % a night: 4 % is noise for it, 6 % is not."""
    level = [100.0, 101.5, 100.0, 101.5, 100.0, 101.5, 100.0]
    assert steps.threshold(level) == pytest.approx(3 * 0.015, rel=0.01)
    assert steps.open_regression([*level, 104.0]) is None
    assert steps.open_regression([*level, 107.0]) is not None


def test_a_step_back_closes_it_and_a_speedup_is_no_regression():
    up_and_back = [100.0] * 4 + [104.0] * 4 + [100.0] * 2
    found = steps.steps(up_and_back)
    assert [(c.index, round(c.relative, 3)) for c in found] == [(4, 0.04), (8, -0.038)]
    assert steps.open_regression(up_and_back) is None
    assert steps.open_regression([100.0] * 4 + [95.0] * 3) is None


def test_one_odd_night_is_reported_and_closed_by_the_nights_after_it():
    odd = [100.0] * 4 + [105.0]
    assert steps.open_regression(odd) is not None
    # The new level's median is the old one again: the step, still found, is no slowdown.
    assert steps.open_regression(odd + [100.0] * 2) is None


def test_thirty_steady_nights_report_nothing():
    assert steps.steps(nights([(2_905_300, 30)], spread=0.003, seed=5)) == []


def test_a_pr_run_is_judged_against_the_current_level_only():
    history = [100.0] * 5 + [110.0] * 3
    assert steps.current_level(history) == [110.0] * 3
    assert steps.above(112.0, steps.current_level(history)) is None
    assert steps.above(113.5, steps.current_level(history)) == pytest.approx(113.5 / 110 - 1)
    assert steps.above(101.0, [100.0]) is None and steps.above(102.5, [100.0]) == pytest.approx(0.025)
    assert steps.above(1.0, []) is None
