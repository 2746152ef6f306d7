"""The upstream suite for real: PyTorch-style device-generic test files, fetched over file:// from a
repository posing as PyTorch at the commit the torch's version.py names, run on OpenReg by
`ootci test --suite upstream`, with the CPU's second opinion and a baseline between two commits
(tests/support/fake_upstream.py)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from ootci.runner.core import procs
from ootci.runner.manifests.known_failures import load as load_known
from ootci.runner.models import Outcome, RunRecord, StageResult, Status, TorchInfo
from ootci.runner.models import TestResult as Result
from ootci.runner.records import record_files
from ootci.runner.records.upstream_files import summarize
from ootci.runner.suite_runs import junit, shard_plan
from ootci.runner.torch_supply import envs
from tests.support import fake_upstream
from tests.support.cli import ootci
from tests.support.fixture_backends import openreg_wheels

pytestmark = pytest.mark.slow

OPS = "test_up_ops.py::TestUpOps::"
VIEWS = "test_up_ops.py::TestUpViews::"

MANIFEST = """\
name = "openreg-upstream"
device = "openreg"
distribution = "torch_openreg"
import_name = "torch_openreg"
entry_point = "torch_openreg = torch_openreg:_autoload"
capabilities = ["synchronize", "streams", "events", "generator", "autograd"]
dtypes = ["float32", "int64"]
retries = 1
[source]
requirement = "torch_openreg"
[build]
recipe = "prebuilt"
[suites]
crash_isolation = "fork"
[suites.upstream]
files = {files}
"""


@pytest.fixture(scope="module")
def pytorch(tmp_path_factory) -> fake_upstream.FakePyTorch:
    return fake_upstream.make_repo(tmp_path_factory.mktemp("pytorch") / "pytorch")


def _env_naming(torch_layer, where: Path, **version):
    env = fake_upstream.torch_naming(torch_layer, where, **version)
    installed = procs.run(envs.pip_argv(env, "install", "--no-deps", *map(str, openreg_wheels(torch_layer))),
                          timeout=600)
    assert installed.ok, installed.output_tail[-3000:]
    return env


def _manifest(where: Path, files=fake_upstream.FILES, *, exclude: dict[str, str] | None = None) -> Path:
    """The manifest naming `files`, or discovering them ("discover") less `exclude` (path -> reason)."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / "backend.toml"
    text = MANIFEST.format(files=json.dumps(files if isinstance(files, str) else list(files)))
    if exclude:
        text += "exclude = [" + ", ".join(f"{{ path = {json.dumps(k)}, reason = {json.dumps(v)} }}"
                                          for k, v in exclude.items()) + "]\n"
    path.write_text(text)
    return path


def _upstream(env, manifest: Path, out: Path, *extra: str, environ: dict[str, str] | None = None):
    done = ootci("test", "--python", str(env.python), "--backend", str(manifest), "--suite", "upstream",
                 "--out", str(out), *extra, timeout=900, env=environ)
    record = record_files.read(out / "record.json")
    return done, record, {t.id: t for t in record.tests}


@dataclass
class Night:
    manifest: Path
    env: object
    env_commit: str
    out: Path
    done: object
    record: object
    tests: dict


@pytest.fixture(scope="module")
def first_night(torch_layer, pytorch, tmp_path_factory) -> Night:
    """The first commit's files, fetched at the commit the torch names, on OpenReg."""
    root = tmp_path_factory.mktemp("first")
    env = _env_naming(torch_layer, root / "env", git_version=pytorch.first)
    manifest = _manifest(root / "backend", [*fake_upstream.FILES, "test_up_missing.py"])
    # What the caller's environment says of PyTorch's lists and slow tests counts for nothing.
    disabled = root / "disabled.json"
    disabled.write_text(json.dumps({f"test_add_openreg_float32 (__main__.TestUpOps{c})": ["", ["linux"]]
                                    for c in ("PRIVATEUSE1", "OPENREG")}))
    environ = {"DISABLED_TESTS_FILE": str(disabled), "PYTORCH_TEST_WITH_SLOW": "1"}
    return Night(manifest, env, pytorch.first, root / "out",
                 *_upstream(env, manifest, root / "out", "--torch-repo", pytorch.url, environ=environ))


