"""The causes table of the run and backend pages, and the index's count of causes per backend.

A row is one cause (runner/core/causes.py): how many tests it broke, its ops and dtypes, the
night it first appeared with the culprit range of that night, and an example test linked to its
stage's log; it opens into its tests. Rows come new first (then a known failure now failing
differently, known, and failing on CPU too), the largest first within each.
"""

from __future__ import annotations

from ootci.dashboard import analysis, render
from ootci.dashboard.store import Run
from ootci.runner.models import RunRecord

NOVELTY_LABEL = {"new": "new", "changed": "known, now failing differently", "known": "known",
                 "upstream": "fails on CPU too"}


def since_entry(since: analysis.CauseSince | None, root: str, paged: set[int] | frozenset[int]) -> dict:
    """A cause's first night for a row, as plain data (a run page is written in another process)."""
    if since is None:
        return {}
    first = since.first
    return {"first_label": first.started_at[:10], "first_run": first.run_id,
            "first_href": root + render.run_href(first) if first.id in paged else None,
            "culprit_url": since.compare_url}


def record_rows(record: RunRecord, logs: dict[str, str], since: dict[str, dict] | None = None) -> list[dict]:
    """The run page's rows, from the record's own causes (every test each lists); `since`: cause
    text -> its since_entry."""
    rows = []
    for stage in record.stages:
        for c in stage.causes:
            rows.append({"text": c.text, "novelty": c.novelty, "label": NOVELTY_LABEL.get(c.novelty, c.novelty),
                         "count": c.count, "ops": c.ops[:5], "n_ops": len(c.ops), "dtypes": c.dtypes[:6],
                         "n_dtypes": len(c.dtypes), "was": c.was, "stage": stage.name,
                         "example": c.tests[0] if c.tests else None, "log_href": logs.get(stage.name),
                         "tests": c.tests, "more": c.count - len(c.tests), "masked": c.masked,
                         **(since or {}).get(c.text, {})})
    return _ordered(rows)


def run_rows(run: Run, since: dict[str, analysis.CauseSince], paged: set[int], root: str = "../") -> list[dict]:
    """The backend page's rows for its latest run, from the index (an example test each, linked to
    the run page's table, which lists them all and links each stage's log)."""
    rows = []
    for c in analysis.run_causes(run):
        rows.append({**c, "label": NOVELTY_LABEL.get(c["novelty"], c["novelty"]), "tests": None, "more": 0,
                     "run_href": root + render.run_href(run) + "#causes" if run.id in paged else None,
                     **since_entry(since.get(c["text"]), root, paged)})
    return _ordered(rows)


ROW: dict[str, object] = {
    "was": None, "example": None, "log_href": None, "run_href": None, "tests": None, "more": 0, "masked": [],
    "ops": [], "n_ops": 0, "dtypes": [], "n_dtypes": 0, "first_label": None, "first_run": None,
    "first_href": None, "culprit_url": None}
"""every field of a row, for those the index or an older record does not have"""


def _ordered(rows: list[dict]) -> list[dict]:
    order = list(NOVELTY_LABEL)
    rows = [{**ROW, **row} for row in rows]
    return sorted(rows, key=lambda r: (order.index(r["novelty"]) if r["novelty"] in order else len(order),
                                       -r["count"], r["text"]))


def counted(run: Run) -> dict:
    """What the index says of a backend's latest run: its causes of its own failures (known and
    new, not those that fail on CPU too) and how many of them are new."""
    found = [c for c in analysis.run_causes(run) if c["novelty"] != "upstream"]
    new = [c for c in found if c["novelty"] in ("new", "changed")]
    return {"causes": len(found), "new": len(new),
            "new_causes": [[c["text"], c["count"], run.started_at[:10]] for c in new]}
