"""`ootci init`: a vendor's repository onboarded in one command.

It asks the repository what it declares (runner/onboarding/project_metadata.py: distribution, the
`torch.backends` entry point, the build requirements), builds and installs the backend
exactly as `ootci run` will (its torch, build and install stages, so the next run finds
the torch layer and a warm compiler cache), asks the installed backend what its device
can do at all (runner/verification/device_probe.py), collects PyTorch's device-generic test
files for the device to propose some (runner/onboarding/upstream_proposal.py), and writes two
files: `ci/backend.toml`, whose comments say where every value came from, and
`.github/workflows/ootci.yml`, one job calling ootci's reusable workflow at the commit
of the ootci that wrote it. Then it runs the suites once and writes their failures as the
backend's baseline, `ci/known-failures.toml` (runner/onboarding/first_run.py).
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from ootci.runner import __version__
from ootci.runner.core import atomic
from ootci.runner.core.errors import GitError, ManifestError, OutputError, ProjectError, UsageError
from ootci.runner.core.git import git
from ootci.runner.manifests import known_failures
from ootci.runner.manifests import manifest as manifest_mod
from ootci.runner.manifests.manifest import ENTRY_POINT, Build, Capability, Manifest, Source
from ootci.runner.models import COMMIT_SHA, SUITES, RunRecord, StageResult, Status, TorchInfo
from ootci.runner.onboarding import first_run, project_metadata, upstream_proposal
from ootci.runner.records import record_files
from ootci.runner.stages import RunContext, RunOptions
from ootci.runner.stages.pipeline import run_stage
from ootci.runner.torch_supply import envs, torchspec
from ootci.runner.verification.device_probe import Finding, Probed, probe

MANIFEST = Path("ci") / "backend.toml"
WORKFLOW = Path(".github") / "workflows" / "ootci.yml"
BASELINE = Path("ci") / known_failures.DEFAULT_NAME
PR_WORKFLOW = Path(".github") / "workflows" / "ootci-pytorch-pr.yml"
OOTCI_REPOSITORY = "ootci/ootci"
DEFAULT_TORCH = "2.13.0"
VENDOR_TEST_DIRS = ("tests", "test")
DEVICE_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
_COMMIT = re.compile(COMMIT_SHA)
_CHECKOUT = Path(__file__).resolve().parents[2]
_BUILD_INFO = Path(__file__).resolve().parents[1] / "_build.json"


@dataclass
class InitOptions:
    repo: Path
    torch: str = DEFAULT_TORCH
    force: bool = False
    probe: bool = True
    device: str | None = None
    index_url: str | None = None
    torch_repo: str | None = None
    """the PyTorch repository (a fork) of a git:/pr: --torch, as for ootci run"""
    jobs: int | None = None
    cache: Path | None = None
    pytorch_prs: bool = False
    """also write the caller of ootci's PR workflow (PyTorch pull requests tested on this backend)"""
    suites: tuple[str, ...] = SUITES
    """the suites init runs once for the baseline (upstream: with the files it proposes); none: no run"""
    upstream_tests: Path | None = None
    """PyTorch's test/ folder to take the upstream candidates from, instead of fetching it at the torch's commit"""

    @property
    def writes_baseline(self) -> bool:
        return self.probe and bool(self.suites)


# ---------------------------------------------------------------- the ootci a workflow pins


@dataclass(frozen=True)
class OotciRef:
    ref: str
    """a 40-hex commit, or the version tag v<version> when no commit is known"""
    version: str
    source: str

    @property
    def is_commit(self) -> bool:
        return bool(_COMMIT.fullmatch(self.ref))