def test_the_files_come_from_the_commit_the_torch_names_and_every_failure_is_classified(first_night, pytorch):
    done, record, tests = first_night.done, first_night.record, first_night.tests
    assert done.returncode == 1, done.stdout + done.stderr
    stage = record.stage("upstream")
    files = stage.data["upstream"]["tests"]
    assert (files["commit"], files["torch_commit"], files["origin"], files["repository"], files["own_commit"]) == (
        pytorch.first, pytorch.first, "fetched", pytorch.url, True)
    assert stage.status is Status.failed
    assert tests[OPS + "test_add_openreg_float32"].outcome is Outcome.passed  # though the caller disabled it
    assert tests[OPS + "test_slow_openreg"].outcome is Outcome.skipped  # though the caller asked for slow tests
    assert (tests[OPS + "test_add_openreg_int64"].outcome, tests[OPS + "test_add_openreg_int64"].dtype) == (
        Outcome.passed, "int64")
    assert tests[OPS + "test_add_openreg_complex64"].outcome is Outcome.skipped
    assert tests[OPS + "test_add_openreg_complex64"].message == "dtype 'complex64' not claimed"
    assert tests[OPS + "test_cuda_only_openreg"].message == "Only runs on cuda"
    # Fails on CPU too: not the backend's, whether a test or a whole file that does not import.
    went_away = tests[OPS + "test_numpy_went_away_openreg"]
    assert went_away.outcome is Outcome.upstream and went_away.message.startswith("fails on CPU too")
    assert "ootci_removed_in_numpy_2" in went_away.message
    broken = tests[fake_upstream.BROKEN_FILE]
    assert broken.outcome is Outcome.upstream and "ootci_binary_ufuncs_and_refs" in broken.message
    # The backend's own: a wrong result, and a segfault that cost only its own test.
    assert tests[OPS + "test_device_type_is_cpu_openreg"].outcome is Outcome.failed
    assert tests[OPS + "test_device_type_is_cpu_openreg"].attempts == 2
    crashed = tests[OPS + "test_segfaults_off_cpu_openreg"]
    assert crashed.outcome is Outcome.crashed and "SIGSEGV" in crashed.message
    assert tests[VIEWS + "test_view_shares_storage_openreg"].outcome is Outcome.passed
    # No id carries the instantiation's class suffix.
    assert not [i for i in tests if "PRIVATEUSE1" in i or "OPENREG" in i]
    assert stage.root_cause.culprit == OPS + "test_device_type_is_cpu_openreg"
    # A file the fetched test/ does not have is one line; the others ran.
    assert [p for p in record.problems if "test_up_missing.py" in p] == [
        f"upstream test_up_missing.py: not in {files['test_dir']} ({stage.data['upstream']['describe']})"]
    per_file = summarize(record.tests)
    ops = per_file["test_up_ops.py"]
    assert (ops.passed, ops.failed, ops.upstream, ops.skipped) == (3, 2, 1, 3)
    assert ops.skipped_by_reason == {"dtype not claimed": 1, "only on cuda": 1, "slow (PYTORCH_TEST_WITH_SLOW)": 1}
    assert per_file[fake_upstream.BROKEN_FILE].collection_error
    # The failures were re-run in a fork of their file's own session, not in a process that collects
    # the file again: the stage's log shows one pytest process per file, and the CPU's opinion.
    log = (first_night.out / "logs" / "upstream.log").read_text()
    started = [line for line in log.splitlines() if line.startswith("$ ") and " -m pytest " in line]
    assert len(started) == 3 and sum("--ootci-retry-junit=" in line for line in started) == 2
    # The run directory keeps the suite's gzip'd JUnit, every test in it, and no per-process copy.
    junit_dir = first_night.out / "junit"
    assert sorted(p.name for p in junit_dir.iterdir()) == ["upstream.xml.gz"]
    assert {c.id for c in junit.parse(junit_dir / "upstream.xml.gz").cases} == set(tests)


