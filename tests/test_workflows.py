"""The workflows and composite actions, statically: three linters and the security rules.

actionlint (with shellcheck for every `run:`), zizmor offline and the GitHub JSON
schemas must report nothing. The rules the linters do not cover (SHA pins with a
version comment, checkouts without persisted credentials, least-privilege permissions,
no expressions inside `run:`) are checked on the parsed YAML.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
ACTIONS = sorted((REPO / "actions").glob("*/action.yml"))
EXAMPLE = REPO / "examples" / "vendor-workflow.yml"
CALLERS = sorted((REPO / "tests" / "workflows").glob("*.yml"))
ALL_WORKFLOWS = [*WORKFLOWS, *CALLERS, EXAMPLE]
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
    assert {p.stem for p in WORKFLOWS} == {"backend", "build-torch", "nightly", "pytorch-pr", "ci", "release"}
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
    bad = "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.event.issue.title }}\n"
    result = subprocess.run([tool("actionlint"), "-shellcheck", shellcheck, "-no-color", "-"], input=bad,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "potentially untrusted" in result.stdout


def test_zizmor_offline_reports_nothing():
    result = subprocess.run([tool("zizmor"), "--offline", "--no-progress", ".", *relative([*CALLERS, EXAMPLE])],
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


@pytest.mark.parametrize("path", [*ALL_WORKFLOWS, *ACTIONS], ids=lambda p: str(p.relative_to(REPO)))
def test_no_expression_inside_run_and_no_persisted_credentials(path):
    for step in steps_of(path):
        if "run" in step:
            assert "${{" not in step["run"], f"{path.name}: an expression inside run: {step['run']!r}"
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step.get("with", {}).get("persist-credentials") is False, f"{path.name}: checkout keeps credentials"


@pytest.mark.parametrize("path", [*ALL_WORKFLOWS, *ACTIONS], ids=lambda p: str(p.relative_to(REPO)))
def test_remote_actions_are_skipped_under_act(path):
    # act cannot fetch them offline; it copies the tree itself for a checkout of this repository.
    for step in steps_of(path):
        uses = step.get("uses", "")
        if uses and not uses.startswith(("$/", "actions/checkout@")):
            assert "!env.ACT" in str(step.get("if", "")), f"{path.name}: {uses} runs under act"


PRIVILEGED_JOBS = {
    "deploy": ["actions/configure-pages", "actions/deploy-pages"],
    "publish": ["actions/download-artifact", "pypa/gh-action-pypi-publish"],
    # The relay authenticates a report by the OIDC token of the job that sends it.
    "relay-start": ["actions/checkout", "$/actions/setup", "$/actions/relay-report"],
    "relay-end": ["actions/checkout", "$/actions/setup", "actions/download-artifact", "$/actions/relay-report"],
}


@pytest.mark.parametrize("path", ALL_WORKFLOWS, ids=lambda p: str(p.relative_to(REPO)))
def test_least_privilege_permissions(path):
    doc = load(path)
    assert "pull_request_target" not in doc["on"]
    assert doc["permissions"] in ({}, {"contents": "read"}), f"{path.name}: top-level permissions too wide"
    for name, job in doc["jobs"].items():
        granted = job.get("permissions", {})
        if "pages" in granted or "id-token" in granted:
            # Only two jobs may mint tokens, and they run nothing of their own.
            assert name in PRIVILEGED_JOBS, f"{path.name}: job {name} gets pages/id-token"
            assert [s["uses"].split("@")[0] for s in job["steps"]] == PRIVILEGED_JOBS[name]
        assert set(granted.values()) <= {"read", "write"}


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
    job_text = EXAMPLE.read_text().split("jobs:\n", 1)[1]
    assert len(job_text.strip().splitlines()) <= 6


def test_docs_show_the_example_file_exactly():
    docs = (REPO / "docs" / "workflows.md").read_text()
    assert EXAMPLE.read_text() in docs


def test_release_publishes_only_a_tested_tag_with_trusted_publishing():
    doc = load(REPO / ".github" / "workflows" / "release.yml")
    build, publish = doc["jobs"]["build"], doc["jobs"]["publish"]
    assert doc["on"]["push"] == {"tags": ["v*"]}
    assert publish["needs"] == "build" and "startsWith(github.ref, 'refs/tags/v')" in publish["if"]
    assert publish["permissions"] == {"id-token": "write"}
    assert not any("password" in step.get("with", {}) for step in publish["steps"]), "trusted publishing takes no token"
    checkout = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0, "setuptools-scm needs the tags"
    test = next(s for s in build["steps"] if "tests/test_packaging.py" in s.get("run", ""))
    assert test["env"]["OOTCI_DIST"] == "dist"


def test_a_cancelled_nightly_publishes_nothing():
    publish = load(REPO / ".github" / "workflows" / "nightly.yml")["jobs"]["publish"]
    assert "!cancelled()" in publish["if"] and "always()" not in publish["if"]


def test_setup_installs_ootci_from_a_copy_and_not_editable():
    # An editable install writes *.egg-info into the action's directory on the runner.
    (install,) = [s for s in steps_of(REPO / "actions" / "setup" / "action.yml") if s.get("id") == "install"]
    assert "--editable" not in install["run"] and " -e " not in install["run"]
    assert 'cp -R "$GITHUB_ACTION_PATH/../.." "$RUNNER_TEMP/ootci-src"' in install["run"]
    assert 'pip install --quiet --disable-pip-version-check "$RUNNER_TEMP/ootci-src"' in install["run"]