def ootci_ref(checkout: Path = _CHECKOUT, build_info: Path = _BUILD_INFO, version: str = __version__) -> OotciRef:
    """The commit of the running ootci: its git checkout's HEAD, else the commit its wheel's
    build recorded (setup.py writes ootci/runner/_build.json), else only its version tag."""
    if (checkout / ".git").exists():
        try:
            commit = git(checkout, "rev-parse", "HEAD", timeout=30).strip()
        except GitError:
            commit = ""  # git missing or the checkout broken: the build record or the version tag still names ootci
        if _COMMIT.fullmatch(commit):
            return OotciRef(commit, version, f"HEAD of the git checkout {checkout}")
    if build_info.is_file():
        try:
            commit = json.loads(build_info.read_text()).get("commit", "")
        except (OSError, ValueError, AttributeError):
            commit = ""
        if isinstance(commit, str) and _COMMIT.fullmatch(commit):
            return OotciRef(commit, version, f"the commit recorded in {build_info.name} when ootci was built")
    return OotciRef(f"v{version}", version, "the version tag: neither a git checkout nor a build record names a commit")


def workflow_text(ref: OotciRef, runs_on: list[str], distribution: str) -> str:
    runs = json.dumps(runs_on)
    return f"""\
# ootci: builds {distribution} against PyTorch, checks that `import torch` loads it,
# and runs the test suites, every night. Written by `ootci init`; the backend is
# described by ci/backend.toml. Pin ootci to a full commit SHA.
name: ootci

on:
  schedule:
    - cron: "0 4 * * *"
  workflow_dispatch:

permissions:
  contents: read

jobs:
  ootci:
    permissions:
      contents: read
      actions: read # backend.yml reads artifacts of an earlier attempt when a job is re-run
    uses: {OOTCI_REPOSITORY}/.github/workflows/backend.yml@{ref.ref}  # ootci {ref.version}
    with:
      backend: ci/backend.toml
      # Runners with your device, e.g. '["self-hosted", "my-accelerator"]'.
      runs-on: '{runs}'
"""


# The relay's callback endpoint as PyTorch's relay serves it (docs/workflows.md, "Joining PyTorch's relay").
RELAY_CALLBACK_URL = "https://gwuj7w5coh4y4l66urspge6mnm0pwaxq.lambda-url.us-east-1.on.aws/github/callback/"


def pr_workflow_text(ref: OotciRef) -> str:
    """examples/vendor-pytorch-pr.yml, pinned as workflow_text pins backend.yml."""
    # A template, not an f-string: the workflow's own ${{ }} expressions stay as they are.
    return """\
# PyTorch pull requests on this backend: PyTorch's cross-repository CI relay dispatches
# every PyTorch PR to this repository (once it is on the relay's allow-list and has the
# relay's GitHub App installed), and ootci's reusable workflow builds the PR's torch, runs
# this backend's suites against it and reports back to the PR. Written by `ootci init
# --pytorch-prs`; every setting on both sides: ootci's docs/workflows.md, "Joining PyTorch's
# relay". Pin ootci to a full commit SHA.
name: ootci PyTorch PR
run-name: ootci PyTorch PR ${{ github.event.client_payload.payload.pull_request.number }}

on:
  repository_dispatch:
    types: [pull_request]

permissions: {}

# The PR's code runs in these jobs: GitHub's cache service refuses them every cache save.
cache-mode: read

# One run per PR: a new push cancels the older run, `closed` cancels a run in progress, and a
# cancelled run sends the relay nothing more.
concurrency:
  group: ootci-pytorch-pr-${{ github.event.client_payload.payload.pull_request.number }}
  cancel-in-progress: true

jobs:
  ootci:
    permissions:
      contents: read
      id-token: write # the relay authenticates each report by the reporting job's OIDC token
      actions: read # the backend jobs' records, also of an earlier attempt ("Re-run failed jobs")
    uses: @REPOSITORY@/.github/workflows/pr.yml@@REF@  # ootci @VERSION@
    with:
      backend: ci/backend.toml
      # The relay's callback endpoint as PyTorch's relay serves it (docs/workflows.md, "Joining PyTorch's relay").
      callback-url: ${{ vars.OOTCI_RELAY_CALLBACK_URL || '@CALLBACK@' }}
      # Optional: a released torch instead of the PR's source build (named in every report).
      torch: ${{ vars.OOTCI_PR_TORCH }}
      # Runners for the source build of the PR's torch (a big machine), e.g. '["self-hosted", "linux-x64-32core"]'.
      torch-build-runs-on: '["ubuntu-latest"]'
      # The accelerator runner's own card(s) for the backend's container, names under /dev.
      devices: ${{ vars.OOTCI_DEVICES }}
      # The nightlies each report compares the PR's runs with: ootci's data branch records registered backends.
      history-repository: ${{ vars.OOTCI_HISTORY_REPOSITORY || 'ootci/ootci' }}
    # The PR's code runs where these go: read-only, narrowly scoped credentials (both optional).
    secrets:
      pip-extra-index-url: ${{ secrets.OOTCI_PIP_EXTRA_INDEX_URL }}
      registry-username: ${{ secrets.OOTCI_REGISTRY_USERNAME }}
      registry-password: ${{ secrets.OOTCI_REGISTRY_PASSWORD }}
""".replace("@REPOSITORY@", OOTCI_REPOSITORY).replace("@REF@", ref.ref).replace("@VERSION@", ref.version) \
        .replace("@CALLBACK@", RELAY_CALLBACK_URL)