def test_a_baseline_then_the_second_commit_says_new_known_and_fixed_with_the_same_ids(
        first_night, torch_layer, pytorch, tmp_path):
    manifest, first_tests = first_night.manifest, first_night.tests
    expected = ootci("expect", "--from", str(first_night.out), "--manifest", str(manifest), timeout=300)
    assert expected.returncode == 0, expected.stdout + expected.stderr
    baseline = load_known(manifest.parent / "known-failures.toml")
    # Only the backend's failures are its baseline; what fails on CPU too is not.
    assert set(baseline["upstream"]) == {OPS + "test_device_type_is_cpu_openreg",
                                         OPS + "test_segfaults_off_cpu_openreg"}
    crash = baseline["upstream"][OPS + "test_segfaults_off_cpu_openreg"]
    assert crash.cause == "SIGSEGV in `test_segfaults_off_cpu`"
    # A known failure whose cause the baseline lists otherwise than it fails tonight: a new bug
    # hiding behind an old one (planted by hand: the test is new at the second commit).
    with open(manifest.parent / "known-failures.toml", "a") as f:
        f.write(f'"{OPS}test_new_at_second_commit_openreg" = {{ outcome = "failed", cause = "RuntimeError: an old '
                f'bug", reason = "RuntimeError: an old bug" }}\n')
    env = _env_naming(torch_layer, tmp_path / "env", git_version=pytorch.second)
    done, second, tests = _upstream(env, manifest, tmp_path / "out", "--torch-repo", pytorch.url)
    assert done.returncode == 1, done.stdout + done.stderr
    assert second.stage("upstream").data["upstream"]["tests"]["commit"] == pytorch.second
    # The classes are instantiated the other way round at this commit: the ids did not move.
    assert set(first_tests) <= set(tests)
    assert set(tests) - set(first_tests) == {OPS + "test_new_at_second_commit_openreg"}
    assert tests[OPS + "test_device_type_is_cpu_openreg"].outcome is Outcome.fixed
    assert tests[OPS + "test_segfaults_off_cpu_openreg"].outcome is Outcome.xfailed
    # The second opinion re-runs what is new: the known crash failed as listed, and is asked nothing more.
    assert tests[OPS + "test_segfaults_off_cpu_openreg"].attempts == 1
    changed = tests[OPS + "test_new_at_second_commit_openreg"]
    assert changed.outcome is Outcome.failed and changed.attempts == 2
    assert changed.message.startswith("known failure, now failing differently (listed as `RuntimeError: an old "
                                      "bug`); it failed: ")
    assert [(c.novelty, c.count, c.was) for c in second.stage("upstream").causes
            if c.novelty in ("new", "changed")] == [("changed", 1, "RuntimeError: an old bug")]
    assert second.novelty()["new"] == [OPS + "test_new_at_second_commit_openreg"]
    assert set(second.novelty()["upstream"]) == {OPS + "test_numpy_went_away_openreg", fake_upstream.BROKEN_FILE}


def test_a_given_folder_is_used_as_it_is_and_said_not_to_be_the_torch_commit(first_night, pytorch, tmp_path):
    # The checkout's root, whose torch/ must not be imported: the files run from its test/, discovered, less
    # the one the manifest excludes with its reason.
    why = "imports what this torch does not have"
    manifest = _manifest(tmp_path / "m", "discover", exclude={fake_upstream.BROKEN_FILE: why, "distributed/": "later"})
    done, record, tests = _upstream(first_night.env, manifest, tmp_path / "out", "--upstream-tests", str(pytorch.root))
    stage = record.stage("upstream")
    files = stage.data["upstream"]
    assert (files["tests"]["origin"], files["tests"]["commit"], files["tests"]["own_commit"]) == (
        "given", pytorch.second, False)
    assert "not the torch's own commit" in files["describe"]
    assert tests[VIEWS + "test_view_shares_storage_openreg"].outcome is Outcome.passed, done.stdout
    assert list(files["files"]) == [fake_upstream.OPS] and not any(t.startswith(fake_upstream.BROKEN_FILE)
                                                                   for t in tests)
    assert files["discovery"] == {"scanned": 2, "found": 2, "files": 1, "excluded": {
        fake_upstream.BROKEN_FILE: {"path": fake_upstream.BROKEN_FILE, "reason": why}}}
    assert stage.summary.startswith("upstream: 1 files (1 device-generic files discovered of 2 test files, 1 more "
                                    "excluded), ")
    log = (tmp_path / "out" / "logs" / "upstream.log").read_text()
    assert f"  excluded ({why}): {fake_upstream.BROKEN_FILE}\n" in log


