"""Failures by cause on the dashboard: the causes table of the run and backend pages (largest
first, ops, dtypes, first night with its culprit range, an example linked to its log, opening into
the tests), the index's count of causes per backend, and a cause new on several backends the same
night shown once. Records are synthetic nights whose causes the runner's own code groups."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from ootci.dashboard import synthetic
from ootci.dashboard.store import safe_name
from ootci.runner.core import causes
from ootci.runner.models import Outcome, RunRecord, StageResult, Status, overall_status
from ootci.runner.models import TestResult as Result
from tests.dashboard.upstream_records import build_site

DEVICE = "vdev"
MISSING = ("NotImplementedError: Could not run 'aten::_fft_r2c' with arguments from the 'PrivateUse1' backend. "
           "This could be because the operator doesn't exist for this backend. 'aten::_fft_r2c' is only "
           "available for these backends: [CPU, Meta].")


def failures(night: int, backend: str) -> list[Result]:
    """Night 0: one known failure. From night 1, the fft kernel is missing (12 tests through
    sample wrappers of varying shapes), and on `alpha` a wrong result breaks 3 more."""
    tests = [Result(id=f"test_ops.py::TestCommon::test_mode_{DEVICE}_float32", suite="upstream",
                        outcome=Outcome.xfailed, message="known failure (failed with torch 2.13.0); it failed: "
                        f"RuntimeError: mode only supports CPU, CUDA and XPU device type, got {DEVICE}:0",
                        op="mode", dtype="float32")]
    if night >= 1:
        for i in range(12):
            op, dtype = ("fft.fft", "fft.rfft", "fft.hfft")[i % 3], ("float32", "float64")[i % 2]
            tests.append(Result(
                id=f"test_opinfo.py::test_compare_cpu[{op}-{dtype}-{i}]", suite="upstream", outcome=Outcome.failed,
                message=f"AssertionError: sample {i} (Tensor[{i + 2}, 3]): raised on {DEVICE} but not on CPU: "
                        + MISSING, op=op, dtype=dtype))
    if night >= 1 and backend == "alpha":
        tests += [Result(id=f"test_ops.py::TestCommon::test_mul_{i}_{DEVICE}_int64", suite="upstream",
                             outcome=Outcome.failed, message=f"AssertionError: assert [{i}, 2] == [{i}, 4]", op="mul",
                             dtype="int64") for i in range(3)]
    return tests


def night_of(backend: str, night: int) -> RunRecord:
    record = synthetic.build_record(synthetic.Scenario(backend, DEVICE), night)
    tests = failures(night, backend)
    stage = StageResult(name="upstream", status=Status.failed if night else Status.passed, log="logs/upstream.log")
    causes.attach(stage, tests, DEVICE)
    record.tests.extend(tests)
    record.stages.append(stage)
    record.status = overall_status(record.stages)
    return record


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    records = {b: [night_of(b, n) for n in range(3)] for b in ("alpha", "beta")}
    out = tmp_path_factory.mktemp("site") / "site"
    build_site(records, tmp_path_factory.mktemp("runs"), out)
    return out, records


def causes_box(page: str) -> str:
    return page.split('<section class="box causes" id="causes">', 1)[1].split("</section>", 1)[0]


def rows(box: str) -> list[str]:
    """Each row's text as it reads."""
    return [html.unescape(" ".join(re.sub(r"<[^>]+>", " ", row).split()))
            for row in re.findall(r"<tr class=\"cause-.*?</tr>", box, re.S)]


def run_page(out: Path, record: RunRecord) -> str:
    return (out / "runs" / safe_name(record.backend) / f"{safe_name(record.run_id)}.html").read_text()


def test_the_run_page_reads_as_causes_largest_first_each_opening_into_its_tests(built):
    out, records = built
    record = records["alpha"][2]
    box = causes_box(run_page(out, record))
    found = rows(box)
    assert [r.split(" ", 2)[:2] for r in found] == [["12", "new"], ["3", "new"], ["1", "known"]]
    fft = found[0]
    assert "NotImplementedError: Could not run 'aten::_fft_r2c' with arguments from the 'PrivateUse1' backend." in fft
    assert "fft.fft, fft.hfft, fft.rfft" in fft and "float32, float64" in fft
    # The night it first appeared, and PyTorch's commits between the night before and that night.
    night1 = records["alpha"][1]
    assert night1.started_at.strftime("%Y-%m-%d") in fft
    assert (f'href="https://github.com/pytorch/pytorch/compare/{synthetic.torch_commit(0)}...'
            f'{synthetic.torch_commit(1)}"') in box
    # Opens into its 12 tests; the example test links to its stage's log.
    details = box.split("<details>", 1)[1].split("</details>", 1)[0]
    assert details.count('<span class="tid">') == 12
    assert f'{safe_name(record.run_id)}.upstream.log.txt">upstream.log</a>' in box
    assert "masked: the sample's wrapper" in html.unescape(box)
    assert "RuntimeError: mode only supports CPU, CUDA and XPU device type, got <device>" in found[2]


def test_the_backend_page_shows_its_latest_causes_and_the_api_lists_them(built):
    out, records = built
    page = (out / "backends" / "alpha.html").read_text()
    found = rows(causes_box(page))
    # Each example leads to the latest run's table, which lists every test and links the logs.
    latest = records["alpha"][-1]
    assert causes_box(page).count(f'href="../runs/alpha/{safe_name(latest.run_id)}.html#causes"') == 3
    assert [r.split(" ", 2)[:2] for r in found] == [["12", "new"], ["3", "new"], ["1", "known"]]
    assert records["alpha"][1].started_at.strftime("%Y-%m-%d") in found[0]
    # The known failure has failed since the first night: no night before it, so no culprit range.
    assert records["alpha"][0].started_at.strftime("%Y-%m-%d") in found[2] and "culprit range" not in found[2]
    api = json.loads((out / "api" / "backends" / "alpha.json").read_text())
    assert [(c["count"], c["novelty"]) for c in api["causes"]] == [(12, "new"), (3, "new"), (1, "known")]
    assert api["causes"][0]["first_run"] == records["alpha"][1].run_id
    assert api["causes"][0]["culprit_url"].endswith(f"{synthetic.torch_commit(0)}...{synthetic.torch_commit(1)}")


def test_the_index_counts_causes_per_backend_and_shows_a_cause_new_on_both_once(built):
    out, _ = built
    index = html.unescape((out / "index.html").read_text())
    assert "3 causes, 2 new" in index and "2 causes, 1 new" in index
    shared = index.split('<section class="box" id="shared-causes">', 1)[1].split("</section>", 1)[0]
    assert shared.count("<li>") == 1
    assert "Could not run 'aten::_fft_r2c'" in shared and "alpha</a> (12)" in shared and "beta</a> (12)" in shared
    latest = json.loads((out / "api" / "latest.json").read_text())
    assert {b["name"]: b["causes"] for b in latest["backends"]} == {
        "alpha": {"causes": 3, "new": 2}, "beta": {"causes": 2, "new": 1}}