# ---------------------------------------------------------------- the manifest


@dataclass
class Onboarding:
    """Everything the two files are written from."""

    repo: Path
    declared: project_metadata.Declared
    entry_point: str
    import_name: str
    vendor_tests: str | None
    probed: Probed | None
    device: str
    torch_version: str | None
    not_probed: str | None = None
    """why the capabilities and dtypes were not probed (--no-probe, or the probe failed)"""
    upstream: upstream_proposal.Proposal | None = None
    """the upstream files init proposes, or why none"""
    baseline: bool = False
    """init runs the suites once and records their failures as known failures"""

    @property
    def device_source(self) -> str:
        if self.probed is not None and self.probed.device:
            return "given with --device (the probe used it)" if self.probed.how == "--device" else \
                f"probed: {self.probed.how}"
        return "given with --device: not probed"

    @property
    def findings(self) -> tuple[dict[str, Finding], dict[str, Finding]] | None:
        if self.probed is None or not self.probed.capabilities:
            return None
        return self.probed.capabilities, self.probed.dtypes

    @property
    def name(self) -> str:
        return canonicalize_name(self.declared.name)


def _toml(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, ensure_ascii=False)


def _found_lines(findings: dict[str, Finding]) -> list[str]:
    width = max((len(n) for n in findings), default=0)
    return [f"#   {name:<{width}}  {'yes' if f.works else 'no '}  {f.detail}".rstrip() for name, f in findings.items()]


SMOKE_DIR = Path(__file__).resolve().parents[1] / "suites" / "smoke"
# The dtypes the smoke suite parametrizes its dtype tests over (runner/suites/smoke/conftest.py).
SMOKE_DTYPES = ("float32", "float16", "bfloat16", "int64", "bool")