def test_a_torch_without_commit_or_release_tag_and_a_failed_fetch_are_one_line(torch_layer, pytorch, tmp_path):
    dev = _env_naming(torch_layer, tmp_path / "dev", git_version="Unknown", version="2.13.0.dev20260101+cpu")
    done, record, tests = _upstream(dev, _manifest(tmp_path / "m"), tmp_path / "out1", "--torch-repo", pytorch.url)
    assert done.returncode == 1 and not tests
    assert record.stage("upstream").summary == (
        "torch 2.13.0.dev20260101+cpu records no commit (torch.version.git_version is 'Unknown') and is not a "
        "release with a v<version> tag: give the files with --upstream-tests DIR")
    unknown = "0" * 40
    elsewhere = _env_naming(torch_layer, tmp_path / "other", git_version=unknown)
    done, record, _ = _upstream(elsewhere, _manifest(tmp_path / "m2"), tmp_path / "out2", "--torch-repo", pytorch.url)
    summary = record.stage("upstream").summary
    assert done.returncode == 1 and summary.startswith(f"cannot fetch PyTorch's test files at {unknown} from "
                                                       f"{pytorch.url}: "), summary
    assert "\n" not in summary


def test_without_network_the_stage_says_it_did_not_run_and_the_run_is_not_red(first_night, tmp_path):
    done, record, tests = _upstream(first_night.env, _manifest(tmp_path / "m", "discover"), tmp_path / "out",
                                    "--torch-repo", "https://pytorch.invalid/pytorch")
    stage = record.stage("upstream")
    assert done.returncode == 0 and stage.status is Status.skipped and not tests, done.stdout + done.stderr
    assert stage.summary.startswith(
        "not run: https://pytorch.invalid/pytorch cannot be reached (Could not resolve host")
    assert f"so PyTorch's test files at {first_night.env_commit} from https://pytorch.invalid/pytorch were not " \
           "fetched" in stage.summary
    assert stage.summary.endswith("; --upstream-tests DIR runs them from a folder")
    assert "upstream: skipped - not run: " in done.stdout


def test_a_backend_that_breaks_import_torch_is_the_cause_not_upstream(make_env, torch_layer, pytorch, tmp_path):
    """The CPU's opinion is given with the backend not loaded: a backend whose autoload raises makes
    every file fail to import on the device, and that is its failure; a file that fails to import on
    a plain CPU torch too is still upstream's."""
    from tests.support.fixture_backends import build_wheels, manifest_path

    env = make_env(str(build_wheels(torch_layer)["raises"]), name="raises")
    done = ootci("test", "--python", str(env.python), "--backend", str(manifest_path("raises")), "--suite",
                 "upstream", "--upstream-files", ",".join(fake_upstream.FILES), "--upstream-tests", str(pytorch.root),
                 "--out", str(tmp_path / "out"), timeout=900)
    record = record_files.read(tmp_path / "out" / "record.json")
    tests = {t.id: t for t in record.tests}
    assert done.returncode == 1 and set(tests) == set(fake_upstream.FILES), done.stdout + done.stderr
    ops = tests[fake_upstream.OPS]
    assert ops.outcome is Outcome.error and "Failed to load the backend extension: torch_raises" in ops.message
    assert tests[fake_upstream.BROKEN_FILE].outcome is Outcome.upstream



# -- a planned shard: a generated file split between two jobs and merged back -----------------

GENERATED = "test_gen_ops.py"
GEN = f"{GENERATED}::TestGenOps::"
GENERATED_TESTS = 24
GENERATED_FAILING = (3, 20)


