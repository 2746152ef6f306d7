"""Backend manifests: `backends/<name>/backend.toml`, one pydantic model.

The model is the single definition of what a manifest may say; its JSON Schema is
exported by `ootci schema` for editors and check-jsonschema.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
import typing
from enum import Enum
from pathlib import Path
from typing import Annotated, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator, model_validator

from ootci.runner.core.errors import ManifestError
from ootci.runner.manifests import known_failures
from ootci.runner.manifests.known_failures import KnownFailure


class Capability(str, Enum):
    synchronize = "synchronize"
    """torch.<device>.synchronize(): wait for the device's work"""
    multi_device = "multi_device"
    streams = "streams"
    events = "events"
    generator = "generator"
    autocast = "autocast"
    pinned_memory = "pinned_memory"
    serialization = "serialization"
    autograd = "autograd"
    sparse = "sparse"
    """sparse layouts: the OpInfos that make or need sparse tensors (to_sparse, sparse.*)"""
    quantized = "quantized"
    """quantized tensors (quantize_per_tensor, int_repr, dequantize); op_db has no quantized OpInfo"""


class _Strict(BaseModel):
    # A mistyped key must be an error naming the key, not silently ignored.
    model_config = ConfigDict(extra="forbid")


ENTRY_POINT = re.compile(r"^\s*([\w.-]+)\s*=\s*([\w.]+)\s*:\s*([\w.]+)\s*$")


class Source(_Strict):
    """Where the backend comes from: exactly one of path, git or requirement."""

    path: str | None = Field(default=None, description="directory relative to the manifest")
    git: str | None = Field(default=None, description="git URL (or local repository path)")
    ref: str = Field(default="HEAD", description="branch, tag or commit for git")
    subdir: str = Field(default="", description="package directory inside the git checkout")
    requirement: str | None = Field(default=None, description="pip requirement of a published package")

    @model_validator(mode="after")
    def _exactly_one(self) -> Source:
        given = [k for k in ("path", "git", "requirement") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("give exactly one of 'path', 'git' or 'requirement'")
        return self

    @property
    def kind(self) -> str:
        return "path" if self.path else "git" if self.git else "requirement"


class Build(_Strict):
    recipe: Literal["pip-wheel", "command", "prebuilt"] = Field(
        default="pip-wheel",
        description="pip-wheel: `pip wheel --no-build-isolation` against the torch under test; "
        "command: run `command` in the source directory, wheels land in $OOTCI_WHEEL_DIR; "
        "prebuilt: install the requirement as published",
    )
    command: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    extra_requirements: list[str] = Field(
        default_factory=list, description="installed into the environment under test before the build"
    )
    no_deps: bool = Field(default=False, description="install the backend with --no-deps")


class Container(_Strict):
    """The job container, with the fields of a GitHub job's `container:` key (registry credentials
    are not among them: secrets cannot travel through a manifest or an input)."""

    image: str = Field(min_length=1, description="image, pinned by digest where the registry allows it")
    options: str = Field(default="", description="extra `docker create` options, e.g. --runtime=habana --ipc=host "
                         "(GitHub runs the job on a network of its own: no --network)")
    volumes: list[str] = Field(default_factory=list, description="SOURCE:TARGET[:ro] mounts, e.g. the host's driver")
    env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")],
              Annotated[str, Field(pattern=r"^\S*$")]] = Field(
        default_factory=dict, description="environment of the container from its start (passed as docker -e: "
        "no whitespace in values)")

    def workflow_input(self) -> str:
        """backend.yml's `container` input: the image alone, or JSON with image, options (the environment
        as -e NAME=VALUE among them) and volumes."""
        options = " ".join([self.options, *(f"-e {key}={value}" for key, value in self.env.items())]).strip()
        fields = {"image": self.image, "options": options, "volumes": self.volumes}
        given = {key: value for key, value in fields.items() if value}
        return self.image if list(given) == ["image"] else json.dumps(given, separators=(",", ":"))


# `container = "image"` (the old form) or a [ci.container] table: the form decides the branch, so a
# mistake in a table is reported against the table's field, not as "not a string".
_CONTAINER_FORMS = ("image-string", "container-table")


def _container_form(value) -> str:
    return _CONTAINER_FORMS[1] if isinstance(value, (dict, Container)) else _CONTAINER_FORMS[0]


