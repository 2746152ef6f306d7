"""`ootci history` and `ootci summary`, run as the real command against real git repositories."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
from pathlib import Path

import pytest

from ootci.runner.models import RootCause, RunRecord, StageResult, Status, TorchInfo
from ootci.runner.records import record_files
from tests.support.cli import ootci

STARTED = dt.datetime(2026, 11, 21, 3, 17, tzinfo=dt.UTC)


def write_run(out: Path, run_id: str, status: Status = Status.passed, backend: str = "openreg",
              **record_fields) -> Path:
    stages = [StageResult(name="build", status=Status.passed, summary="built")]
    if status is not Status.passed:
        stages.append(StageResult(name="autoload", status=status, summary="import torch failed",
                                  root_cause=RootCause(kind="exception", summary="OSError: libhccl.so: cannot open")))
    record = RunRecord(run_id=run_id, backend=backend, device="openreg",
                       torch=TorchInfo(spec="2.13.0", version="2.13.0"),
                       started_at=STARTED, status=status, stages=stages, **record_fields)
    run_dir = out / run_id
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / "build.log").write_text("build output\n")
    (run_dir / "record.json").write_text(record.model_dump_json(indent=2))
    return run_dir


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout


# -- merge -------------------------------------------------------------------------

def test_merge_adds_new_runs_without_their_logs_and_keeps_existing_ones(tmp_path):
    history, artifacts = tmp_path / "history", tmp_path / "artifacts"
    write_run(history, "openreg-1")
    kept = (history / "openreg-1" / "record.json").read_text()
    # Downloaded artifacts nest run directories one level down, one folder per artifact.
    write_run(artifacts / "ootci-openreg-1", "openreg-1", status=Status.failed)
    write_run(artifacts / "ootci-openreg-1", "openreg-2")
    write_run(artifacts / "ootci-ascend-npu-1", "ascend-npu-3", status=Status.crashed, backend="ascend-npu")

    result = ootci("history", "merge", str(artifacts), "--into", str(history))

    assert result.returncode == 0, result.stderr
    assert "2 added, 1 already present, 0 skipped" in result.stdout
    assert sorted(p.name for p in history.iterdir()) == ["ascend-npu-3", "openreg-1", "openreg-2"]
    assert (history / "openreg-1" / "record.json").read_text() == kept  # immutable: never overwritten
    # The logs stay in the workflow run's artifacts (runner/history/history_store.py): the history keeps the header.
    assert [p.name for p in (history / "openreg-2").iterdir()] == ["record.json"]


def test_merge_skips_records_that_do_not_load_or_name_another_run(tmp_path):
    artifacts = tmp_path / "artifacts"
    (artifacts / "broken").mkdir(parents=True)
    (artifacts / "broken" / "record.json").write_text("{not json")
    renamed = write_run(artifacts, "openreg-9")
    renamed.rename(artifacts / "renamed")

    result = ootci("history", "merge", str(artifacts), "--into", str(tmp_path / "history"))

    assert result.returncode == 0, result.stderr
    assert "0 added, 0 already present, 2 skipped" in result.stdout
    assert list((tmp_path / "history").iterdir()) == []


def test_merge_of_a_missing_source_is_one_line_and_exit_2_unless_missing_is_ok(tmp_path):
    result = ootci("history", "merge", str(tmp_path / "nowhere"), "--into", str(tmp_path / "history"))
    assert result.returncode == 2
    assert result.stderr.strip() == f"ootci: history merge: {tmp_path / 'nowhere'} is not a directory"
    # After a run in which no backend job uploaded anything, the history still builds.
    result = ootci("history", "merge", str(tmp_path / "nowhere"), "--into", str(tmp_path / "history"), "--missing-ok")
    assert result.returncode == 0 and "0 added" in result.stdout


# -- fill-missing -------------------------------------------------------------------

RUN_ID = re.compile(r"(?P<backend>[a-z0-9-]+)-(?P<stamp>\d{8}T\d{6}Z)-[0-9a-f]{6}")


def test_fill_missing_writes_a_missing_record_for_each_matrix_entry_without_one(tmp_path):
    # The matrix exactly as the nightly's plan job prints it.
    matrix = ootci("matrix", "openreg", "gaudi-hpu", "--torch", "2.13.0")
    assert matrix.returncode == 0, matrix.stderr
    artifacts = tmp_path / "records"
    write_run(artifacts / "ootci-run-openreg-1", "openreg-1", trigger="nightly")  # openreg's job uploaded its record
    reason = "it never started, was cancelled, lost its runner or failed before ootci ran (backend jobs: failure)"

    result = ootci("history", "fill-missing", "--matrix", matrix.stdout, "--runs", str(artifacts), "--reason", reason)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"ootci: history {artifacts}: 2 matrix entries, 1 without a record"
    [written] = [p for p in artifacts.glob("*/record.json")]
    record = RunRecord.model_validate_json(written.read_text())
    assert record == record_files.read(written)
    assert written.parent.name == record.run_id and sorted(p.name for p in written.parent.iterdir()) == ["record.json"]
    match = RUN_ID.fullmatch(record.run_id)
    assert match and match["backend"] == "gaudi-hpu"
    assert f"gaudi-hpu: no record; wrote {record.run_id} (missing: {reason})" in result.stdout
    # Who, against what, and why, from the registry and the matrix entry.
    assert ((record.backend, record.device, record.trigger, record.torch.spec)
            == ("gaudi-hpu", "hpu", "nightly", "2.13.0"))
    assert record.status is Status.missing and not record.status.ok
    assert record.finished_at is not None and record.started_at.strftime("%Y%m%dT%H%M%SZ") == match["stamp"]
    [stage] = record.stages
    assert stage.status is Status.missing and stage.root_cause.kind == "missing"
    assert stage.root_cause.summary == f"no record from the backend job: {reason}"
    assert record.missing_reason == stage.root_cause.summary
    assert record.first_problem() == f"job: {stage.root_cause.summary}"
    assert record.command == "ootci run gaudi-hpu --torch 2.13.0"
    # gaudi-hpu's runner is the vendor's own: one too old for `uses: $/` fails before any step, which no step
    # can say (issue 54), so the record says the version it needs.
    assert stage.root_cause.hint.endswith(
        "its runner is self-hosted: one older than 2.336.0 fails while it sets up the job, on ootci's "
        "`uses: $/...` references, before any step (`./config.sh --version` on the runner prints its version)")

    # Run again (a re-run of publish): every entry has a record now.
    again = ootci("history", "fill-missing", "--matrix", matrix.stdout, "--runs", str(artifacts))
    assert again.returncode == 0 and "2 matrix entries, 0 without a record" in again.stdout
    assert len(list(artifacts.rglob("record.json"))) == 2

    # The missing record joins the history like any run, and the summary reports it worst.
    merged = ootci("history", "merge", str(artifacts), "--into", str(tmp_path / "history"), "--missing-ok")
    assert merged.returncode == 0 and "2 added" in merged.stdout
    github_output = tmp_path / "github_output"
    summary = ootci("summary", str(tmp_path / "history"), env={"GITHUB_OUTPUT": str(github_output)})
    assert github_output.read_text().splitlines()[0] == "status=missing"
    assert (f"| gaudi-hpu | ❓ missing | 2.13.0 | nightly | job: no record from the backend job: {reason} |"
            in summary.stdout)


def test_fill_missing_from_a_matrix_file_into_a_directory_that_does_not_exist_yet(tmp_path):
    # No backend job uploaded anything: download-artifact made no directory.
    matrix = tmp_path / "matrix.json"
    matrix.write_text(json.dumps({"include": [{"name": "openreg", "torch": "nightly"}, {"name": "openreg"}]}))
    runs = tmp_path / "records"

    result = ootci("history", "fill-missing", "--matrix", str(matrix), "--runs", str(runs), "--trigger", "pr",
                   "--pr", "175022")

    assert result.returncode == 0, result.stderr
    [written] = list(runs.glob("*/record.json"))  # a backend named twice is recorded once
    record = record_files.read(written)
    assert (record.backend, record.device, record.torch.spec, record.trigger, record.pr) == \
        ("openreg", "openreg", "nightly", "pr", 175022)
    assert record.missing_reason == ("no record from the backend job: it never started, was cancelled, "
                                     "lost its runner or failed before ootci ran")
    assert "2.336.0" not in record.stages[0].root_cause.hint  # a hosted runner (the default): always recent


@pytest.mark.parametrize("matrix, code, message", [
    ('{"include": [', 2, "--matrix: not valid JSON: Expecting value (line 1 column 14)"),
    ("nowhere.json", 2, "--matrix nowhere.json: cannot read: No such file or directory"),
    ('{"matrix": []}', 2, '--matrix: expected {"include": [...]} as `ootci matrix` prints it'),
    ('{"include": [{"name": "openreg"}, {"torch": "2.13.0"}]}', 2, "--matrix: include[1].name: missing"),
    ('{"include": [{"name": "openreg", "torch": 2}]}', 2,
     "--matrix: include[0].torch: expected a non-empty string, got 2"),
    ('{"include": ["openreg"]}', 2, '--matrix: include[0]: expected an object, got "openreg"'),
    ('{"include": [{"name": "no-such-backend"}]}', 4, "--matrix: include[0].name: unknown backend 'no-such-backend'"),
], ids=["json", "file", "shape", "name", "torch", "entry", "unknown"])
def test_fill_missing_bad_matrix_is_one_line_naming_the_field(tmp_path, matrix, code, message):
    result = ootci("history", "fill-missing", "--matrix", matrix, "--runs", str(tmp_path / "records"), cwd=tmp_path)
    assert result.returncode == code
    [line] = result.stderr.splitlines()
    assert line.startswith(f"ootci: {message}"), line
    assert not (tmp_path / "records").exists()


# -- push --------------------------------------------------------------------------

@pytest.fixture
def bare_remote(tmp_path) -> Path:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    return remote


def test_push_creates_the_branch_then_adds_to_it_and_survives_a_concurrent_push(tmp_path, bare_remote):
    first = tmp_path / "first"
    write_run(first, "openreg-1")
    result = ootci("history", "push", str(first), "--branch", "ootci-data", "--remote", str(bare_remote))
    assert result.returncode == 0, result.stderr
    assert "pushed to ootci-data" in result.stdout
    assert git(bare_remote, "ls-tree", "-r", "--name-only", "ootci-data").split() == [
        "openreg-1/logs/build.log", "openreg-1/record.json"]

    # Two jobs clone the branch; the other one pushes first.
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for clone in (mine, theirs):
        subprocess.run(["git", "clone", "-q", "-b", "ootci-data", str(bare_remote), str(clone)], check=True)
    write_run(theirs, "openreg-2")
    assert ootci("history", "push", str(theirs), "--branch", "ootci-data").returncode == 0
    write_run(mine, "openreg-3")
    result = ootci("history", "push", str(mine), "--branch", "ootci-data")

    assert result.returncode == 0, result.stderr
    files = git(bare_remote, "ls-tree", "-r", "--name-only", "ootci-data").split()
    assert {f.split("/")[0] for f in files} == {"openreg-1", "openreg-2", "openreg-3"}
    assert "nothing new to commit" in ootci("history", "push", str(mine), "--branch", "ootci-data").stdout


def test_pushers_started_at_the_same_moment_all_land(tmp_path, bare_remote):
    """Publishers are in no concurrency group: jobs of several runs push the data branch at the
    same time. Four `ootci history push` processes, started together from clones of one tip,
    each with a record of its own: every push succeeds and every record is on the branch."""
    from tests.support.cli import OOTCI

    seed = tmp_path / "seed"
    write_run(seed, "openreg-0")
    assert ootci("history", "push", str(seed), "--branch", "ootci-data", "--remote", str(bare_remote)).returncode == 0
    clones = []
    for i in range(1, 5):
        clone = tmp_path / f"job{i}"
        subprocess.run(["git", "clone", "-q", "-b", "ootci-data", str(bare_remote), str(clone)], check=True)
        write_run(clone, f"openreg-{i}")
        clones.append(clone)
    procs = [subprocess.Popen([str(OOTCI), "history", "push", str(clone), "--branch", "ootci-data"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for clone in clones]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    assert all(code == 0 for code, _, _ in results), results
    files = git(bare_remote, "ls-tree", "-r", "--name-only", "ootci-data").split()
    assert {f.split("/")[0] for f in files} == {f"openreg-{i}" for i in range(5)}


def test_push_without_any_remote_names_what_is_missing(tmp_path):
    write_run(tmp_path / "history", "openreg-1")
    env = {"GITHUB_REPOSITORY": "", "GITHUB_SERVER_URL": "", "OOTCI_DATA_REMOTE": ""}
    result = ootci("history", "push", str(tmp_path / "history"), env=env)
    assert result.returncode == 2
    assert "no --remote, no 'origin', no $OOTCI_DATA_REMOTE and no $GITHUB_REPOSITORY" in result.stderr


def test_ootci_data_remote_stands_in_for_the_workflows_repository(tmp_path, bare_remote):
    """Without --remote, pull and push use $OOTCI_DATA_REMOTE before $GITHUB_REPOSITORY: the
    workflows name no remote, and a mirror (or the act tests' bare repository) takes its place."""
    env = {"OOTCI_DATA_REMOTE": str(bare_remote), "GITHUB_REPOSITORY": "ootci/ootci",
           "GITHUB_SERVER_URL": "https://github.invalid"}
    first = tmp_path / "first"
    assert ootci("history", "pull", str(first), env=env).returncode == 0
    write_run(first / "runs", "openreg-1")
    pushed = ootci("history", "push", str(first), env=env)
    assert pushed.returncode == 0, pushed.stderr
    assert "runs/openreg-1/record.json" in git(bare_remote, "ls-tree", "-r", "--name-only", "ootci-data").split()


def test_pull_starts_an_empty_history_then_clones_what_was_pushed(tmp_path, bare_remote):
    first = tmp_path / "first"
    result = ootci("history", "pull", str(first), "--branch", "ootci-data", "--remote", str(bare_remote))
    assert result.returncode == 0, result.stderr
    assert "ootci-data does not exist yet" in result.stdout
    write_run(first / "runs", "openreg-1")
    assert ootci("history", "push", str(first), "--branch", "ootci-data").returncode == 0

    second = tmp_path / "second"
    result = ootci("history", "pull", str(second), "--branch", "ootci-data", "--remote", str(bare_remote))
    assert result.returncode == 0, result.stderr
    assert "cloned ootci-data" in result.stdout
    assert (second / "runs" / "openreg-1" / "record.json").is_file()
    write_run(second / "runs", "openreg-2")
    assert ootci("history", "push", str(second), "--branch", "ootci-data").returncode == 0
    assert "openreg-2/record.json" in git(bare_remote, "ls-tree", "-r", "--name-only", "ootci-data", "runs")

    result = ootci("history", "pull", str(second), "--remote", str(bare_remote))
    assert result.returncode == 8 and "exists and is not empty" in result.stderr


def test_push_token_travels_in_environment_config_not_argv_or_git_config(monkeypatch):
    from ootci.runner.history.data_branch import _auth_env

    monkeypatch.delenv("GIT_CONFIG_COUNT", raising=False)
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_example")
    env = _auth_env("https://github.com/ootci/ootci.git")
    assert env["GIT_CONFIG_COUNT"] == "1"
    assert env["GIT_CONFIG_KEY_0"] == "http.https://github.com/.extraheader"
    assert env["GIT_CONFIG_VALUE_0"] == "AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46Z2hzX2V4YW1wbGU="
    # A local or file remote never gets the header.
    assert "GIT_CONFIG_COUNT" not in _auth_env("/srv/remote.git")


# -- summary -------------------------------------------------------------------------

def test_summary_reports_the_worst_status_a_safe_artifact_name_and_a_table(tmp_path):
    out = tmp_path / "out"
    write_run(out, "openreg-1")
    write_run(out, "ascend-npu-2", status=Status.crashed, backend="ascend-npu", trigger="pr", pr=123456)
    github_output, step_summary = tmp_path / "github_output", tmp_path / "step_summary"

    result = ootci("summary", str(out), "--artifact", "ootci-run-/vendor/ci/backend.toml:1", "--step-summary",
                   env={"GITHUB_OUTPUT": str(github_output), "GITHUB_STEP_SUMMARY": str(step_summary)})

    assert result.returncode == 0, result.stderr
    *outputs, unforeseen = github_output.read_text().splitlines()
    assert outputs == ["status=crashed", "runs=2", "artifact=ootci-run-vendor-ci-backend.toml-1"]
    # The name to upload under when another job of the run took that one first: drawn anew each time.
    assert re.fullmatch(r"unforeseen=ootci-run-vendor-ci-backend\.toml-1-taken-[0-9a-f]{16}", unforeseen)
    again = tmp_path / "again"
    ootci("summary", str(out), "--artifact", "ootci-run-/vendor/ci/backend.toml:1", env={"GITHUB_OUTPUT": str(again)})
    assert again.read_text().splitlines()[-1] != unforeseen
    table = step_summary.read_text()
    assert table == result.stdout
    assert "| ascend-npu | 💥 crashed | 2.13.0 | pr #123456 | autoload: OSError: libhccl.so: cannot open |" in table
    assert "| openreg | ✅ passed | 2.13.0 | manual |  | `openreg-1` |" in table


def test_summary_without_records_says_missing_and_still_exits_0(tmp_path):
    github_output = tmp_path / "github_output"
    result = ootci("summary", str(tmp_path / "never-written"), env={"GITHUB_OUTPUT": str(github_output)})
    assert result.returncode == 0
    assert github_output.read_text().splitlines() == ["status=missing", "runs=0"]
    assert "No run records were written" in result.stdout
