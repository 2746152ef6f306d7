"""`ootci dashboard build` on real RunRecord files: pages, history answers, incremental
updates, bad input and the all-or-nothing swap."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ootci.dashboard import render, site, synthetic
from ootci.dashboard.store import safe_name
from ootci.runner.models import Outcome, RunRecord
from ootci.runner.models import TestResult as Result  # not "Test*": pytest would try to collect it
from ootci.runner.records import packed_tests, record_files

SCENARIOS = {s.name: s for s in synthetic.default_scenarios()}


def write_nights(root: Path, name: str, days, **kw) -> list[RunRecord]:
    records = [synthetic.build_record(SCENARIOS[name], day, **kw) for day in days]
    for record in records:
        synthetic.write_record(root, record)
    return records


def build(data: Path, out: Path, **kw) -> site.BuildReport:
    warnings: list[str] = []
    kw.setdefault("jobs", 1)
    report = site.build(data, out, warn=warnings.append, **kw)
    report.warnings = warnings
    return report


def api(out: Path, name: str) -> dict:
    return json.loads((out / "api" / "backends" / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    data = tmp_path_factory.mktemp("runs")
    synthetic.write_history(data, nights=14, prs=2)
    out = tmp_path_factory.mktemp("site") / "site"
    report = build(data, out)
    return data, out, report


def test_every_page_kind_is_written(history):
    data, out, report = history
    assert report.full and report.skipped == [] and report.records == 14 * 4 + 2 * 2
    for name in SCENARIOS:
        assert (out / "backends" / f"{name}.html").is_file()
        badge = (out / "badges" / f"{name}.svg").read_text()
        assert badge.startswith("<svg") and "<title>" in badge
    assert (out / "index.html").is_file() and (out / "coverage.html").is_file()
    assert sorted(p.name for p in (out / "prs").iterdir()) == ["100.html", "101.html"]
    # Every run page copies the logs its record names; no page lists the passed tests: every
    # test of a run is in its JSON beside it, packed against a test set the runs share.
    run_pages = list((out / "runs").glob("*/*.html"))
    assert len(run_pages) == report.run_pages_written == 60
    assert not list(out.rglob("*.passed.html"))
    lists = list((out / "runs").glob("*/*.tests.json.gz"))
    assert {p.with_name(p.name.replace(".tests.json.gz", ".html")) for p in lists} <= set(run_pages)
    assert len(lists) > 40
    testsets = list((out / "api" / "testsets").glob("*.json.gz"))
    assert 0 < len(testsets) < len(lists)
    some = out / "runs" / "gaudi"
    assert len(list(some.glob("*.integration.log.txt"))) == 14


def test_latest_api_matches_the_records(history):
    data, out, _ = history
    latest = json.loads((out / "api" / "latest.json").read_text())
    by_name = {b["name"]: b for b in latest["backends"]}
    assert set(by_name) == set(SCENARIOS)
    last_night = {name: synthetic.build_record(sc, 13) for name, sc in SCENARIOS.items()}
    for name, record in last_night.items():
        entry = by_name[name]
        assert entry["status"] == record.status.value
        assert entry["run_id"] == record.run_id
        assert entry["torch"]["git_version"] == record.torch.git_version
        assert entry["stages"] == {s.name: s.status.value for s in record.stages}
        assert (out / entry["page"]).is_file() and (out / entry["badge"]).is_file() and (out / entry["api"]).is_file()
    # ascend crashes at autoload from night 9: its last green night is 8.
    assert by_name["ascend"]["last_green"]["torch_git"] == synthetic.torch_commit(8)
    assert by_name["openreg"]["last_green"]["run_id"] == last_night["openreg"].run_id


def test_culprit_range_is_last_green_to_first_red(history):
    _, out, _ = history
    ascend = api(out, "ascend")
    culprit = ascend["culprit"]
    assert culprit["last_green"]["torch_git"] == synthetic.torch_commit(8)
    assert culprit["first_red"]["torch_git"] == synthetic.torch_commit(9)
    assert culprit["red_runs"] == 5
    assert culprit["compare_url"] == (f"https://github.com/pytorch/pytorch/compare/"
                                      f"{synthetic.torch_commit(8)}...{synthetic.torch_commit(9)}")
    page = (out / "backends" / "ascend.html").read_text()
    assert culprit["compare_url"] in page and "libhccl.so" in page
    assert api(out, "gaudi")["culprit"] is None  # red nights 5-7, green again since 8
    assert ascend["reproduce"] == "ootci run ascend --torch nightly"


def test_flaky_tests_are_counted_from_the_records(history):
    data, out, _ = history
    test = synthetic.op_test_id("npu", "softmax", "float16")
    outcomes = []
    for path in sorted((data / "ascend").glob("*/record.json")):
        record = record_files.read(path)
        if record.trigger == "pr":
            continue
        outcomes += [t.outcome for t in record.tests if t.id == test]
    flaky = {f["test"]: f for f in api(out, "ascend")["flaky"]}
    assert test in flaky
    assert flaky[test]["flaky_runs"] == outcomes.count(Outcome.flaky) > 0
    assert flaky[test]["failed_runs"] == outcomes.count(Outcome.failed)
    assert flaky[test]["seen"] == len(outcomes)
    assert api(out, "gaudi")["flaky"] == []  # one red stretch is a regression, not a flake


def test_expected_failures_and_pr_pages(history):
    _, out, _ = history
    xfail = api(out, "openreg")["expected_failures"]
    assert xfail == [{"test": synthetic.op_test_id("openreg", "topk", "bfloat16"), "outcome": "xfailed",
                      "reason": "expected failure: topk is not implemented for bfloat16"}]
    assert "topk is not implemented for bfloat16" in (out / "backends" / "openreg.html").read_text()
    pr = (out / "prs" / "100.html").read_text()
    assert "ascend" in pr and "openreg" in pr and "gaudi" not in pr
    runs = api(out, "ascend")["runs"]
    assert sorted(r["pr"] for r in runs if r["trigger"] == "pr") == [100, 101]
    assert {r["pr"]: r["pr_head_sha"] for r in runs if r["trigger"] == "pr"} == {
        100: synthetic.pr_head(100), 101: synthetic.pr_head(101)}
    assert {r["pr_head_sha"] for r in runs if r["trigger"] == "nightly"} == {None}


# --- PR pages: runs by head commit, new failures against the backend's nightly ----------

TEST_A, TEST_B = synthetic.smoke_ids()[:2]
HEAD_1, HEAD_2 = synthetic.pr_head(7, 0), synthetic.pr_head(7, 1)


def run_at(name: str, day: int, hour: int, *, pr: int | None = None, head: str | None = None,
           outcomes: dict[str, Outcome] | None = None) -> RunRecord:
    """A nightly (or, with pr, a PR run) of a scenario's backend that started at hour:00 of day."""
    record = synthetic.build_record(SCENARIOS[name], day, trigger="pr" if pr else "nightly", pr=pr,
                                    pr_head_sha=head)
    record.started_at = synthetic.EPOCH.replace(hour=0) + dt.timedelta(days=day, hours=hour)
    record.finished_at = record.started_at + dt.timedelta(minutes=30)
    record.run_id = f"{name}-{record.trigger}-d{day}h{hour:02d}" + (f"-pr{pr}" if pr else "")
    for t in record.tests:
        if t.id in (outcomes or {}):
            t.outcome = outcomes[t.id]
    return record