ContainerField = Annotated[
    Annotated[str, Tag(_CONTAINER_FORMS[0])] | Annotated[Container, Tag(_CONTAINER_FORMS[1])],
    Discriminator(_container_form),
]


class CI(_Strict):
    runs_on: list[str] = Field(default_factory=lambda: ["ubuntu-latest"], description="GitHub runner labels")
    container: ContainerField = Field(
        default="", description="the job's container: an image, or a table with image, options, volumes and env; "
        "empty for none")
    torch: str = Field(default="nightly", description="torch spec used by the nightly matrix")
    python: str = Field(
        default="", pattern=r"^(/\S*)?$",
        description="absolute path of the interpreter in the image whose torch is tested (torch = \"installed\"): "
        "passed to `ootci run --python`")
    login_shell: bool = Field(
        default=False, description="run the job's steps in a login shell (bash -el {0}), for images whose "
        "environment comes from /etc/profile (CANN's set_env.sh)")
    use_image_python: bool = Field(
        default=False, description="run ootci itself on the image's python3 (a venv under runner.temp) instead of "
        "actions/setup-python, for images setup-python does not support (openEuler); needs Python >= 3.11 and venv")
    pull_requests: bool | None = Field(
        default=None,
        description="run on PyTorch pull requests (`ootci relay plan`); unset: yes, unless the backend is a "
        "prebuilt package pinned to one torch (`==` in source.requirement), which a PR's torch cannot be",
    )
    relay: bool = Field(
        default=False, description="report this backend's nightly results to PyTorch's relay (`ootci relay nightly`, "
        "RFC-0056): PyTorch must have enrolled the repository for nightly results")

    @property
    def container_spec(self) -> Container | None:
        """The container as a table, whichever form the manifest used (None: no container)."""
        if isinstance(self.container, Container):
            return self.container
        return Container(image=self.container) if self.container else None

    def container_input(self) -> str:
        spec = self.container_spec
        return spec.workflow_input() if spec else ""


class VendorSuite(_Strict):
    name: str
    path: str | None = Field(default=None, description="pytest path inside the backend's source")
    command: list[str] = Field(default_factory=list, description="command that writes JUnit XML to $OOTCI_JUNIT")
    requirements: list[str] = Field(
        default_factory=list, description="what the suite's tests import besides torch and the backend (pip "
        "requirements, e.g. \"psutil>=5\"): installed into the environment under test, torch pinned, before it runs")

    @model_validator(mode="after")
    def _one(self) -> VendorSuite:
        if bool(self.path) == bool(self.command):
            raise ValueError("give exactly one of 'path' or 'command'")
        return self


UPSTREAM_REQUIREMENTS = ("expecttest", "hypothesis", "numpy", "psutil")
"""What PyTorch's device-generic test files import besides torch and pytest (common_utils needs
numpy and expecttest at its top; property tests need hypothesis; memory checks need psutil)."""

_UPSTREAM_FILE = re.compile(r"^(?!/)(?!.*(?:^|/)\.\.?(?:/|$))[A-Za-z0-9_][A-Za-z0-9_./-]*\.py$")
_UPSTREAM_FOLDER = re.compile(r"^(?!/)(?!.*(?:^|/)\.\.?(?:/|$))[A-Za-z0-9_][A-Za-z0-9_./-]*/$")
DISCOVER = "discover"
"""`files = "discover"`: every device-generic file of the torch's test/, less the exclusions"""


