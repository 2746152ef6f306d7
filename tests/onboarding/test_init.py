"""`ootci init`: a vendor's repository gets ci/backend.toml, .github/workflows/ootci.yml and a baseline.

The slow tests run the real command on the repositories of tests/fixtures/init (real
PrivateUse1 backends under their own device names, built with setuptools from
pyproject.toml, with a setup.py alone, and with scikit-build-core and CMake), then the
first `ootci run` init says to make, which must be green on the baseline init recorded. One
of them (acme) has no bfloat16 kernel for amax and amin, and is given a folder of PyTorch-style
test files to propose upstream files from; another (vela) cannot reach the torch repository.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from ootci.runner import cli, models
from ootci.runner.core.errors import ProjectError
from ootci.runner.manifests import known_failures, manifest
from ootci.runner.models import Outcome, Status
from ootci.runner.onboarding import first_run, onboard, project_metadata, upstream_proposal
from ootci.runner.records import record_files
from ootci.runner.verification import device_probe
from tests.support import fake_upstream
from tests.support.cli import ootci
from tests.support.init_fixtures import BACKENDS, SETUPTOOLS_FIXTURES, UNITY_PARTS, materialize, unity_unit

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PINNED = re.compile(r"^ootci/ootci/\.github/workflows/backend\.yml@[0-9a-f]{40}$")
PR_PINNED = re.compile(r"^ootci/ootci/\.github/workflows/pr\.yml@[0-9a-f]{40}$")
PROBED_CAPABILITIES = ["synchronize", "multi_device", "streams", "events", "generator", "autocast", "pinned_memory",
                       "serialization", "autograd"]


def head(path: Path) -> str:
    return subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def one_line_error(result: subprocess.CompletedProcess, *, after_progress: bool = False) -> str:
    """The error line; with after_progress, the stage lines init printed before it may precede it."""
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr
    assert lines and lines[-1].startswith("ootci: "), result.stderr
    if not after_progress:
        assert len(lines) == 1, result.stderr
    else:
        assert all(not line.startswith("ootci") for line in lines[:-1]), result.stderr
    return lines[-1]


# -- mistakes are one line, before anything is built ------------------------------------------------

@pytest.mark.parametrize("existing", [onboard.MANIFEST, onboard.WORKFLOW, onboard.BASELINE])
def test_refuses_to_overwrite_without_force(tmp_path, existing):
    repo = materialize("pyproject", tmp_path / "repo")
    (repo / existing).parent.mkdir(parents=True, exist_ok=True)
    (repo / existing).write_text("mine\n")
    result = ootci("init", str(repo), timeout=120)
    assert result.returncode == 2
    assert f"{existing} already exists" in one_line_error(result) and "--force" in result.stderr
    assert (repo / existing).read_text() == "mine\n"
    assert [p for p in onboard._targets(repo, baseline=True) if p.exists()] == [repo / existing]


@pytest.mark.parametrize("args, code, words", [
    (["--no-probe"], 2, "--device"),
    (["--device", "Bad-Name"], 2, "--device 'Bad-Name'"),
    (["--torch", "installed"], 2, "--torch installed"),
    (["--torch", "nightlyy"], 5, "did you mean nightly"),
    (["--jobs", "0"], 2, "--jobs"),
    (["--suites", "smoke,intgration"], 2, "--suites: unknown suite 'intgration' (known: smoke, integration, upstream"),
    (["--upstream-tests", "no/such/folder"], 2, "--upstream-tests: "),
])
def test_bad_options_are_one_line(tmp_path, capsys, args, code, words):
    repo = materialize("pyproject", tmp_path / "repo", git=False)
    assert cli.main(["init", str(repo), *args]) == code
    err = capsys.readouterr().err.strip()
    assert err.startswith("ootci: ") and "\n" not in err and words in err, err
    assert not (repo / "ci").exists()


def test_a_directory_without_a_python_project_is_refused(tmp_path, capsys):
    assert cli.main(["init", str(tmp_path)]) == ProjectError.exit_code
    err = capsys.readouterr().err.strip()
    assert "no pyproject.toml, setup.py or setup.cfg" in err and "\n" not in err
    assert cli.main(["init", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err


# -- the ootci the workflow pins ---------------------------------------------------------------------

def test_the_workflow_pins_the_checkouts_commit():
    ref = onboard.ootci_ref()
    assert ref.is_commit and ref.ref == head(REPO)


def test_an_installed_ootci_pins_the_commit_its_build_recorded(tmp_path):
    info = tmp_path / "_build.json"
    info.write_text(json.dumps({"commit": "ab" * 20}))
    ref = onboard.ootci_ref(checkout=tmp_path / "site-packages", build_info=info, version="0.2.0")
    assert (ref.ref, ref.is_commit, ref.version) == ("ab" * 20, True, "0.2.0")


def test_without_a_commit_the_version_tag_is_used_and_said_to_be_no_sha(tmp_path):
    (tmp_path / "_build.json").write_text("{}")
    ref = onboard.ootci_ref(checkout=tmp_path, build_info=tmp_path / "_build.json", version="0.2.0")
    assert (ref.ref, ref.is_commit) == ("v0.2.0", False)
    assert "version tag" in ref.source


def test_the_workflow_is_one_job_calling_backend_yml(tmp_path):
    ref = onboard.OotciRef("c" * 40, "0.2.0", "test")
    text = onboard.workflow_text(ref, ["self-hosted", "npu"], "torch_npu")
    assert f"@{'c' * 40}  # ootci 0.2.0\n" in text
    workflow = YAML(typ="safe").load(text)
    declared = YAML(typ="safe").load((REPO / ".github" / "workflows" / "backend.yml").read_text())
    inputs = declared["on"]["workflow_call"]["inputs"]
    [job] = workflow["jobs"].values()
    assert PINNED.match(job["uses"])
    assert set(job["with"]) <= set(inputs)
    assert {n for n, spec in inputs.items() if spec.get("required")} <= set(job["with"])
    assert job["with"]["backend"] == "ci/backend.toml"
    assert json.loads(job["with"]["runs-on"]) == ["self-hosted", "npu"]
    assert workflow["permissions"] == {"contents": "read"}


@pytest.mark.parametrize("name", ["ootci.yml", "ootci-pytorch-pr.yml"])
def test_the_workflow_passes_actionlint_and_zizmor(tmp_path, name):
    for tool in ("actionlint", "zizmor"):
        if not (BIN / tool).is_file():
            pytest.skip(f"{tool} is not installed (the [test] extra of pyproject.toml provides it)")
    path = tmp_path / ".github" / "workflows" / name
    path.parent.mkdir(parents=True)
    ref = onboard.ootci_ref()
    path.write_text(onboard.workflow_text(ref, ["ubuntu-latest"], "torch_acme") if name == "ootci.yml"
                    else onboard.pr_workflow_text(ref))
    lint = subprocess.run([str(BIN / "actionlint"), "-no-color", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert lint.returncode == 0 and lint.stdout == "", lint.stdout + lint.stderr
    audit = subprocess.run([str(BIN / "zizmor"), "--offline", "--no-progress", str(path)], capture_output=True,
                           text=True, timeout=120)
    assert audit.returncode == 0 and "No findings" in audit.stdout, audit.stdout + audit.stderr


def test_the_pr_workflow_is_the_vendor_example_pinned_like_the_nightly_one():
    ref = onboard.OotciRef("c" * 40, "0.2.0", "test")
    text = onboard.pr_workflow_text(ref)
    assert f"/pr.yml@{'c' * 40}  # ootci 0.2.0\n" in text
    written = YAML(typ="safe").load(text)
    example = YAML(typ="safe").load((REPO / "examples" / "vendor-pytorch-pr.yml").read_text())
    [job] = written["jobs"].values()
    [example_job] = example["jobs"].values()
    assert PR_PINNED.match(job["uses"])
    declared = YAML(typ="safe").load((REPO / ".github" / "workflows" / "pr.yml").read_text())
    assert set(job["with"]) <= set(declared["on"]["workflow_call"]["inputs"])
    # The example's workflow, but for the pin and the runners of the torch build (the vendor's to name).
    for j in (job, example_job):
        j.pop("uses")
        j["with"].pop("torch-build-runs-on")
    assert written == example
    assert job["permissions"] == {"contents": "read", "id-token": "write", "actions": "read"}


def test_the_pr_workflow_is_not_overwritten_without_force(tmp_path, capsys):
    repo = materialize("pyproject", tmp_path / "repo", git=False)
    (repo / onboard.PR_WORKFLOW).parent.mkdir(parents=True)
    (repo / onboard.PR_WORKFLOW).write_text("mine\n")
    assert cli.main(["init", str(repo), "--pytorch-prs", "--no-probe", "--device", "acme"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"ootci: {onboard.PR_WORKFLOW} already exists in {repo.resolve()}: pass --force to overwrite it")
    assert (repo / onboard.PR_WORKFLOW).read_text() == "mine\n" and not (repo / "ci").exists()


# -- the manifest --------------------------------------------------------------------------------------

def declared(**changes) -> project_metadata.Declared:
    system = project_metadata.BuildSystem(["setuptools>=64", "torch>=2.13"], "setuptools.build_meta")
    values = dict(name="acme-accel", version="0.3.0", summary='Acme "accelerator" support',
                  entry_points={"torch_acme": "torch_acme:_autoload"}, build_system=system)
    values.update(changes)
    return project_metadata.Declared(**values)


def onboarding(probed, **changes) -> onboard.Onboarding:
    values = dict(repo=Path("/r"), declared=declared(), entry_point="torch_acme = torch_acme:_autoload",
                  import_name="torch_acme", vendor_tests="tests", probed=probed, device="acme",
                  torch_version="2.13.0+cpu")
    values.update(changes)
    return onboard.Onboarding(**values)


def test_the_manifest_claims_what_the_probe_found_and_says_so():
    yes, no = device_probe.Finding(True, "ok"), device_probe.Finding(False, "RuntimeError: not on this device")
    probed = device_probe.Probed(device="acme", how="torch._C._get_privateuse1_backend_name()",
                                 capabilities={"streams": yes, "sparse": no, "autograd": yes},
                                 dtypes={"float32": yes, "float64": no})
    text = onboard.manifest_text(onboarding(probed))
    m = onboard.validated(text)
    assert (m.name, m.device, m.distribution, m.import_name) == ("acme-accel", "acme", "acme-accel", "torch_acme")
    assert [c.value for c in m.capabilities] == ["streams", "autograd"] and m.dtypes == ["float32"]
    assert m.description == 'Acme "accelerator" support' and m.source.path == ".."
    assert [(v.name, v.path) for v in m.suites.vendor] == [("tests", "tests")]
    assert "# probed: torch._C._get_privateuse1_backend_name()\ndevice = \"acme\"" in text
    assert re.search(r"#   sparse +no +RuntimeError: not on this device", text)
    assert "2.13.0+cpu" in text


@pytest.mark.parametrize("works, isolation", [(True, "fork"), (False, "process")])
def test_the_manifest_contains_a_crash_with_a_fork_where_the_probe_found_a_fork_uses_the_device(works, isolation):
    detail = "a child forked after `import torch` " + ("uses the device" if works else "was killed by SIGSEGV")
    probed = device_probe.Probed(device="acme", how="test", capabilities={},
                                 dtypes={"float32": device_probe.Finding(True, "")},
                                 fork=device_probe.Finding(works, detail))
    text = onboard.manifest_text(onboarding(probed))
    assert onboard.validated(text).suites.crash_isolation == isolation
    assert f"# probed: {detail}" in text
    # Unprobed: the default, and nothing said.
    assert onboard.validated(onboard.manifest_text(onboarding(None, not_probed="--no-probe"))).suites.crash_isolation \
        == "process"


def test_a_manifest_without_a_probe_says_what_to_fill_in():
    text = onboard.manifest_text(onboarding(None, not_probed="--no-probe", vendor_tests=None))
    m = onboard.validated(text)
    assert m.capabilities == [] and m.suites.vendor == []
    assert "# given with --device: not probed\ndevice = \"acme\"" in text
    assert ("# NOT PROBED (--no-probe).\n"
            "# Fill in what 'acme' supports, from: synchronize, multi_device, streams") in text


def proposal(**changes) -> upstream_proposal.Proposal:
    jit = next(e for e in upstream_proposal.default_exclusions() if e.path == "jit/")
    values = dict(candidates=["test_view_ops.py", "test_binary_ufuncs.py", "nn/test_init.py"],
                  excluded={"jit/test_a.py": jit, "jit/test_b.py": jit}, scanned=9,
                  collected=[upstream_proposal.Collected("nn/test_init.py", other=1, seconds=0.01,
                                                         error="no test for acme to run (1 in classes ...)"),
                             upstream_proposal.Collected("test_binary_ufuncs.py", seconds=0.2,
                                                         error="does not collect: ImportError: cannot import x"),
                             upstream_proposal.Collected("test_view_ops.py", tests=7, unclaimed=1, seconds=0.42)],
                  source="files from /p/test at 0123456789ab")
    values.update(changes)
    return upstream_proposal.Proposal(**values)


def test_the_default_exclusions_are_pytorchs_openreg_runner_blocklist_each_with_its_group():
    exclusions = upstream_proposal.default_exclusions()
    folders = [e for e in exclusions if e.path.endswith("/")]
    # run_openreg_tests.py at df34a4d: 14 + 14 folders, 35 + 112 files.
    assert (len(folders), len(exclusions) - len(folders)) == (28, 147)
    later = [e for e in exclusions if "(for later, PyTorch's OpenReg runner)" in e.reason]
    assert (len([e for e in later if e.path.endswith("/")]), len(later)) == (14, 49)
    assert {"distributed/", "test_jit.py", "nn/test_pruning.py"} <= {e.path for e in exclusions}


def test_the_proposal_is_discovery_with_what_it_excluded_and_why():
    probed = device_probe.Probed(device="acme", how="test", capabilities={},
                                 dtypes={"float32": device_probe.Finding(True, "")})
    text = onboard.manifest_text(onboarding(probed, upstream=proposal()))
    upstream = onboard.validated(text).suites.upstream
    assert upstream is not None and upstream.files == "discover"
    # The default entry that left out files of this torch, then each candidate that collects nothing, with why.
    assert {e.path: e.reason for e in upstream.exclude} == {
        "jit/": "folder: not about a device backend (exporters, other devices, legacy compilers, packaging, "
                "typing) (don't care, PyTorch's OpenReg runner)",
        "nn/test_init.py": "not proposed: no test for acme to run (1 in classes ...)",
        "test_binary_ufuncs.py": "not proposed: does not collect: ImportError: cannot import x"}
    assert "#   test_view_ops.py: 7 tests for acme (1 more in dtypes not claimed), collected in 0.42 s\n" in text
    assert "files from /p/test at 0123456789ab" in text
    lines = upstream_proposal.terminal_lines(proposal(), "acme")
    assert lines[0] == ("upstream: discovery: 1 of the 3 device-generic files collect tests for acme (files from "
                        "/p/test at 0123456789ab); 2 excluded by PyTorch's OpenReg runner:")
    assert lines[1].startswith("  excluded, folder: not about a device backend") and lines[1].endswith(
        "(don't care, PyTorch's OpenReg runner): jit/test_a.py, jit/test_b.py")
    assert [line.split()[0] for line in lines[-3:]] == ["nn/test_init.py", "test_binary_ufuncs.py", "test_view_ops.py"]


def uncommented_table(text: str) -> dict:
    """The commented-out [suites.upstream] of a manifest, as TOML once its lines are uncommented."""
    lines = text.splitlines()
    start = lines.index("# [suites.upstream]")
    end = lines.index("# ]", start)
    return tomllib.loads("\n".join(line[2:] for line in lines[start:end + 1]))


@pytest.mark.parametrize("why", [
    "cannot fetch PyTorch's test files at v2.13.0 from https://github.com/pytorch/pytorch: it cannot be reached "
    "(Could not resolve host: github.com)", None])
def test_without_files_to_propose_the_table_is_written_commented_out_discovering(why):
    probed = device_probe.Probed(device="acme", how="test", capabilities={},
                                 dtypes={"float32": device_probe.Finding(True, "")})
    nothing = upstream_proposal.unavailable(why) if why else proposal(collected=proposal().collected[:2])
    text = onboard.manifest_text(onboarding(probed, upstream=nothing))
    assert onboard.validated(text).suites.upstream is None
    table = uncommented_table(text)["suites"]["upstream"]
    assert table["files"] == "discover"
    # Offline, every default exclusion; else those of this torch and the candidates that collect nothing.
    assert [e["path"] for e in table["exclude"]] == (
        [e.path for e in upstream_proposal.default_exclusions()] if why
        else ["jit/", "nn/test_init.py", "test_binary_ufuncs.py"])
    said = " ".join(line.removeprefix("# ") for line in text.splitlines() if line.startswith("# "))
    assert f"not proposed: {why or 'none of the candidates collects a test for acme'}." in said
    assert "Uncomment the table to run every device-generic file" in said
    if why:
        [line] = upstream_proposal.terminal_lines(nothing, "acme")
        assert line.startswith(f"upstream: not proposed: {why}; [suites.upstream] is written commented out, "
                               "discovering with PyTorch's OpenReg runner's 175 exclusions")


def result(test_id: str, suite: str, outcome: Outcome = Outcome.failed, **fields) -> models.TestResult:
    return models.TestResult(id=test_id, suite=suite, outcome=outcome, **fields)


def test_the_known_failures_are_counted_per_claimed_dtype_and_capability_with_their_first_ops(tmp_path):
    m = onboard.validated(onboard.manifest_text(onboarding(device_probe.Probed(
        device="acme", how="test", capabilities={"streams": device_probe.Finding(True, ""),
                                                 "autograd": device_probe.Finding(True, "")},
        dtypes={n: device_probe.Finding(True, "") for n in ("float32", "bfloat16", "int64")}))))
    tests = [result("test_tensors.py::test_reductions[bfloat16]", "smoke", dtype="bfloat16"),
             result("test_opinfo.py::test_compare_cpu[amax-bfloat16]", "integration", op="amax", dtype="bfloat16"),
             result("test_opinfo.py::test_compare_cpu[amin-bfloat16]", "integration", op="amin", dtype="bfloat16"),
             result("test_opinfo.py::test_compare_cpu[amin-float32]", "integration", Outcome.passed, op="amin",
                    dtype="float32"),
             result("test_runtime.py::test_streams", "smoke", Outcome.crashed),
             # Crashed before it reported its op and dtype: its id says them.
             result("test_opinfo.py::test_compare_cpu[fft.rfft-int64]", "integration", Outcome.crashed),
             result("tests/test_acme.py::test_memory", "tests"),
             result("test_view_ops.py::TestUpOps::test_msort_acme", "upstream", Outcome.upstream)]
    baseline, _ = known_failures.update({}, tests, "2.13.0+cpu", prune=False)
    recorded = known_failures.Recorded(tmp_path / "known-failures.toml", baseline, {})
    smoke = {"streams": ["test_runtime.py::test_streams"], "autograd": ["test_runtime.py::test_autograd_mlp"]}
    rows = dict(first_run.known_by_claim(
        models.RunRecord.model_construct(tests=tests), m, recorded, smoke))
    assert [t.id for t in rows["dtype bfloat16"]] == [t.id for t in tests[:3]]
    assert [first_run.label(t, m.dtypes) for t in rows["dtype int64"]] == ["fft.rfft"]
    assert rows["dtype float32"] == rows["capability autograd"] == []
    assert [t.id for t in rows["capability streams"]] == ["test_runtime.py::test_streams"]
    assert [t.id for t in rows["other"]] == ["tests/test_acme.py::test_memory"]  # what fails on CPU too is not known
    assert first_run.first_few(rows["dtype bfloat16"], limit=2) == "smoke test_reductions, amax, +1 more"


def test_the_manifest_passes_check_jsonschema(tmp_path):
    tool = BIN / "check-jsonschema"
    if not tool.is_file():
        pytest.skip("check-jsonschema is not installed (the [test] extra of pyproject.toml provides it)")
    yes = device_probe.Finding(True, "")
    probed = device_probe.Probed(device="acme", how="test", capabilities={"streams": yes}, dtypes={"float32": yes})
    path = tmp_path / "backend.toml"
    path.write_text(onboard.manifest_text(onboarding(probed)))
    result = subprocess.run([str(tool), "--schemafile", str(REPO / "backends" / "backend.schema.json"), str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_build_requirements_the_layer_lacks_become_extra_requirements():
    text = onboard.manifest_text(onboarding(None, not_probed="--no-probe",
                                            declared=declared(extra_build_requirements=["scikit-build-core>=0.10"])))
    assert onboard.validated(text).build.extra_requirements == ["scikit-build-core>=0.10"]


def test_the_missing_entry_point_message_shows_the_snippet_for_the_file_that_declares():
    pyproject = onboard.no_entry_point_message(declared(name="torch_plain", entry_points={}), ["pyproject.toml"])
    assert '[project.entry-points."torch.backends"] with the line torch_plain = "torch_plain:_autoload"' in pyproject
    legacy = declared(name="torch_plain", entry_points={},
                      build_system=project_metadata.BuildSystem([], project_metadata.DEFAULT_BACKEND, declared=False))
    setup = onboard.no_entry_point_message(legacy, ["setup.py"])
    assert 'entry_points={"torch.backends": ["torch_plain = torch_plain:_autoload"]}' in setup


def test_the_probe_has_a_check_for_every_capability():
    import ast

    from ootci.runner.manifests.manifest import Capability

    script = ast.parse((REPO / "runner" / "probes" / "capabilities.py").read_text())
    checks = next(n for n in script.body if isinstance(n, ast.Assign) and n.targets[0].id == "CHECKS")
    names = {e.id for e in ast.walk(checks.value) if isinstance(e, ast.Name) and e.id not in ("f",)}
    assert {c.value for c in Capability} <= names


def test_the_build_system_defaults_to_setuptools_legacy(tmp_path):
    (tmp_path / "setup.py").write_text("")
    system = project_metadata.build_system(tmp_path)
    assert (system.backend, system.declared) == ("setuptools.build_meta:__legacy__", False)
    requires = ["torch>=2.13", "Torch==2.13.0", "scikit-build-core"]
    assert project_metadata.without_torch(requires) == ["scikit-build-core"]


# -- the real command on real repositories ---------------------------------------------------------

@pytest.mark.slow
def test_a_repository_without_an_entry_point_is_told_what_to_add(tmp_path, torch_layer):
    repo = materialize("no-entry-point", tmp_path / "repo")
    result = ootci("init", cwd=repo, timeout=600)
    assert result.returncode == ProjectError.exit_code, result.stderr
    line = one_line_error(result, after_progress=True)
    assert "torch_plain 0.1.0 declares no torch.backends entry point" in line
    assert '[project.entry-points."torch.backends"] with the line torch_plain = "torch_plain:_autoload"' in line
    assert not (repo / "ci").exists() and not (repo / ".github").exists()


def comments_before(text: str, key: str) -> str:
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{key} = "))
    return lines[at - 1]


UNREACHABLE = "http://pytorch.invalid/pytorch.git"
"""a torch repository no machine reaches (.invalid never resolves): init offline, in CI too"""
GAPS = {"OOTCI_OPS": "amax,amin"}
"""acme's ops without a bfloat16 kernel, and no other of op_db: its integration suite stays short"""
NOT_PER_DEVICE = """\
from torch.testing._internal.common_utils import TestCase, run_tests


class TestNotPerDevice(TestCase):
    def test_runs_on_cpu_only(self):
        pass
"""
CUDA_ONLY = """\
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestOnCuda(TestCase):
    def test_kernel(self, device):
        pass


instantiate_device_type_tests(TestOnCuda, globals(), only_for="cuda")
"""


