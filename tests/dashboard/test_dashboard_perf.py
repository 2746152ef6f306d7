"""The backend page's performance section and the index's mark of an open performance regression,
from records whose bench stage measured device/CPU ratios (dashboard/performance.py)."""

from __future__ import annotations

import datetime as dt
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from ootci.dashboard import site, synthetic
from ootci.runner.models import RunRecord, StageResult, Status, TorchInfo

START = dt.datetime(2026, 10, 1, 3, 17, tzinfo=dt.timezone.utc)
NIGHTS = 30
STEP_AT = 24
"""the first night of the slowdown planted in `add_tiny`: 6 nights at the new level"""


def night(backend: str, day: int, ratios: dict[str, float] | None) -> RunRecord:
    started = START + dt.timedelta(days=day)
    stages = [StageResult(name="build", status=Status.passed, summary="built")]
    if ratios is not None:
        stages.append(StageResult(name="bench", status=Status.passed, summary=f"{len(ratios)} measurements", data={
            "measurements": {name: {"ratio": ratio, "device": {"median": ratio * 1e-5}, "cpu": {"median": 1e-5}}
                             for name, ratio in ratios.items()}}))
    return RunRecord(run_id=f"{backend}-{started:%Y%m%dT%H%M%SZ}-{day:06x}", backend=backend, device=backend,
                     trigger="nightly", torch=TorchInfo(spec="nightly", version=f"2.14.0.dev{day}",
                                                        git_version=f"{day:02x}" * 20),
                     started_at=started, status=Status.passed, stages=stages)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """fast: a 25 % slowdown of add_tiny for the last 6 nights, matmul flat; plain: no bench stage."""
    data = tmp_path_factory.mktemp("runs")
    noise = random.Random(7)
    for day in range(NIGHTS):
        tiny = 3.0 * (1.25 if day >= STEP_AT else 1.0) * (1 + noise.gauss(0, 0.02))
        synthetic.write_record(data, night("fast", day, {"add_tiny": tiny, "matmul": 1.1 * (1 + noise.gauss(0, 0.02))}))
        synthetic.write_record(data, night("plain", day, None))
    out = tmp_path_factory.mktemp("site") / "site"
    site.build(data, out, jobs=1)
    return data, out


def test_each_measurement_gets_a_chart_with_the_change_point_marked(built):
    _, out = built
    page = (out / "backends" / "fast.html").read_text()
    assert 'id="performance"' in page
    assert page.count('<svg class="perf"') == 2
    tiny = page[page.index('id="perf-add_tiny"'):page.index('id="perf-matmul"')]
    # One change, open: the dashed line sits between the last good and the first slow night.
    assert tiny.count('<line class="change open"') == 1 and "% slower" in tiny
    assert tiny.count("<circle") == NIGHTS
    last_good, first_bad = START + dt.timedelta(days=STEP_AT - 1), START + dt.timedelta(days=STEP_AT)
    assert f"fast-{last_good:%Y%m%dT%H%M%SZ}" in tiny and f"fast-{first_bad:%Y%m%dT%H%M%SZ}" in tiny
    # The torch commits either side are linked for comparison.
    assert f"compare/{STEP_AT - 1:02x}" in tiny and f"...{STEP_AT:02x}" in tiny
    matmul = page[page.index('id="perf-matmul"'):]
    assert '<line class="change' not in matmul.split("</figure>")[0]
    assert 'id="perf-regressions"' in page and "<b>add_tiny</b>" in page


def test_the_index_marks_the_backend_with_an_open_regression_and_only_it(built):
    _, out = built
    index = (out / "index.html").read_text()
    rows = {row.split('href="backends/')[1].split(".html")[0]: row for row in index.split("<tr")[1:]
            if 'href="backends/' in row}
    assert 'class="perf-mark"' in rows["fast"] and "add_tiny +" in rows["fast"]
    assert "perf-mark" not in rows["plain"]


def test_the_api_carries_the_measurements_and_their_changes(built):
    _, out = built
    perf = json.loads((out / "api" / "backends" / "fast.json").read_text())["performance"]
    tiny = perf["measurements"]["add_tiny"]
    assert perf["judged"] is True and tiny["runs"] == NIGHTS
    [change] = tiny["changes"]
    assert change["open"] and 0.15 < change["relative"] < 0.35
    assert perf["measurements"]["matmul"]["changes"] == []
    summary = json.loads((out / "api" / "latest.json").read_text())
    by_name = {b["name"]: b for b in summary["backends"]}
    assert [r["measurement"] for r in by_name["fast"]["performance_regressions"]] == ["add_tiny"]
    assert by_name["plain"]["performance_regressions"] == []


def test_a_backend_without_bench_has_no_section(built):
    _, out = built
    assert 'id="performance"' not in (out / "backends" / "plain.html").read_text()
    assert json.loads((out / "api" / "backends" / "plain.json").read_text())["performance"] is None


def test_without_the_perf_extra_the_charts_are_drawn_and_no_change_is_claimed(built, tmp_path):
    """The site never needs numpy: a build where signal-processing-algorithms cannot be imported
    draws the charts, marks nothing, and says why."""
    data, _ = built
    blocker = tmp_path / "no-perf-extra" / "signal_processing_algorithms"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('the perf extra is not installed')\n")
    out = tmp_path / "site"
    subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from ootci.dashboard import site; "
                    "site.build(Path(sys.argv[1]), Path(sys.argv[2]), jobs=1)", str(data), str(out)],
                   check=True, env={"PYTHONPATH": str(blocker.parent), "PATH": "/usr/bin:/bin"}, timeout=300)
    page = (out / "backends" / "fast.html").read_text()
    assert page.count('<svg class="perf"') == 2 and '<line class="change' not in page
    assert "pip install &#39;ootci[perf]&#39;" in page or "pip install 'ootci[perf]'" in page
    assert "perf-mark" not in (out / "index.html").read_text()
