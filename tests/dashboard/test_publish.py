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

NOW = dt.datetime(2026, 11, 26, 3, 17, tzinfo=dt.UTC)


def run_id(backend: str, suffix: str) -> str:
    return f"{backend}-{NOW:%Y%m%dT%H%M%SZ}-{suffix}"


def unpacked(directory: Path, backend: str, suffix: str, trigger: str = "manual", pr: int | None = None) -> str:
    """One run's artifact, as download-artifact leaves it (the run directory under `directory`)."""
    rid = run_id(backend, suffix)
    zipfile.ZipFile(io.BytesIO(run_artifact(rid, backend, NOW, trigger=trigger, pr=pr))).extractall(directory)
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


def outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_a_deploy_skips_a_site_the_data_branch_has_moved_past(tmp_path, data):
    """Issue 54: four deployers share Pages, and a deploy could put a site built from an older tip of the
    data branch over a newer one. Each site's publish says the commit it was built from (`data-tip`);
    `ootci history tip --built` says whether the branch is still there: a deploy whose branch moved is
    skipped, the deploy of the publisher that moved it carries the newer history."""
    first = unpacked(tmp_path / "night-1", "openreg", "aaaaaa")
    out = tmp_path / "publish-1.out"
    published = ootci("dashboard", "publish", str(tmp_path / "night-1"), "--history", str(tmp_path / "h1"),
                      "--site", str(tmp_path / "site-1"), "--remote", str(data), env={"GITHUB_OUTPUT": str(out)})
    assert published.returncode == 0, published.stderr
    built = outputs(out)["data-tip"]
    assert built == subprocess.run(["git", "--git-dir", str(data), "rev-parse", "ootci-data"], check=True,
                                   capture_output=True, text=True).stdout.strip()

    tip_out = tmp_path / "tip-1.out"
    still = ootci("history", "tip", "--built", built, "--remote", str(data), env={"GITHUB_OUTPUT": str(tip_out)})
    assert still.returncode == 0, still.stderr
    assert outputs(tip_out) == {"current": "true", "tip": built}

    unpacked(tmp_path / "night-2", "openreg", "bbbbbb")
    pulled_out = tmp_path / "pull.out"
    assert ootci("dashboard", "publish", str(tmp_path / "night-2"), "--history", str(tmp_path / "h2"),
                 "--site", str(tmp_path / "site-2"), "--remote", str(data)).returncode == 0
    assert ootci("history", "pull", str(tmp_path / "h3"), "--remote", str(data),
                 env={"GITHUB_OUTPUT": str(pulled_out)}).returncode == 0
    newer = outputs(pulled_out)["commit"]
    assert newer != built and first

    tip_out.unlink()
    moved = ootci("history", "tip", "--built", built, "--remote", str(data), env={"GITHUB_OUTPUT": str(tip_out)})
    assert moved.returncode == 0, moved.stderr
    assert outputs(tip_out) == {"current": "false", "tip": newer}
    assert moved.stdout.strip() == (f"ootci: history tip: ootci-data moved from {built[:12]} to {newer[:12]} after "
                                    "this site was built: this deploy is skipped, the deploy of whoever moved it "
                                    "carries the newer history")
    bad = ootci("history", "tip", "--built", "main", "--remote", str(data))
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "ootci: --built: expected the 40 hexadecimal digits of a commit, got 'main'")


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