class UpstreamExclusion(_Strict):
    """A file or folder of PyTorch's test/ that discovery leaves out, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(description="a file (test_jit.py, nn/test_pruning.py) or a folder ending in / (distributed/) "
                      "under PyTorch's test/")
    reason: str = Field(min_length=1, description="why it is not run on the device: shown wherever it is left out")

    @field_validator("path")
    @classmethod
    def _path(cls, path: str) -> str:
        if not (_UPSTREAM_FILE.match(path) or _UPSTREAM_FOLDER.match(path)):
            raise ValueError("expected a relative path under test/: a .py file such as 'test_jit.py', or a folder "
                             "ending in / such as 'distributed/'")
        return path

    def covers(self, file: str) -> bool:
        return file.startswith(self.path) if self.path.endswith("/") else file == self.path


class UpstreamSuite(_Strict):
    """PyTorch's own device-generic test files, run on the device (the `upstream` suite)."""

    files: list[str] | Literal["discover"] = Field(
        description="\"discover\": every file under PyTorch's test/ that instantiates device-generic tests, less "
        "`exclude`; or paths under test/, e.g. test_view_ops.py or nn/test_pooling.py. Either way taken from the "
        "exact commit of the torch under test")
    exclude: list[UpstreamExclusion] = Field(
        default_factory=list, description="with files = \"discover\": the files and folders left out, each with "
        "its reason")
    timeout: float = Field(default=600, gt=0, description="seconds one file may take on the device, its retries and "
                           "its re-runs on CPU included")
    requirements: list[str] = Field(
        default_factory=lambda: list(UPSTREAM_REQUIREMENTS),
        description="what the files import besides torch and pytest: installed into the environment under test, "
        "torch pinned, before they run")
    slow: bool = Field(default=False, description="run the tests PyTorch marks slow too (PYTORCH_TEST_WITH_SLOW=1)")

    @field_validator("files", mode="before")
    @classmethod
    def _one_word(cls, files: object) -> object:
        # Before the union, so that a misspelt word is one line, not one per branch.
        if isinstance(files, str) and files != DISCOVER:
            raise ValueError(f"expected {DISCOVER!r} or a list of paths under test/")
        return files

    @field_validator("files")
    @classmethod
    def _paths(cls, files: list[str] | str) -> list[str] | str:
        if isinstance(files, str):
            return files
        if not files:
            raise ValueError("name at least one file, or give \"discover\"")
        for index, name in enumerate(files):
            if not _UPSTREAM_FILE.match(name):
                raise ValueError(f"files[{index}] {name!r}: expected a relative path of a .py file under test/, "
                                 f"such as 'test_view_ops.py' or 'nn/test_pooling.py'")
        if len(set(files)) != len(files):
            twice = next(f for f in files if files.count(f) > 1)
            raise ValueError(f"{twice!r} is listed twice")
        return files

    @model_validator(mode="after")
    def _exclude_with_discovery(self) -> UpstreamSuite:
        # An exclusion that nothing consults would be a silent no-op.
        if self.exclude and not self.discovers:
            raise ValueError("exclude: goes with files = \"discover\" (a list of files runs just those)")
        paths = [e.path for e in self.exclude]
        if len(set(paths)) != len(paths):
            twice = next(p for p in paths if paths.count(p) > 1)
            raise ValueError(f"exclude: {twice!r} is listed twice")
        return self

    @property
    def discovers(self) -> bool:
        return self.files == DISCOVER


class Suites(_Strict):
    smoke: bool = True
    integration: bool = True
    integration_dtypes: list[str] | None = Field(
        default=None, min_length=1, description="the dtypes the integration suite runs op_db in, some of `dtypes` "
        "(default: every claimed dtype). Each claimed dtype is one more pass over op_db; the upstream and vendor "
        "suites run in every claimed dtype whatever this says")
    upstream: UpstreamSuite | None = Field(
        default=None, description="PyTorch's own device-generic test files (`[suites.upstream] files = \"discover\"` "
        "or `files = [...]`); "
        "none when absent")
    bench: bool = Field(default=False, description="the `bench` stage: op and model timings on the device and on "
                        "CPU, recorded for regression tracking (off unless turned on here or by `--suites bench`)")
    bench_time: Literal["gated", "shown"] = Field(
        default="gated", description="whether a slowdown of the bench stage's device time is reported ('gated') or "
        "only charted ('shown'). 'shown' for a device whose memory is host memory (OpenReg): its time is the "
        "host's, as noisy as the runner; its instruction counts are judged either way")
    vendor: list[VendorSuite] = Field(default_factory=list)
    crash_isolation: Literal["process", "fork"] = Field(
        default="process", description="how a test that crashes the interpreter is contained: 'process' starts a "
        "new interpreter (or xdist worker) after each crash; 'fork' runs the tests in forked children of a process "
        "that imported torch and the backend, so a crash costs a fork, not an interpreter start and a collection. "
        "'fork' needs a backend that does not start its device when imported (`ootci init` probes it)")


