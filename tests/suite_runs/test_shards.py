"""Sharding: `ootci run --shard K/N` (the plugin's partition of a suite), `ootci shards merge`,
and a sharded OpenReg integration run merged and compared with the unsharded run."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from ootci.runner.history.merging import merge as history_merge
from ootci.runner.manifests import manifest
from ootci.runner.models import Outcome, RootCause, RunRecord, StageResult, Status, TorchInfo
from ootci.runner.models import TestResult as Result
from ootci.runner.records import record_files
from ootci.runner.stages.base import RunContext, RunOptions
from ootci.runner.suite_runs import junit, shards
from ootci.runner.suite_runs.suite_runner import SUITES_DIR, run_stage
from tests.support.cli import ootci
from tests.support.records import records_under
from tests.support.shared_runs import OPENREG_ON_2_13, openreg_on_2_13

STARTED = dt.datetime(2026, 11, 21, 3, 17, tzinfo=dt.UTC)


def load_plugin():
    spec = importlib.util.spec_from_file_location("ootci_plugin_shards", SUITES_DIR / "ootci_plugin.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    return plugin


# -- the partition ------------------------------------------------------------------------

IDS = [f"test_opinfo.py::test_compare_cpu[op{i}-float32]" for i in range(3000)]


def test_every_test_is_in_exactly_one_shard_and_three_shards_are_balanced():
    plugin = load_plugin()
    owners = {i: [k for k in (1, 2, 3) if plugin.shard_of("integration", i, 3) == k] for i in IDS}
    assert all(len(found) == 1 for found in owners.values())
    sizes = Counter(found[0] for found in owners.values())
    assert set(sizes) == {1, 2, 3}
    assert all(900 <= size <= 1100 for size in sizes.values()), sizes  # 1000 expected, sd ~26
    assert all(plugin.shard_of("integration", i, 1) == 1 for i in IDS[:100])
    # The suite is part of the key: the same node id in another suite may land elsewhere.
    assert any(plugin.shard_of("smoke", i, 3) != plugin.shard_of("integration", i, 3) for i in IDS[:50])


def test_the_partition_is_the_same_in_every_process():
    plugin = load_plugin()
    code = ("import importlib.util, json, sys; s = importlib.util.spec_from_file_location('p', sys.argv[1]); "
            "p = importlib.util.module_from_spec(s); s.loader.exec_module(p); "
            "print(json.dumps([p.shard_of('integration', i, 3) for i in json.loads(sys.stdin.read())]))")
    expected = [plugin.shard_of("integration", i, 3) for i in IDS[:500]]
    for seed in ("0", "1", "4242"):
        done = subprocess.run([sys.executable, "-c", code, str(SUITES_DIR / "ootci_plugin.py")],
                              input=json.dumps(IDS[:500]), capture_output=True, text=True,
                              env=dict(os.environ, PYTHONHASHSEED=seed), check=True)
        assert json.loads(done.stdout) == expected


@pytest.mark.parametrize("text", ["0/3", "4/3", "3", "a/b", "1/0", "-1/3", "", "1/3/5"])
def test_bad_shard_is_refused(text):
    with pytest.raises(ValueError):
        load_plugin().parse_shard(text)
    with pytest.raises(shards.UsageError) as err:
        shards.parse_shard(text)
    assert "is not K/N with 1 <= K <= N" in err.value.message


@pytest.mark.parametrize("args, words", [
    (["--shard", "4/3"], "--shard: '4/3' is not K/N with 1 <= K <= N (e.g. 2/3)"),
    (["--shard", "0/2"], "--shard: '0/2' is not K/N"),
    (["--shard", "two"], "--shard: 'two' is not K/N"),
    (["--shard-group", "g1"], "--shard-group names the shards of one run: it needs --shard K/N"),
    (["--shard", "1/2", "--shard-group", "a b;rm"], "--shard-group: 'a b;rm' is not 1-64 letters"),
])
def test_run_shard_validation_is_one_line_and_writes_nothing(tmp_path, args, words):
    out = tmp_path / "out"
    result = ootci("run", "openreg", "--torch", "2.13.0", *args, "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == f"ootci: {words}" or words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_dry_run_names_the_shard_and_its_group(tmp_path):
    result = ootci("run", "openreg", "--torch", "2.13.0", "--shard", "2/3", "--dry-run", "--out", str(tmp_path / "o"),
                   env={"GITHUB_RUN_ID": "123456"})
    assert result.returncode == 0, result.stderr
    assert "shard 2/3 (group gh-123456)" in result.stdout


def test_default_group_is_the_workflow_run_else_the_date():
    assert shards.default_group({"GITHUB_RUN_ID": "987"}) == "gh-987"
    assert shards.default_group({}, today=dt.date(2026, 11, 21)) == "local-20261121"
    assert shards.default_group({"GITHUB_RUN_ID": "x;y"}, today=dt.date(2026, 11, 21)) == "local-20261121"


def test_reproduce_command_names_the_shard():
    from ootci.runner.models import reproduce_command

    torch = TorchInfo(spec="2.13.0", version="2.13.0+cpu", dist_version="2.13.0+cpu")
    assert reproduce_command("openreg", torch, ("integration",), "2/3") == \
        "ootci run openreg --torch 2.13.0+cpu --index-url https://download.pytorch.org/whl/cpu --suites integration " \
        "--shard 2/3"
    assert shards._without_shard("ootci run openreg --torch 2.13.0+cpu --shard 2/3") == \
        "ootci run openreg --torch 2.13.0+cpu"


def test_old_records_load_without_shard_fields():
    raw = {"run_id": "openreg-1", "backend": "openreg", "device": "openreg", "torch": {"spec": "2.13.0"},
           "started_at": STARTED.isoformat()}
    record = RunRecord.model_validate(raw)
    assert record.shard is None and record.shard_group is None


# -- the plugin and the suite runner, for real, on a tiny suite without torch ---------------

TINY_TESTS = '''
import pytest

@pytest.mark.parametrize("i", range(12))
def test_many(i):
    assert i != 7, "seven fails"

def test_single():
    pass
'''


def tiny_backend(tmp_path: Path) -> manifest.Manifest:
    root = tmp_path / "tiny"
    (root / "suite").mkdir(parents=True)
    (root / "suite" / "check_many.py").write_text(TINY_TESTS)
    (root / "suite" / "check_one.py").write_text("def test_alone():\n    pass\n")
    (root / "write_junit.py").write_text(textwrap.dedent('''
        import os
        open(os.environ["OOTCI_JUNIT"], "w").write(
            '<testsuite name="cmd"><testcase classname="cmd" name="test_cmd"/></testsuite>')
    '''))
    (root / "backend.toml").write_text(textwrap.dedent('''
        name = "tiny"
        device = "cpu"
        distribution = "pytest"
        import_name = "json"
        entry_point = "cpu = json:cpu"
        retries = 0
        [source]
        path = "."
        [build]
        recipe = "prebuilt"
        [suites]
        smoke = false
        integration = false
        vendor = [
            { name = "many", path = "suite/check_many.py" },
            { name = "one", path = "suite/check_one.py" },
            { name = "cmd", command = ["$OOTCI_PYTHON", "write_junit.py"] },
        ]
    '''))
    return manifest.load(root / "backend.toml")


def tiny_stage(m: manifest.Manifest, out: Path, shard: str | None) -> RunRecord:
    """The integration stage of the tiny backend in this (orchestrator) interpreter, as a record."""
    record = RunRecord(run_id=out.name, backend="tiny", device="cpu", torch=TorchInfo(spec="installed"),
                       started_at=dt.datetime.now(dt.UTC), shard=shard,
                       shard_group="g1" if shard else None)
    options = RunOptions(python=Path(sys.executable), suites=("integration",), shard=shard, out=out.parent)
    ctx = RunContext(manifest=m, options=options, record=record, run_dir=out, cache=out, reporter=object(),
                     stage_name="integration")
    out.mkdir(parents=True)
    stage = run_stage(ctx, "integration")
    stage.duration_s = 1.0
    stage.log = "logs/integration.log"
    record.stages = [StageResult(name="autoload", status=Status.passed, summary="ok"), stage]
    record.status = stage.status
    record.finished_at = dt.datetime.now(dt.UTC)
    record_files.write(out, record)
    return record


def outcomes(record: RunRecord) -> set[tuple[str, str, Outcome]]:
    return {(t.suite, t.id, t.outcome) for t in record.tests}


def test_tiny_suites_sharded_and_merged_equal_the_unsharded_run(tmp_path):
    m = tiny_backend(tmp_path)
    whole = tiny_stage(m, tmp_path / "whole" / "tiny-whole", None)
    parts = [tiny_stage(m, tmp_path / "shards" / f"tiny-{k}", f"{k}/3") for k in (1, 2, 3)]
    # Every pytest test in exactly one shard; the command suite runs whole in shard 1 only.
    plugin = load_plugin()
    for k, part in enumerate(parts, 1):
        for t in part.tests:
            assert t.suite == "cmd" and k == 1 or plugin.shard_of(t.suite, t.id, 3) == k
        cmd = [t for t in part.tests if t.suite == "cmd"]
        assert len(cmd) == (1 if k == 1 else 0)
        if k > 1:
            assert "command suites cmd run in shard 1/3" in part.stage("integration").summary
    # "one" has a single test: two shards hold none of it, and that alone fails nothing.
    empty = [p for p in parts if not any(t.suite == "one" for t in p.tests)]
    assert len(empty) == 2
    for part in empty:
        assert part.stage("integration").data["suites"]["one"]["status"] == "passed"
        assert "one: no tests in shard" in part.stage("integration").summary
    assert sum(len(p.tests) for p in parts) == len(whole.tests) == 15

    written, notes = shards.merge([tmp_path / "shards"], tmp_path / "merged")
    assert notes == [] and len(written) == 1
    merged = record_files.read(tmp_path / "merged" / written[0].run_id / "record.json")
    assert outcomes(merged) == outcomes(whole)
    stage, whole_stage = merged.stage("integration"), whole.stage("integration")
    assert stage.counts == whole_stage.counts == {"failed": 1, "passed": 14}
    assert stage.status is Status.failed and merged.status is Status.failed
    assert stage.root_cause.culprit.endswith("check_many.py::test_many[7]")
    # The merge groups the shards' failures by cause again, over all of them.
    assert [(c.novelty, c.count, c.text) for c in stage.causes] == [("new", 1, "AssertionError: seven fails")]
    assert {s: d["counts"] for s, d in stage.data["suites"].items()} == \
        {s: d["counts"] for s, d in whole_stage.data["suites"].items()}
    assert [s["shard"] for s in stage.data["shards"]] == ["1/3", "2/3", "3/3"]
    assert merged.shard is None and merged.shard_group == "g1"
    run_dir = tmp_path / "merged" / merged.run_id
    assert (run_dir / "junit" / "many.xml.gz").is_file()
    log = (run_dir / stage.log).read_text()
    assert log.count("==== ootci: shard ") == 3
    # The same shards merged again: the same record, not a second one.
    again, _ = shards.merge([tmp_path / "shards"], tmp_path / "merged")
    assert again[0].run_id == merged.run_id and len(list((tmp_path / "merged").iterdir())) == 1


def plugin_pytest_under_xdist(cwd: Path, *args: str, path: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """pytest -n 2 with ootci's plugin, in this interpreter (no torch: the plugin goes on without it)."""
    # Run under xdist itself, a test would hand its own worker's name to the inner controller.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "ootci_plugin", "-p", "no:cacheprovider", "-n", "2", "-q", *args],
        cwd=cwd, capture_output=True, text=True, timeout=300,
        env=dict(env, PYTHONPATH=os.pathsep.join([str(SUITES_DIR), *path]), PYTHONDONTWRITEBYTECODE="1"))


