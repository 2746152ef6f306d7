"""`ootci bisect` for real: a backend's git history with a planted fault, built and tested
step by step, then shown on the dashboard; and an interrupted bisection resumed."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from ootci.runner.core import causes
from ootci.runner.models import BisectRecord, Status, Verdict
from ootci.runner.records import record_files
from tests.support import bisect_repo
from tests.support.cli import ootci
from tests.support.records import records_under

pytestmark = pytest.mark.slow


def pinned_manifest(tmp_path: Path, repo: Path, ref: str) -> Path:
    """The fixture's manifest with source.ref at one commit: what a nightly of that day ran."""
    path = bisect_repo.manifest(tmp_path / ref[:10], repo)
    path.write_text(path.read_text().replace('ref = "main"', f'ref = "{ref}"'))
    return path


def read_bisection(out: Path) -> tuple[BisectRecord, Path]:
    found = sorted(out.glob("*/bisect.json"))
    assert len(found) == 1, found
    return BisectRecord.model_validate_json(found[0].read_text()), found[0].parent


@pytest.fixture(scope="module")
def bisected(tmp_path_factory, openreg_compiled):
    """Two nightly runs of the fixture (commit 1: green, commit 8: red), then `ootci bisect` between them."""
    root = tmp_path_factory.mktemp("bisect")
    repo, commits = bisect_repo.make(root)
    runs = root / "runs"
    for commit in (commits[0], commits[-1]):
        ootci("run", str(pinned_manifest(root, repo, commit)), "--torch", "2.13.0", "--suites", "smoke",
              "--trigger", "nightly", "--out", str(runs), timeout=1800)
    good, bad = sorted(records_under(runs), key=lambda r: r.started_at)
    assert (good.status, bad.status) == (Status.passed, Status.failed), (good.first_problem(), bad.first_problem())
    out = root / "bisect"
    result = ootci("bisect", str(bisect_repo.manifest(root, repo)), "--good", good.run_id, "--bad", bad.run_id,
                   "--runs", str(runs), "--out", str(out), timeout=3000)
    record, directory = read_bisection(out)
    return {"root": root, "repo": repo, "commits": commits, "runs": runs, "good": good, "bad": bad, "out": out,
            "result": result, "record": record, "dir": directory}