def upstream_folder(root: Path) -> Path:
    """A test/ folder as init's discovery sees PyTorch's: PyTorch-style files (tests/support/fake_upstream.py),
    one device-generic file that collects, one that does not import, one made only for CUDA, one that is not
    device-generic, and one in a folder PyTorch's OpenReg runner blocks."""
    test = root / "test"
    (test / "nn").mkdir(parents=True)
    (test / "distributed").mkdir()
    (test / "test_view_ops.py").write_text(fake_upstream.ops_file(second=False))
    (test / "test_binary_ufuncs.py").write_text(fake_upstream.BROKEN)
    (test / "nn" / "test_init.py").write_text(CUDA_ONLY)
    (test / "test_not_per_device.py").write_text(NOT_PER_DEVICE)
    (test / "distributed" / fake_upstream.OPS).write_text(fake_upstream.ops_file(second=False))
    return test


def init_arguments(fixture: str, root: Path) -> tuple[list[str], dict[str, str]]:
    """How each fixture is onboarded: acme with every suite and PyTorch-style files, vela with the smoke
    suite and a torch repository it cannot reach, nova without a run of the suites (and no baseline)."""
    if fixture == "pyproject":
        return ["--upstream-tests", str(upstream_folder(root / "pytorch"))], GAPS
    if fixture == "scikit-build":
        return ["--suites", "smoke,upstream", "--torch-repo", UNREACHABLE], {}
    return ["--suites", "none"], {}


