"""The backend page's performance section and the index's mark of an open performance regression,
from records whose bench stage counted instructions and timed the device (dashboard/performance.py)."""

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

START = dt.datetime(2026, 10, 1, 3, 17, tzinfo=dt.UTC)
NIGHTS = 30
STEP_AT = 24
"""the first night of the 3 % step planted in `add_tiny`'s device count: 6 nights at the new level"""


NO_COUNTER = ("time only: no hardware instruction counter: torch._C._instruction_counter.start() returned -1; "
              "valgrind is not on PATH (install it for instruction counts: apt-get install valgrind)")


def night(backend: str, day: int, measured: dict[str, tuple[float, float, float]] | None,
          gated: bool = False, counted: bool = True) -> RunRecord:
    """measured: name -> (device instructions, CPU instructions, device seconds) per call; not
    counted: a time-only stage, as one on a runner without a counter records it."""
    started = START + dt.timedelta(days=day)
    stages = [StageResult(name="build", status=Status.passed, summary="built")]
    if measured is not None:
        data = {"counter": "callgrind" if counted else None, "timing": "events", "time_gated": gated,
                "measurements": {name: {"counts": {"device": {"per_call": d}, "cpu": {"per_call": c}, "ratio": d / c},
                                        "device": {"median": t, "rsd": 0.2}, "cpu": {"median": 1e-5},
                                        "ratio": t / 1e-5, "timing": "events", "noisy": True}
                                 for name, (d, c, t) in measured.items()}}
        if not counted:
            data["counter_note"] = NO_COUNTER
            for m in data["measurements"].values():
                del m["counts"]
        stages.append(StageResult(name="bench", status=Status.passed, summary=f"{len(measured)} measurements",
                                  data=data))
    return RunRecord(run_id=f"{backend}-{started:%Y%m%dT%H%M%SZ}-{day:06x}", backend=backend, device=backend,
                     trigger="nightly", torch=TorchInfo(spec="nightly", version=f"2.14.0.dev{day}",
                                                        git_version=f"{day:02x}" * 20),
                     started_at=started, status=Status.passed, stages=stages)


def write_nights(data: Path) -> None:
    noise = random.Random(7)
    for day in range(NIGHTS):
        tiny = 18_400 * (1.03 if day >= STEP_AT else 1.0) * (1 + noise.uniform(-0.001, 0.001))
        synthetic.write_record(data, night("fast", day, {
            "add_tiny": (tiny, 9_000.0, 4e-6 * (1 + noise.gauss(0, 0.2))),
            "matmul": (1.1e8 * (1 + noise.uniform(-0.0001, 0.0001)), 1.1e8, 8e-3 * (1 + noise.gauss(0, 0.2)))}))
        synthetic.write_record(data, night("plain", day, None))
        synthetic.write_record(data, night("timeonly", day, {"add_tiny": (1.0, 1.0, 4e-6)}, counted=False))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """fast: add_tiny's device count 3 % up for the last 6 nights, matmul flat, time noisy and not
    gated (a host-memory device); plain: no bench stage."""
    data = tmp_path_factory.mktemp("runs")
    write_nights(data)
    out = tmp_path_factory.mktemp("site") / "site"
    site.build(data, out, jobs=1)
    return data, out


def test_each_measurement_gets_its_counts_and_time_charted_with_the_step_marked(built):
    _, out = built
    page = (out / "backends" / "fast.html").read_text()
    assert 'id="performance"' in page
    assert page.count('<svg class="perf"') == 6  # 2 measurements x (count, count ratio, time)
    tiny = page[page.index('id="perf-add_tiny-count"'):page.index('id="perf-add_tiny-count_ratio"')]
    # One step, open: the dashed line sits between the last night before it and its first night.
    assert tiny.count('<line class="change open"') == 1 and "% slower" in tiny and "+3.0 %" in tiny
    assert tiny.count("<circle") == NIGHTS
    last_good, first_bad = START + dt.timedelta(days=STEP_AT - 1), START + dt.timedelta(days=STEP_AT)
    assert f"fast-{last_good:%Y%m%dT%H%M%SZ}" in tiny and f"fast-{first_bad:%Y%m%dT%H%M%SZ}" in tiny
    # The torch commits either side are linked for comparison.
    assert f"compare/{STEP_AT - 1:02x}" in tiny and f"...{STEP_AT:02x}" in tiny
    matmul = page[page.index('id="perf-matmul"'):]
    assert '<line class="change' not in matmul.split("</figure>")[0]
    assert 'id="perf-regressions"' in page and "<b>add_tiny</b>" in page
    # Time on a device that is host memory: drawn (each night too noisy to judge: hollow), never judged.
    time_chart = page[page.index('id="perf-add_tiny-time"'):page.index('id="perf-matmul"')]
    assert "shown, not gated" in time_chart and time_chart.count('class="noisy"') == NIGHTS
    assert '<line class="change' not in time_chart