def test_the_backend_axis_names_the_planted_commit_skips_the_broken_build_and_takes_four_judged_steps(bisected):
    result, record, commits = bisected["result"], bisected["record"], bisected["commits"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    # Its first line says where the bisection is written, before any step runs.
    assert result.stdout.splitlines()[0].endswith(f" -> {bisected['dir']}/bisect.json")
    # What changed between the two runs is the backend's commit, not the torch: the axis is chosen by itself.
    assert [r.axis for r in record.rounds] == ["backend"]
    round_ = record.rounds[0]
    assert [c.commit for c in round_.candidates] == commits
    verdict = round_.result
    assert verdict.kind == "found"
    assert round_.candidates[verdict.first_bad].commit == commits[bisect_repo.FIRST_BAD - 1]
    assert round_.candidates[verdict.last_good].commit == commits[bisect_repo.FIRST_BAD - 2]
    assert verdict.summary.startswith(f"openreg-history broke at openreg-history@{commits[4][:10]}")
    assert "Add a device kernel for mul" in verdict.summary
    assert f"openreg-history broke at openreg-history@{commits[4][:10]}" in result.stdout
    # Commit 3 does not build: skipped, with the build's failure as the reason.
    skipped = [s for s in round_.steps if s.verdict is Verdict.skip]
    assert [round_.candidates[s.candidate].commit for s in skipped] == [commits[bisect_repo.BUILD_BROKEN - 1]]
    assert skipped[0].reason.startswith("build failed before smoke")
    judged = [s for s in round_.steps if s.verdict is not Verdict.skip]
    assert len(judged) <= 4
    # The boundary verdicts were each judged twice and agreed.
    assert sorted(s.candidate for s in round_.steps if s.rerun) == [verdict.last_good, verdict.first_bad]
    assert record.state == "finished" and record.finished_at is not None


def test_a_step_runs_only_the_stage_that_failed_and_only_the_tests_that_turned_red(bisected):
    record, good, bad = bisected["record"], bisected["good"], bisected["bad"]
    predicate = record.predicate
    assert predicate.stage == "smoke"
    turned = {t.id for t in bad.tests if not t.outcome.ok} & {t.id for t in good.tests if t.outcome.value == "passed"}
    # The target is the bad run's largest new cause: the tests that turned red with it.
    assert predicate.failure_cause == next(c.text for c in bad.stage("smoke").causes if c.novelty == "new")
    target = {t.id for t in bad.tests if t.id in turned and causes.cause_of(t, bad.device) == predicate.failure_cause}
    assert set(predicate.tests["smoke"]) == target and 0 < len(target) <= len(turned) < len(good.tests)
    for step in record.rounds[0].steps:
        run = record_files.read(bisected["dir"] / "steps" / step.run_id / "record.json")
        assert run.stage("integration").status in (Status.skipped, Status.blocked)
        assert {t.suite for t in run.tests} <= {"smoke"}
        if step.verdict is not Verdict.skip:
            assert {t.id for t in run.tests} == target, step
            assert (bisected["dir"] / step.log).is_file()
            # Judging smoke, a step verifies only what would block it: one interpreter importing torch.
            verified = {c.name: c.status for c in run.stage("autoload").checks}
            assert {n for n, s in verified.items() if s is Status.skipped} == {"opt_out", "circular_import",
                                                                                "neighbours", "import_cost"}, verified
            assert all(verified[n] is Status.passed for n in ("plain_import", "build_torch", "device", "tensor"))
        assert step.duration_s > 0
    # The ends are whole nightly runs: they verified everything.
    for end in (good, bad):
        assert all(c.status is Status.passed for c in end.stage("autoload").checks), end.stage("autoload").checks


def test_the_dashboard_shows_the_bisection_next_to_the_culprit_range(bisected, tmp_path):
    data, site = tmp_path / "data", tmp_path / "site"
    merged = ootci("history", "merge", str(bisected["runs"]), str(bisected["out"]), "--into", str(data))
    assert merged.returncode == 0, merged.stderr
    assert "2 added" in merged.stdout and "bisections: 1 added" in merged.stdout
    built = ootci("dashboard", "build", "--data", str(data), "--out", str(site))
    assert built.returncode == 0, built.stderr
    page = (site / "backends" / "openreg-history.html").read_text()
    assert 'id="culprit"' in page and 'id="bisection"' in page
    assert page.index('id="culprit"') < page.index('id="bisection"')
    section = page[page.index('id="bisection"'):]
    section = section[:section.index("</section>")]
    commits = bisected["commits"]
    assert f"openreg-history broke at openreg-history@{commits[4][:10]}" in section
    assert section.count("<tr><td>") == len(bisected["record"].rounds[0].steps)
    assert section.count(">skip<") == 1 and "re-run" in section
    # The steps' own runs are part of the bisection, not runs of the history.
    api = json.loads((site / "api" / "backends" / "openreg-history.json").read_text())
    assert len(api["runs"]) == 2
    assert api["bisection"]["kind"] == "found" and api["bisection"]["steps"] == bisected["record"].steps_taken()


def test_an_interrupted_bisection_resumes_where_it_stopped(bisected, tmp_path):
    """The record as it stood after two steps (what a killed job leaves): --resume replays those
    two and runs only the rest, to the same verdict."""
    copy = tmp_path / bisected["dir"].name
    shutil.copytree(bisected["dir"], copy)
    state = BisectRecord.model_validate_json((copy / "bisect.json").read_text())
    kept = state.rounds[0].steps[:2]
    state.rounds[0].steps, state.rounds[0].result = kept, None
    state.state, state.finished_at, state.error = "interrupted", None, "interrupted by SIGTERM"
    (copy / "bisect.json").write_text(state.model_dump_json())
    result = ootci("bisect", "--resume", str(copy), timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    resumed = BisectRecord.model_validate_json((copy / "bisect.json").read_text())
    original = bisected["record"].rounds[0]
    assert resumed.rounds[0].steps[:2] == kept
    assert [(s.candidate, s.verdict, s.rerun) for s in resumed.rounds[0].steps] == \
        [(s.candidate, s.verdict, s.rerun) for s in original.steps]
    assert resumed.rounds[0].result.summary == original.result.summary and resumed.state == "finished"
    new_runs = {p.name for p in (copy / "steps").iterdir()} - {p.name for p in (bisected["dir"] / "steps").iterdir()}
    assert len(new_runs) == len(original.steps) - 2
    assert re.search(r"judging openreg-history@[0-9a-f]{10} \(backend axis, step 3\)", result.stderr + result.stdout)
