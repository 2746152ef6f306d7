"""A backend's performance section: each bench measurement's series over its latest main-line
runs (its instruction counts and its device time), as static SVG charts with the changes
marked, and the open regressions the index marks.

Counts are judged by runner/performance/steps (standard library only), device time by
E-divisive (runner/performance/changes, the `perf` extra) where the backend gates it. Without
the extra the charts are drawn, counts are still judged, and the section says in one line what
to install for change points in time: the site never needs numpy to build. A time too noisy
to judge is drawn hollow and left out of detection. Only the latest WINDOW runs are judged: a
regression is about what changed lately, and a year of nights per measurement would cost the
build seconds per backend (docs/dashboard.md, "Performance").
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field

from markupsafe import Markup

from ootci.dashboard.analysis import compare_url
from ootci.dashboard.store import Run
from ootci.runner.core.errors import UsageError
from ootci.runner.performance import changes, series, steps

WINDOW = 60
"""main-line runs shown and judged per series"""
LABELS = {series.COUNT: "instructions per call", series.COUNT_RATIO: "device/CPU instructions",
          series.TIME: "device time per call"}


@dataclass
class Shift:
    """A change of one series: the runs either side of it, and the medians."""

    last_good: Run
    first_bad: Run
    before: float
    after: float
    open: bool
    """the series' last change, and a slowdown: what the index marks"""

    @property
    def relative(self) -> float:
        return self.after / self.before - 1

    @property
    def compare_url(self) -> str | None:
        """The torch commits between the two runs."""
        return compare_url(self.last_good.torch_git, self.first_bad.torch_git)


@dataclass
class Chart:
    """One series of one measurement: a metric measured one way."""

    measurement: str
    metric: str
    method: str
    points: list[tuple[Run, float, bool]]
    """(run, value, too noisy to judge), oldest first"""
    gated: bool = True
    judged: bool = False
    """whether changes were looked for (counts: always; time: gated, with the perf extra)"""
    shifts: list[Shift] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.measurement

    @property
    def label(self) -> str:
        how = f"{LABELS.get(self.metric, self.metric)} ({self.method})"
        return how if self.metric in series.COUNTED or self.gated else f"{how}, shown, not gated"

    @property
    def anchor(self) -> str:
        return f"perf-{self.measurement}-{self.metric}".replace(":", "-")

    @property
    def latest(self) -> float:
        return self.points[-1][1]

    @property
    def open_regression(self) -> Shift | None:
        return next((s for s in self.shifts if s.open), None)


@dataclass
class Section:
    charts: list[Chart]
    missing_extra: str | None = None
    """one line: what to install for change points in device time (None: nothing is missing)"""
    counter_note: str | None = None
    """why the latest run counted nothing (or not everything): its bench stage's own line"""

    @property
    def judged(self) -> bool:
        return self.missing_extra is None

    @property
    def measurements(self) -> list[str]:
        return sorted({c.measurement for c in self.charts})

    def charts_of(self, measurement: str) -> list[Chart]:
        return [c for c in self.charts if c.measurement == measurement]

    @property
    def regressions(self) -> list[Chart]:
        return [c for c in self.charts if c.open_regression is not None]

    @property
    def slower(self) -> list[tuple[str, float]]:
        """Each measurement with an open regression and its largest slowdown: what the index marks."""
        worst: dict[str, float] = {}
        for c in self.regressions:
            shift = c.open_regression
            if shift is not None:
                worst[c.measurement] = max(worst.get(c.measurement, shift.relative), shift.relative)
        return sorted(worst.items())


def values(run: Run) -> list[tuple[str, str, str, float, bool, bool]]:
    """(measurement, metric, method, value, noisy, gated) of the run's bench stage, as
    dashboard/records.py stored them."""
    if not run.bench:
        return []
    stored = json.loads(run.bench)
    return [tuple(entry) for entry in stored.get("series", [])]


def section(main: list[Run]) -> Section | None:
    """The section for a backend's main-line runs (oldest first); None when none was benchmarked."""
    by_key: dict[tuple[str, str, str], list[tuple[Run, float, bool]]] = {}
    gated: dict[tuple[str, str, str], bool] = {}
    for run in main:
        for measurement, metric, method, value, noisy, is_gated in values(run):
            key = (measurement, metric, method)
            by_key.setdefault(key, []).append((run, value, noisy))
            gated[key] = is_gated
    if not by_key:
        return None
    latest = json.loads(main[-1].bench) if main[-1].bench else {}
    charts = [Chart(m, metric, method, points[-WINDOW:], gated=gated[(m, metric, method)])
              for (m, metric, method), points in sorted(by_key.items(), key=lambda kv: _order(kv[0]))]
    perf = Section(charts, counter_note=latest.get("note"))
    for chart in charts:
        judged = [(run, value) for run, value, noisy in chart.points if not noisy]
        if chart.metric in series.COUNTED:
            found = steps.steps([value for _, value in judged])
        elif chart.gated:
            try:
                found = changes.changes([value for _, value in judged])
            except UsageError as exc:  # no perf extra: charts without change points
                perf.missing_extra = exc.message
                continue
        else:
            continue
        chart.judged = True
        still_open = found[-1] if found and found[-1].is_slowdown else None
        for change in found:
            chart.shifts.append(Shift(judged[change.index - 1][0], judged[change.index][0], change.before,
                                      change.after, open=change is still_open))
    if perf.missing_extra is None and not changes.available():
        perf.missing_extra = changes.MISSING_EXTRA
    return perf


