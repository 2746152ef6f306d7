"""The built dashboard in a real Chromium over real HTTP: pages render, every link
resolves, the outcome filter works, and hostile record text stays inert."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

import pytest
from playwright.sync_api import expect

from ootci.dashboard import site, synthetic
from ootci.runner import models
from ootci.runner.records import packed_tests
from ootci.runner.torch_supply.torch_tests import UpstreamTests
from tests.dashboard.upstream_records import night_tests, upstream_stage_of
from tests.support.static_site import CHROMIUM_ARGS, chromium_path, serve

pytestmark = pytest.mark.skipif(chromium_path() is None,
                                reason="chromium not on PATH (scripts/setup.sh installs Debian's chromium)")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "dashboard"
COMPARE = re.compile(r"^https://github\.com/pytorch/pytorch/compare/[0-9a-f]{7,40}\.\.\.[0-9a-f]{7,40}$")
COMMIT = re.compile(r"^https://github\.com/pytorch/pytorch/commit/[0-9a-f]{40}$")
PULL = re.compile(r"^https://github\.com/pytorch/pytorch/pull/[0-9]+$")

LONG = "very long message " * 3000
HOSTILE_ID = 'test_evil.py::test_<script>window.__pwned = 1</script>_"quoted"'
HOSTILE_MSG = '<img src=x onerror="window.__pwned = 2; alert(2)"> Ünïcödé 日本語 ✓ 🔥'
HOSTILE_CAUSE = "<svg onload=alert(3)>boom</svg>"
# An expected failure's message longer than the backend page shows: cut at a word, with an ellipsis.
LONG_REASON = "expected failure: differs from CPU by up to 8 ulp " + "Mismatched elements: 1 / 18 (5.6%) " * 12
# Upstream files from a folder at another commit than the torch's, at a path no page may run.
HOSTILE_TEST_DIR = "/home/<script>window.__pwned = 6</script>/test"
NOT_OWN = "These files are not from the torch's own commit:"


def hostile_record():
    sc = synthetic.default_scenarios()[0]
    record = synthetic.build_record(sc, 20)
    record.backend = "evil<b>end"
    record.run_id = "evil-<i>run</i>"
    record.tests[:0] = [
        models.TestResult(id=HOSTILE_ID, suite="smoke", outcome=models.Outcome.failed, message=HOSTILE_MSG,
                   log_tail="</pre><script>alert(4)</script>"),
        models.TestResult(id="test_long.py::test_" + "x" * 3000, suite="smoke", outcome=models.Outcome.error,
                          message=LONG),
        models.TestResult(id="test_xf.py::test_long_reason", suite="integration", outcome=models.Outcome.xfailed,
                          message=LONG_REASON),
    ]
    smoke = record.stage("smoke")
    # The runner's own words for a suite: its counts (the run page must not show them twice).
    smoke.summary = "smoke: " + ", ".join(f"{n} {o}" for o, n in smoke.counts.items())
    smoke.status = smoke.status.failed
    smoke.root_cause = models.RootCause(kind="exception", summary=HOSTILE_CAUSE, hint="<b>not bold</b>")
    record.status = record.status.failed
    record.torch.git_version = "javascript:alert(5)"
    upstream = night_tests(1)
    record.tests.extend(upstream)
    record.stages.append(upstream_stage_of(upstream, UpstreamTests(
        test_dir=Path(HOSTILE_TEST_DIR), origin="given", commit=synthetic.torch_commit(19), torch_commit=None)))
    return record


def follow(page, link):
    """Click `link` and return once the page it opens (or the anchor it scrolls to) has loaded. A click
    returns as soon as the
    navigation commits: `page.url` already names the new page while its rows may not be parsed
    yet (CI once read 0 rows of 97 on the "passed" page)."""
    target = link.evaluate("a => a.href")  # resolved and encoded as the browser will load it
    link.click()
    page.wait_for_url(lambda url: url == target)  # then waits for the "load" event


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    data = tmp_path_factory.mktemp("runs")
    synthetic.write_history(data, nights=10, prs=1)
    synthetic.write_record(data, hostile_record())
    out = tmp_path_factory.mktemp("site") / "site"
    site.build(data, out, jobs=1, warn=lambda line: None)
    return out


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def base(built):
    with serve(built) as url:
        yield url


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.dialogs = []
    page.errors = []
    page.failed_requests = []  # what the browser asked for and did not get (a favicon.ico, say)
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.on("response", lambda r: r.status >= 400 and page.failed_requests.append((r.status, r.url)))
    yield page
    context.close()


def shot(page, name: str, full_page: bool = False) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full_page)


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_every_link_resolves(page, base):
    """Crawl from index.html through every page; each internal href/src gets a 200."""
    seen_pages, checked, external = set(), {}, set()
    queue = [urljoin(base, "index.html")]
    while queue:
        url = queue.pop()
        if url in seen_pages:
            continue
        seen_pages.add(url)
        response = page.goto(url)
        assert response.status == 200, url
        assert page.errors == [], (url, page.errors)
        assert page.locator("link[rel='icon']").count() == 1, url  # no /favicon.ico asked for (a 404)
        refs = page.eval_on_selector_all(
            "a[href], link[href], img[src], script[src]",
            "els => els.map(e => e.getAttribute('href') || e.getAttribute('src'))")
        for ref in refs:
            target = urldefrag(urljoin(url, ref)).url
            if not target.startswith(base):
                external.add(target)
                continue
            if target not in checked:
                checked[target] = status_of(target)
            assert checked[target] == 200, (url, ref)
            if urlparse(target).path.endswith(".html"):
                queue.append(target)
    kinds = {urlparse(u).path.split("/")[1] for u in seen_pages}
    assert {"index.html", "coverage.html", "backends", "runs", "prs"} <= kinds
    assert any(u.endswith(".log.txt") for u in checked) and any(u.endswith(".svg") for u in checked)
    assert all(COMPARE.match(u) or COMMIT.match(u) or PULL.match(u) for u in external), external
    assert all(any(shape.match(u) for u in external) for shape in (COMPARE, COMMIT, PULL)), external
    assert any(u.endswith("assets/favicon.svg") for u in checked)
    assert page.dialogs == [] and page.failed_requests == []


def test_index_and_backend_pages_render(page, base):
    page.goto(urljoin(base, "index.html"))
    rows = page.locator("#backends tbody tr")
    assert rows.count() == 5
    assert page.locator("#backends tbody tr[data-status='crashed'] th a").first.inner_text() == "ascend"
    # The device is named where it is not the backend's name: "openreg", not "openreg openreg".
    names = page.locator("#backends tbody th.name").all_inner_texts()
    assert "openreg" in names and "ascend npu" in names and "evil<b>end openreg" in names, names
    heads = page.locator("#backends thead th").all_inner_texts()
    assert len(heads) == len(set(h.lower() for h in heads)), heads  # one column headed "torch" (the stage)
    assert page.locator("svg.spark").count() == 5
    # Every run of "Last 30 runs" is a cell as tall as the chart, a red one too (not a 3 px sliver).
    cells = page.evaluate("""() => [...document.querySelectorAll('#backends svg.spark')].map(svg => ({
        height: svg.getBBox().height, runs: [...svg.querySelectorAll('path')].map(p => p.getAttribute('d')),
        tallest: Math.min(...[...svg.querySelectorAll('path')].map(p => p.getBBox().height))}))""")
    for spark in cells:
        assert spark["tallest"] == spark["height"] == 20, spark
        assert sum(d.count("M") for d in spark["runs"]) in (10, 1), spark  # one cell per run
    red = page.locator("#backends tbody tr", has_text="ascend").locator("svg.spark path.f-crashed")
    assert red.bounding_box()["height"] == 20 and red.bounding_box()["width"] >= 5
    cell = page.locator("#backends tbody tr", has_text="gaudi").locator("td.c").nth(5)
    assert cell.get_attribute("title").startswith("integration: ")
    shot(page, "index")

    follow(page, page.get_by_role("link", name="ascend", exact=True))
    assert page.url.endswith("backends/ascend.html")
    assert page.locator("#culprit").is_visible()
    assert page.locator("#culprit a.ext").get_attribute("href") == (
        f"https://github.com/pytorch/pytorch/compare/{synthetic.torch_commit(8)}...{synthetic.torch_commit(9)}")
    assert page.locator("h1").inner_text().startswith("ascend device npu")
    history_heads = page.locator("#history thead th").all_inner_texts()
    assert len(history_heads) == len(set(h.lower() for h in history_heads)), history_heads
    assert page.locator("#history tbody tr").count() == 10
    # The latest run crashed in autoload, so its suites ran no tests: it is no point of the
    # pass-rate chart (at 0 % it would read as a collapse). The other nine are.
    assert page.locator("svg.trend circle").count() == 9
    assert not any("pass rate –" in t for t in page.locator("svg.trend circle title").all_text_contents())
    shot(page, "backend-ascend", full_page=True)

    page.goto(urljoin(base, "backends/openreg.html"))
    assert "device" not in page.locator("h1").inner_text()  # not "openreg device openreg"

    page.goto(urljoin(base, "coverage.html"))
    assert page.locator("#coverage tbody tr").count() == len(synthetic.OPS)
    shot(page, "coverage")


def test_pr_page_shows_the_head_and_each_backend(page, base):
    page.goto(urljoin(base, "index.html"))
    follow(page, page.get_by_role("link", name="#100", exact=True).first)
    assert page.url.endswith("prs/100.html")
    head = page.locator(f"#head-{synthetic.pr_head(100)}")
    assert head.is_visible() and "latest tested" in head.locator("h2").inner_text()
    assert head.get_by_role("link", name=f"commit {synthetic.pr_head(100)}").get_attribute("href") == (
        f"https://github.com/pytorch/pytorch/commit/{synthetic.pr_head(100)}")
    assert head.locator("table.pr-runs tbody tr").count() == 2
    assert head.locator("ul.vs-nightly > li").count() == 2
    follow(page, head.locator("table.pr-runs tbody tr", has_text="ascend").locator("td.num a"))
    assert page.url.endswith(f"#{page.locator('ul.vs-nightly > li', has_text='ascend').get_attribute('id')}")
    shot(page, "pr", full_page=True)


def test_outcome_filter(page, base):
    page.goto(urljoin(base, "backends/gaudi.html"))
    follow(page, page.locator("#history tbody tr[data-status='failed'] th a").first)
    run_url = page.url
    # The tests that did not pass are the page, worst first.
    rows = page.locator("#tests tbody tr")
    total = rows.count()
    failed = page.locator("#tests tbody tr[data-outcome='failed']").count()
    assert total > failed > 0
    outcomes = [row.get_attribute("data-outcome") for row in rows.all()]
    assert "passed" not in outcomes and outcomes == sorted(outcomes, key=["failed", "skipped"].index)
    # filter.js unhides the bar: wait for it (a snapshot raced the script on a loaded machine).
    expect(page.locator("#filters")).to_be_visible()
    assert page.locator("#filters button[data-filter='all']").get_attribute("aria-pressed") == "true"
    assert page.evaluate("document.documentElement.scrollHeight") < 3000

    page.locator("#filters button[data-filter='failed']").click()
    assert page.locator("#tests tbody tr:visible").count() == failed
    assert page.locator("#shown").inner_text() == f"{failed} of {total} tests shown"
    shot(page, "run-filtered-failed")

    page.locator("#filters button[data-filter='all']").click()
    page.fill("#search", "matmul")
    matmul = sum(1 for t in page.locator("#tests tbody tr td:nth-child(2)").all_inner_texts() if "matmul" in t.lower())
    assert 0 < page.locator("#tests tbody tr:visible").count() == matmul < total

    # The passed tests are counted, never listed in HTML: every test of the run is in its JSON,
    # linked from the page and packed against the test set it names.
    passed = int(page.locator("#filters .o-good .n").inner_text())
    assert passed > 0 and page.locator("#tests tbody tr[data-outcome='passed']").count() == 0
    listed = urljoin(run_url, page.locator("#tests-json").get_attribute("href"))
    assert listed == run_url.removesuffix(".html") + ".tests.json.gz"
    with urllib.request.urlopen(listed, timeout=10) as response:
        results = packed_tests.loads(response.read())
    with urllib.request.urlopen(urljoin(base, f"api/testsets/{results['testset']}.json.gz"), timeout=10) as response:
        tests = packed_tests.unpack_rows(packed_tests.loads(response.read()), results)
    assert sum(1 for t in tests if t["outcome"] == "passed") == passed
    assert sum(1 for t in tests if t["outcome"] != "passed") == total
    assert any("softmax" in t["id"] for t in tests if t["outcome"] == "passed")


def test_run_page_without_javascript_shows_every_row(browser, base):
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(urljoin(base, "index.html"))
    follow(page, page.get_by_role("link", name="gaudi", exact=True))
    follow(page, page.locator("#history tbody tr th a").first)
    rows = page.locator("#tests tbody tr")
    assert rows.count() > 0 and page.locator("#tests tbody tr:visible").count() == rows.count()
    assert not page.locator("#filters").is_visible()
    assert page.locator("#tests-json").is_visible()  # every test, the passed ones too, is a link away
    context.close()


def test_hostile_text_stays_inert_and_readable(page, base):
    page.goto(urljoin(base, "index.html"))
    # Its upstream files are another commit's: the index's upstream cell is marked, and says so.
    other = page.locator("#backends tbody tr", has_text="evil<b>end").locator("td.c.other-commit")
    assert other.count() == 1 and other.get_attribute("title").startswith(f"{NOT_OWN} files from {HOSTILE_TEST_DIR}")
    follow(page, page.get_by_role("link", name="evil<b>end", exact=True))
    assert page.locator("h1").inner_text().startswith("evil<b>end")
    banner = page.locator("#upstream .upstream-banner")
    expect(banner).to_be_visible()
    assert banner.inner_text().startswith(f"{NOT_OWN} files from {HOSTILE_TEST_DIR}")
    assert page.locator("#culprit a.ext").count() == 0  # a non-hex commit is never linked
    reason = page.locator("#xfail li", has_text="test_long_reason").locator(".muted").inner_text()
    assert reason.endswith("…") and len(reason) < 320, reason
    assert reason.removeprefix("— ").removesuffix("…") in LONG_REASON  # cut where a word ends, on one line
    assert LONG_REASON[len(reason.removeprefix("— ").removesuffix("…"))] == " "
    follow(page, page.locator("#history tbody tr th a").first)

    assert page.locator("h1").inner_text().startswith("evil-<i>run</i>")
    expect(page.locator("#upstream .upstream-banner")).to_be_visible()
    # The id stands in the "What is new" box (a new failure) and in the tests table, inert in both.
    shown = page.get_by_text(HOSTILE_ID, exact=True)
    assert shown.count() == 2 and all(shown.nth(i).is_visible() for i in range(2))
    assert page.locator("#news").get_by_text(HOSTILE_ID, exact=True).count() == 1
    assert page.get_by_text(HOSTILE_MSG).is_visible()
    assert page.get_by_text(HOSTILE_CAUSE).is_visible()
    assert page.locator("img[src='x']").count() == 0
    assert page.locator("main svg[onload], main i").count() == 0
    assert page.get_by_text("<b>not bold</b>").is_visible()
    smoke_row = page.locator("#stages tbody tr", has_text="smoke:").inner_text()
    counts = hostile_record().stage("smoke").counts
    assert counts and all(smoke_row.count(f"{n} {o}") == 1 for o, n in counts.items()), smoke_row  # once each
    assert page.locator("script").count() == 1  # only the filter script
    assert page.evaluate("window.__pwned") is None
    assert page.dialogs == [] and page.errors == []

    # A very long unbroken test id wraps instead of widening the page past the viewport.
    long_cell = page.locator("#tests td:nth-child(2)", has_text="test_long.py::test_xxx")
    assert long_cell.bounding_box()["width"] < 1280
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280 + 1
    assert "more characters" in page.locator("#tests tbody tr[data-outcome='error'] pre.msg").inner_text()
    shot(page, "run-hostile")