class ExpectedFailure(_Strict):
    test: str = Field(description="test id, or an fnmatch pattern of test ids")
    reason: str
    link: str = Field(default="", description="tracking issue")
    torch: str = Field(default="", description="torch versions it applies to, as a PEP 440 specifier "
                       "(e.g. '<2.15' or '>=2.14,<2.16'); empty for every torch")

    @field_validator("torch")
    @classmethod
    def _specifier(cls, value: str) -> str:
        try:
            SpecifierSet(value)
        except InvalidSpecifier:
            raise ValueError("expected a version specifier such as '<2.15' or '>=2.14,<2.16'") from None
        return value

    def applies_to(self, torch_version: str | None) -> bool:
        """Does the entry hold for the torch under test (its public version: 2.14.0 for 2.14.0+cu130)?"""
        if not self.torch or not torch_version:
            return True
        try:
            public = Version(torch_version).public
        except InvalidVersion:
            return True
        return SpecifierSet(self.torch).contains(public, prereleases=True)


class Timeouts(_Strict):
    """Seconds."""

    torch: float = 3600
    build: float = 1800
    install: float = 900
    autoload: float = 300
    smoke: float = 900
    integration: float = 3600
    upstream: float = 3600
    """the whole upstream stage; each file also has its own limit ([suites.upstream] timeout)"""
    bench: float = 600
    test: float = Field(default=300, description="one test, before it counts as a hang")