@dataclass
class Onboarded:
    repo: Path
    result: subprocess.CompletedProcess
    env: dict[str, str]

    @property
    def next_run(self) -> list[str]:
        """The arguments of the first `ootci run` init says to make."""
        line = next(text for text in self.result.stdout.splitlines() if text.startswith("  ootci run ci/backend.toml"))
        return shlex.split(line.split("#", 1)[0])[1:]

    @property
    def record(self) -> models.RunRecord:
        """init's own run of the suites, where it says it is."""
        found = re.search(r"init's run of the suites: .* \(every result: (\S+)\)$", self.result.stdout, re.M)
        assert found, self.result.stdout
        return record_files.read(Path(found.group(1)))


@pytest.fixture(scope="module")
def onboarded(tmp_path_factory, torch_layer, openreg_compiled):
    """onboarded(fixture) -> Onboarded: `ootci init` run there, once per fixture."""
    done: dict[str, Onboarded] = {}

    def get(fixture: str) -> Onboarded:
        if fixture not in done:
            root = tmp_path_factory.mktemp(fixture)
            repo = materialize(fixture, root / "repo")
            args, env = init_arguments(fixture, root)
            done[fixture] = Onboarded(repo, ootci("init", "--torch", "2.13.0", *args, cwd=repo, env=env,
                                                  timeout=1200), env)
        return done[fixture]

    return get