def write_runs(data: Path, *records: RunRecord) -> None:
    for record in records:
        synthetic.write_record(data, record)


def head_sections(page: str) -> dict[str, str]:
    """The PR page's sections by their id (head-<sha> or head-unknown), in page order."""
    parts = page.split('<section class="box pr-head" id="')[1:]
    return {part.split('"', 1)[0]: part.split("</section>", 1)[0] for part in parts}


def test_pr_page_lists_failures_that_are_new_against_the_nightly(tmp_path):
    data, out = tmp_path / "runs", tmp_path / "site"
    failed = Outcome.failed
    write_runs(
        data,
        # The nightly before the PR run: A passed, B failed. The ones around it must not count.
        run_at("openreg", 2, 2, outcomes={TEST_A: failed}),
        run_at("openreg", 3, 2, outcomes={TEST_B: failed}),
        run_at("openreg", 4, 2, outcomes={TEST_A: failed}),
        # The PR fails both (B as an error): only A is new.
        run_at("openreg", 3, 12, pr=7, head=HEAD_1, outcomes={TEST_A: failed, TEST_B: Outcome.error}),
        # gaudi has no nightly at all.
        run_at("gaudi", 3, 13, pr=7, head=HEAD_1, outcomes={TEST_A: failed}),
    )
    build(data, out)
    page = (out / "prs" / "7.html").read_text()
    sections = head_sections(page)
    assert list(sections) == [f"head-{HEAD_1}"]
    head = sections[f"head-{HEAD_1}"]
    assert f'href="https://github.com/pytorch/pytorch/commit/{HEAD_1}"' in head
    assert 'href="https://github.com/pytorch/pytorch/pull/7"' in head
    assert f"<code>{HEAD_1}</code>" in head

    vs = head.split('<ul class="vs-nightly">', 1)[1]
    openreg = vs.split("<b>openreg</b>", 1)[1]
    assert openreg.startswith(' <span class="muted">2026-01-04 12:00 UTC</span>:')
    assert '<span class="count">1</span> new against the <a href="../runs/openreg/openreg-nightly-d3h02.html">' \
        in openreg
    assert TEST_A in openreg.split("</li>\n</ul>", 1)[0] and TEST_B not in page
    gaudi = vs.split("<b>gaudi</b>", 1)[1].split("</li>", 1)[0]
    assert "no nightly of this backend to compare with" in gaudi and TEST_A not in gaudi

    runs = {r["run_id"]: r for r in api(out, "openreg")["runs"]}
    assert runs["openreg-pr-d3h12-pr7"]["pr_head_sha"] == HEAD_1
    assert runs["openreg-nightly-d3h02"]["pr_head_sha"] is None