def test_the_index_marks_the_backend_with_an_open_regression_and_only_it(built):
    _, out = built
    index = (out / "index.html").read_text()
    rows = {row.split('href="backends/')[1].split(".html")[0]: row for row in index.split("<tr")[1:]
            if 'href="backends/' in row}
    assert 'class="perf-mark"' in rows["fast"] and "add_tiny +" in rows["fast"]
    assert "perf-mark" not in rows["plain"] and "perf-mark" not in rows["timeonly"]


def test_the_api_carries_the_series_and_their_changes(built):
    _, out = built
    perf = json.loads((out / "api" / "backends" / "fast.json").read_text())["performance"]
    tiny = perf["measurements"]["add_tiny"]
    assert perf["judged"] is True and perf["missing_extra"] is None
    assert (tiny["count"]["runs"], tiny["count"]["method"], tiny["count"]["judged"]) == (NIGHTS, "callgrind", True)
    [change] = tiny["count"]["changes"]
    assert change["open"] and change["relative"] == pytest.approx(0.03, abs=0.003)
    assert [c["open"] for c in tiny["count_ratio"]["changes"]] == [True]
    assert (tiny["time"]["gated"], tiny["time"]["judged"], tiny["time"]["noisy_runs"]) == (False, False, NIGHTS)
    assert perf["measurements"]["matmul"]["count"]["changes"] == []
    summary = json.loads((out / "api" / "latest.json").read_text())
    by_name = {b["name"]: b for b in summary["backends"]}
    assert {(r["measurement"], r["metric"]) for r in by_name["fast"]["performance_regressions"]} == \
        {("add_tiny", "count"), ("add_tiny", "count_ratio")}
    assert by_name["plain"]["performance_regressions"] == []


def test_a_time_only_backend_says_why_it_has_no_counts(built):
    """A runner without a counter: its time charted, and the stage's own line on the page and in the API."""
    _, out = built
    page = (out / "backends" / "timeonly.html").read_text()
    assert page.count('<svg class="perf"') == 1 and 'id="perf-add_tiny-time"' in page
    assert f"The latest run's instruction counts: {NO_COUNTER}." in page
    perf = json.loads((out / "api" / "backends" / "timeonly.json").read_text())["performance"]
    assert perf["counter_note"] == NO_COUNTER and set(perf["measurements"]["add_tiny"]) == {"time"}


def test_a_backend_without_bench_has_no_section(built):
    _, out = built
    assert 'id="performance"' not in (out / "backends" / "plain.html").read_text()
    assert json.loads((out / "api" / "backends" / "plain.json").read_text())["performance"] is None


# A Python where the perf extra's modules are not there: importing them fails as a missing module does.
WITHOUT_PERF_EXTRA = """
import importlib.abc, sys
from pathlib import Path

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("numpy", "scipy", "signal_processing_algorithms"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from ootci.dashboard import site
site.build(Path(sys.argv[1]), Path(sys.argv[2]), jobs=1)
import numpy
"""


def test_without_the_perf_extra_counts_are_still_judged_and_one_line_says_what_to_install(built, tmp_path):
    """The site never needs numpy: a build in a Python where numpy and signal-processing-algorithms
    cannot be imported draws every chart, finds the step in the counts, and says what to install
    for change points in device time (tests/test_packaging.py builds from a plain install too)."""
    data, _ = built
    out = tmp_path / "site"
    done = subprocess.run([sys.executable, "-c", WITHOUT_PERF_EXTRA, str(data), str(out)], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin"}, timeout=300)
    assert "ModuleNotFoundError: No module named 'numpy'" in done.stderr  # only the script's own last line
    page = (out / "backends" / "fast.html").read_text()
    assert page.count('<svg class="perf"') == 6
    assert 'id="perf-missing-extra"' in page and "pip install 'ootci[perf]'" in page
    assert page.count('<line class="change open"') == 2  # add_tiny's count and count ratio
    assert 'class="perf-mark"' in (out / "index.html").read_text()