# fixture -> the stages of the first run init says to make
FIRST_RUN_STAGES = {
    "pyproject": {"smoke": "passed", "integration": "passed", "upstream": "passed"},
    "setup-py": {"smoke": "passed", "integration": "skipped"},
    "scikit-build": {"smoke": "passed", "integration": "skipped"},
}


@pytest.mark.slow
@pytest.mark.parametrize("fixture", sorted(BACKENDS))
def test_init_then_the_first_run_it_names_is_green(tmp_path, onboarded, fixture):
    distribution, package, device = BACKENDS[fixture]
    done = onboarded(fixture)
    repo, result = done.repo, done.result
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ootci run ci/backend.toml --torch 2.13.0" in result.stdout

    text = (repo / onboard.MANIFEST).read_text()
    m = manifest.load(repo / onboard.MANIFEST)
    assert (m.distribution, m.import_name, m.device) == (distribution, package, device)
    assert m.entry_point == f"{package} = {package}:_autoload"
    # Nothing in the repository's metadata names the device: the probe asked torch.
    assert comments_before(text, "device") == "# probed: torch._C._get_privateuse1_backend_name()"
    assert [c.value for c in m.capabilities] == PROBED_CAPABILITIES
    assert re.search(r"#   sparse +no +NotImplementedError", text)
    # Every dtype the device can hold, acme's bfloat16 too (its amax and amin fail in it), complex and float8 too.
    assert m.dtypes[:10] == list(device_probe.DTYPES[:10])
    assert {"complex64", "complex128", "uint16", "float8_e4m3fn", "float8_e5m2"} <= set(m.dtypes)
    assert [v.path for v in m.suites.vendor] == ["test" if fixture == "setup-py" else "tests"]
    assert m.build.extra_requirements == (["scikit-build-core>=0.10"] if fixture == "scikit-build" else [])
    # The baseline init wrote is the manifest's (--suites none: no run, no baseline).
    baseline = fixture != "setup-py"
    assert (m.known_failures == "known-failures.toml") == baseline
    assert (f"wrote {onboard.BASELINE}" in result.stdout) == baseline == (repo / onboard.BASELINE).is_file()

    workflow = YAML(typ="safe").load((repo / onboard.WORKFLOW).read_text())
    [job] = workflow["jobs"].values()
    assert job["uses"] == f"ootci/ootci/.github/workflows/backend.yml@{head(REPO)}"
    assert job["with"]["backend"] == "ci/backend.toml"

    out = tmp_path / "runs"
    run = ootci(*done.next_run, "--out", str(out), cwd=repo, env=done.env, timeout=1200)
    assert run.returncode == 0, run.stdout + run.stderr
    record = json.loads(next(out.glob("*/record.json")).read_text())
    stages = {s["name"]: s["status"] for s in record["stages"]}
    assert stages == {"torch": "passed", "build": "passed", "install": "passed", "autoload": "passed",
                      **FIRST_RUN_STAGES[fixture]}
    assert record["device"] == device and record["status"] == "passed"
    known = sum(len(tests) for tests in known_failures.load(repo / onboard.BASELINE).values()) if baseline else 0
    assert (f"{known} known failures failed as expected" in run.stderr) == bool(known), run.stderr[-2000:]
    if fixture in SETUPTOOLS_FIXTURES:  # OpenReg's units (tests/backends/test_openreg.py): ccache hits
        for part in UNITY_PARTS:
            assert (repo / "build" / "unity" / f"{part}.cpp").read_text() == unity_unit(repo, part)

    again = ootci("init", cwd=repo, timeout=120)
    assert again.returncode == 2 and "ci/backend.toml already exists" in again.stderr