def test_pr_page_groups_runs_by_head(tmp_path):
    data, out = tmp_path / "runs", tmp_path / "site"
    failed = Outcome.failed
    write_runs(
        data,
        run_at("openreg", 3, 2),
        # A record from before ootci kept the head commit.
        run_at("openreg", 3, 8, pr=7, outcomes={TEST_B: failed}),
        run_at("openreg", 3, 10, pr=7, head=HEAD_1, outcomes={TEST_A: failed}),
        run_at("ascend", 3, 11, pr=7, head=HEAD_1),
        # The PR was pushed again: HEAD_2 ran twice on openreg (a re-run), and it fixed A.
        run_at("openreg", 3, 14, pr=7, head=HEAD_2, outcomes={TEST_B: failed}),
        run_at("openreg", 3, 16, pr=7, head=HEAD_2),
    )
    build(data, out)
    page = (out / "prs" / "7.html").read_text()
    sections = head_sections(page)
    assert list(sections) == [f"head-{HEAD_2}", f"head-{HEAD_1}", "head-unknown"]  # newest first

    latest = sections[f"head-{HEAD_2}"]
    assert '<span class="tag">latest tested</span>' in latest
    rows = latest.split("<tbody>", 1)[1].split("</tbody>", 1)[0].split("<tr ")[1:]
    assert [r.split(">", 1)[0] for r in rows] == ['data-status="passed" class="latest"',
                                                  'data-status="passed" class="earlier"']
    assert "openreg-pr-d3h16-pr7.html" in rows[0] and "openreg-pr-d3h14-pr7.html" in rows[1]
    assert '<span class="tag">earlier run</span>' in rows[1] and "earlier run" not in rows[0]
    assert latest.count(f"{TEST_B}</span>") == 1  # new in the re-run's predecessor only
    assert "no new failures against the" in latest

    first = sections[f"head-{HEAD_1}"]
    assert "latest tested" not in first and f"/commit/{HEAD_1}" in first
    assert first.count('class="latest"') == 2 and "ascend" in first and TEST_A in first

    unknown = sections["head-unknown"]
    assert "<h2>Head unknown</h2>" in unknown and "/commit/" not in unknown
    assert "openreg-pr-d3h08-pr7.html" in unknown and TEST_B in unknown
    assert page.count("/commit/") == 2


def test_pr_page_follows_the_nightlies_it_compares_with(tmp_path):
    """A nightly recorded after the PR run it precedes, and a nightly page leaving the site,
    rewrite the PR page; a nightly that started after the PR run leaves it alone."""
    data, out = tmp_path / "runs", tmp_path / "site"
    failed = Outcome.failed
    write_runs(data, run_at("openreg", 3, 12, pr=7, head=HEAD_1, outcomes={TEST_A: failed, TEST_B: failed}))
    build(data, out, run_pages=1)
    pr_page = out / "prs" / "7.html"
    assert "no nightly of this backend to compare with" in pr_page.read_text()

    write_runs(data, run_at("openreg", 3, 2, outcomes={TEST_B: failed}))
    report = build(data, out, run_pages=1)
    assert not report.full
    page = pr_page.read_text()
    assert '<span class="count">1</span> new against the <a href="../runs/openreg/openreg-nightly-d3h02.html">' \
        in page and TEST_A in page and TEST_B not in page

    # The next night starts after the PR run: not compared with. It takes the one run page
    # kept, so the PR page no longer links the nightly's page but the backend's history.
    write_runs(data, run_at("openreg", 4, 2, outcomes={TEST_A: failed}))
    build(data, out, run_pages=1)
    assert not (out / "runs" / "openreg" / "openreg-nightly-d3h02.html").exists()
    page = pr_page.read_text()
    assert "openreg-nightly-d3h02.html" not in page
    assert 'new against the nightly of 2026-01-04 02:00 UTC (<a href="../backends/openreg.html">history</a>)' in page
    assert TEST_A in page and TEST_B not in page

    inode = pr_page.stat().st_ino
    write_runs(data, run_at("openreg", 5, 2))
    build(data, out, run_pages=1)
    assert pr_page.stat().st_ino == inode


def test_an_index_without_pr_head_sha_is_rebuilt(tmp_path):
    data, out = tmp_path / "runs", tmp_path / "site"
    write_runs(data, run_at("openreg", 3, 2), run_at("openreg", 3, 12, pr=7, head=HEAD_1))
    build(data, out)
    # The index as the previous dashboard version left it: no pr_head_sha column.
    db = sqlite3.connect(tmp_path / "site.state" / "index.sqlite")
    db.execute("ALTER TABLE runs DROP COLUMN pr_head_sha")
    db.execute("UPDATE meta SET value='4' WHERE key='index_version'")
    db.commit()
    db.close()
    report = build(data, out)
    assert report.full and report.parsed == 2 and report.warnings == []
    assert f"/commit/{HEAD_1}" in (out / "prs" / "7.html").read_text()
    assert [r["pr_head_sha"] for r in api(out, "openreg")["runs"]] == [HEAD_1, None]


def test_op_coverage_lists_ops_per_backend(history):
    _, out, _ = history
    page = (out / "coverage.html").read_text()
    for op in synthetic.OPS:
        assert f'<th class="name">{op}</th>' in page
    # ascend's latest runs crash before the suites: coverage falls back to its last run with ops.
    assert 'href="backends/ascend.html">ascend</a><br><span class="stale">2026-01-09' in page


