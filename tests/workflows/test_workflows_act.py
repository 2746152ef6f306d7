"""The workflows, executed: backend.yml (called like a vendor calls it), nightly.yml and the
composite actions run under act in host mode, offline, with the real `ootci` commands on OpenReg.

Remote actions (setup-python, artifacts, the cache, Pages) are working stand-ins that keep what
they carry in $OOTCI_ACT_DIR (artifacts/, cache/, site/ as deployed), and data.git there is the
data branch's remote (tests/support/act_harness.py). The torch layer
of the test session is reused through $OOTCI_CACHE, so torch is not installed again.
What a vendor's repository and PyTorch's relay run through ootci is in test_workflows_act_vendor.py.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

from ootci.runner.models import Status
from tests.support import act_cases, act_stand_ins, real_wheels
from tests.support.act_cases import (
    BACKEND,
    REPO,
    TORCH,
    act_dir,
    act_marks,
    assert_every_remote_action_had_a_stand_in,
    cache_entries,
    cache_requests,
    data_branch_checkout,
    data_branch_files,
    merge_artifact,
    needs_dashboard,
    needs_openreg,
    plant_artifact,
    records_under,
)
from tests.support.act_harness import data_remote, run_act
from tests.support.cli import ootci
from tests.support.fake_github import REPOSITORY, TOKEN, FakeGitHub, run_artifact
from tests.support.fake_relay import FakeRelay
from tests.support.other_publishers import push_after_the_next_push
from tests.support.shared_runs import openreg_on_2_13

# The fixture from tests/support/act_cases.py, which the tests below take by name.
act_setup = act_cases.act_setup

pytestmark = act_marks


@needs_openreg
def test_backend_workflow_builds_verifies_and_tests_openreg(act_setup, tmp_path):
    workdir, root, env = act_setup
    ootci_act_dir = act_dir(root, "backend")
    result = run_act(workdir, "workflow_dispatch", "tests/workflows/caller.yml",
                     env={**env, "OOTCI_ACT_DIR": str(ootci_act_dir)},
                     inputs={"backend": BACKEND, "torch": TORCH, "suites": "smoke"},
                     log=tmp_path / "act.log", stubs=root / "stubs")

    assert result.returncode == 0, result.output[-6000:]
    assert_every_remote_action_had_a_stand_in(result.output)
    # The caller sees backend.yml's outputs.
    assert f"backend.yml outputs status=passed artifact=ootci-run-{BACKEND}-1" in result.output

    artifact = ootci_act_dir / "artifacts" / f"ootci-run-{BACKEND}-1"
    [record] = records_under(artifact)
    assert record.backend == BACKEND and record.status is Status.passed
    assert record.trigger == "manual"  # started by hand, and the caller set no trigger
    assert record.torch.version and record.torch.version.startswith(TORCH)
    stages = {s.name: s.status for s in record.stages}
    assert stages["build"] is Status.passed and stages["install"] is Status.passed
    assert stages.get("autoload") is Status.passed, stages
    assert stages.get("smoke") is Status.passed, stages
    assert stages.get("integration") is Status.skipped, stages
    assert any(t.suite == "smoke" for t in record.tests)
    run_dir = artifact / record.run_id
    assert list((run_dir / "junit").glob("*.xml.gz")), "the artifact carries the JUnit files"
    # A cached build writes no log; the stages that ran always do.
    assert (run_dir / "logs" / "smoke.log").is_file() and (run_dir / "logs" / "autoload.log").is_file()
    # A run by hand runs trusted code: its torch layer, the one directory, was saved under the key
    # `ootci cache-key` gave, and it restored nothing (it only looked its key up).
    keys = dict(line.split("=", 1) for line in ootci(
        "cache-key", BACKEND, "--torch", TORCH, env={"OOTCI_CACHE": env["OOTCI_CACHE"]}).stdout.splitlines())
    saved = cache_entries(ootci_act_dir)
    assert list(saved) == [keys["torch-key"]] and keys["torch-key"].startswith("ootci-main-")
    assert saved[keys["torch-key"]]["paths"] == [keys["torch-path"]] and saved[keys["torch-key"]]["files"] > 0
    assert [(r["key"], r["lookup-only"]) for r in cache_requests(ootci_act_dir)] == [(keys["torch-key"], True)]


@needs_openreg
def test_backend_workflow_with_three_shards_publishes_one_merged_record_with_the_unsharded_tests(act_setup,
                                                                                               tmp_path_factory,
                                                                                               tmp_path):
    workdir, root, env = act_setup
    ootci_act_dir = act_dir(root, "sharded")
    result = run_act(workdir, "workflow_dispatch", "tests/workflows/caller.yml",
                     env={**env, "OOTCI_ACT_DIR": str(ootci_act_dir)},
                     inputs={"backend": BACKEND, "torch": TORCH, "suites": "smoke", "shards": "3"},
                     log=tmp_path / "act.log", stubs=root / "stubs")

    assert result.returncode == 0, result.output[-6000:]
    assert f"backend.yml outputs status=passed artifact=ootci-run-{BACKEND}-1" in result.output
    shards = [records_under(ootci_act_dir / "artifacts" / f"ootci-shard-{BACKEND}-{k}-1") for k in (1, 2, 3)]
    assert [[r.shard for r in records] for records in shards] == [["1/3"], ["2/3"], ["3/3"]]
    # One shard group for the three, the one backend.yml made for this call (not ootci's default).
    [group] = {r.shard_group for records in shards for r in records}
    assert group.startswith("gh-") and group != f"gh-{group.split('-')[1]}"
    [merged] = records_under(ootci_act_dir / "artifacts" / f"ootci-run-{BACKEND}-1")
    assert merged.shard is None and merged.status is Status.passed
    # The same tests with the same outcomes as one unsharded run of the suite: the session's
    # OpenReg run on 2.13.0 (tests/support/shared_runs.py), whose smoke suite is this one.
    whole = openreg_on_2_13(tmp_path_factory)
    assert whole.returncode == 0, whole.stdout[-3000:]
    [unsharded] = records_under(whole.out)
    smoke = [t for t in unsharded.tests if t.suite == "smoke"]
    assert {t.id: t.outcome for t in merged.tests} == {t.id: t.outcome for t in smoke}
    assert sorted(len(records[0].tests) for records in shards) != [0, 0, len(merged.tests)]  # really split


# A backend whose CI job never starts: no runner has its labels. A job that starts and then fails
# at setup cannot stand in here: act (0.2.89) turns the failure of a job inside a called workflow
# into an error that ends its whole run, so the caller's publish never starts, whatever its `if:`.
# On GitHub publish runs (`!cancelled()`), and both leave the same thing behind: no artifact.
GHOST_MANIFEST = """\
name = "ghost"
description = "a backend whose CI job never starts"
device = "ghost"
distribution = "torch_ghost"
import_name = "torch_ghost"
entry_point = "torch_ghost = torch_ghost:_autoload"
[source]
path = "."
[ci]
runs_on = ["self-hosted", "ootci-offline-accelerator"]
"""


def record_paths_on_data_branch(data: Path) -> set[str]:
    return {name for name in data_branch_files(data) if name.endswith("/record.json")}


@needs_openreg
@needs_dashboard
def test_the_nightly_publishes_its_matrix_and_a_rerun_adds_only_its_own_new_records(act_setup, httpserver,
                                                                                     tmp_path):
    """nightly.yml, and then "Re-run failed jobs" of the same run.

    Attempt 1: the matrix has openreg and ghost, whose job never starts: openreg's record and a
    missing one for ghost (publish's `ootci history fill-missing`) join the history and the page.

    Attempt 2, on GitHub the same run: the backend job runs again and uploads its artifact beside
    attempt 1's (a run's artifacts outlive its attempts), and publish runs again on a fresh runner.
    Between the two attempts another publisher (the collector, a PR run) pushed a record of a
    backend this run does not have, and a third one pushes right after the re-run's own push (a
    hook on the data branch's remote). The re-run adds only its new records, and the site it builds
    comes from the data branch's tip as it is after its push: every run once, both other
    publishers' too, never the history this job merged into. (One act run of each attempt shows
    both, where two tests ran the nightly three times.)

    The relay (issue 53), in the same runs: with the `relay` input, each attempt reports openreg's
    result to a local server that plays PyTorch's relay, one `completed` callback under the
    pytorch/pytorch commit of the torch that ran; the forged record (another trigger) and ghost
    (no record) are not reported.

    The trust boundary (issue 43), shown in the same two runs: before attempt 1 a PR's code has planted
    a cache entry under the very key tonight's torch layer gets, with a file of its own in it, and an
    artifact in the run holding a record that claims to be a night (the run, by hand, is manual). No
    job of the nightly restores the entry (a lookup finds the key, so nothing is saved over it either),
    its file never reaches the layer, and publish refuses the forged record: it is neither on the data
    branch nor on the page.

    Issue 54, high: vendor code in the run has also taken openreg's own artifact name first, with a record
    of openreg in it. openreg's job uploads under a name nobody could know and says so in its annotations;
    publish and the relay job read the run through GitHub's API (a local stand-in that follows act: the
    stand-ins' artifacts and each job's `::notice` lines) and take only what the job of its backend said it
    uploaded: the squatter's record never lands, openreg's real one does."""
    workdir, root, env = act_setup
    ootci_act_dir = act_dir(root, "nightly")
    keys = dict(line.split("=", 1) for line in ootci(
        "cache-key", BACKEND, "--torch", TORCH, env={"OOTCI_CACHE": env["OOTCI_CACHE"]}).stdout.splitlines())
    planted = Path(keys["torch-path"]) / f"ootci-planted-by-a-pr-{ootci_act_dir.name}.txt"
    act_stand_ins.plant(ootci_act_dir, keys["torch-key"], Path(keys["torch-path"]),
                        {planted.name: b"raise SystemExit('a PR planted this')\n"})

    def take_the_plant_back() -> bool:
        """Whether a restore put the planted file anywhere in the session's torch layers (the layer, or
        the layers' directory an older workflow restored into); removed either way."""
        found = [*planted.parent.parent.glob(planted.name), *planted.parent.parent.glob(f"*/{planted.name}")]
        for path in found:
            path.unlink()
        return bool(found)

    now = dt.datetime.now(dt.UTC)
    forged = f"forged-{now:%Y%m%dT%H%M%SZ}-eeeeee"
    plant_artifact(ootci_act_dir, "ootci-run-forged-1", run_artifact(forged, "forged", now, trigger="nightly"))
    squatter = f"{BACKEND}-{now:%Y%m%dT%H%M%SZ}-5a5a5a"
    plant_artifact(ootci_act_dir, f"ootci-run-{BACKEND}-1", run_artifact(squatter, BACKEND, now, trigger="manual"))
    github = FakeGitHub(httpserver)
    follow = github.follow_act(ootci_act_dir, 4711)
    registry = tmp_path / "registry"
    (registry / "ghost").mkdir(parents=True)
    (registry / "ghost" / "backend.toml").write_text(GHOST_MANIFEST)
    data = data_remote(ootci_act_dir)
    artifacts, site = ootci_act_dir / "artifacts", ootci_act_dir / "site"

    relay = FakeRelay(httpserver)
    token_env = {k: v for k, v in relay.env().items() if k.startswith("ACTIONS_")}

    def attempt(number: int):
        result = run_act(workdir, "workflow_dispatch", ".github/workflows/nightly.yml",
                         env={**env, **token_env, "OOTCI_ACT_DIR": str(ootci_act_dir), "OOTCI_REGISTRY": str(registry),
                              "GITHUB_RUN_ID": "4711", "GITHUB_RUN_ATTEMPT": str(number),
                              "GITHUB_API_URL": github.api_url, "GITHUB_REPOSITORY": REPOSITORY},
                         secrets={"GITHUB_TOKEN": TOKEN}, on_line=follow,
                         inputs={"backends": f"{BACKEND} ghost", "torch": TORCH, "suites": "smoke", "relay": "true"},
                         log=tmp_path / f"act-{number}.log", stubs=root / "stubs",
                         variables={"OOTCI_RELAY_CALLBACK_URL": relay.env()["OOTCI_RELAY_CALLBACK_URL"]})
        assert result.returncode == 0, result.output[-6000:]
        assert_every_remote_action_had_a_stand_in(result.output)
        # After the publish, the bisect plan of a run by hand plans nothing, and nothing is bisected.
        assert "::set-output:: matrix=[]" in result.output
        assert not any("bisect.json" in p.name for p in ootci_act_dir.rglob("*"))
        assert "Run Main ootci bisect \"$BACKEND\"" not in result.output
        return result

    try:
        result = attempt(1)
    finally:
        restored_the_plant = take_the_plant_back()  # the layers are the test session's: never leave it there
    assert not restored_the_plant, "a trusted run restored what a PR's code saved"
    lines = result.output.splitlines()
    refused = [line for line in lines if "ootci: history collect: refused" in line]
    assert any("refused ootci-run-forged-1 " in line and "no job of its backend said it uploaded it" in line
               for line in refused), refused
    assert any(f"refused ootci-run-{BACKEND}-1 " in line and "no job of its backend said it uploaded it" in line
               for line in refused), refused
    [taken] = [line for line in lines if f"::ootci-run-{BACKEND}-1 was uploaded by another job of this run" in line]
    fallback = re.search(r"this job's records are (\S+),", taken)[1]
    assert re.fullmatch(rf"ootci-run-{BACKEND}-1-taken-[0-9a-f]{{16}}", fallback), taken
    matrix = [line for line in result.output.splitlines() if "::set-output:: matrix=" in line]
    assert matrix and [e["name"] for e in json.loads(matrix[0].split("matrix=", 1)[1])["include"]] == [BACKEND, "ghost"]
    assert "Skipping unsupported platform" in result.output  # ghost's job never started

    records = {r.backend: r for r in records_under(data_branch_checkout(data, tmp_path / "tip") / "runs")}
    assert set(records) == {BACKEND, "ghost"}
    assert record_paths_on_data_branch(data) == {f"runs/{r.run_id}/record.json" for r in records.values()}
    first, ghost = records[BACKEND], records["ghost"]
    # ghost's job uploaded nothing; the forged and squatting records are only in the artifacts planted.
    assert sorted(r.run_id for r in records_under(artifacts)) == sorted([forged, squatter, first.run_id])
    assert squatter not in "".join(data_branch_files(data))
    # A run by hand of a subset is no night: recorded as manual, missing record too.
    assert first.trigger == "manual" and first.status is Status.passed
    assert ghost.status is Status.missing and ghost.trigger == "manual" and ghost.torch.spec == TORCH
    assert ghost.device == "ghost"
    assert ghost.missing_reason.startswith("no record from the backend job: it never started")
    assert (site / "index.html").is_file()
    assert first.run_id in "".join(p.read_text(errors="replace") for p in site.rglob("*.html")) or \
        first.run_id in "".join(p.read_text(errors="replace") for p in site.rglob("*.json"))
    # The backend that produced nothing is still on the page, as missing, with the reason.
    index = (site / "index.html").read_text()
    assert 'href="backends/ghost.html"' in index and 'href="backends/openreg.html"' in index
    assert index.count('<tr data-status="missing">') == 1
    page = (site / "backends" / "ghost.html").read_text()
    assert '<span class="pill s-missing">missing</span>' in page and ghost.missing_reason in page
    # The night went to the relay: openreg's result alone, under the commit of the torch that ran.
    [nightly] = relay.received
    assert relay.accepted == relay.received
    assert (nightly["event_type"], nightly["delivery_id"]) == ("nightly", first.torch.git_version)
    assert nightly["payload"]["head_sha"] == first.torch.git_version and len(first.torch.git_version or "") == 40
    report = nightly["workflow"]
    assert (report["status"], report["job_name"], report["conclusion"]) == ("completed", BACKEND, "success")
    assert report["started_at"] and report["completed_at"]
    assert report["test_results"]["total"] == len(first.tests) > 0
    assert squatter not in json.dumps(relay.received) and forged not in json.dumps(relay.received)

    now = dt.datetime.now(dt.UTC)
    other = f"latecomer-{now:%Y%m%dT%H%M%SZ}-cccccc"
    seed = tmp_path / "seed"
    assert ootci("history", "pull", str(seed / "history"), "--remote", str(data)).returncode == 0
    merge_artifact(run_artifact(other, "latecomer", now), seed / "artifact", seed / "history" / "runs")
    pushed = ootci("history", "push", str(seed / "history"), "--remote", str(data))
    assert pushed.returncode == 0, pushed.stderr

    straggler = f"straggler-{now:%Y%m%dT%H%M%SZ}-dddddd"
    merge_artifact(run_artifact(straggler, "straggler", now), tmp_path / "straggler",
                   tmp_path / "straggler-files" / "runs")
    push_after_the_next_push(data, tmp_path / "straggler-files")

    # Each job runs on a fresh runner (act makes each job a workspace of its own); the run's
    # artifacts, the deployed site and the data branch stay.
    try:
        attempt(2)
    finally:
        restored_the_plant = take_the_plant_back()
    assert not restored_the_plant, "a trusted run restored what a PR's code saved"

    assert [b["workflow"]["job_name"] for b in relay.received] == [BACKEND, BACKEND]  # each attempt reports its own
    assert sorted(p.name for p in artifacts.iterdir()) == [f"github-pages-{n}" for n in (1, 2)] + [
        "ootci-run-forged-1", f"ootci-run-{BACKEND}-1", fallback, f"ootci-run-{BACKEND}-2"]
    [second] = [r for r in records_under(artifacts) if r.run_id not in (first.run_id, forged, squatter)]
    # No job of either attempt restored anything: each looked its key up, found the planted entry, and
    # so saved nothing over it; the forged record never reached the data branch or the page.
    asked = cache_requests(ootci_act_dir)
    assert asked and all(r["lookup-only"] for r in asked), asked
    assert cache_entries(ootci_act_dir)[keys["torch-key"]].get("archive")  # the plant, not a save
    assert not any(forged in name or squatter in name for name in data_branch_files(data))
    # ghost's job never started in attempt 2 either: publish records that attempt's missing run too.
    ghosts = [r for r in records_under(data_branch_checkout(data, tmp_path / "tip-2") / "runs") if r.backend == "ghost"]
    assert len(ghosts) == 2 and all(r.status is Status.missing for r in ghosts)
    assert ghost.run_id in {r.run_id for r in ghosts}
    everything = (first.run_id, second.run_id, other, straggler, *(r.run_id for r in ghosts))
    assert record_paths_on_data_branch(data) == {f"runs/{r}/record.json" for r in everything}
    index = (site / "index.html").read_text()
    for backend in (BACKEND, "latecomer", "straggler", "ghost"):
        assert f'href="backends/{backend}.html"' in index
    assert index.count('<tr data-status="missing">') == 1
    run_pages = sorted(p.relative_to(site / "runs").parent.as_posix() for p in (site / "runs").rglob("*.html"))
    assert run_pages == sorted([BACKEND, BACKEND, "ghost", "ghost", "latecomer", "straggler"])
    pages = "".join(p.read_text(errors="replace") for p in site.rglob("*.html"))
    assert all(run_id in pages for run_id in everything) and forged not in pages and squatter not in pages