class Manifest(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    description: str = ""
    device: str = Field(pattern=r"^[a-z_][a-z0-9_]*$", description="torch device type, e.g. npu")
    distribution: str = Field(description="Python distribution name")
    import_name: str = Field(description="module the entry point loads")
    entry_point: str = Field(description="expected `name = module:attr` in group torch.backends")
    homepage: str = ""
    source: Source
    build: Build = Field(default_factory=Build)
    ci: CI = Field(default_factory=CI)
    capabilities: list[Capability] = Field(default_factory=list)
    dtypes: list[str] = Field(default_factory=lambda: ["float32"])
    suites: Suites = Field(default_factory=Suites)
    expected_failures: list[ExpectedFailure] = Field(default_factory=list)
    known_failures: str = Field(
        default="", description="the baseline file of known failures beside the manifest, written by `ootci expect` "
        "(e.g. \"known-failures.toml\"); empty for none")
    timeouts: Timeouts = Field(default_factory=Timeouts)
    retries: int = Field(default=2, ge=0, le=10, description="re-runs of a failing test, to tell flaky from failing")

    # Set by the loader, not by the file.
    path: Path | None = Field(default=None, exclude=True)
    known: dict[str, dict[str, KnownFailure]] = Field(default_factory=dict, exclude=True)
    """the known failures file, read: suite -> test id -> entry"""

    @model_validator(mode="after")
    def _integration_dtypes_claimed(self) -> Manifest:
        unclaimed = [d for d in self.suites.integration_dtypes or [] if d not in self.dtypes]
        if unclaimed:
            raise ValueError(f"suites.integration_dtypes: {unclaimed[0]!r} is not among the claimed dtypes "
                             f"({', '.join(self.dtypes)})")
        return self

    @model_validator(mode="after")
    def _recipe_fits_source(self) -> Manifest:
        # pydantic names the failing field from the error's location: raise with the field in it.
        if self.build.recipe == "pip-wheel" and self.source.kind == "requirement":
            raise ValueError("build.recipe: 'pip-wheel' builds from sources, but source.requirement names a "
                             "published package: use recipe = \"prebuilt\" or give source.path or source.git")
        if self.build.recipe == "command" and not self.build.command:
            raise ValueError("build.command: recipe = \"command\" needs the command to run")
        return self

    @property
    def pinned_torch(self) -> str | None:
        """The one torch a prebuilt backend runs with (ci.torch, a version), or None when it builds against any."""
        if self.build.recipe != "prebuilt":
            return None
        try:
            Version(self.ci.torch)
        except InvalidVersion:
            return None
        return self.ci.torch

    def pull_request_gate(self) -> str | None:
        """Why this backend does not run on PyTorch pull requests, or None when it does."""
        if self.ci.pull_requests is not None:
            return None if self.ci.pull_requests else "[ci] pull_requests = false in its manifest"
        pin = self.pinned_requirement
        if pin:
            return (f"prebuilt {pin} is pinned to one torch, and a pull request builds another "
                    "(set [ci] pull_requests = true to run it anyway)")
        return None

    @property
    def pinned_requirement(self) -> str | None:
        """source.requirement of a prebuilt backend when it pins one version (`torch-npu==2.13.0`)."""
        if self.build.recipe != "prebuilt" or not self.source.requirement:
            return None
        try:
            requirement = Requirement(self.source.requirement)
        except InvalidRequirement:
            return None
        if any(s.operator in ("==", "===") and not s.version.endswith("*") for s in requirement.specifier):
            return self.source.requirement
        return None

    @field_validator("entry_point")
    @classmethod
    def _entry_point_form(cls, value: str) -> str:
        if not ENTRY_POINT.match(value):
            raise ValueError("expected 'name = module:attribute'")
        return value

    @property
    def entry_point_parts(self) -> tuple[str, str, str]:
        m = ENTRY_POINT.match(self.entry_point)
        assert m
        return m.group(1), m.group(2), m.group(3)

    @property
    def directory(self) -> Path:
        assert self.path is not None
        return self.path.parent

    def known_failures_path(self) -> Path | None:
        return (self.directory / self.known_failures) if self.known_failures else None

    def source_dir(self) -> Path | None:
        if self.source.path is None:
            return None
        return (self.directory / self.source.path).resolve()


def json_schema() -> dict:
    schema = Manifest.model_json_schema()
    schema["properties"].pop("path", None)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "ootci backend manifest"
    return schema


def _field_path(loc: tuple) -> str:
    return ".".join(str(p) for p in _named(loc)) or "(top level)"


def _named(loc: tuple) -> tuple:
    """loc without the tags pydantic adds for the branch of a union (ci.container's forms)."""
    return tuple(p for p in loc if p not in _CONTAINER_FORMS)


def _model_in(annotation) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if found := _model_in(arg):
            return found
    return None


def _model_at(loc: tuple) -> type[BaseModel]:
    """The model that owns the field at loc, for 'did you mean' suggestions."""
    model: type[BaseModel] = Manifest
    for part in _named(loc)[:-1]:
        field = model.model_fields.get(str(part))
        inner = _model_in(getattr(field, "annotation", None))
        if inner is None:
            break
        model = inner
    return model


_CROSS_FIELD = re.compile(r"^([a-z_]+\.[a-z_]+): (.*)$", re.S)
_INNER_FIELD = re.compile(r"^([a-z_]+): (.*)$", re.S)
"""the same inside a table (suites.upstream's `exclude: ...`): the field is the table's"""


def _describe(exc: ValidationError) -> list[str]:
    """Every problem of a manifest, one line each, misspelt keys first."""
    errors = exc.errors()
    lines, suggested = [], set()
    for err in sorted(errors, key=lambda e: e["type"] != "extra_forbidden"):
        field = _field_path(err["loc"])
        value = err.get("input")
        text = err["msg"].removeprefix("Value error, ")
        cross = _CROSS_FIELD.match(text) if not err["loc"] else \
            _INNER_FIELD.match(text) if err["type"] == "value_error" else None
        if cross:  # a rule over several fields names the one to change first
            field = f"{field}.{cross.group(1)}" if err["loc"] else cross.group(1)
            text, value = cross.group(2), None
        if err["type"] == "missing" and field in suggested:
            continue  # a misspelt key also shows up as a missing one; the misspelling is the news
        message = f"field '{field}': {text}"
        if err["type"] == "extra_forbidden":
            known = [n for n in _model_at(err["loc"]).model_fields if n != "path"]
            close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
            if close:
                message += f" (did you mean '{close[0]}'?)"
                suggested.add(_field_path((*err["loc"][:-1], close[0])))
        elif err["type"] != "missing" and value is not None and not isinstance(value, dict):
            message += f" (got {value!r})"
        lines.append(message)
    return lines


def load(path: Path) -> Manifest:
    """Read and validate one manifest; any problem is one line naming file and field."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: not valid TOML: {exc}") from None
    if "path" in data:
        raise ManifestError(f"{path}: field 'path': not allowed in a manifest")
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        raise ManifestError("\n".join(f"{path}: {line}" for line in _describe(exc))) from None
    manifest.path = path.resolve()
    baseline = manifest.known_failures_path()
    if baseline is not None:
        if not baseline.is_file():
            raise ManifestError(f"{path}: field 'known_failures': {baseline} does not exist (`ootci expect --from RUN` "
                                f"writes it)")
        manifest.known = known_failures.load(baseline)
        vendor = {v.name for v in manifest.suites.vendor}
        suites = ["smoke", "integration", *(["upstream"] if manifest.suites.upstream else []), *sorted(vendor)]
        unknown = sorted(set(manifest.known) - set(suites))
        if unknown:
            raise ManifestError(f"{baseline}: [{unknown[0]}]: no such suite in {path} (suites: {', '.join(suites)})")
    return manifest