def test_new_failures_then_fixed_incrementally(tmp_path):
    data, out = tmp_path / "runs", tmp_path / "site"
    write_nights(data, "gaudi", range(0, 6))  # night 5 is the first red one
    write_nights(data, "openreg", range(0, 6))
    first = build(data, out)
    broken = sorted(SCENARIOS["gaudi"].broken_tests)
    gaudi = api(out, "gaudi")
    assert [f["test"] for f in gaudi["new_failures"]] == broken
    assert gaudi["culprit"]["first_red"]["torch_git"] == synthetic.torch_commit(5)
    assert first.full

    openreg_page = out / "backends" / "openreg.html"
    openreg_run = next((out / "runs" / "openreg").glob("*.html"))
    before = {p: p.stat().st_ino for p in (openreg_page, openreg_run)}

    write_nights(data, "gaudi", range(6, 9))  # night 8 is green again
    second = build(data, out)
    assert not second.full and second.parsed == 3 and second.backend_pages == 1
    assert second.run_pages_written == 3
    gaudi = api(out, "gaudi")
    assert [f["test"] for f in gaudi["newly_fixed"]] == broken
    assert gaudi["new_failures"] == [] and gaudi["culprit"] is None
    # Pages of the untouched backend are the very same files, not re-rendered copies.
    assert {p: p.stat().st_ino for p in before} == before

    third = build(data, out)
    assert third.parsed == 0 and third.backend_pages == 0 and third.run_pages_written == 0


def run_pages(directory: Path) -> set[str]:
    """Run ids with a page in directory; a run's JSON of its tests goes and comes with it, and the
    test sets they are packed against go when no page refers to them."""
    pages = {p.name.removesuffix(".html") for p in directory.glob("*.html")}
    lists = {p.name.removesuffix(".tests.json.gz") for p in directory.glob("*.tests.json.gz")}
    assert lists and lists <= pages, (lists, pages)
    site = directory.parents[1]
    used = {packed_tests.loads((directory / f"{run}.tests.json.gz").read_bytes())["testset"] for run in lists}
    testsets = {p.name.removesuffix(".json.gz") for p in (site / "api" / "testsets").glob("*.json.gz")}
    if len(list((site / "runs").iterdir())) == 1:  # one backend: its pages are all that use the sets
        assert testsets == used, (testsets, used)
    return pages


def test_run_page_retention_keeps_the_culprit_pair(tmp_path):
    data, out = tmp_path / "runs", tmp_path / "site"
    records = write_nights(data, "ascend", range(0, 14))
    build(data, out, run_pages=3)
    kept = run_pages(out / "runs" / "ascend")
    expected = {r.run_id for r in records[-3:]} | {records[8].run_id, records[9].run_id}
    assert kept == expected
    links = [r["page"] for r in api(out, "ascend")["runs"] if r["page"]]
    assert len(links) == 5 and all((out / link).is_file() for link in links)

    more = write_nights(data, "ascend", range(14, 16))
    report = build(data, out, run_pages=3)
    kept = run_pages(out / "runs" / "ascend")
    assert kept == {r.run_id for r in (records + more)[-3:]} | {records[8].run_id, records[9].run_id}
    assert report.run_pages_deleted == 2 and report.run_pages_written == 2