def test_plugin_partitions_under_xdist_too(tmp_path):
    m = tiny_backend(tmp_path)
    suite = m.directory / "suite"
    seen = []
    for k in (1, 2, 3):
        junit_file = tmp_path / f"s{k}.xml"
        done = plugin_pytest_under_xdist(suite, str(suite / "check_many.py"), "--ootci-suite", "many",
                                         "--ootci-shard", f"{k}/3", "--ootci-junit", str(junit_file))
        assert done.returncode in (0, 1), done.stdout + done.stderr
        ids = Path(f"{junit_file}.collected").read_text().split()
        seen += ids
    assert sorted(i.rpartition("::")[2] for i in seen) == sorted([*(f"test_many[{i}]" for i in range(12)),
                                                                   "test_single"])
    assert len(set(seen)) == 13


# -- the merge, on written records ---------------------------------------------------------

def shard_record(out: Path, k: int, n: int, tests: list[Result], *, group: str = "night-1",
                 status: Status = Status.passed, build: Status = Status.passed) -> RunRecord:
    run_id = f"openreg-2026112{k}T031700Z-00000{k}"
    suite_status = Status.passed if all(t.outcome.ok for t in tests) else Status.failed
    stages = [
        StageResult(name="torch", status=Status.passed, duration_s=10 + k, summary="torch 2.13.0"),
        StageResult(name="build", status=build, duration_s=20 + k, summary=f"built in shard {k}",
                    data={"cache_hit": k != 2},
                    root_cause=None if build.ok else RootCause(kind="exception", summary="ValueError: no SDK")),
        StageResult(name="autoload", status=Status.passed, duration_s=3),
        StageResult(name="integration", status=suite_status if build.ok else Status.blocked, duration_s=30 * k,
                    counts={}, data={"suites": {"integration": {"status": suite_status.value, "counts": {},
                                                               "duration_s": 30 * k,
                                                               "junit": "junit/integration.xml.gz"}},
                                     "shard": f"{k}/{n}"}),
    ]
    record = RunRecord(run_id=run_id, backend="openreg", device="openreg", torch=TorchInfo(spec="2.13.0"),
                       started_at=STARTED + dt.timedelta(seconds=k), finished_at=STARTED + dt.timedelta(minutes=5),
                       status=status, stages=stages, tests=tests if build.ok else [], shard=f"{k}/{n}",
                       shard_group=group, command=f"ootci run openreg --torch 2.13.0+cpu --shard {k}/{n}")
    record_files.write(out / run_id, record)
    return record


