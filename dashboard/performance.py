"""A backend's performance section: each bench measurement's device/CPU ratio over its latest
main-line runs, as a static SVG chart with the change points marked, and the open regressions
the index marks.

Change points come from runner/performance/changes (E-divisive means), which needs the `perf`
extra. Without it the charts are drawn and the section says that changes are not looked for:
the site never needs numpy to build. Only the latest WINDOW runs are judged: a regression is
about what changed lately, and a year of nights per measurement would cost the build seconds
per backend (docs/dashboard.md, "Performance").
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field

from markupsafe import Markup

from ootci.dashboard.analysis import compare_url
from ootci.dashboard.store import Run
from ootci.runner.core.errors import UsageError

WINDOW = 60
"""main-line runs shown and judged per measurement"""


@dataclass
class Shift:
    """A change point of one measurement: the runs either side of it, and the medians."""

    last_good: Run
    first_bad: Run
    before: float
    after: float
    open: bool
    """the measurement's last change, and a slowdown: what the index marks"""

    @property
    def relative(self) -> float:
        return self.after / self.before - 1

    @property
    def compare_url(self) -> str | None:
        """The torch commits between the two runs."""
        return compare_url(self.last_good.torch_git, self.first_bad.torch_git)


@dataclass
class Measurement:
    name: str
    points: list[tuple[Run, float]]
    shifts: list[Shift] = field(default_factory=list)

    @property
    def open_regression(self) -> Shift | None:
        return next((s for s in self.shifts if s.open), None)


@dataclass
class Section:
    measurements: list[Measurement]
    judged: bool
    """False: the perf extra is missing, no change point was looked for"""

    @property
    def regressions(self) -> list[Measurement]:
        return [m for m in self.measurements if m.open_regression is not None]


def ratios(run: Run) -> dict[str, float]:
    return json.loads(run.bench)["ratios"] if run.bench else {}


def section(main: list[Run]) -> Section | None:
    """The section for a backend's main-line runs (oldest first); None when none was benchmarked."""
    by_name: dict[str, list[tuple[Run, float]]] = {}
    for run in main:
        for name, ratio in ratios(run).items():
            by_name.setdefault(name, []).append((run, ratio))
    if not by_name:
        return None
    measurements = [Measurement(name, points[-WINDOW:]) for name, points in sorted(by_name.items())]
    judged = True
    try:
        from ootci.runner.performance import changes
        for m in measurements:
            values = [ratio for _, ratio in m.points]
            found = changes.changes(values)
            still_open = changes.open_of(found)
            for change in found:
                m.shifts.append(Shift(m.points[change.index - 1][0], m.points[change.index][0], change.before,
                                      change.after, open=change is still_open))
    except UsageError:  # no perf extra: charts without change points
        judged = False
    return Section(measurements, judged)


def chart(m: Measurement, hrefs: dict[int, str], width: int = 360, height: int = 110) -> Markup:
    """The ratio per run, one dot each (linked to the run page where there is one), a dashed line
    before each change point, labelled with the change."""
    pad_l, pad_r, pad_t, pad_b = 40, 8, 14, 16
    plot_w, plot_h = width - pad_l - pad_r, height - pad_t - pad_b
    values = [ratio for _, ratio in m.points]
    low, high = min(values), max(values)
    if high - low < 1e-9:
        low, high = low * 0.95, high * 1.05
    span = high - low
    low, high = low - span * 0.08, high + span * 0.08
    step = plot_w / max(1, len(values) - 1)

    def x(i: int) -> float:
        return pad_l + i * step if len(values) > 1 else pad_l + plot_w / 2

    def y(v: float) -> float:
        return pad_t + plot_h * (1 - (v - low) / (high - low))

    esc = html.escape
    parts = [f'<svg class="perf" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{esc(m.name)}: device/CPU ratio per run">']
    for v in (low + (high - low) * 0.1, high - (high - low) * 0.1):
        parts.append(f'<line class="grid" x1="{pad_l}" x2="{width - pad_r}" y1="{y(v):.1f}" y2="{y(v):.1f}"/>'
                     f'<text x="{pad_l - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    index = {run.id: i for i, (run, _) in enumerate(m.points)}
    for shift in m.shifts:
        at = (x(index[shift.last_good.id]) + x(index[shift.first_bad.id])) / 2
        kind = "slower" if shift.relative > 0 else "faster"
        label = (f"{shift.relative:+.0%} ({kind}): {shift.before:.3g} → {shift.after:.3g}, between "
                 f"{shift.last_good.run_id} and {shift.first_bad.run_id}")
        parts.append(f'<line class="change {"open" if shift.open else ""}" x1="{at:.1f}" x2="{at:.1f}" '
                     f'y1="{pad_t - 10}" y2="{pad_t + plot_h}"><title>{esc(label)}</title></line>'
                     f'<text class="change-label" x="{at + 2:.1f}" y="{pad_t - 3}">{shift.relative:+.0%}</text>')
    parts.append('<polyline class="line" points="' + " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
                 + '"/>')
    for i, (run, ratio) in enumerate(m.points):
        dot = (f'<circle cx="{x(i):.1f}" cy="{y(ratio):.1f}" r="2.5"><title>{esc(run.started_at[:16])} · '
               f'{esc(run.run_id)} · device/CPU {ratio:.3g}</title></circle>')
        href = hrefs.get(run.id)
        parts.append(f'<a href="{esc(href)}">{dot}</a>' if href else dot)
    parts.append(f'<text x="{pad_l}" y="{height - 3}">{esc(m.points[0][0].started_at[:10])}</text>'
                 f'<text x="{width - pad_r}" y="{height - 3}" text-anchor="end">'
                 f'{esc(m.points[-1][0].started_at[:10])}</text></svg>')
    return Markup("".join(parts))


def api(perf: Section | None) -> dict | None:
    """The section in the backend's JSON API."""
    if perf is None:
        return None
    return {"judged": perf.judged, "window": WINDOW, "measurements": {
        m.name: {"latest_ratio": m.points[-1][1], "runs": len(m.points),
                 "changes": [{"last_good": s.last_good.run_id, "first_bad": s.first_bad.run_id, "before": s.before,
                              "after": s.after, "relative": round(s.relative, 4), "open": s.open,
                              "compare_url": s.compare_url} for s in m.shifts]}
        for m in perf.measurements}}