ACME_OPS = "test_view_ops.py::TestUpOps::"


@pytest.mark.slow
def test_a_dtype_whose_ops_fail_is_claimed_and_its_failures_are_the_baseline(onboarded):
    done = onboarded("pyproject")
    assert done.result.returncode == 0, done.result.stdout + done.result.stderr
    text = (done.repo / onboard.MANIFEST).read_text()
    assert re.search(r"^#   bfloat16 +yes +round trip, torch\.ones on the device$", text, re.M)
    assert "bfloat16" in manifest.load(done.repo / onboard.MANIFEST).dtypes
    baseline = known_failures.load(done.repo / onboard.BASELINE)
    # bfloat16's failures, in the smoke and integration suites, are known; the backend's own upstream failures
    # (a wrong result, a segfault) too, and not what fails on CPU too.
    assert set(baseline["smoke"]) == {"test_tensors.py::test_reductions[bfloat16]"}
    assert set(baseline["integration"]) == {"test_opinfo.py::test_compare_cpu[amax-bfloat16]",
                                            "test_opinfo.py::test_compare_cpu[amin-bfloat16]"}
    assert set(baseline["upstream"]) == {ACME_OPS + "test_device_type_is_cpu_acme",
                                         ACME_OPS + "test_segfaults_off_cpu_acme"}
    assert "no bfloat16 kernel" in baseline["integration"]["test_opinfo.py::test_compare_cpu[amax-bfloat16]"].reason
    # Printed per claim: how many, and the first ops; the claims without any on a line of their own.
    out = done.result.stdout
    assert "  known failures: 5 recorded in ci/known-failures.toml, by claim (count, first ops):" in out
    assert re.search(r"^    dtype bfloat16 +3  smoke test_reductions, amax, amin$", out, re.M), out
    assert re.search(r"^    other +2  upstream test_device_type_is_cpu_acme, upstream test_segfaults_off_cpu_acme$",
                     out, re.M), out
    assert "    none in dtypes float32, float64, float16, int64, int32, int16, int8, uint8, bool, complex64, " in out
    assert f"    none in capabilities {', '.join(PROBED_CAPABILITIES)}\n" in out
    assert 'known_failures = "known-failures.toml"' in text.split("\n[", 1)[0]
    # init's run is a record like any run's: its suites, each failure kept with its retries.
    record = done.record
    assert record.backend == "acme-accel" and [s.name for s in record.stages] == [
        "torch", "build", "install", "autoload", "smoke", "integration", "upstream"]
    tests = {t.id: t for t in record.tests}
    assert tests[ACME_OPS + "test_segfaults_off_cpu_acme"].outcome is Outcome.crashed
    assert tests[ACME_OPS + "test_numpy_went_away_acme"].outcome is Outcome.upstream
    assert tests["test_opinfo.py::test_compare_cpu[amax-float32]"].outcome is Outcome.passed