def generated_file(tests: int, failing: tuple[int, ...]) -> str:
    """A device-generic file of `tests` tests made in a loop, as PyTorch's generated ones are: an op
    each, with the backend's own failure (a wrong result on the device only) where `failing` says."""
    return fake_upstream.HEADER + f'''

class TestGenOps(TestCase):
    pass


def _make(i, wrong_off_cpu):
    @dtypes(torch.float32)
    def test(self, device, dtype):
        got = (torch.full((4,), float(i), device=device, dtype=dtype) + 1).cpu()
        expected = float(i + 1) + (1 if wrong_off_cpu and torch.device(device).type != "cpu" else 0)
        self.assertEqual(got, torch.full((4,), expected, dtype=dtype))
    return test


for _i in range({tests}):
    setattr(TestGenOps, f"test_op{{_i:03d}}", _make(_i, _i in {failing!r}))

instantiate_device_type_tests(TestGenOps, globals())

if __name__ == "__main__":
    run_tests()
'''


def test_a_file_split_across_two_jobs_runs_each_range_once_and_merges_back(first_night, tmp_path):
    folder = tmp_path / "test"
    folder.mkdir()
    (folder / GENERATED).write_text(generated_file(GENERATED_TESTS, GENERATED_FAILING))
    manifest = _manifest(tmp_path / "backend", [GENERATED])
    # A recorded night of the file: skewed times, the later tests slower.
    ids = [f"{GEN}test_op{i:03d}_openreg_float32" for i in range(GENERATED_TESTS)]
    night = RunRecord(run_id="openreg-upstream-20261201T031700Z-000001", backend="openreg-upstream",
                      device="openreg", torch=TorchInfo(spec="installed"), trigger="nightly",
                      started_at=dt.datetime(2026, 12, 1, 3, 17, tzinfo=dt.UTC), status=Status.passed,
                      stages=[StageResult(name="upstream", status=Status.passed, counts={"passed": len(ids)})],
                      tests=[Result(id=i, suite="upstream", outcome=Outcome.passed, duration_s=1.0 + (n % 6) ** 2)
                             for n, i in enumerate(ids)])
    record_files.write(tmp_path / "history" / night.run_id, night)
    plan = tmp_path / "plan.json"
    planned_out = ootci("shards", "plan", str(manifest), "--minutes", "60", "--jobs", "2",
                        "--history", str(tmp_path / "history"), "--out", str(plan))
    assert planned_out.returncode == 0, planned_out.stderr
    planned = shard_plan.read(plan)
    [first], [second] = (job.pieces for job in planned.jobs)
    assert (first.file, second.file) == (GENERATED, GENERATED) and first.before == second.start
    shards = []
    for k, piece in ((1, first), (2, second)):
        done, record, tests = _upstream(first_night.env, manifest, tmp_path / f"job{k}", "--upstream-tests",
                                        str(folder), "--shard-plan", str(plan), "--shard", str(k),
                                        "--shard-group", "split-1")
        assert record.shard == f"{k}/2", done.stdout + done.stderr
        # The job collected and ran its own range only.
        assert sorted(tests) == piece.tests, done.stdout
        assert record.stage("upstream").data["shard_plan"]["pieces"] == [
            {"file": GENERATED, "start": piece.start, "before": piece.before}]
        shards.append(tmp_path / f"job{k}")
    done = ootci("shards", "merge", *map(str, shards), "--out", str(tmp_path / "merged"), "--plan", str(plan))
    assert done.returncode == 0, done.stdout + done.stderr
    [merged_dir] = (tmp_path / "merged").iterdir()
    merged = record_files.read(merged_dir / "record.json")
    outcomes = {t.id: t.outcome for t in merged.tests}
    assert sorted(outcomes) == ids  # every test once, none twice
    assert {i for i, o in outcomes.items() if o is Outcome.failed} == {ids[i] for i in GENERATED_FAILING}
    stage = merged.stage("upstream")
    assert stage.data["upstream"]["files"][GENERATED]["tests"] == GENERATED_TESTS
    assert not [p for p in merged.problems if "left no record" in p or "did not finish" in p]