def test_removed_record_leaves_the_site(tmp_path):
    data, out = tmp_path / "runs", tmp_path / "site"
    records = write_nights(data, "openreg", range(0, 3))
    build(data, out)
    gone = data / "openreg" / records[-1].run_id
    for path in sorted(gone.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    gone.rmdir()
    report = build(data, out)
    assert report.removed == 1
    assert not list((out / "runs" / "openreg").glob(f"{records[-1].run_id}*"))
    assert api(out, "openreg")["run_id"] == records[-2].run_id


def test_bad_records_are_skipped_with_file_and_field(tmp_path):
    data, out = tmp_path / "runs", tmp_path / "site"
    good = write_nights(data, "openreg", range(0, 2))
    truncated = data / "broken" / "truncated" / "record.json"
    truncated.parent.mkdir(parents=True)
    truncated.write_text(good[0].model_dump_json()[:500])
    invalid = data / "broken" / "invalid" / "record.json"
    invalid.parent.mkdir(parents=True)
    doc = json.loads(good[1].model_dump_json())
    doc["tests"][3]["outcome"] = "exploded"
    invalid.write_text(json.dumps(doc))
    missing = data / "broken" / "missing" / "record.json"
    missing.parent.mkdir(parents=True)
    doc = json.loads(good[1].model_dump_json())
    del doc["torch"]
    missing.write_text(json.dumps(doc))

    report = build(data, out)
    lines = "\n".join(report.warnings)
    assert len(report.skipped) == 3
    assert f"{truncated}: not valid JSON" in lines
    assert f"{invalid}: field tests.3.outcome" in lines and "exploded" in lines
    assert f"{missing}: field torch: Field required" in lines
    assert api(out, "openreg")["run_id"] == good[1].run_id
    assert "3 records skipped" in (out / "index.html").read_text()

    # Through the CLI: still exit 0, one warning line per record, no traceback.
    proc = subprocess.run([sys.executable, "-m", "ootci.runner", "dashboard", "build", "--data", str(data),
                           "--out", str(tmp_path / "site2")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("ootci: warning: skipped ") == 3 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("jobs", [1, 2], ids=["in-process", "workers"])
def test_tests_json_is_read_only_for_runs_the_site_shows(tmp_path, jobs):
    data, out = tmp_path / "runs", tmp_path / "site"
    nights = write_nights(data, "tenstorrent", range(0, 35))
    dirs = [data / "tenstorrent" / r.run_id for r in nights]
    assert all((d / "tests.json").is_file() and b'"tests": []' in (d / "record.json").read_bytes() for d in dirs)
    # Night 0 is older than the flaky window and the kept run pages, and night 20 has no page
    # and ran the same tests as its neighbours (record.json says so): neither tests.json is opened.
    for old in (dirs[0], dirs[20]):
        (old / "tests.json").write_text("{not json")
    bad_outcome = json.loads((dirs[34] / "tests.json").read_text())
    bad_outcome["tests"][3]["outcome"] = "exploded"
    (dirs[34] / "tests.json").write_text(json.dumps(bad_outcome))
    # A tests.json copied from another run is refused, not shown under the wrong run.
    (dirs[33] / "tests.json").write_bytes((dirs[32] / "tests.json").read_bytes())

    report = build(data, out, run_pages=10, jobs=jobs)
    lines = "\n".join(report.warnings)
    assert report.skipped == [] and len(report.warnings) == 2, lines
    assert f"{dirs[34] / 'tests.json'}: field tests.3.outcome" in lines and "exploded" in lines
    assert f"{dirs[33] / 'tests.json'}: field run_id: belongs to run {nights[32].run_id!r}" in lines
    page = (out / "runs" / "tenstorrent" / f"{nights[34].run_id}.html").read_text()
    assert "The test results could not be read" in page and "exploded" in page
    # Every run keeps its counts and status from record.json alone, night 0 included.
    runs = {r["run_id"]: r for r in api(out, "tenstorrent")["runs"]}
    for record in (nights[0], nights[34]):
        counts: dict[str, int] = {}
        for t in record.tests:
            counts[t.outcome.value] = counts.get(t.outcome.value, 0) + 1
        assert runs[record.run_id]["tests"] == counts and runs[record.run_id]["status"] == record.status.value
    good = (out / "runs" / "tenstorrent" / f"{nights[32].run_id}.html").read_text()
    assert f'<span class="count">{len(nights[32].tests)}</span>' in good
    # The flaky analysis looked at all 30 recent nights, night 20 included, by its fingerprint.
    assert [f["seen"] for f in api(out, "tenstorrent")["flaky"]] == [30]

    # Without the fingerprint, night 20's tests must be read to know what ran: now it warns.
    header = json.loads((dirs[20] / "record.json").read_text())
    del header["test_ids_hash"]
    (dirs[20] / "record.json").write_text(json.dumps(header))
    report = build(data, out, run_pages=10, jobs=jobs)
    assert [w for w in report.warnings if str(dirs[20]) in w] == [
        f"tests not read: {dirs[20] / 'tests.json'}: not valid JSON (truncated?): "
        "key must be a string at line 1 column 2"]


def test_records_with_inline_tests_still_build(tmp_path):
    """Records written before tests.json existed carry their tests in record.json."""
    data, out = tmp_path / "runs", tmp_path / "site"
    split = write_nights(data / "split", "gaudi", range(0, 8))
    inline = write_nights(data / "inline", "gaudi", range(0, 8))
    for record in inline:
        run_dir = data / "inline" / "gaudi" / record.run_id
        (run_dir / "tests.json").unlink()
        (run_dir / "record.json").write_text(record.model_dump_json())
    build(data / "split", out / "split")
    build(data / "inline", out / "inline")
    assert api(out / "split", "gaudi") | {"generated_at": 0} == api(out / "inline", "gaudi") | {"generated_at": 0}
    for record in split:
        pages = [(out / kind / "runs" / "gaudi" / f"{record.run_id}.html").read_text() for kind in ("split", "inline")]
        # All but the footer, which says the minute each build ran: the two builds straddled a
        # minute about once in 40 runs on a loaded machine.
        bodies = [page.split("<footer>")[0] for page in pages]
        assert "<tbody>" in bodies[0] and bodies[0] == bodies[1]


def test_test_row_matches_test_result():
    """The dashboard validates tests.json as TestRow dicts: the same fields as TestResult."""
    from typing import get_type_hints

    from ootci.dashboard.records import TestRow
    from ootci.runner.models import TestResult

    fields = TestResult.model_fields
    assert set(get_type_hints(TestRow)) == set(fields)
    assert TestRow.__required_keys__ == {name for name, f in fields.items() if f.is_required()}


def test_failed_build_leaves_old_site_and_index(tmp_path, monkeypatch):
    data, out = tmp_path / "runs", tmp_path / "site"
    write_nights(data, "openreg", range(0, 3))
    build(data, out)
    snapshot = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    write_nights(data, "openreg", range(3, 4))

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(render, "badge", disk_full)
    with pytest.raises(OSError):
        build(data, out)
    monkeypatch.undo()
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == snapshot
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs", "site", "site.state"]
    # The index did not keep the failed build's work: the new night is parsed again.
    report = build(data, out)
    assert report.parsed == 1
    assert api(out, "openreg")["run_id"] == synthetic.build_record(SCENARIOS["openreg"], 3).run_id


def test_log_paths_cannot_leave_the_record_directory(tmp_path):
    data, out = tmp_path / "runs", tmp_path / "site"
    record = synthetic.build_record(SCENARIOS["openreg"], 0)
    path = synthetic.write_record(data, record)
    (path.parent.parent / "secret.txt").write_text("not for the site\n")
    record.stages[0].log = "../secret.txt"
    path.write_text(record.model_dump_json())
    build(data, out)
    base = out / "runs" / "openreg" / record.run_id
    assert not Path(f"{base}.torch.log.txt").exists()
    assert "log missing" in Path(f"{base}.html").read_text()
    assert Path(f"{base}.build.log.txt").is_file()
    assert not any(b"not for the site" in (gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes())
                   for p in out.rglob("*") if p.is_file())


def test_unsafe_names_become_safe_paths(tmp_path):
    data, out = tmp_path / "runs", tmp_path / "site"
    record = synthetic.build_record(SCENARIOS["openreg"], 0)
    record.backend = "../../evil backend"
    record.run_id = "../x"
    path = data / "odd" / "record.json"
    path.parent.mkdir(parents=True)
    path.write_text(record.model_dump_json())
    build(data, out)
    assert (out / "backends" / f"{safe_name(record.backend)}.html").is_file()
    assert all(out in p.resolve().parents for p in out.rglob("*"))
    assert not (tmp_path / "evil backend.html").exists()


def test_cli_reports_usage_errors_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ootci.runner", "dashboard", "build", "--data", str(tmp_path),
                           "--out", str(tmp_path / "site"), "--run-pages", "lots"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "ootci: --run-pages: expected a number or 'all', got 'lots'"
    proc = subprocess.run([sys.executable, "-m", "ootci.runner", "dashboard", "build", "--data", str(tmp_path / "nope"),
                           "--out", str(tmp_path / "site")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == f"ootci: --data {tmp_path / 'nope'}: no such directory"


def test_dashboard_never_imports_torch(tmp_path):
    data = tmp_path / "runs"
    write_nights(data, "openreg", range(0, 2))
    code = ("import sys; sys.modules['torch'] = None\n"  # any `import torch` now raises ImportError
            "from ootci.runner.cli import main\n"
            f"raise SystemExit(main(['dashboard', 'build', '--data', {str(data)!r}, "
            f"'--out', {str(tmp_path / 's')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert proc.returncode == 0, proc.stderr


def test_background_cleanup_removes_the_replaced_site(tmp_path):
    data, out = tmp_path / "runs", tmp_path / "site"
    write_nights(data, "openreg", range(0, 2))
    build(data, out)
    write_nights(data, "openreg", range(2, 3))
    build(data, out, background_cleanup=True)
    assert api(out, "openreg")["run_id"] == synthetic.build_record(SCENARIOS["openreg"], 2).run_id
    deadline = time.monotonic() + 60
    while any(p.name.startswith(".site.old-") for p in tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs", "site", "site.state"]


def test_changed_record_replaces_its_page(tmp_path):
    data, out = tmp_path / "runs", tmp_path / "site"
    record = write_nights(data, "openreg", [0])[0]
    build(data, out)
    base = out / "runs" / "openreg" / record.run_id
    assert Path(f"{base}.integration.log.txt").is_file()

    record.status = record.status.failed
    for stage in record.stages[4:]:
        stage.log = None
    (data / "openreg" / record.run_id / "record.json").write_text(record.model_dump_json())
    report = build(data, out)
    assert report.parsed == 1 and report.removed == 0 and report.run_pages_written == 1
    assert not Path(f"{base}.integration.log.txt").exists()  # the new record names no such log
    assert Path(f"{base}.build.log.txt").is_file()
    assert api(out, "openreg")["status"] == "failed"


def test_records_of_a_real_ootci_run(tmp_path):
    """`ootci run` against an interpreter without torch writes a real failing record."""
    from ootci.runner.manifests import registry

    name = registry.load_all()[0].name
    runs, out = tmp_path / "runs", tmp_path / "site"
    run = subprocess.run([sys.executable, "-m", "ootci.runner", "run", name, "--torch", "installed",
                          "--python", sys.executable, "--out", str(runs)],
                         capture_output=True, text=True, timeout=300)
    assert list(runs.glob("*/record.json")), run.stdout + run.stderr
    proc = subprocess.run([sys.executable, "-m", "ootci.runner", "dashboard", "build", "--data", str(runs),
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    latest = json.loads((out / "api" / "latest.json").read_text())["backends"]
    assert [b["name"] for b in latest] == [name] and latest[0]["status"] == "failed"
    assert latest[0]["stages"]["torch"] == "failed"
    page = (out / latest[0]["run_page"]).read_text()
    assert "cannot import torch" in page


# --- runs that left no record (`ootci history fill-missing`) ------------------------------

WHY = "it never started, was cancelled, lost its runner or failed before ootci ran (backend jobs: failure)"


def test_a_backend_whose_job_left_no_record_stays_on_the_page_as_missing(tmp_path):
    """A nightly whose matrix had openreg and gaudi-hpu: openreg's job wrote its record, gaudi-hpu's
    failed at setup and wrote none; publish's fill-missing recorded it as missing."""
    from ootci.runner.history import missing_runs

    data, out = tmp_path / "runs", tmp_path / "site"
    write_nights(data, "openreg", range(3))
    matrix = [{"name": "openreg", "torch": "nightly"}, {"name": "gaudi-hpu", "torch": "nightly"}]
    [missing], unreadable = missing_runs.fill_missing(matrix, data, WHY, trigger="nightly")
    assert missing.backend == "gaudi-hpu" and unreadable == 0
    reason = f"no record from the backend job: {WHY}"

    report = build(data, out)

    assert report.skipped == [] and report.warnings == []
    index = (out / "index.html").read_text()
    rows = {row.split('href="backends/', 1)[1].split(".html", 1)[0]: row
            for row in index.split('<tr data-status="')[1:]}
    assert set(rows) == {"openreg", "gaudi-hpu"}, "a backend never disappears from the page"
    assert rows["openreg"].startswith('passed"')
    assert rows["gaudi-hpu"].startswith('missing"') and "s-missing" in rows["gaudi-hpu"]
    assert "missing" in rows["gaudi-hpu"] and reason in rows["gaudi-hpu"]
    # The backend page says so, with the reason, and links the run page, which says so too.
    page = (out / "backends" / "gaudi-hpu.html").read_text()
    assert '<span class="pill s-missing">missing</span>' in page
    assert 'id="missing"' in page and reason in page
    entry = {b["name"]: b for b in json.loads((out / "api" / "latest.json").read_text())["backends"]}["gaudi-hpu"]
    assert (entry["status"], entry["device"], entry["missing_reason"]) == ("missing", "hpu", reason)
    assert entry["stages"] == {"job": "missing"} and entry["last_green"] is None
    run_page = (out / entry["run_page"]).read_text()
    assert missing.run_id in run_page and '<span class="pill s-missing">missing</span>' in run_page
    assert reason in run_page
    badge = (out / "badges" / "gaudi-hpu.svg").read_text()
    assert "gaudi-hpu: missing" in badge and render.COLOURS["missing"] in badge
    assert api(out, "openreg")["status"] == "passed"


def test_a_missing_night_neither_starts_nor_ends_a_red_stretch(tmp_path):
    """tenstorrent: green until night 9, red from night 10; night 12 left no record. The culprit
    range, the new failures and the nightly a PR run compares with come from the runs that have
    results; the latest run shown is the missing one."""
    from ootci.runner.history import missing_runs
    from ootci.runner.manifests import registry

    data, out = tmp_path / "runs", tmp_path / "site"
    write_nights(data, "tenstorrent", range(8, 12))
    night = synthetic.EPOCH + dt.timedelta(days=12, hours=3)
    missing = missing_runs.missing_record(registry.resolve("openreg"), "nightly", WHY, trigger="nightly", pr=None,
                                     now=night).model_copy(update={"backend": "tenstorrent", "device": "tt",
                                                                   "run_id": "tenstorrent-missing-night-12"})
    record_files.write(data / missing.run_id, missing)
    write_runs(data, run_at("tenstorrent", 13, 1, pr=7, head=HEAD_1))

    build(data, out)

    tt = api(out, "tenstorrent")
    assert tt["status"] == "missing" and tt["run_id"] == missing.run_id
    assert tt["culprit"]["last_green"]["torch_git"] == synthetic.torch_commit(9)
    assert tt["culprit"]["first_red"]["torch_git"] == synthetic.torch_commit(10)
    assert tt["culprit"]["red_runs"] == 2
    assert tt["last_green"]["torch_git"] == synthetic.torch_commit(9)
    assert tt["new_failures"] == [] and tt["newly_fixed"] == []  # night 11 against night 10, not against nothing
    page = (out / "backends" / "tenstorrent.html").read_text()
    assert 'id="missing"' in page and 'id="culprit"' in page
    assert page.count('<tr data-status="missing">') == 1  # its row in the history grid
    # The PR run compares with night 11, the last nightly with results, not with the missing one.
    pr_page = (out / "prs" / "7.html").read_text()
    assert "(missing)" not in pr_page and "nothing to compare with" not in pr_page
    assert f"<code>{synthetic.torch_commit(11)[:12]}</code>" in pr_page


def test_run_page_says_what_is_new_what_is_known_and_what_is_fixed(tmp_path):
    """Against the backend's known failures: new failures make the run red, known ones (xfailed)
    do not, fixed ones are good news. The backend's history counts only the new ones."""
    data, out = tmp_path / "runs", tmp_path / "site"
    base = run_at("openreg", 0, 4)
    ids = sorted(t.id for t in base.tests if t.outcome is Outcome.passed)
    known = run_at("openreg", 1, 4, outcomes={ids[0]: Outcome.xfailed, ids[1]: Outcome.xfailed})
    later = run_at("openreg", 2, 4, outcomes={ids[0]: Outcome.xfailed, ids[1]: Outcome.fixed, ids[2]: Outcome.failed})
    write_runs(data, base, known, later)
    build(data, out)
    page = (out / "runs" / "openreg" / f"{safe_name(later.run_id)}.html").read_text()
    news = page.split('<section class="box" id="news">', 1)[1].split("</section>", 1)[0]
    xfailed = sum(t.outcome is Outcome.xfailed for t in later.tests)  # the scenario's own, and ids[0]
    assert "new failures 1" in news and f"still failing, known {xfailed}" in news and "fixed 1" in news
    assert ids[2] in news.split("<h3>Fixed")[0] and ids[1] in news.split("<h3>Fixed")[1]
    assert ids[0] not in news  # a known failure that failed again is no news
    # The backend page's new failures: only the test that is not a known failure.
    assert [f["test"] for f in api(out, "openreg")["new_failures"]] == [ids[2]]
    known_page = (out / "runs" / "openreg" / f"{safe_name(known.run_id)}.html").read_text()
    assert "new failures 0" in known_page and f"still failing, known {xfailed + 1}" in known_page


def test_a_run_page_says_which_backend_commit_ran_and_whether_its_tree_was_dirty(tmp_path):
    """Issue 43: the page could not say which backend commit ran. The build stage records it (a git
    source's, or the HEAD of the work tree a path source is in) and whether the tree was dirty."""
    data, out = tmp_path / "runs", tmp_path / "site"
    clean, dirty, unknown = write_nights(data, "gaudi", range(0, 3))
    for record, built in ((clean, {"commit": "a" * 40, "dirty": False}), (dirty, {"commit": "b" * 40, "dirty": True}),
                          (unknown, {})):
        record.stage("build").data.update(built)
        synthetic.write_record(data, record)
    build(data, out, run_pages=None)
    page = {r.run_id: (out / "runs" / "gaudi" / f"{r.run_id}.html").read_text() for r in (clean, dirty, unknown)}
    assert f"commit <code>{'a' * 40}</code></dd>" in page[clean.run_id]
    assert f"commit <code>{'b' * 40}</code> <span class=\"bad\">with uncommitted changes</span>" in page[dirty.run_id]
    [backend_line] = [line for line in page[unknown.run_id].splitlines() if line.startswith("<dt>Backend</dt>")]
    assert "commit" not in backend_line and "gaudi" in backend_line


def test_a_run_of_100000_tests_keeps_its_page_under_1_mb(tmp_path):
    """100,000 tests, 5,000 of them failing with the longest message and log tail the runner keeps:
    the page lists the failures until it holds PAGE_ROWS_BYTES of them, says how many more there
    are, and lists no passed test; every test is in the run's JSON, in bytes a fraction of a page."""
    data, out = tmp_path / "runs", tmp_path / "site"
    record = synthetic.build_record(SCENARIOS["openreg"], 0)
    record.tests = [Result(id=f"test_ops.py::TestCommon::test_compare_cpu_op{i // 4:05d}_openreg_"
                                  f"{('float32', 'float64', 'int64', 'int32')[i % 4]}", suite="upstream",
                               outcome=Outcome.failed if i % 20 == 0 else Outcome.passed, duration_s=(i % 89) / 1000,
                               message=f"AssertionError: {i} " + "m" * 990 if i % 20 == 0 else "",
                               log_tail=f"Traceback {i}\n" + "t" * 3980 if i % 20 == 0 else "")
                    for i in range(100_000)]
    synthetic.write_record(data, record)
    build(data, out)
    page = out / "runs" / "openreg" / f"{record.run_id}.html"
    html = page.read_text()
    assert page.stat().st_size < 1_000_000
    shown = html.count('<tr data-outcome="failed">')
    assert 0 < shown < 5000 and html.count('data-outcome="passed"') == 0
    assert f"… and {5000 - shown} more that did not pass" in html
    assert f"The first {shown} of the 5000 tests that did not pass are listed here" in html
    listed = out / "runs" / "openreg" / f"{record.run_id}.tests.json.gz"
    assert f'href="{listed.name}"' in html
    results = packed_tests.loads(listed.read_bytes())
    testset = out / "api" / "testsets" / f"{results['testset']}.json.gz"
    tests = packed_tests.unpack_rows(packed_tests.loads(testset.read_bytes()), results)
    assert len(tests) == 100_000 and sum(t["outcome"] == "failed" for t in tests) == 5000
    assert listed.stat().st_size + testset.stat().st_size < 2_000_000
    assert max(p.stat().st_size for p in out.rglob("*.html")) == page.stat().st_size


def test_op_coverage_at_a_vendors_size_is_cut_into_pages_of_whole_rows_under_the_limit():
    """Issue 51: ops x backends outgrows any one page (700 OpInfos x 100 backends); the table is cut
    into pages of whole rows, every op on exactly one page, each page's rows within the limit."""
    backends = [f"vendor{i}" for i in range(100)]
    ops = [f"op{i:03d}" for i in range(700)]
    table = {op: {b: {"ok": ["float32", "bfloat16"], "bad": ["float16"], "skip": []} for b in backends} for op in ops}
    pages = render.coverage_pages(ops, backends, table)
    assert len(pages) > 1
    assert [op for page_ops, _ in pages for op in page_ops] == ops
    assert all(len(rows.encode()) <= render.COVERAGE_PAGE_BYTES for _, rows in pages)
    assert "\n".join(rows for _, rows in pages) == render.coverage_rows(ops, backends, table)
    one = render.coverage_pages(ops[:3], backends[:2], table)
    assert [page_ops for page_ops, _ in one] == [ops[:3]]


def test_a_coverage_table_of_several_pages_links_each_from_every_page_and_a_smaller_one_leaves_none(
        tmp_path, monkeypatch):
    data, out = tmp_path / "runs", tmp_path / "site"
    write_nights(data, "openreg", range(0, 2))
    monkeypatch.setattr(render, "COVERAGE_PAGE_BYTES", 400)  # a few rows a page
    build(data, out)
    extra = sorted((out / "coverage").glob("*.html"))
    assert len(extra) >= 2
    first = (out / "coverage.html").read_text()
    seen = [op for op in synthetic.OPS if f'<th class="name">{op}</th>' in first]
    for page in extra:
        text = page.read_text()
        assert 'href="../coverage.html"' in text and 'href="../assets/style.css"' in text
        assert 'href="../backends/openreg.html"' in text
        seen += [op for op in synthetic.OPS if f'<th class="name">{op}</th>' in text]
    assert sorted(seen) == sorted(synthetic.OPS)  # every op on exactly one page
    assert f'href="coverage/{len(extra) + 1}.html"' in first
    monkeypatch.setattr(render, "COVERAGE_PAGE_BYTES", 10**9)
    write_nights(data, "openreg", range(2, 3))
    build(data, out)
    assert not (out / "coverage").exists() or not list((out / "coverage").glob("*.html"))
