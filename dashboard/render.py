"""Turning index rows and records into HTML, SVG and JSON text.

Templates live in dashboard/templates (autoescaped: every string from a record is
untrusted). Pages link to each other by relative paths so the site works from any
sub-path of GitHub Pages and from file://.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import operator
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import jinja2
from markupsafe import Markup, escape

from ootci.dashboard import upstream
from ootci.dashboard.records import FAILING
from ootci.dashboard.store import Run, safe_name

# Bump when templates or page layout change: the next build re-renders every page.
RENDERER_VERSION = "12"
STAGES = ("torch", "build", "install", "autoload", "smoke", "integration", "upstream")
GLYPH = {"passed": "✓", "failed": "✗", "crashed": "!", "timeout": "◷", "blocked": "–", "skipped": "○",
         "missing": "?"}
COLOURS = {"passed": "#2da44e", "failed": "#cf222e", "crashed": "#82071e", "timeout": "#bc4c00",
           "blocked": "#8c959f", "skipped": "#afb8c1", "missing": "#bf3989", "unknown": "#8c959f"}
OUTCOME_ORDER = ("failed", "error", "crashed", "timeout", "xpassed", "flaky", "upstream", "fixed", "xfailed", "skipped",
                 "passed")
OUTCOME_LABEL = {"upstream": "fails on CPU too"}
"""an outcome's name on a filter button, where the bare word would mislead"""
OTHER_MARK = "†"
"""the mark on an upstream cell whose files are not the torch's own commit (its title says so)"""
_RANK = {o: i for i, o in enumerate(OUTCOME_ORDER)}
LONG_TEXT = 20_000  # characters of a message or log tail shown before cutting

_env: jinja2.Environment | None = None


def env() -> jinja2.Environment:
    global _env
    if _env is None:
        _env = jinja2.Environment(
            loader=jinja2.PackageLoader(__package__, "templates"),
            autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
        )
        _env.filters.update(duration=fmt_duration, when=fmt_time, short=short_sha, counts=counts_text,
                            pct=fmt_pct, cut=cut)
        _env.globals.update(STAGES=STAGES, GLYPH=GLYPH, run_href=run_href, backend_href=backend_href,
                            stage_title=stage_title, sparkline=sparkline, coverage_rows=coverage_rows,
                            history_rows=history_rows, missing_cell=missing_cell,
                            outcome_class=outcome_class, OUTCOME_LABEL=OUTCOME_LABEL, OTHER_MARK=OTHER_MARK,
                            other_commit=other_commit)
    return _env


def page(template: str, **context) -> str:
    return env().get_template(template).render(**context)


# --- formatting -----------------------------------------------------------------

def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds >= 0.1 or seconds == 0 else f"{seconds * 1000:.0f} ms"
    minutes, sec = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} m {sec:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} m"


def fmt_time(iso: str | None) -> str:
    if not iso:
        return ""
    return iso.replace("T", " ").removesuffix("Z")[:16] + " UTC"


def fmt_pct(rate: float | None) -> str:
    return "–" if rate is None else f"{rate * 100:.1f}%"


def short_sha(sha: str | None) -> str:
    return (sha or "")[:12]


def cut(text: str, limit: int = LONG_TEXT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit} more characters)"


def counts_text(counts: dict[str, int]) -> str:
    ordered = sorted(counts.items(), key=lambda kv: OUTCOME_ORDER.index(kv[0]) if kv[0] in OUTCOME_ORDER else 99)
    return ", ".join(f"{n} {o}" for o, n in ordered) if counts else "no tests"


def outcome_class(outcome: str) -> str:
    if outcome in FAILING:
        return "bad"
    return {"passed": "good", "fixed": "good", "flaky": "warn", "xfailed": "muted", "skipped": "muted",
            "upstream": "upstream"}.get(outcome, "muted")


def other_commit(run: Run, name: str = upstream.STAGE) -> str | None:
    """For the upstream stage's cell of a run whose files are not the torch's own commit: the
    warning its title starts with (None for any other cell)."""
    return upstream.other_commit(run.upstream) if name == upstream.STAGE else None


def stage_title(stage: dict | None, name: str) -> str:
    if stage is None:
        return f"{name}: not run"
    parts = [f"{name}: {stage['status']}", fmt_duration(stage.get("duration_s"))]
    if stage.get("counts"):
        parts.append(counts_text(stage["counts"]))
    if stage.get("cause"):
        parts.append(stage["cause"])
    elif stage.get("summary"):
        parts.append(stage["summary"])
    return " · ".join(p for p in parts if p)


