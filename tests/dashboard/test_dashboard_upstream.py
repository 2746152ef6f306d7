"""The upstream suite on the dashboard, built from records shaped by the runner's own code
(tests/dashboard/upstream_records.py): per-file rows and skip reasons, where the files came from
and the banner when they are not the torch's own commit, tests that fail on CPU too apart from
new failures, a new test failing apart from a regression, the offline "did not run" line, the
JSON API, and records that go through the history's packed form coming back the same."""

from __future__ import annotations

import html
import json
import operator
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ootci.dashboard import site, synthetic
from ootci.dashboard.store import safe_name
from ootci.runner.history import history_store
from ootci.runner.models import RunRecord
from ootci.runner.records import record_files
from ootci.runner.records.upstream_files import summarize
from tests.dashboard.upstream_records import (
    BROKEN,
    DEVICE,
    FILES,
    SORT,
    UNREACHABLE,
    VIEW,
    build_site,
    fetched,
    given_elsewhere,
    with_upstream,
)

BANNER = "These files are not from the torch's own commit:"
REGRESSED = VIEW + f"test_ravel_{DEVICE}_float32"
NEW_TEST = VIEW + f"test_new_at_second_commit_{DEVICE}_float32"
NOW_FIXED = VIEW + f"test_flip_{DEVICE}_bool"
CPU_TOO = {VIEW + f"test_unfold_{DEVICE}_float32", SORT + f"test_msort_{DEVICE}_float32", BROKEN}


class UpstreamRows(HTMLParser):
    """The text of each cell of the upstream table's rows, by file."""

    def __init__(self, text: str):
        super().__init__()
        self.rows: dict[str, list[str]] = {}
        self._file: str | None = None
        self._cells: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if tag == "tr" and "data-file" in found:
            self._file, self._cells = found["data-file"], []
        elif tag == "td" and self._file is not None:
            self._cells.append("")

    def handle_endtag(self, tag):
        if tag == "tr" and self._file is not None:
            self.rows[self._file] = [" ".join(c.split()) for c in self._cells]
            self._file = None

    def handle_data(self, data):
        if self._file is not None and self._cells:
            self._cells[-1] += data


def upstream_box(page: str) -> str:
    return page.split('<section class="box upstream" id="upstream">', 1)[1].split("</section>", 1)[0]


def shown(fragment: str) -> str:
    """A fragment of a page as its text reads (entities decoded), tags left in."""
    return html.unescape(fragment)


def stage_cells(row: str) -> list[tuple[str, bool, str]]:
    """(status, marked as another commit's files, title) of each stage cell of a grid row."""
    return [(status, bool(other), html.unescape(title)) for status, other, title in
            re.findall(r'<td class="c s-(\w+)( other-commit)?" title="([^"]*)">', row)]


def index_row(index: str, backend: str) -> str:
    return next(r for r in index.split("<tr")[1:] if f'href="backends/{backend}.html"' in r)


def run_page(out: Path, record: RunRecord) -> str:
    return (out / "runs" / safe_name(record.backend) / f"{safe_name(record.run_id)}.html").read_text()


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """vendor: night 0 from the torch's own commit, night 1 from a folder at another commit;
    steady: both nights fetched at the torch's commit; offline: the repository could not be reached;
    rebuilt: night 0's build broke (no tests), night 1 runs the upstream files."""
    data = tmp_path_factory.mktemp("runs")
    records = {
        "vendor": [with_upstream("vendor", 0, fetched(0)), with_upstream("vendor", 1, given_elsewhere(1))],
        "steady": [with_upstream("steady", 0, fetched(0)), with_upstream("steady", 1, fetched(1))],
        "offline": [with_upstream("offline", 0, None)],
    }
    broken = synthetic.Scenario("rebuilt", DEVICE, red_from=0, red_stage="build", fixed_from=1)
    records["rebuilt"] = [synthetic.build_record(broken, 0), with_upstream("rebuilt", 1, fetched(1))]
    assert not records["rebuilt"][0].tests
    out = tmp_path_factory.mktemp("site") / "site"
    build_site(records, data, out)
    return data, out, records