@pytest.mark.slow
def test_init_proposes_discovery_less_what_it_excluded_and_why(onboarded):
    done = onboarded("pyproject")
    text = (done.repo / onboard.MANIFEST).read_text()
    upstream = manifest.load(done.repo / onboard.MANIFEST).suites.upstream
    assert upstream is not None and upstream.files == "discover"
    # Excluded: the folder PyTorch's OpenReg runner blocks, and the candidates that give the device nothing.
    reasons = {e.path: e.reason for e in upstream.exclude}
    assert list(reasons) == ["distributed/", "nn/test_init.py", "test_binary_ufuncs.py"]
    assert reasons["distributed/"].endswith("(for later, PyTorch's OpenReg runner)")
    assert reasons["nn/test_init.py"].startswith("not proposed: no test for acme to run")
    assert reasons["test_binary_ufuncs.py"].startswith(
        "not proposed: does not collect: ImportError: cannot import name 'ootci_binary_ufuncs_and_refs'")
    # A comment per proposed file: the tests collected for the device and the time it took.
    # Every test of the file's dtypes for acme: it holds complex64 too, now that the probe asks for it.
    collected = re.search(r"^#   test_view_ops\.py: 9 tests for acme, collected in (\d+\.\d\d) s$", text, re.M)
    assert collected, text
    assert "test_not_per_device.py" not in text  # not device-generic: never a candidate
    # The terminal says the same.
    out = done.result.stdout
    assert ("  upstream: discovery: 1 of the 3 device-generic files collect tests for acme") in out
    assert re.search(r"^    excluded, folder: a subsystem of its own .*: distributed/test_up_ops\.py$", out, re.M), out
    assert re.search(rf"^    test_view_ops\.py +9 tests for acme, collected in {collected.group(1)} s$", out, re.M), out
    assert "upstream files not proposed" not in done.result.stderr