# --- links ------------------------------------------------------------------------

def run_base(run: Run) -> str:
    """Site path of a run page without '.html'; its logs sit beside it (no directory per run)."""
    return f"runs/{safe_name(run.backend)}/{run.slug}"


def run_href(run: Run) -> str:
    return f"{run_base(run)}.html"


def backend_href(name: str) -> str:
    return f"backends/{safe_name(name)}.html"


def log_name(base: str, stage: str) -> str:
    return f"{base}.{safe_name(stage)}.log.txt"


# --- SVG ----------------------------------------------------------------------------

def sparkline(runs: list[Run], width: int = 6, height: int = 20) -> Markup:
    """One cell per run, the full height and coloured by the run's status: a red run is as
    visible as a green one (its pass rate is on the backend page's chart)."""
    if not runs:
        return Markup("")
    paths: dict[str, list[str]] = {}
    for i, run in enumerate(runs):
        paths.setdefault(_status(run.status), []).append(f"M{i * width} 0h{width - 1}v{height}h-{width - 1}z")
    w = len(runs) * width
    greens = sum(1 for r in runs if r.ok)
    title = f"last {len(runs)} runs: {greens} green, {len(runs) - greens} red"
    body = "".join(f'<path class="f-{s}" d="{"".join(d)}"/>' for s, d in paths.items())
    return Markup(f'<svg class="spark" width="{w}" height="{height}" viewBox="0 0 {w} {height}" role="img">'
                  f'<title>{html.escape(title)}</title>{body}</svg>')


def trend(runs: list[Run], hrefs: dict[int, str] | None = None, width: int = 760, height: int = 170) -> Markup:
    """Pass rate over the backend's history, one dot per run that has test results, coloured by
    status. A run without tests (its suites blocked or not asked for) has no pass rate: no dot,
    rather than one at 0 % that would read as a collapse."""
    if not runs:
        return Markup("")
    pad_l, pad_r, pad_t, pad_b = 36, 8, 8, 20
    plot_w, plot_h = width - pad_l - pad_r, height - pad_t - pad_b
    step = plot_w / max(1, len(runs) - 1)
    parts = [f'<svg class="trend" viewBox="0 0 {width} {height}" role="img" aria-label="pass rate per run">']
    for pct in (0, 50, 100):
        y = pad_t + plot_h * (1 - pct / 100)
        parts.append(f'<line class="grid" x1="{pad_l}" x2="{width - pad_r}" y1="{y:.1f}" y2="{y:.1f}"/>'
                     f'<text x="{pad_l - 4}" y="{y + 4:.1f}" text-anchor="end">{pct}%</text>')
    points, dots = [], []
    for i, run in enumerate(runs):
        if run.pass_rate is None:
            continue
        x = pad_l + i * step if len(runs) > 1 else pad_l + plot_w / 2
        y = pad_t + plot_h * (1 - run.pass_rate)
        points.append(f"{x:.1f},{y:.1f}")
        label = html.escape(f"{fmt_time(run.started_at)} · {run.status} · pass rate {fmt_pct(run.pass_rate)}")
        dot = f'<circle class="f-{_status(run.status)}" cx="{x:.1f}" cy="{y:.1f}" r="3"><title>{label}</title></circle>'
        href = (hrefs or {}).get(run.id)
        dots.append(f'<a href="{html.escape(href)}">{dot}</a>' if href else dot)
    parts.append(f'<polyline class="line" points="{" ".join(points)}"/>')
    parts.extend(dots)
    parts.append(f'<text x="{pad_l}" y="{height - 4}">{html.escape(fmt_time(runs[0].started_at)[:10])}</text>'
                 f'<text x="{width - pad_r}" y="{height - 4}" text-anchor="end">'
                 f'{html.escape(fmt_time(runs[-1].started_at)[:10])}</text></svg>')
    return Markup("".join(parts))