def test_the_run_page_has_a_row_per_file_with_whose_failures_they_are_and_why_tests_were_skipped(nights):
    _, out, records = nights
    record = records["vendor"][1]
    rows = UpstreamRows(upstream_box(run_page(out, record))).rows
    assert list(rows) == sorted(FILES)
    # tests, passed, failed (the backend's), known, fails on CPU too, fixed, skipped
    assert rows["test_view_ops.py"][2:9] == ["9", "2", "2", "1", "1", "1", "3"]
    assert rows["test_view_ops.py"][9] == "dtype not claimed 1 · only on cuda 1 · onlyNativeDeviceTypes 1"
    assert rows["test_sort_and_select.py"][2:10] == ["3", "1", "0", "0", "1", "0", "1", "dtype not claimed 1"]
    # A file that did not import is a collection error, with its message, and its failure is CPU's too.
    assert rows[BROKEN][2:9] == ["1", "0", "0", "0", "1", "0", "0"]
    name, error = rows[BROKEN][0][:len(BROKEN)], rows[BROKEN][0][len(BROKEN):]
    assert name == BROKEN and error.startswith("collection error: fails on CPU too") and "binary_ufuncs" in error
    assert rows[BROKEN][9] == ""
    # The same counts as the runner's own summary of the record's tests, for every file.
    for name, summary in summarize(record.tests).items():
        assert rows[name][2:9] == [str(n) for n in (summary.tests, summary.passed, summary.failed, summary.known,
                                                     summary.upstream, summary.fixed, summary.skipped)]
    assert all(rows[name][1].startswith(("failed", "passed")) for name in rows)


def test_the_banner_says_when_the_files_are_not_the_torch_own_commit_and_only_then(nights):
    _, out, records = nights
    elsewhere = upstream_box(run_page(out, records["vendor"][1]))
    assert BANNER in elsewhere and 'role="alert"' in elsewhere
    described = records["vendor"][1].stage("upstream").data["upstream"]["describe"]
    assert "not the torch's own commit" in described and described in shown(elsewhere)
    own = upstream_box(run_page(out, records["vendor"][0]))
    assert BANNER not in own and 'role="alert"' not in own
    assert records["vendor"][0].stage("upstream").data["upstream"]["describe"] in shown(own)
    # The backend page shows its latest run's section through the same template, banner included.
    assert BANNER in upstream_box((out / "backends" / "vendor.html").read_text())
    steady = upstream_box((out / "backends" / "steady.html").read_text())
    assert BANNER not in steady and UpstreamRows(steady).rows.keys() == set(FILES)


def test_tests_that_fail_on_cpu_too_are_their_own_group_never_new_failures(nights):
    _, out, records = nights
    page = run_page(out, records["vendor"][1])
    news = shown(page.split('<section class="box" id="news">', 1)[1].split("</section>")[0])
    assert "<h3>Fails on CPU too: not the backend's</h3>" in news and "fails on CPU too 3" in news
    group = news.split('id="news-upstream">', 1)[1].split("</ul>", 1)[0]
    new = news.split('id="news-new">', 1)[1].split("</ul>", 1)[0]
    assert all(t in group and t not in new for t in CPU_TOO)
    assert REGRESSED in new and NEW_TEST in new and "new failures 2" in news
    # The backend page and its API count them nowhere among the new failures either.
    api = json.loads((out / "api" / "backends" / "vendor.json").read_text())
    listed = {f["test"] for f in api["new_failures"] + api["new_tests_failing"]}
    assert not listed & CPU_TOO


def test_a_new_test_failing_is_shown_apart_from_a_regression(nights):
    _, out, _ = nights
    api = json.loads((out / "api" / "backends" / "steady.json").read_text())
    assert api["new_failures"] == [{"test": REGRESSED, "outcome": "failed"}]
    assert api["new_tests_failing"] == [{"test": NEW_TEST, "outcome": "failed"}]
    assert api["newly_fixed"] == [{"test": VIEW + f"test_flatten_quantized_{DEVICE}", "was": "failed"}]
    page = shown((out / "backends" / "steady.html").read_text())
    regressions = page.split('id="new-failures">', 1)[1].split("</ul>", 1)[0]
    new_tests = page.split('id="new-tests-failing">', 1)[1].split("</ul>", 1)[0]
    assert REGRESSED in regressions and NEW_TEST not in regressions
    assert NEW_TEST in new_tests and "new test, failing" in new_tests and REGRESSED not in new_tests
    # Night 0's build broke and it ran no tests: nothing says which tests it had, so night 1's
    # failures are all counted as new failures, none as a new test.
    rebuilt = json.loads((out / "api" / "backends" / "rebuilt.json").read_text())
    assert {f["test"] for f in rebuilt["new_failures"]} == {REGRESSED, NEW_TEST}
    assert rebuilt["new_tests_failing"] == []


def test_an_upstream_stage_that_did_not_run_says_why_in_one_line(nights):
    _, out, records = nights
    for page in (run_page(out, records["offline"][0]), (out / "backends" / "offline.html").read_text()):
        box = upstream_box(page)
        lines = re.findall(r'<p class="upstream-not-run">(.*?)</p>', shown(box))
        assert lines == [f"The upstream tests did not run: {UNREACHABLE} (files selected: {', '.join(FILES)})"]
        assert "upstream-files" not in box and BANNER not in box
    entry = {b["name"]: b for b in json.loads((out / "api" / "latest.json").read_text())["backends"]}["offline"]
    assert entry["status"] == "passed" and entry["stages"]["upstream"] == "skipped"
    assert (entry["upstream"]["not_run"], entry["upstream"]["files_selected"]) == (UNREACHABLE, list(FILES))