def test_build_torch_workflow_acquires_a_pinned_wheel(act_setup, tmp_path):
    workdir, root, env = act_setup
    result = run_act(workdir, "workflow_dispatch", "tests/workflows/torch-caller.yml",
                     env={**env, "OOTCI_ACT_DIR": str(tmp_path)}, inputs={"torch": TORCH},
                     log=tmp_path / "act.log", stubs=root / "stubs")

    assert result.returncode == 0, result.output[-6000:]
    assert_every_remote_action_had_a_stand_in(result.output)
    # The wheel pip picks for torch==TORCH on this machine: its local label and tags are the machine's.
    assert TORCH == real_wheels.RELEASE
    wheel = real_wheels.cpu_release_wheel().name
    assert f"build-torch.yml outputs artifact=torch-wheel-1 wheel={wheel}" in result.output
    assert (tmp_path / "artifacts" / "torch-wheel-1" / wheel).stat().st_size > 100_000_000
    # ccache is restored only for source builds.
    assert "actions/cache" not in "".join(result.job_lines("Run Main"))


def test_build_backend_and_verify_autoload_actions(act_setup, make_env, tmp_path):
    """The two actions a vendor uses in a workflow of their own, on the toy backend."""
    workdir, root, env = act_setup
    toy = "tests/fixtures/registry/toy"
    installed = make_env(str(REPO / toy / "pkg"), name="toy")
    result = run_act(workdir, "workflow_dispatch", "tests/workflows/actions-caller.yml",
                     env={**env, "OOTCI_ACT_DIR": str(tmp_path)},
                     inputs={"backend": f"{toy}/backend.toml", "torch": TORCH, "python": str(installed.python)},
                     log=tmp_path / "act.log", stubs=root / "stubs")

    assert result.returncode == 0, result.output[-6000:]
    assert_every_remote_action_had_a_stand_in(result.output)
    # build-backend: every stage but the suites.
    assert "ootci: toy: passed" in result.output
    assert any("autoload" in line and "passed" in line for line in result.job_lines("✅ autoload"))
    # verify-autoload on an environment of the caller's.
    assert "import torch loaded torch_toy without an explicit import" in result.output
    assert "Success - Main ./actions/verify-autoload" in result.output