def test_a_pr_runs_publish_refuses_what_its_jobs_cannot_have_made(tmp_path, data):
    """Issue 43: the PR's code can upload artifacts into its own run, and pytorch-pr.yml's publish pushed
    whatever `ootci-run-*` it found. With the run's trigger and PR given, a forged nightly record, a record
    of another PR and a bisection are refused, named, and never reach the data branch or the page; the
    PR's own record is published."""
    records = tmp_path / "records"
    own = unpacked(records, "openreg", "aaaaaa", trigger="pr", pr=167123)
    forged = unpacked(records, "acme-npu", "bbbbbb", trigger="nightly")
    other_pr = unpacked(records, "openreg", "cccccc", trigger="pr", pr=1)
    bisection = records / "openreg-bisect-x"
    bisection.mkdir()
    (bisection / "bisect.json").write_text("{}")  # refused before it is even read
    published = ootci("dashboard", "publish", str(records), "--history", str(tmp_path / "history"),
                      "--site", str(tmp_path / "site"), "--remote", str(data),
                      "--accept-trigger", "pr", "--accept-pr", "167123")

    assert published.returncode == 0, published.stderr
    assert f"refused {records / forged}: its trigger is 'nightly', and this run publishes pr runs" in published.stdout
    assert (f"refused {records / other_pr}: it is a run of PR #1, and this run publishes PR #167123's"
            in published.stdout)
    assert f"refused {bisection}: a bisection" in published.stdout
    assert "1 run(s) and 0 bisection(s) added" in published.stdout
    on_branch = data_branch_files(data)
    assert f"runs/{own}/record.json" in on_branch
    assert not any(forged in f or other_pr in f or "bisect" in f for f in on_branch)
    site = pages(tmp_path / "site")
    assert own in site and forged not in site and other_pr not in site


def test_a_nightly_publishes_only_its_own_trigger_and_says_what_it_refused(tmp_path, data):
    records = tmp_path / "records"
    night = unpacked(records, "openreg", "aaaaaa", trigger="nightly")
    pr_run = unpacked(records, "openreg", "bbbbbb", trigger="pr", pr=7)
    published = ootci("dashboard", "publish", str(records), "--history", str(tmp_path / "history"),
                      "--site", str(tmp_path / "site"), "--remote", str(data), "--accept-trigger", "nightly")
    assert published.returncode == 0, published.stderr
    assert f"refused {records / pr_run}: its trigger is 'pr'" in published.stdout
    assert {f"runs/{night}/record.json"} == {f for f in data_branch_files(data) if f.endswith("record.json")}
    # Without the run's triggers (a publish by hand) everything is taken, as before.
    merged = ootci("history", "merge", str(records), "--into", str(tmp_path / "all"))
    assert merged.returncode == 0 and "2 added" in merged.stdout


def test_the_bisections_publish_takes_bisections_and_no_run_beside_or_inside_them(tmp_path):
    """Issue 54, high: nightly.yml's publish-bisections merged whatever its `ootci-bisect-*` artifacts held,
    and a record.json placed beside a bisection's directory joined the history as a run. With
    `--accept-trigger bisections` every run record is refused, named; a run inside a bisection's
    directory (its steps) is part of the bisection, never a run of its own."""
    from ootci.runner.models import BisectRecord

    records = tmp_path / "bisections"
    bisect_id = "bisect-openreg-20261126T031700Z-abcdef"
    bisection = records / "ootci-bisect-openreg-1-1" / bisect_id
    unpacked(bisection / "steps", "openreg", "stepstp", trigger="nightly")
    (bisection / "bisect.json").write_text(BisectRecord(bisect_id=bisect_id, backend="openreg", started_at=NOW,
                                                        good="2.13.0", bad="2.14.0").model_dump_json())
    beside = unpacked(records / "ootci-bisect-openreg-1-1", "acme-npu", "bbbbbb", trigger="nightly")
    into = tmp_path / "history" / "runs"

    merged = ootci("history", "merge", str(records), "--into", str(into), "--accept-trigger", "bisections")

    assert merged.returncode == 0, merged.stderr
    assert (f"refused {records / 'ootci-bisect-openreg-1-1' / beside}: it is a run, and this run publishes "
            "only bisections") in merged.stdout
    assert sorted(p.name for p in into.iterdir() if not p.name.startswith(".")) == [bisect_id]
    assert (into / bisect_id / "bisect.json").is_file()


@pytest.mark.parametrize("args, message", [
    (["--accept-trigger", "bisections,nightly"], "--accept-trigger bisections: publishes no run"),
    (["--accept-trigger", "nightly,schedule"], "--accept-trigger: unknown trigger 'schedule'"),
    (["--accept-pr", "0"], "--accept-pr: expected a PR number, got 0"),
])
def test_what_a_publisher_accepts_is_checked(tmp_path, data, args, message):
    published = ootci("history", "merge", str(tmp_path), "--into", str(tmp_path / "into"), *args)
    assert published.returncode == 2 and message in published.stderr