def _order(key: tuple[str, str, str]) -> tuple[str, int, str]:
    measurement, metric, method = key
    return measurement, series.METRICS.index(metric) if metric in series.METRICS else len(series.METRICS), method


def number(metric: str, value: float) -> str:
    """A value as people read it: instructions whole, ratios to four digits, times in their unit."""
    if metric == series.COUNT:
        return f"{value:,.0f}"
    if metric == series.TIME:
        for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
            if value >= scale:
                return f"{value / scale:.3g} {unit}"
        return f"{value / 1e-9:.3g} ns"
    return f"{value:.4g}"


def axis_label(metric: str, value: float) -> str:
    """A short label for the chart's axis: instructions in thousands or millions."""
    if metric == series.COUNT:
        for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
            if value >= scale:
                return f"{value / scale:.4g}{suffix}"
    return number(metric, value)


MIN_SPAN = {series.COUNT: 2 * steps.FLOOR, series.COUNT_RATIO: 2 * steps.FLOOR, series.TIME: 2 * changes.MIN_SLOWDOWN}
"""the least height of a chart, relative to its median: a steady count is drawn flat, not its
hundredths of a per cent blown up to the chart's height"""


def chart(c: Chart, hrefs: dict[int, str], width: int = 360, height: int = 110) -> Markup:
    """The value per run, one dot each (linked to the run page where there is one; hollow when too
    noisy to judge), a dashed line before each change, labelled with the change."""
    pad_l, pad_r, pad_t, pad_b = 46, 8, 14, 16
    plot_w, plot_h = width - pad_l - pad_r, height - pad_t - pad_b
    values = [value for _, value, _ in c.points]
    low, high = min(values), max(values)
    middle = sorted(values)[len(values) // 2]
    least = abs(middle) * MIN_SPAN.get(c.metric, 0.1) or 1e-30
    if high - low < least:
        low, high = (low + high - least) / 2, (low + high + least) / 2
    span = high - low
    low, high = low - span * 0.08, high + span * 0.08
    step = plot_w / max(1, len(values) - 1)

    def x(i: int) -> float:
        return pad_l + i * step if len(values) > 1 else pad_l + plot_w / 2

    def y(v: float) -> float:
        return pad_t + plot_h * (1 - (v - low) / (high - low))

    esc = html.escape
    parts = [f'<svg class="perf" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{esc(c.measurement)}: {esc(c.label)} per run">']
    for v in (low + (high - low) * 0.1, high - (high - low) * 0.1):
        parts.append(f'<line class="grid" x1="{pad_l}" x2="{width - pad_r}" y1="{y(v):.1f}" y2="{y(v):.1f}"/>'
                     f'<text x="{pad_l - 4}" y="{y(v) + 4:.1f}" text-anchor="end">'
                     f'{esc(axis_label(c.metric, v))}</text>')
    index = {run.id: i for i, (run, _, _) in enumerate(c.points)}
    for shift in c.shifts:
        at = (x(index[shift.last_good.id]) + x(index[shift.first_bad.id])) / 2
        kind = "slower" if shift.relative > 0 else "faster"
        label = (f"{shift.relative:+.1%} ({kind}): {number(c.metric, shift.before)} → {number(c.metric, shift.after)}, "
                 f"between {shift.last_good.run_id} and {shift.first_bad.run_id}")
        parts.append(f'<line class="change {"open" if shift.open else ""}" x1="{at:.1f}" x2="{at:.1f}" '
                     f'y1="{pad_t - 10}" y2="{pad_t + plot_h}"><title>{esc(label)}</title></line>'
                     f'<text class="change-label" x="{at + 2:.1f}" y="{pad_t - 3}">{shift.relative:+.1%}</text>')
    parts.append('<polyline class="line" points="' + " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
                 + '"/>')
    for i, (run, value, noisy) in enumerate(c.points):
        said = f"{esc(run.started_at[:16])} · {esc(run.run_id)} · {esc(number(c.metric, value))}"
        hollow, why = (' class="noisy"', " · too noisy to judge") if noisy else ("", "")
        dot = (f'<circle{hollow} cx="{x(i):.1f}" cy="{y(value):.1f}" r="2.5">'
               f'<title>{said}{why}</title></circle>')
        href = hrefs.get(run.id)
        parts.append(f'<a href="{esc(href)}">{dot}</a>' if href else dot)
    parts.append(f'<text x="{pad_l}" y="{height - 3}">{esc(c.points[0][0].started_at[:10])}</text>'
                 f'<text x="{width - pad_r}" y="{height - 3}" text-anchor="end">'
                 f'{esc(c.points[-1][0].started_at[:10])}</text></svg>')
    return Markup("".join(parts))


def api(perf: Section | None) -> dict | None:
    """The section in the backend's JSON API: per measurement, per metric."""
    if perf is None:
        return None
    measurements: dict[str, dict] = {}
    for c in perf.charts:
        measurements.setdefault(c.measurement, {})[c.metric] = {
            "method": c.method, "latest": c.latest, "runs": len(c.points), "gated": c.gated, "judged": c.judged,
            "noisy_runs": sum(1 for _, _, noisy in c.points if noisy),
            "changes": [{"last_good": s.last_good.run_id, "first_bad": s.first_bad.run_id, "before": s.before,
                         "after": s.after, "relative": round(s.relative, 4), "open": s.open,
                         "compare_url": s.compare_url} for s in c.shifts]}
    return {"judged": perf.judged, "missing_extra": perf.missing_extra, "counter_note": perf.counter_note,
            "window": WINDOW,
            "measurements": measurements}