BROKEN_MANIFEST = """\
name = "broken"
description = "A backend whose build fails, for the failure path of backend.yml"
device = "broken"
distribution = "torch_broken"
import_name = "torch_broken"
entry_point = "torch_broken = torch_broken:_autoload"
capabilities = []

[source]
path = "pkg"
"""


def test_backend_workflow_fails_the_job_but_still_publishes_the_record(act_setup, tmp_path):
    """A vendor's manifest given by path, whose build breaks: red job, record kept."""
    workdir, root, env = act_setup
    vendor = tmp_path / "vendor"
    (vendor / "pkg").mkdir(parents=True)
    (vendor / "backend.toml").write_text(BROKEN_MANIFEST)
    (vendor / "pkg" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n')
    (vendor / "pkg" / "setup.py").write_text('raise SystemExit("this backend does not build, on purpose")\n')
    ootci_act_dir = act_dir(root, "broken")

    result = run_act(workdir, "workflow_dispatch", "tests/workflows/caller.yml",
                     env={**env, "OOTCI_ACT_DIR": str(ootci_act_dir)},
                     inputs={"backend": str(vendor / "backend.toml"), "torch": TORCH, "suites": "smoke"},
                     log=tmp_path / "act.log", stubs=root / "stubs")

    assert result.returncode != 0, "a failed build must fail the job"
    assert_every_remote_action_had_a_stand_in(result.output)
    assert "::error title=ootci broken build failed::" in result.output or "ootci broken build failed" in result.output
    artifacts = list((ootci_act_dir / "artifacts").iterdir())
    assert [a.name for a in artifacts] == [f"ootci-run-{str(vendor / 'backend.toml').strip('/').replace('/', '-')}-1"]
    [record] = records_under(artifacts[0])
    assert record.backend == "broken" and record.status is Status.failed
    stages = {s.name: s.status for s in record.stages}
    assert stages["build"] is Status.failed and stages["install"] is Status.blocked