def badge(label: str, status: str) -> str:
    """A shields-style SVG badge with its colours inline (it is shown outside the site)."""
    text = {"passed": "passing", "skipped": "skipped"}.get(status, status)
    colour = COLOURS.get(status, COLOURS["unknown"])
    lw, rw = 7 * len(label) + 12, 7 * len(text) + 12
    w = lw + rw
    label_e, text_e = html.escape(label), html.escape(text)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="20" role="img" '
            f'aria-label="{label_e}: {text_e}"><title>{label_e}: {text_e}</title>'
            f'<rect width="{lw}" height="20" fill="#555"/><rect x="{lw}" width="{rw}" height="20" fill="{colour}"/>'
            f'<g fill="#fff" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11" text-anchor="middle">'
            f'<text x="{lw / 2}" y="14">{label_e}</text><text x="{lw + rw / 2}" y="14">{text_e}</text></g></svg>\n')


def _status(status: str) -> str:
    return status if status in COLOURS else "unknown"


# --- run page rows: 2,000 rows per page, so built without a template loop -------------
# End tags of cells and rows are optional in HTML; leaving them out keeps a page of
# thousands of tests a third smaller. Styling keys off data-outcome and column order.

def test_rows(tests: Sequence[Mapping[str, Any]], budget: int | None = None) -> tuple[Markup, int]:
    """Rows for dashboard.records.TestRow dicts (fields at their default may be absent), and how
    many of the tests they are: the rows stop before their HTML passes `budget` characters."""
    out: list[str] = []
    size = 0
    append = out.append
    esc = html.escape  # 2x faster than markupsafe's escape, which wraps every result in Markup
    suites: dict[str, str] = {}
    durations: dict[float, str] = {}
    for t in tests:
        o = t["outcome"]
        seconds = t.get("duration_s", 0.0)
        duration = durations.get(seconds)
        if duration is None:
            duration = durations[seconds] = fmt_duration(seconds)
        suite = suites.get(t["suite"])
        if suite is None:
            suite = suites[t["suite"]] = esc(t["suite"])
        message, log_tail, attempts = t.get("message"), t.get("log_tail"), t.get("attempts", 1)
        if not (message or log_tail or attempts > 1):  # most tests: a plain pass
            row = f'<tr data-outcome="{o}"><td>{o}<td>{esc(t["id"])}<td>{suite}<td>{duration}<td>'
        else:
            detail = f'<pre class="msg">{esc(cut(message))}</pre>' if message else ""
            if log_tail:
                detail += f'<details><summary>log tail</summary><pre class="log">{esc(cut(log_tail))}</pre></details>'
            extra = f" ×{attempts}" if attempts > 1 else ""
            row = f'<tr data-outcome="{o}"><td>{o}<td>{esc(t["id"])}<td>{suite}<td>{duration}{extra}<td>{detail}'
        size += len(row) + 1
        if budget is not None and size > budget:
            break
        append(row)
    return Markup("\n".join(out)), len(out)


_Row = TypeVar("_Row", bound=Mapping[str, Any])  # a TestRow, or a plain dict of one


def sorted_tests(tests: list[_Row]) -> tuple[list[_Row], list[tuple[str, int]]]:
    """Tests in page order (worst outcome first, then by id), and (outcome, count) in that order."""
    buckets: dict[str, list[_Row]] = {}
    for t in tests:
        bucket = buckets.get(t["outcome"])
        if bucket is None:
            bucket = buckets[t["outcome"]] = []
        bucket.append(t)
    ordered: list[_Row] = []
    counts: list[tuple[str, int]] = []
    by_id = operator.itemgetter("id")
    for outcome in sorted(buckets, key=lambda o: (_RANK.get(o, len(_RANK)), o)):
        bucket = sorted(buckets[outcome], key=by_id)
        ordered += bucket
        counts.append((outcome, len(bucket)))
    return ordered, counts


