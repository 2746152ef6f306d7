"""The act harness's stand-ins for GitHub's remote actions (tests/support/act_stand_ins.py) keep
the contract the workflows rely on: run here as act runs them, a process with INPUT_* variables."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.support import act_stand_ins


@pytest.fixture
def job(tmp_path, monkeypatch):
    """Run a stand-in as a step of a job whose workspace and $OOTCI_ACT_DIR are under tmp_path."""
    workspace, state = tmp_path / "workspace", tmp_path / "act"
    workspace.mkdir()
    state.mkdir()

    def step(kind: str, attempt: int = 1, **inputs: str) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
        output = tmp_path / f"output-{kind}"
        output.write_text("")
        env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "OOTCI_ACT_DIR": str(state),
               "GITHUB_WORKSPACE": str(workspace), "GITHUB_OUTPUT": str(output), "RUNNER_TEMP": str(tmp_path / "temp"),
               "GITHUB_RUN_ATTEMPT": str(attempt), "GITHUB_REPOSITORY": "ootci/ootci",
               **{f"INPUT_{k.upper()}": v for k, v in inputs.items()}}
        done = subprocess.run([sys.executable, str(act_stand_ins.SCRIPT), kind], env=env, cwd=workspace,
                              capture_output=True, text=True, timeout=60)
        outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
        return done, outputs

    return workspace, state, step


def test_an_artifact_name_is_taken_once_per_run_unless_overwritten(job):
    workspace, state, step = job
    (workspace / "out" / "run-1").mkdir(parents=True)
    (workspace / "out" / "run-1" / "record.json").write_text("{}")
    (workspace / "out" / ".hidden").write_text("secret")
    done, outputs = step("upload-artifact", NAME="ootci-run-x-1", PATH="out", IF_NO_FILES_FOUND="error")
    assert done.returncode == 0, done.stdout
    assert sorted(p.relative_to(state / "artifacts").as_posix() for p in (state / "artifacts").rglob("*")
                  if p.is_file()) == ["ootci-run-x-1/run-1/record.json"]  # a directory's contents; no hidden file
    assert outputs["artifact-id"] == "ootci-run-x-1"
    again, _ = step("upload-artifact", NAME="ootci-run-x-1", PATH="out")
    assert again.returncode == 1 and "(409) Conflict" in again.stdout
    assert step("upload-artifact", NAME="ootci-run-x-1", PATH="out", OVERWRITE="true")[0].returncode == 0


@pytest.mark.parametrize("behaviour, code, said", [("error", 1, "::error::No files were found"),
                                                   ("warn", 0, "::warning::No files were found"),
                                                   ("ignore", 0, "")])
def test_no_files_to_upload_is_what_if_no_files_found_says(job, behaviour, code, said):
    _, state, step = job
    done, _ = step("upload-artifact", NAME="a", PATH="nothing/*.whl", IF_NO_FILES_FOUND=behaviour)
    assert done.returncode == code and said in done.stdout
    assert not (state / "artifacts" / "a").exists()


def test_a_glob_uploads_the_files_at_the_artifacts_root(job):
    workspace, state, step = job
    (workspace / "wheel").mkdir()
    (workspace / "wheel" / "torch-2.13.0-cp311-none-any.whl").write_text("w")
    assert step("upload-artifact", NAME="torch-wheel-1", PATH="wheel/*.whl")[0].returncode == 0
    assert (state / "artifacts" / "torch-wheel-1" / "torch-2.13.0-cp311-none-any.whl").is_file()


def upload(step, workspace: Path, name: str, attempt: int) -> None:
    source = workspace / f"src-{name}"
    (source / f"run-{name}").mkdir(parents=True)
    (source / f"run-{name}" / "record.json").write_text(name)
    done, _ = step("upload-artifact", attempt=attempt, NAME=name, PATH=source.name)
    assert done.returncode == 0, done.stdout


def test_a_download_sees_earlier_attempts_only_by_run_id_with_a_token(job):
    """As the workflows' comments say: what "Re-run failed jobs" did not re-run uploaded in an
    earlier attempt, and the runtime token does not list it."""
    workspace, _, step = job
    upload(step, workspace, "ootci-run-a-1", attempt=1)
    upload(step, workspace, "ootci-run-b-2", attempt=2)
    done, _ = step("download-artifact", attempt=2, PATTERN="ootci-run-*", PATH="plain")
    assert done.returncode == 0 and sorted(p.name for p in (workspace / "plain").iterdir()) == ["ootci-run-b-2"]
    done, outputs = step("download-artifact", attempt=2, PATTERN="ootci-run-*", PATH="by-id", GITHUB_TOKEN="t",
                         RUN_ID="4711")
    assert sorted(p.name for p in (workspace / "by-id").iterdir()) == ["ootci-run-a-1", "ootci-run-b-2"]
    assert outputs["download-path"] == str(workspace / "by-id")


def test_a_pattern_takes_brace_alternatives_and_merge_multiple_merges(job):
    workspace, _, step = job
    for name in ("ootci-shard-x-1-1", "ootci-shard-x-2-1", "ootci-shard-xy-1-1"):
        upload(step, workspace, name, attempt=1)
    step("download-artifact", PATTERN="{ootci-shard-x-1-1,ootci-shard-x-2-1}", PATH="shards", MERGE_MULTIPLE="true")
    assert (sorted(p.name for p in (workspace / "shards").iterdir())
            == ["run-ootci-shard-x-1-1", "run-ootci-shard-x-2-1"])


def test_a_download_by_name_that_is_not_there_fails(job):
    workspace, _, step = job
    upload(step, workspace, "dist", attempt=1)
    done, _ = step("download-artifact", NAME="torch-wheel-1", PATH="t")
    assert done.returncode == 1 and "Artifact not found for name: torch-wheel-1" in done.stdout
    assert step("download-artifact", NAME="dist", PATH="d")[0].returncode == 0
    assert (workspace / "d" / "run-dist" / "record.json").read_text() == "dist"


def test_the_cache_saves_a_key_once_a_lookup_finds_it_and_a_restore_misses(job):
    workspace, state, step = job
    (workspace / "layer").mkdir()
    (workspace / "layer" / "torch.so").write_bytes(b"x" * 10)
    done, outputs = step("cache-restore", KEY="k1", PATH="layer", RESTORE_KEYS="k")
    assert done.returncode == 0 and "cache-hit" not in outputs and outputs["cache-primary-key"] == "k1"
    assert step("cache-save", KEY="k1", PATH="layer")[0].returncode == 0
    again, _ = step("cache-save", KEY="k1", PATH="layer")
    assert again.returncode == 0 and "Unable to reserve cache with key k1" in again.stdout
    assert act_stand_ins_entries(state) == {"k1": (1, 10)}
    # The stand-in keeps no contents of what a workflow saved: a lookup finds the key, a restore does not.
    assert step("cache-restore", KEY="k1", PATH="layer", LOOKUP_ONLY="true")[1]["cache-hit"] == "true"
    assert step("cache-restore", KEY="k1", PATH="layer", FAIL_ON_CACHE_MISS="true")[0].returncode == 1
    logged = [json.loads(line) for line in (state / "cache" / "requests.jsonl").read_text().splitlines()]
    assert [(r["key"], r["lookup-only"]) for r in logged] == [("k1", False), ("k1", True), ("k1", False)]


def test_a_planted_entry_is_really_restored_and_a_lookup_downloads_nothing(job):
    """What a PR's code could have saved: the stand-in extracts it, so a workflow that restored it would
    really get it (the act tests show that no trusted run does)."""
    workspace, state, step = job
    act_stand_ins.plant(state, "ootci-main-layer", workspace / "layer", {"planted-by-a-pr.txt": b"boo"})
    found, outputs = step("cache-restore", KEY="ootci-main-layer", PATH="layer", LOOKUP_ONLY="true")
    assert found.returncode == 0 and outputs["cache-hit"] == "true" and not (workspace / "layer").exists()
    restored, outputs = step("cache-restore", KEY="ootci-pr-layer", PATH="layer", RESTORE_KEYS="ootci-main-")
    assert restored.returncode == 0 and outputs["cache-hit"] == "false"
    assert outputs["cache-matched-key"] == "ootci-main-layer"
    assert (workspace / "layer" / "planted-by-a-pr.txt").read_bytes() == b"boo"


def act_stand_ins_entries(state: Path) -> dict[str, tuple[int, int]]:
    from tests.support.act_cases import cache_entries
    return {key: (entry["files"], entry["bytes"]) for key, entry in cache_entries(state).items()}


def test_pages_deploys_the_named_artifact_of_any_attempt(job):
    workspace, state, step = job
    (workspace / "site" / "backends").mkdir(parents=True)
    (workspace / "site" / "index.html").write_text("<h1>ootci</h1>")
    (workspace / "site" / "backends" / "openreg.html").write_text("openreg")
    (workspace / "site" / ".nojekyll").write_text("")  # hidden: upload-pages-artifact v5 leaves it out
    assert step("upload-pages-artifact", attempt=1, PATH="site", NAME="github-pages-1")[0].returncode == 0
    with tarfile.open(state / "artifacts" / "github-pages-1" / "artifact.tar") as tar:
        assert sorted(tar.getnames()) == ["./backends", "./backends/openreg.html", "./index.html"]
    assert step("upload-pages-artifact", PATH="site", NAME="github-pages-hidden", INCLUDE_HIDDEN_FILES="true")[
        0].returncode == 0
    with tarfile.open(state / "artifacts" / "github-pages-hidden" / "artifact.tar") as tar:
        assert "./.nojekyll" in tar.getnames()
    done, outputs = step("deploy-pages", attempt=2, ARTIFACT_NAME="github-pages-1")
    assert done.returncode == 0 and outputs["page_url"] == "https://ootci.github.io/ootci/"
    assert (state / "site" / "backends" / "openreg.html").read_text() == "openreg"
    missing, _ = step("deploy-pages", ARTIFACT_NAME="github-pages-9")
    assert missing.returncode == 1 and "github-pages-9" in missing.stdout


def test_act_reads_the_workflows_with_self_references_resolved_and_without_cache_mode():
    """act's workflow schema predates GitHub's cache-mode and refuses the key: the copy act runs leaves it
    out (GitHub's cache service enforces it; the stand-in cache has no token to limit)."""
    from tests.support.act_harness import as_act_reads

    workflow = ("on: repository_dispatch\ncache-mode: read\njobs:\n  a:\n    cache-mode: none\n"
                "    uses: $/.github/workflows/pr.yml\n")
    assert as_act_reads(workflow) == "on: repository_dispatch\njobs:\n  a:\n    uses: ./.github/workflows/pr.yml\n"
    assert "uses: ootci/ootci/.github/workflows/pr.yml@" + "a" * 40 in as_act_reads(workflow, "a" * 40)