@pytest.mark.slow
def test_offline_init_says_so_in_one_line_and_writes_the_table_commented_out(onboarded):
    done = onboarded("scikit-build")
    assert done.result.returncode == 0, done.result.stdout + done.result.stderr
    [line] = [text for text in done.result.stdout.splitlines() if text.startswith("  upstream:")]
    assert line.startswith(f"  upstream: not proposed: {UNREACHABLE} cannot be reached (")
    assert "written commented out, discovering with PyTorch's OpenReg runner's 175 exclusions" in line
    text = (done.repo / onboard.MANIFEST).read_text()
    assert manifest.load(done.repo / onboard.MANIFEST).suites.upstream is None
    table = uncommented_table(text)["suites"]["upstream"]
    assert table["files"] == "discover" and len(table["exclude"]) == len(upstream_proposal.default_exclusions())
    # init's run has no upstream stage, and its baseline is that of the suites it ran: none failed.
    assert {s.name: s.status for s in done.record.stages[3:]} == {"autoload": Status.passed,
                                                                  "smoke": Status.passed,
                                                                  "integration": Status.skipped}
    assert known_failures.load(done.repo / onboard.BASELINE) == {}


@pytest.mark.slow
def test_no_probe_writes_what_is_declared_and_force_overwrites(tmp_path, torch_layer):
    repo = materialize("pyproject", tmp_path / "repo")
    (repo / "ci").mkdir()
    (repo / onboard.MANIFEST).write_text("old\n")
    result = ootci("init", "--no-probe", "--device", "acme", "--force", "--pytorch-prs", cwd=repo, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    # --pytorch-prs: the PR caller too, pinned to the same ootci commit as the nightly's workflow.
    pr = YAML(typ="safe").load((repo / onboard.PR_WORKFLOW).read_text())
    [job] = pr["jobs"].values()
    assert job["uses"] == f"ootci/ootci/.github/workflows/pr.yml@{head(REPO)}"
    assert f"wrote {onboard.PR_WORKFLOW}" in result.stdout
    assert str(onboard.PR_WORKFLOW) in result.stdout.splitlines()[-1]
    m = manifest.load(repo / onboard.MANIFEST)
    assert (m.device, m.distribution, m.capabilities) == ("acme", "acme-accel", [])
    assert "NOT PROBED (--no-probe)" in (repo / onboard.MANIFEST).read_text()
    assert not list(repo.rglob("*.so")), "--no-probe compiles nothing"


@pytest.mark.slow
def test_a_failed_probe_is_said_and_leaves_the_rest_to_fill_in(tmp_path, torch_layer):
    # Without OpenReg's aten/ kernels the device is registered, but no tensor can reach it.
    repo = materialize("setup-py", tmp_path / "repo")
    shutil.rmtree(repo / "csrc" / "aten")
    result = ootci("init", cwd=repo, timeout=1200)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "a tensor cannot be copied to device 'nova' (torch._C._get_privateuse1_backend_name())" in result.stderr
    assert "Fill in capabilities and dtypes in ci/backend.toml by hand" in result.stderr
    text = (repo / onboard.MANIFEST).read_text()
    m = manifest.load(repo / onboard.MANIFEST)
    assert m.device == "nova" and m.capabilities == []
    assert "# NOT PROBED (the probe failed: a tensor cannot be copied to device 'nova'" in text
    assert comments_before(text, "device") == "# probed: torch._C._get_privateuse1_backend_name()"


CRASH_STREAMS = """\
import builtins, os, sys

_import = builtins.__import__


def _crash_on_streams(name, *args, **kwargs):
    module = _import(name, *args, **kwargs)
    # Once the probe's checks import torch (torch itself is complete by then).
    if name == "torch" and sys._getframe(1).f_code.co_filename.endswith("capabilities.py"):
        module.Stream = lambda *a, **k: os.abort()
    return module


builtins.__import__ = _crash_on_streams
"""


@pytest.mark.slow
def test_a_check_that_crashes_is_a_no_and_the_probe_goes_on(tmp_path, onboarded, monkeypatch):
    done = onboarded("setup-py")
    result = done.result
    assert result.returncode == 0, result.stdout + result.stderr
    env_root = re.search(r"(?:installed torch_nova \S+ in|torch_nova \S+ reused environment) (\S+)",
                         result.stderr).group(1)
    # torch.Stream aborts the interpreter in this environment (a sitecustomize patches it).
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(CRASH_STREAMS)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    probed = device_probe.probe(Path(env_root) / "bin" / "python", "torch_nova", None, log=tmp_path / "probe.log")
    assert probed.failure is None and probed.device == "nova"
    streams = probed.capabilities["streams"]
    assert not streams.works and "SIGABRT" in streams.detail and "streams check" in streams.detail
    assert {n for n, f in probed.capabilities.items() if f.works} == set(PROBED_CAPABILITIES) - {"streams"}
    assert all(f.works for f in probed.dtypes.values()), probed.dtypes