def history_rows(runs: list[Run], paged: set[int], root: str) -> Markup:
    """The backend page's runs x stages grid: one row per run of a year of nights, so no template loop."""
    esc = html.escape
    out = []
    for run in runs:
        href = esc(root + run_href(run)) if run.id in paged else None
        when = esc(fmt_time(run.started_at))
        cells = [f'<tr data-status="{esc(run.status)}">\n<th class="name">'
                 + (f'<a href="{href}">{when}</a>' if href else when) + "</th>\n"]
        by_name = {st["name"]: st for st in run.stages}
        missing = run.status == "missing"
        if missing:  # no stage ran: one cell across them says why
            cells.append(missing_cell(run, href))
        for name in () if missing else STAGES:
            stage = by_name.get(name)
            status = esc(stage["status"]) if stage else "none"
            glyph = GLYPH.get(status, "")
            title = esc(stage_title(stage, name))
            other = other_commit(run, name)
            if other:  # results of another commit's files: the cell says so
                title = f"{esc(other)} · {title}"
                glyph += f'<span class="other-mark" title="{esc(other)}">{OTHER_MARK}</span>'
            cells.append(f'<td class="c s-{status}{" other-commit" if other else ""}" title="{title}">'
                         + (f'<a href="{href}">{glyph}</a>' if href else glyph) + "</td>")
        total = run.total
        tests = f"{total - run.failing}/{total}" if total else "–"
        cells.append(f'\n<td class="num" title="{esc(counts_text(run.counts))}">{tests}</td>\n'
                     f'<td class="num">{fmt_pct(run.pass_rate)}</td>\n'
                     f'<td><code title="{esc(run.torch_version or "")}">{esc(short_sha(run.torch_git))}</code></td>\n'
                     f'<td class="num">{fmt_duration(run.duration_s)}</td>\n</tr>')
        out.append("".join(cells))
    return Markup("\n".join(out))


def missing_cell(run: Run, href: str | None = None) -> Markup:
    """The stage columns of a run that left no record (status missing): one cell with the reason.
    href: already escaped."""
    reason = html.escape(run.missing_reason)
    text = f'{GLYPH["missing"]} missing<span class="why">: {reason}</span>'
    return Markup(f'<td class="c s-missing wide" colspan="{len(STAGES)}" title="missing: {reason}">'
                  + (f'<a href="{href}">{text}</a>' if href else text) + "</td>")


COVERAGE_PAGE_BYTES = 800_000
"""The rows one coverage page holds at most: ops x backends grows past any page at a vendor's size
(about 700 OpInfos x 100 backends), so the table is cut into pages of whole rows under this."""


def coverage_pages(ops: list[str], backends: list[str], table: dict[str, dict[str, dict]],
                   limit: int | None = None) -> list[tuple[list[str], Markup]]:
    """The coverage table cut into pages of whole rows, each under `limit` bytes of rows (a row larger
    than that is a page of its own): [(the page's ops, its rows)]; one page where all fit."""
    limit = COVERAGE_PAGE_BYTES if limit is None else limit
    pages: list[tuple[list[str], Markup]] = []
    chunk_ops: list[str] = []
    chunk_rows: list[str] = []
    size = 0
    for op, row in zip(ops, _coverage_row_texts(ops, backends, table), strict=True):
        cost = len(row.encode("utf-8")) + 1
        if chunk_rows and size + cost > limit:
            pages.append((chunk_ops, Markup("\n".join(chunk_rows))))
            chunk_ops, chunk_rows, size = [], [], 0
        chunk_ops.append(op)
        chunk_rows.append(row)
        size += cost
    pages.append((chunk_ops, Markup("\n".join(chunk_rows))))
    return pages


def coverage_rows(ops: list[str], backends: list[str], table: dict[str, dict[str, dict]]) -> Markup:
    """The ops x backends cells (up to hundreds of each, so no template loop)."""
    return Markup("\n".join(_coverage_row_texts(ops, backends, table)))


def _coverage_row_texts(ops: list[str], backends: list[str], table: dict[str, dict[str, dict]]) -> list[str]:
    out = []
    esc = escape
    names = [(b, esc(b)) for b in backends]
    for op in ops:
        row = table[op]
        eop = esc(op)
        cells = []
        for b, eb in names:
            c = row.get(b)
            if c is None:
                cells.append(f'<td class="cov-none" title="{eb} · {eop}: not tested">')
                continue
            ok, bad, skip = c["ok"], c["bad"], c["skip"]
            kind = "cov-bad" if bad else ("cov-ok" if ok else "cov-skip")
            title = f"{eb} · {eop}: " + "; ".join(
                f"{label} {esc(', '.join(dtypes))}" for label, dtypes in
                (("passing", ok), ("failing", bad), ("skipped", skip)) if dtypes)
            cells.append(f'<td class="{kind}" title="{title}">{len(ok)}/{len(ok) + len(bad)}')
        out.append(f'<tr><th class="name">{eop}</th>{"".join(cells)}')
    return out


def dumps(data) -> str:
    # No indent: only then does json use its C encoder (a backend's API file lists every run).
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
