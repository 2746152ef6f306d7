"""`ootci dashboard publish`: new records join the data branch, and the site comes from its tip
as it is after the push (dashboard/publish.py); what update-dashboard and the nightly's
bisections run in one step."""

from __future__ import annotations

import datetime as dt
import io
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.support.act_cases import data_branch_files
from tests.support.cli import ootci
from tests.support.fake_github import run_artifact
from tests.support.other_publishers import push_after_the_next_push

NOW = dt.datetime(2026, 11, 26, 3, 17, tzinfo=dt.timezone.utc)


def run_id(backend: str, suffix: str) -> str:
    return f"{backend}-{NOW:%Y%m%dT%H%M%SZ}-{suffix}"


def unpacked(directory: Path, backend: str, suffix: str) -> str:
    """One run's artifact, as download-artifact leaves it (the run directory under `directory`)."""
    rid = run_id(backend, suffix)
    zipfile.ZipFile(io.BytesIO(run_artifact(rid, backend, NOW))).extractall(directory)
    return rid


@pytest.fixture
def data(tmp_path) -> Path:
    remote = tmp_path / "data.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    return remote


def pages(site: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in [*site.rglob("*.html"), *site.rglob("*.json")])


def test_publish_pushes_the_new_runs_and_builds_the_site_from_the_tip_after_the_push(tmp_path, data):
    """Between this publisher's push and its site, another publisher's run lands on the tip (a
    hook on the remote): it is on the page, because the page comes from the tip, not from the
    history this publisher merged."""
    first = unpacked(tmp_path / "night-1", "openreg", "aaaaaa")
    assert ootci("dashboard", "publish", str(tmp_path / "night-1"), "--history", str(tmp_path / "h1"),
                 "--site", str(tmp_path / "site"), "--remote", str(data)).returncode == 0
    assert f"runs/{first}/record.json" in data_branch_files(data)

    other = tmp_path / "other"
    straggler = unpacked(tmp_path / "other-artifact", "straggler", "cccccc")
    merged = ootci("history", "merge", str(tmp_path / "other-artifact"), "--into", str(other / "runs"))
    assert merged.returncode == 0, merged.stderr
    push_after_the_next_push(data, other)
    second = unpacked(tmp_path / "night-2", "openreg", "bbbbbb")
    published = ootci("dashboard", "publish", str(tmp_path / "night-2"), "--history", str(tmp_path / "h2"),
                      "--site", str(tmp_path / "site"), env={"OOTCI_DATA_REMOTE": str(data)})

    assert published.returncode == 0, published.stderr
    assert "1 run(s) and 0 bisection(s) added; data branch: pushed to ootci-data" in published.stdout
    assert {f"runs/{r}/record.json" for r in (first, second, straggler)} <= data_branch_files(data)
    assert not (tmp_path / "h2" / "runs" / straggler).exists(), "the hook pushed after this publisher's push"
    site = pages(tmp_path / "site")
    assert all(r in site for r in (first, second, straggler))


def test_without_push_the_merged_history_alone_makes_the_site(tmp_path, data):
    rid = unpacked(tmp_path / "records", "openreg", "aaaaaa")
    published = ootci("dashboard", "publish", str(tmp_path / "records"), "--history", str(tmp_path / "history"),
                      "--site", str(tmp_path / "site"), "--remote", str(data), "--no-push")
    assert published.returncode == 0, published.stderr
    assert "data branch: not pushed" in published.stdout
    assert rid in pages(tmp_path / "site")
    assert subprocess.run(["git", "--git-dir", str(data), "rev-parse", "-q", "--verify", "ootci-data"],
                          capture_output=True).returncode != 0


def test_nothing_to_add_still_publishes_the_tip(tmp_path, data):
    """Every backend job failed before uploading: no records directory at all; the page still
    comes from the branch as others left it."""
    rid = unpacked(tmp_path / "earlier", "openreg", "aaaaaa")
    assert ootci("dashboard", "publish", str(tmp_path / "earlier"), "--history", str(tmp_path / "h1"),
                 "--site", str(tmp_path / "s1"), "--remote", str(data)).returncode == 0
    published = ootci("dashboard", "publish", str(tmp_path / "never-downloaded"), "--history", str(tmp_path / "h2"),
                      "--site", str(tmp_path / "s2"), "--remote", str(data))
    assert published.returncode == 0, published.stderr
    assert "0 run(s) and 0 bisection(s) added; data branch: nothing new to commit" in published.stdout
    assert rid in pages(tmp_path / "s2")


def test_a_history_directory_in_use_is_one_line(tmp_path, data):
    (tmp_path / "history" / "something").mkdir(parents=True)
    published = ootci("dashboard", "publish", str(tmp_path / "records"), "--history", str(tmp_path / "history"),
                      "--site", str(tmp_path / "site"), "--remote", str(data))
    assert published.returncode != 0
    assert published.stderr.count("\n") == 1 and "exists and is not empty" in published.stderr