def t(i: int, outcome: Outcome = Outcome.passed) -> Result:
    return Result(id=f"test_opinfo.py::test_compare_cpu[op{i}-float32]", suite="integration", outcome=outcome)


def test_merge_of_all_shards_is_the_union(tmp_path):
    shard_record(tmp_path / "a", 1, 3, [t(1), t(2)])
    shard_record(tmp_path / "b", 2, 3, [t(3), t(4, Outcome.flaky)])
    shard_record(tmp_path / "b", 3, 3, [t(5)])
    done = ootci("shards", "merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "openreg group night-1: 3/3 shards, 5 tests" in done.stdout and "(passed)" in done.stdout
    [merged] = records_under(tmp_path / "out")
    assert merged.status is Status.passed and merged.shard is None and merged.shard_group == "night-1"
    assert len(merged.tests) == 5 and merged.test_counts == {Outcome.passed: 4, Outcome.flaky: 1}
    integration = merged.stage("integration")
    assert integration.counts == {"flaky": 1, "passed": 4} and integration.duration_s == 90
    assert integration.data["suites"]["integration"]["counts"] == {"flaky": 1, "passed": 4}
    assert [(s["run_id"], s["status"], s["duration_s"]) for s in integration.data["shards"]] == [
        ("openreg-20261121T031700Z-000001", "passed", 30), ("openreg-20261122T031700Z-000002", "passed", 60),
        ("openreg-20261123T031700Z-000003", "passed", 90)]
    build = merged.stage("build")
    assert build.duration_s == 23 and build.data["cache_hit"] is True  # all passed: shard 1's data, the longest time
    assert merged.command == "ootci run openreg --torch 2.13.0+cpu"
    # `ootci history merge` takes the merged record and leaves the shard records out.
    outcome = history_merge([tmp_path / "a", tmp_path / "b", tmp_path / "out"], tmp_path / "history")
    assert outcome["added"] == [merged.run_id] and len(outcome["shards"]) == 3


def upstream_shard(out: Path, k: int, n: int, outcomes: dict[str, Outcome]) -> RunRecord:
    """A shard whose upstream stage ran the tests `outcomes` names, of PyTorch's test_view_ops.py."""
    tests = [Result(id=f"test_view_ops.py::TestViewOps::{name}", suite="upstream", outcome=o)
             for name, o in outcomes.items()]
    files = {"test_dir": "/c/upstream-tests/pytorch/abc/test", "origin": "fetched", "commit": "a" * 40,
             "torch_commit": "a" * 40, "repository": "https://github.com/pytorch/pytorch", "ref": "a" * 40,
             "changed": False, "own_commit": True}
    bad = any(not o.ok for o in outcomes.values())
    stage = StageResult(name="upstream", status=Status.failed if bad else Status.passed, duration_s=40 + k,
                        data={"suites": {"upstream": {"status": "failed" if bad else "passed", "counts": {},
                                                      "duration_s": 40 + k, "junit": "junit/upstream.xml.gz"}},
                              "upstream": {"tests": files, "describe": "files from GitHub at aaaaaaaaaaaa",
                                           "files": {"test_view_ops.py": {
                                               "status": "failed" if bad else "passed", "duration_s": 30 + k,
                                               "rerun": sum(1 for o in outcomes.values() if not o.ok),
                                               "failed_on_cpu": 0, "tests": len(outcomes)}},
                                           "second_opinion_s": 5.0 * k},
                              "shard": f"{k}/{n}"})
    record = RunRecord(run_id=f"openreg-2026112{k}T031700Z-00000{k}", backend="openreg", device="openreg",
                       torch=TorchInfo(spec="2.13.0"), started_at=STARTED + dt.timedelta(seconds=k),
                       finished_at=STARTED + dt.timedelta(minutes=5), status=stage.status, stages=[stage],
                       tests=tests, shard=f"{k}/{n}", shard_group="night-1",
                       command=f"ootci run openreg --torch 2.13.0+cpu --shard {k}/{n}")
    record_files.write(out / record.run_id, record)
    return record


def test_the_upstream_stage_merges_with_its_files_commit_and_per_file_counts(tmp_path):
    upstream_shard(tmp_path / "a", 1, 2, {"test_flip_openreg_float32": Outcome.passed,
                                          "test_ravel_openreg": Outcome.failed})
    upstream_shard(tmp_path / "a", 2, 2, {"test_view_openreg": Outcome.passed,
                                          "test_msort_openreg": Outcome.upstream})
    done = ootci("shards", "merge", str(tmp_path / "a"), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    [merged] = records_under(tmp_path / "out")
    stage = merged.stage("upstream")
    assert stage.status is Status.failed
    assert stage.counts == {"failed": 1, "passed": 2, "upstream": 1}
    assert stage.data["upstream"]["tests"]["commit"] == "a" * 40 and stage.data["upstream"]["tests"]["own_commit"]
    assert stage.data["upstream"]["files"] == {"test_view_ops.py": {
        "status": "failed", "duration_s": 32, "rerun": 1, "failed_on_cpu": 0, "tests": 4}}
    assert stage.data["upstream"]["second_opinion_s"] == 10.0
    assert (tmp_path / "out" / merged.run_id / "junit" / "upstream.xml.gz").is_file()


def test_a_missing_shard_fails_the_merged_suite_stage_naming_it(tmp_path):
    shard_record(tmp_path / "runs", 1, 3, [t(1), t(2)])
    shard_record(tmp_path / "runs", 3, 3, [t(5)])
    done = ootci("shards", "merge", str(tmp_path / "runs"), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "openreg: shard 2/3 left no record: its tests did not run" in done.stdout
    [merged] = records_under(tmp_path / "out")
    assert merged.status is Status.failed
    integration = merged.stage("integration")
    assert integration.status is Status.failed
    assert integration.root_cause.kind == "missing"
    assert integration.root_cause.summary == "shard 2/3 left no record: its tests did not run"
    assert merged.first_problem() == "integration: shard 2/3 left no record: its tests did not run"
    assert "shard 2/3 left no record: its tests did not run" in merged.problems
    assert integration.data["shards"][1] == {"shard": "2/3", "run_id": None, "status": "missing", "duration_s": None}
    assert len(merged.tests) == 3


def test_expect_counts_shards_that_left_nothing_at_all(tmp_path):
    shard_record(tmp_path / "runs", 1, 2, [t(1)])
    shard_record(tmp_path / "runs", 2, 2, [t(2)])
    bad = ootci("shards", "merge", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--expect", "3")
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "ootci: shards merge: --expect 3, but the records of openreg group night-1 are shards of 2")
    assert not (tmp_path / "out").exists()
    only_one = tmp_path / "one"
    shard_record(only_one, 1, 2, [t(1)])
    done = ootci("shards", "merge", str(only_one), "--out", str(tmp_path / "out"), "--expect", "2")
    [merged] = records_under(tmp_path / "out")
    assert merged.stage("integration").root_cause.summary == "shard 2/2 left no record: its tests did not run"
    assert merged.status is Status.failed and done.returncode == 0


def test_a_shard_whose_build_failed_fails_the_merge(tmp_path):
    shard_record(tmp_path / "runs", 1, 2, [t(1)])
    shard_record(tmp_path / "runs", 2, 2, [t(2)], build=Status.failed, status=Status.failed)
    written, _ = shards.merge([tmp_path / "runs"], tmp_path / "out")
    merged = written[0]
    assert merged.stage("build").status is Status.failed
    assert merged.stage("build").summary.startswith("shard 2/2: built in shard 2 (other shards: 1/2 passed)")
    integration = merged.stage("integration")
    assert integration.status is Status.failed and "shard 2/2: " in integration.summary
    assert "its tests did not run" in integration.summary
    assert merged.status is Status.failed and merged.first_problem() == "build: ValueError: no SDK"


def test_merge_bad_input_is_one_line(tmp_path):
    shard_record(tmp_path / "runs", 1, 2, [t(1)])
    shard_record(tmp_path / "runs", 2, 3, [t(2)])
    disagree = ootci("shards", "merge", str(tmp_path / "runs"), "--out", str(tmp_path / "out"))
    assert disagree.returncode == 2 and len(disagree.stderr.strip().splitlines()) == 1
    assert "the records disagree on N" in disagree.stderr
    nodir = ootci("shards", "merge", str(tmp_path / "nope"), "--out", str(tmp_path / "out"))
    assert nodir.returncode == 2
    assert nodir.stderr.strip() == f"ootci: shards merge: {tmp_path / 'nope'} is not a directory"
    expect = ootci("shards", "merge", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--expect", "0")
    assert expect.returncode == 2 and expect.stderr.strip() == "ootci: --expect 0: must be at least 1"
    (tmp_path / "file").write_text("")
    out_file = ootci("shards", "merge", str(tmp_path / "runs"), "--out", str(tmp_path / "file"))
    assert out_file.returncode == 8 and "is not a directory" in out_file.stderr
    assert not (tmp_path / "out").exists()
    (tmp_path / "unsharded").mkdir()
    nothing = ootci("shards", "merge", str(tmp_path / "unsharded"), "--out", str(tmp_path / "out"))
    assert nothing.returncode == 0 and "no shard records" in nothing.stdout


# -- for real: the OpenReg integration suite, whole and in three shards ---------------------

def same(outcome: Outcome) -> str:
    # A test that needed a retry on one machine may pass at once on another: flaky = passed.
    return "passed" if outcome in (Outcome.passed, Outcome.flaky) else outcome.value


@pytest.mark.slow
def test_openreg_suites_in_three_shards_merged_equal_the_unsharded_run(torch_layer, tmp_path_factory, tmp_path):
    # The unsharded run is the session's OpenReg run on 2.13.0, which the release matrix
    # (tests/torch_supply/test_torch_releases.py) also checks: the same command, made once.
    whole = openreg_on_2_13(tmp_path_factory)
    assert whole.returncode in (0, 1), whole.stderr
    [unsharded] = records_under(whole.out)
    for suite in ("smoke", "integration"):
        assert unsharded.stage(suite).status not in (Status.blocked, Status.skipped), unsharded.first_problem()
    for k in (1, 2, 3):
        done = ootci(*OPENREG_ON_2_13, "--shard", f"{k}/3", "--shard-group", "test-group",
                     "--out", str(tmp_path / "shards"), timeout=1800)
        assert done.returncode in (0, 1), done.stderr
    parts = records_under(tmp_path / "shards")
    assert sorted(p.shard for p in parts) == ["1/3", "2/3", "3/3"]
    assert {p.shard_group for p in parts} == {"test-group"}
    assert all(p.command == f"{unsharded.command} --shard {p.shard}" for p in parts), [p.command for p in parts]
    for part in parts:  # every shard builds, installs and checks autoload on its own machine
        assert [s.name for s in part.stages if s.status is Status.passed][:4] == ["torch", "build", "install",
                                                                                    "autoload"]
        share = len(part.tests) / len(unsharded.tests)
        assert 0.25 < share < 0.42, (part.shard, len(part.tests), len(unsharded.tests))

    merged_run = ootci("shards", "merge", str(tmp_path / "shards"), "--out", str(tmp_path / "merged"))
    assert merged_run.returncode == 0, merged_run.stderr
    [merged] = records_under(tmp_path / "merged")
    key = lambda r: {(x.suite, x.id, same(x.outcome)) for x in r.tests}  # noqa: E731
    assert len(merged.tests) == len(unsharded.tests) > 3000
    assert key(merged) == key(unsharded)
    assert merged.status is unsharded.status
    assert merged.stage("integration").status is unsharded.stage("integration").status
    assert merged.test_ids_hash == unsharded.test_ids_hash
    assert merged.problems == unsharded.problems
    assert merged.command == unsharded.command


def _pytest_under_xdist(tmp_path: Path, backend_source: str, test_source: str) -> tuple[list[str], Path]:
    """pytest -n 2 with the plugin importing `fakebackend`, which writes down each process that
    imports it; the lines written and the JUnit file."""
    imported = tmp_path / "imported"
    (tmp_path / "fakebackend.py").write_text(textwrap.dedent(f"""\
        import os
        with open({str(imported)!r}, "a") as f:
            f.write(os.environ.get("PYTEST_XDIST_WORKER", "controller") + "\\n")
        """) + backend_source)
    (tmp_path / "check_import.py").write_text(test_source)
    junit_file = tmp_path / "junit.xml"
    done = plugin_pytest_under_xdist(tmp_path, "check_import.py", "--ootci-import", "fakebackend",
                                     "--ootci-suite", "imports", "--ootci-junit", str(junit_file),
                                     path=(str(tmp_path),))
    assert done.returncode in (0, 1, 2), done.stdout + done.stderr
    return sorted(imported.read_text().split()) if imported.exists() else [], junit_file


def test_the_xdist_controller_does_not_import_the_backend(tmp_path):
    """Each worker imports torch and the backend; the controller, which runs no test, does not
    (about 2 s of CPU before the workers start, in every integration run)."""
    imported, junit_file = _pytest_under_xdist(tmp_path, "", "def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    assert imported == ["gw0", "gw1"]
    assert junit_file.read_text().count("<testcase ") == 2


def test_under_xdist_a_collection_error_still_names_the_backends_import_error(tmp_path):
    """A worker's collection error reaches the controller with the worker's reason: the
    controller still imports nothing."""
    imported, junit_file = _pytest_under_xdist(tmp_path, "raise RuntimeError('no device driver')\n",
                                               "import fakebackend\n\ndef test_one():\n    pass\n")
    assert set(imported) == {"gw0", "gw1"}  # each twice: in pytest_configure, then collecting the module
    cases = [case for case in junit.parse(junit_file).cases if case.outcome is Outcome.error]
    assert cases and all(case.message.startswith(
        "--ootci-import: cannot import 'fakebackend': "
        "RuntimeError: no device driver (collecting: ") for case in cases), cases
    assert not any("ootci: the backend's import error" in case.output for case in cases)  # said once, as the message