def smoke_tests_by_capability(directory: Path = SMOKE_DIR) -> dict[str, list[str]]:
    """capability -> the smoke tests marked with it, read from the suite's source (never imported
    here: it needs torch)."""
    found: dict[str, list[str]] = {}
    for path in sorted(directory.glob("test_*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for mark in node.decorator_list:
                if (isinstance(mark, ast.Call) and isinstance(mark.func, ast.Attribute)
                        and mark.func.attr == "capability"):
                    for arg in mark.args:
                        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                            found.setdefault(arg.value, []).append(f"{path.name}::{node.name}")
    return found


def smoke_skips(o: Onboarding) -> list[str]:
    """Which smoke tests the manifest's claims skip, and why: one line each capability or dtype."""
    if o.findings is None:
        return []
    capabilities, dtypes = o.findings
    by_capability = smoke_tests_by_capability()
    lines = []
    for name, finding in capabilities.items():
        tests = by_capability.get(name, [])
        if not finding.works and tests:
            lines.append(f"{', '.join(tests)}: capability {name!r} not claimed ({finding.detail})")
    for name, finding in dtypes.items():
        if not finding.works and name in SMOKE_DTYPES:
            lines.append(f"the dtype tests in {name} (test_tensors.py::test_*[{name}]): dtype not claimed "
                         f"({finding.detail})")
    return lines


def manifest_text(o: Onboarding) -> str:
    d = o.declared
    where = f"the metadata the build backend {d.build_system.backend} prepares from this repository"
    lines = [
        f"# How ootci builds and tests {d.name} (https://github.com/{OOTCI_REPOSITORY}).",
        f"# Written by `ootci init` (ootci {__version__}). Each value says where it came from:",
        f"#   declared: {where}",
        *(["#   probed: asked of the backend, built and installed over torch"
           + (f" {o.torch_version}," if o.torch_version else ",") + " after a plain `import torch`"]
          if o.probed is not None else []),
        "# Review it, run `ootci run ci/backend.toml`, and commit it.",
        f"name = {_toml(o.name)}",
    ]
    if d.summary:
        lines.append(f"description = {_toml(d.summary)}")
    lines += [
        f"# {o.device_source}",
        f"device = {_toml(o.device)}",
        "# declared: the distribution's name",
        f"distribution = {_toml(d.name)}",
        "# declared: the package of the entry point's module",
        f"import_name = {_toml(o.import_name)}",
        "# declared: group torch.backends" + (f" (also there: {', '.join(sorted(d.entry_points)[1:])})"
                                               if len(d.entry_points) > 1 else ""),
        f"entry_point = {_toml(o.entry_point)}",
    ]
    if o.findings is not None:
        capabilities, dtypes = o.findings
        failing = (["# are known failures, recorded by init's first run of the suites (known_failures below),",
                    "# not a reason to claim less:"] if o.baseline else
                   ["# fail a run until they are fixed or made known failures (`ootci expect --from RUN`), not a",
                    "# reason to claim less:"])
        lines += [f"# probed: one small operation on {o.device!r} for each capability, as the smoke suite tests it.",
                  "# Every capability that works is claimed; the tests that fail in one", *failing]
        lines += _found_lines(capabilities)
        lines.append(f"capabilities = {_toml([n for n, f in capabilities.items() if f.works])}")
        lines += ["# probed: a tensor of each dtype copied to the device and back, and one made on it. Every dtype",
                  "# the device can hold is claimed; the tests that fail in one", *failing]
        lines += _found_lines(dtypes)
        lines.append(f"dtypes = {_toml([n for n, f in dtypes.items() if f.works])}")
    else:
        known = ", ".join(c.value for c in Capability)
        lines += [
            f"# NOT PROBED ({o.not_probed}).",
            f"# Fill in what {o.device!r} supports, from: {known}",
            "capabilities = []",
            "# NOT PROBED: fill in the dtypes a tensor on the device can have (float32, float16, bfloat16, int64, ...)",
            'dtypes = ["float32"]',
        ]
    lines += ["", "[source]", "# the repository this file is in", 'path = ".."', "", "[build]",
              "# pip wheel --no-build-isolation against the torch under test", 'recipe = "pip-wheel"']
    if d.extra_build_requirements:
        lines += ["# declared: [build-system] requires these, and the torch layer does not have them",
                  f"extra_requirements = {_toml(d.extra_build_requirements)}"]
    lines += ["", "[ci]", "# labels of a runner with your device (also runs-on in .github/workflows/ootci.yml)",
              'runs_on = ["ubuntu-latest"]', "# the torch the nightly matrix tests", 'torch = "nightly"',
              "", "[suites]", "smoke = true", "integration = true"]
    if o.probed is not None and o.probed.fork is not None:
        fork = o.probed.fork
        lines += [f"# probed: {fork.detail}" + ("" if fork.works else "; a crash starts a new interpreter"),
                  f"crash_isolation = {_toml('fork' if fork.works else 'process')}"]
    if o.upstream is not None:
        lines += ["", *upstream_proposal.manifest_lines(o.upstream, o.device)]
    if o.vendor_tests:
        lines += ["", f"# found: {o.vendor_tests}/, run with pytest in the environment under test (integration stage)",
                  "[[suites.vendor]]", f"name = {_toml(o.vendor_tests)}", f"path = {_toml(o.vendor_tests)}"]
    return "\n".join(lines) + "\n"


def validated(text: str) -> Manifest:
    """The manifest text as runner/manifests/manifest.py loads it (from a scratch file: nothing half-right is
    written)."""
    with tempfile.TemporaryDirectory(prefix="ootci-init-") as tmp:
        path = Path(tmp) / "backend.toml"
        path.write_text(text, encoding="utf-8")
        try:
            return manifest_mod.load(path)
        except ManifestError as exc:
            raise ManifestError(f"ootci init wrote a manifest it cannot load, a bug of ootci: {exc.message}") from None


# ---------------------------------------------------------------- init


def no_entry_point_message(declared: project_metadata.Declared, files: list[str]) -> str:
    module = canonicalize_name(declared.name).replace("-", "_")
    if "pyproject.toml" in files and not declared.build_system.backend.endswith("__legacy__"):
        add = (f'add the table [project.entry-points."torch.backends"] with the line '
               f'{module} = "{module}:_autoload" to pyproject.toml')
    else:
        add = f'add entry_points={{"torch.backends": ["{module} = {module}:_autoload"]}} to setup()'
    return (f"{declared.name} {declared.version} declares no torch.backends entry point, so `import torch` cannot "
            f"load it: {add} (_autoload: your package's function that registers the device)")


def _entry_point(declared: project_metadata.Declared, files: list[str]) -> tuple[str, str]:
    """(`name = module:attr`, import name) of the backend's torch.backends entry point."""
    if not declared.entry_points:
        raise ProjectError(no_entry_point_message(declared, files))
    name = sorted(declared.entry_points)[0]
    value = declared.entry_points[name].split("[", 1)[0].strip()
    text = f"{name} = {value}"
    if not ENTRY_POINT.match(text):
        raise ProjectError(f"{declared.name}: entry point {text!r} in group torch.backends is not "
                           "'name = module:function' (torch calls the function it names)")
    module = value.split(":", 1)[0].strip()
    return text, module.split(".", 1)[0]


def _targets(repo: Path, pytorch_prs: bool = False, baseline: bool = False) -> list[Path]:
    return [repo / MANIFEST, repo / WORKFLOW, *([repo / PR_WORKFLOW] if pytorch_prs else []),
            *([repo / BASELINE] if baseline else [])]


def check_options(options: InitOptions) -> tuple[Path, torchspec.TorchSpec]:
    """Everything that can be wrong with the input, before anything is built."""
    repo = options.repo
    if not repo.is_dir():
        raise UsageError(f"{repo}: not a directory")
    repo = repo.resolve()
    for target in _targets(repo, options.pytorch_prs, options.writes_baseline):
        if target.is_dir():
            raise UsageError(f"{target.relative_to(repo)} in {repo} is a directory, not a file")
        if target.exists() and not options.force:
            raise UsageError(f"{target.relative_to(repo)} already exists in {repo}: pass --force to overwrite it")
    if not project_metadata.project_files(repo):
        raise ProjectError(f"{repo}: no pyproject.toml, setup.py or setup.cfg: not a Python project's root")
    if options.device is not None and not DEVICE_NAME.match(options.device):
        raise UsageError(f"--device {options.device!r}: expected a torch device type such as npu (a-z, 0-9, _)")
    if not options.probe and options.device is None:
        raise UsageError("--no-probe: give the device with --device NAME (nothing else can tell it)")
    unknown = [s for s in options.suites if s not in SUITES]
    if unknown:
        raise UsageError(f"--suites: unknown suite {unknown[0]!r} (known: {', '.join(SUITES)}, or none)")
    if options.upstream_tests is not None and not options.upstream_tests.is_dir():
        raise UsageError(f"--upstream-tests: {options.upstream_tests} is not a directory")
    spec = torchspec.parse(options.torch)
    if spec.kind == "installed":
        raise UsageError("--torch installed: ootci init builds its own environment; give a version, a wheel, "
                         "nightly, git:REF or pr:N")
    return repo, spec


@dataclass
class InitResult:
    written: list[Path]
    onboarding: Onboarding | None
    ref: OotciRef | None
    failure: str | None = None
    log_dir: Path | None = None
    first_run: first_run.FirstRun | None = None
    """the suites' one run and the baseline it wrote (None: no run)"""


class _Steps:
    """The stages init borrows from `ootci run`, and its own steps, reported as `ootci run` reports stages."""

    def __init__(self, ctx: RunContext, reporter):
        self.ctx = ctx
        self.reporter = reporter

    def stage(self, name: str) -> StageResult:
        """A stage of `ootci run`, reported, and kept in init's record."""
        self.reporter.stage_started(self.ctx.manifest.name, name)
        result = run_stage(name, self.ctx)
        self.reporter.stage_finished(self.ctx.manifest.name, result)
        self.ctx.record.stages.append(result)
        return result

    def begin(self, name: str) -> None:
        """One of init's own steps starts (its progress shows as a stage's does)."""
        self.reporter.stage_started(self.ctx.manifest.name, name)

    def report(self, name: str, status: Status, summary: str, started: float) -> None:
        result = StageResult(name=name, status=status, summary=summary,
                             duration_s=round(time.monotonic() - started, 1))
        self.reporter.stage_finished(self.ctx.manifest.name, result)


def _draft(repo: Path, name: str, device: str, distribution: str, import_name: str, entry_point: str,
           extra: list[str]) -> Manifest:
    m = Manifest(name=name, device=device, distribution=distribution, import_name=import_name,
                 entry_point=entry_point, source=Source(path=".."), build=Build(extra_requirements=extra))
    m.path = repo / MANIFEST
    return m


def run_context(repo: Path, spec: torchspec.TorchSpec, options: InitOptions, reporter) -> RunContext:
    """The context init's stages (torch, build, install, the probe) run in, as `ootci run` would
    with the same --torch, --index-url, --torch-repo, --jobs and --cache."""
    cache = options.cache or envs.cache_root()
    work = cache / "init" / envs.digest(str(repo))
    shutil.rmtree(work / "logs", ignore_errors=True)  # the logs of this init only
    # The torch stage needs a manifest before the repository has said anything: a placeholder.
    placeholder = _draft(repo, "init", options.device or "privateuseone", "unknown", "unknown",
                         "unknown = unknown:unknown", [])
    now = dt.datetime.now(dt.UTC)
    record = RunRecord(run_id=f"init-{now:%Y%m%dT%H%M%SZ}", backend="init", device=placeholder.device,
                       torch=TorchInfo(spec=spec.raw), started_at=now, ootci_version=__version__)
    # What an earlier init of this repository left: its run's results are not this one's.
    shutil.rmtree(work / "junit", ignore_errors=True)
    for stale in (record_files.RECORD_NAME, record_files.TESTS_NAME, record_files.TESTS_GZ_NAME):
        (work / stale).unlink(missing_ok=True)
    options_ = RunOptions(torch=spec.raw, out=work, index_url=options.index_url, torch_repo=options.torch_repo,
                          jobs=options.jobs, cache=cache, suites=options.suites, upstream_tests=options.upstream_tests)
    return RunContext(manifest=placeholder, options=options_, record=record, run_dir=work, cache=cache,
                      reporter=reporter)


def _declared(repo: Path, options: InitOptions, ctx: RunContext, steps: _Steps) -> Onboarding:
    """What the repository declares; the run context's manifest becomes the backend's draft."""
    assert ctx.torch_env is not None
    started = time.monotonic()
    declared = project_metadata.read(repo, ctx.torch_env, ctx.run_dir / "metadata",
                                     constraint=ctx.constraint_args(), log=ctx.log_path("declared"))
    entry_point, import_name = _entry_point(declared, project_metadata.project_files(repo))
    steps.report("declared", Status.passed, f"{declared.name} {declared.version}, entry point {entry_point}",
                 started)
    ctx.manifest = _draft(repo, canonicalize_name(declared.name), options.device or "privateuseone", declared.name,
                          import_name, entry_point, declared.extra_build_requirements)
    return Onboarding(repo=repo, declared=declared, entry_point=entry_point, import_name=import_name,
                      vendor_tests=next((d for d in VENDOR_TEST_DIRS if (repo / d).is_dir()), None),
                      probed=None, device=options.device or "", torch_version=ctx.record.torch.version)


def _probe_device(onboarding: Onboarding, options: InitOptions, ctx: RunContext, steps: _Steps) -> str | None:
    """Build, install and probe; what failed, or None."""
    for stage in ("build", "install"):
        result = steps.stage(stage)
        if not result.status.ok:
            cause = result.root_cause.summary if result.root_cause else result.summary
            return f"the {stage} stage {result.status.value}: {cause}"
    started = time.monotonic()
    probed = probe(ctx.python, onboarding.import_name, options.device, log=ctx.log_path("probe"))
    onboarding.probed = probed
    onboarding.device = probed.device or onboarding.device
    claimed = [n for n, f in probed.capabilities.items() if f.works]
    dtypes = [n for n, f in probed.dtypes.items() if f.works]
    summary = probed.failure or (f"device {probed.device}; capabilities: {', '.join(claimed) or 'none'}; "
                                 f"dtypes: {', '.join(dtypes) or 'none'}")
    steps.report("probe", Status.failed if probed.failure else Status.passed, summary, started)
    return probed.failure


def _propose_upstream(onboarding: Onboarding, options: InitOptions, ctx: RunContext, steps: _Steps,
                      failure: str | None) -> None:
    """Which of PyTorch's test files to propose (collected for the device), or why none."""
    probed = onboarding.probed
    if "upstream" not in options.suites:
        onboarding.upstream = upstream_proposal.unavailable("not collected: --suites leaves upstream out")
        return
    if not options.probe or failure is not None or probed is None:
        why = "--no-probe" if not options.probe else "the probe failed"
        onboarding.upstream = upstream_proposal.unavailable(f"not collected: {why}")
        return
    started = time.monotonic()
    steps.begin(upstream_proposal.STEP)
    proposal = upstream_proposal.propose(
        ctx, onboarding.device, dtypes=[n for n, f in probed.dtypes.items() if f.works],
        capabilities=[n for n, f in probed.capabilities.items() if f.works], import_name=onboarding.import_name)
    onboarding.upstream = proposal
    status = Status.skipped if proposal.unavailable else Status.passed
    steps.report(upstream_proposal.STEP, status, upstream_proposal.summary(proposal, onboarding.device), started)


def _first_run(repo: Path, ctx: RunContext, steps: _Steps) -> first_run.FirstRun:
    """The suites once, on the manifest as written; their failures become its baseline."""
    manifest = manifest_mod.load(repo / MANIFEST)
    record, record_path = first_run.run_suites(ctx, manifest, steps.stage)
    return first_run.FirstRun(manifest, record, record_path, first_run.record_baseline(manifest, record),
                              first_run.beyond_baseline(record))


def init(options: InitOptions, reporter) -> InitResult:
    """Onboard options.repo; files are written only once the manifest they hold is valid."""
    repo, spec = check_options(options)
    ctx = run_context(repo, spec, options, reporter)
    logs = ctx.run_dir / "logs"
    steps = _Steps(ctx, reporter)
    torch_result = steps.stage("torch")
    if not torch_result.status.ok:
        return InitResult([], None, None, failure=f"the torch stage failed: {torch_result.summary}", log_dir=logs)
    onboarding = _declared(repo, options, ctx, steps)
    failure = None
    if options.probe:
        failure = _probe_device(onboarding, options, ctx, steps)
        if failure is not None:
            onboarding.not_probed = f"the probe failed: {failure}"
    else:
        onboarding.not_probed = "--no-probe"
    if not onboarding.device:
        return InitResult([], onboarding, None, failure=failure, log_dir=logs)
    _propose_upstream(onboarding, options, ctx, steps, failure)
    onboarding.baseline = options.writes_baseline and failure is None
    ref = ootci_ref()
    text = manifest_text(onboarding)
    loaded = validated(text)
    workflow = workflow_text(ref, loaded.ci.runs_on, onboarding.declared.name)
    files = [(repo / MANIFEST, text), (repo / WORKFLOW, workflow)]
    if options.pytorch_prs:
        files.append((repo / PR_WORKFLOW, pr_workflow_text(ref)))
    for path, content in files:
        try:
            atomic.write_text(path, content)
        except OSError as exc:
            raise OutputError(f"{path}: cannot write: {exc.strerror}") from None
    result = InitResult(_targets(repo, options.pytorch_prs), onboarding, ref, failure=failure, log_dir=logs)
    if onboarding.baseline:
        result.first_run = _first_run(repo, ctx, steps)
        result.written.append(result.first_run.recorded.path)
    return result