def test_the_index_marks_the_upstream_cell_of_files_from_another_commit(nights):
    _, out, _ = nights
    index = (out / "index.html").read_text()
    assert "<th class=\"c\">upstream</th>" in index
    status, marked, title = stage_cells(index_row(index, "vendor"))[-1]
    assert status == "failed" and marked and title.startswith(BANNER + " files from /home/vendor/pytorch/test")
    assert f'class="other-mark" title="{BANNER}' in shown(index_row(index, "vendor"))
    for backend in ("steady", "offline"):
        status, marked, title = stage_cells(index_row(index, backend))[-1]
        assert not marked and title.startswith("upstream: ") and "other-mark" not in index_row(index, backend)
    # The backend page's history grid marks the night whose files were another commit's, not the other.
    history = (out / "backends" / "vendor.html").read_text().split('id="history"', 1)[1].split("</table>")[0]
    rows = [stage_cells(r)[-1] for r in history.split("<tr data-status")[1:]]
    assert [marked for _, marked, _ in rows] == [True, False]  # newest first


def test_the_api_carries_the_files_counts_and_where_they_came_from(nights):
    _, out, records = nights
    latest = {b["name"]: b for b in json.loads((out / "api" / "latest.json").read_text())["backends"]}
    vendor = json.loads((out / "api" / "backends" / "vendor.json").read_text())
    up = latest["vendor"]["upstream"]
    assert vendor["upstream"] == up
    source = records["vendor"][1].stage("upstream").data["upstream"]
    assert (up["own_commit"], up["origin"], up["commit"], up["torch_commit"], up["describe"]) == (
        False, "given", synthetic.torch_commit(0), synthetic.torch_commit(1), source["describe"])
    by_file = {f["file"]: f for f in up["files"]}
    for name, summary in summarize(records["vendor"][1].tests).items():
        got = by_file[name]
        assert (got["tests"], got["passed"], got["failed"], got["known"], got["upstream"], got["fixed"],
                got["skipped"], got["skipped_by_reason"], got["collection_error"]) == (
            summary.tests, summary.passed, summary.failed, summary.known, summary.upstream, summary.fixed,
            summary.skipped, summary.skipped_by_reason, summary.collection_error)
        assert got["status"] == source["files"][name]["status"]
    assert up["totals"]["skipped_by_reason"] == {"dtype not claimed": 2, "only on cuda": 1, "onlyNativeDeviceTypes": 1}
    assert latest["steady"]["upstream"]["own_commit"] is True
    assert latest["steady"]["upstream"]["repository"] == "https://github.com/pytorch/pytorch"
    # A run without an upstream stage has none; one the pass rate leaves out: neither pass nor failure.
    night = records["steady"][1]
    counts = {o.value: n for o, n in record_files.header(night).test_counts.items()}
    judged = sum(n for o, n in counts.items() if o not in ("skipped", "upstream"))
    good = sum(n for o, n in counts.items() if o in ("passed", "xfailed", "flaky", "fixed"))
    assert latest["steady"]["pass_rate"] == pytest.approx(good / judged)


def test_records_with_the_upstream_stage_come_back_the_same_from_the_history(nights, tmp_path):
    data, out, records = nights
    by_id = operator.attrgetter("id")
    history = tmp_path / "history"
    (history / "vendor").mkdir(parents=True)
    for record in records["vendor"]:
        history_store.add_run(data / record.backend / record.run_id, history / record.backend / record.run_id)
    for record in records["vendor"]:
        back = record_files.read(history / record.backend / record.run_id / "record.json")
        assert back.tests_file == "results.json.gz"  # packed against the shared test set
        assert back.stages == record.stages
        assert sorted(back.tests, key=by_id) == sorted(record.tests, key=by_id)
        assert back.notable_tests == record_files.header(record).notable_tests
    rebuilt = tmp_path / "site"
    site.build(history, rebuilt, jobs=1, warn=lambda line: pytest.fail(line))
    again = json.loads((rebuilt / "api" / "backends" / "vendor.json").read_text())
    first = json.loads((out / "api" / "backends" / "vendor.json").read_text())
    assert again["upstream"] == first["upstream"] and again["new_failures"] == first["new_failures"]
    assert upstream_box(run_page(rebuilt, records["vendor"][1])) == upstream_box(run_page(out, records["vendor"][1]))
