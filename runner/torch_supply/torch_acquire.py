"""From a torch spec to what pip installs: `plan(spec, ...) -> TorchPlan`.

The plan says how to install torch into a venv (`install_args`), which key the torch
layer is cached under, where the torch came from, and, in words, every step taken
(what `--dry-run` prints). Without `dry_run` the wheel is acquired too: downloaded
into `$OOTCI_CACHE/wheels/` or built from source; with it, only read-only queries
are made (the index page, `git ls-remote`), so a dry run still reports an unreachable
index or a missing pull request.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit

from packaging.specifiers import SpecifierSet
from packaging.utils import parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ootci.runner.core import atomic, downloads, procs
from ootci.runner.core.errors import PackageIndexError, TorchSpecError, UsageError
from ootci.runner.torch_supply import torch_index, torch_source
from ootci.runner.torch_supply.envs import cache_root, digest
from ootci.runner.torch_supply.torchspec import TorchSpec, check_torch_wheel_name


@dataclass
class TorchPlan:
    spec: TorchSpec
    install_args: list[str]
    key: str
    source: str | None
    steps: list[str]
    version: str | None = None
    commit: str | None = None
    wheel: Path | None = None
    commands: list[dict] = field(default_factory=list)
    index_url: str | None = None
    """the package index torch (and its own dependencies) came from, besides pip's default"""

    @property
    def needs_install(self) -> bool:
        return self.spec.kind != "installed"

    def to_json(self) -> dict:
        return {
            "spec": self.spec.raw,
            "kind": self.spec.kind,
            "install_args": self.install_args,
            "key": self.key,
            "source": self.source,
            "version": self.version,
            "commit": self.commit,
            "wheel": str(self.wheel) if self.wheel else None,
            "steps": self.steps,
            "commands": self.commands,
            "index_url": self.index_url,
        }


def plan(
    spec: TorchSpec,
    *,
    dry_run: bool = False,
    index_url: str | None = None,
    python: str | os.PathLike | None = None,
    cache: Path | None = None,
    jobs: int | None = None,
    torch_repo: str | None = None,
    log: Path | None = None,
) -> TorchPlan:
    """How to get the torch `spec` names; acquires the wheel unless dry_run.

    python: the interpreter torch is for (default: this one, which also creates the
    torch venvs); index_url: nightly index (default $OOTCI_TORCH_INDEX or PyTorch's
    nightly CPU index) or, for a version, an extra index; log: where source-build
    commands write their output.
    """
    cache = cache or cache_root()
    if spec.kind == "installed":
        return _installed(spec, python)
    if spec.kind == "version":
        return _version(spec, index_url or os.environ.get(torch_index.INDEX_ENV))
    if spec.kind == "wheel":
        return _wheel_file(spec, python)
    if spec.kind == "url":
        return _wheel_url(spec, cache, dry_run)
    if spec.kind == "nightly":
        return _nightly(spec, index_url, python, cache, dry_run)
    if spec.kind in ("git", "pr"):
        return _source(spec, torch_repo, python, cache, jobs, dry_run, log)
    raise TorchSpecError(f"torch spec '{spec.raw}': kind {spec.kind!r} has no plan")


def _installed(spec: TorchSpec, python: str | os.PathLike | None) -> TorchPlan:
    if python is None:
        raise UsageError("--torch installed tests the torch of an existing environment: give its interpreter "
                         "with --python PATH")
    python = os.fspath(python)
    return TorchPlan(spec, [], f"installed:{python}", python,
                     [f"use the torch already installed for {python} (nothing is installed)"])


def _version(spec: TorchSpec, extra_index: str | None) -> TorchPlan:
    args = (["--extra-index-url", extra_index] if extra_index else []) + [f"torch=={spec.value}"]
    # The key is the pip arguments themselves, so `torch==2.13.0` shares its layer
    # with anything else that installs exactly that.
    key = " ".join(args)
    return TorchPlan(spec, args, key, f"torch=={spec.value}", [f"pip install {' '.join(args)}"],
                     version=spec.value, index_url=extra_index)


AVAILABLE = re.compile(r"^Available versions: (.+)$", re.M)
VERSIONS_NAMED = 8  # newest versions a "no such torch" error names


def check_version_available(plan: TorchPlan, *, python: str | os.PathLike | None = None,
                            cache: Path | None = None) -> None:
    """A version spec that pip's package index does not have is the user's mistake: one
    line naming the versions it does have (TorchSpecError), before anything is written.

    Asks `pip index versions` with the indexes and find-links pip is configured with (plus
    the plan's extra index), as the torch layer's pip install would. When pip cannot tell
    (no pip, index unreachable, no torch there at all) nothing is refused here: the
    install stage reports what pip says.
    """
    if plan.spec.kind != "version":
        return
    argv = [os.fspath(python or sys.executable), "-m", "pip", "index", "versions", "torch", "--pre",
            "--disable-pip-version-check", "--no-input", "--timeout", "20", "--retries", "1"]
    if plan.index_url:
        argv += ["--extra-index-url", plan.index_url]
    wanted = SpecifierSet(f"=={plan.spec.value}")
    # A release the index had stays there: a version once found is not asked for again
    # (a nightly matrix, a test suite, a bisection start many runs of one version).
    seen = (cache or cache_root()) / "torch-versions" / digest(
        argv[1:], *(os.environ.get(k, "") for k in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS")))
    if _found_in(_read_list(seen), wanted):
        return
    result = procs.run(argv, timeout=120)
    found = AVAILABLE.search(result.output_tail) if result.ok else None
    if found is None:
        return
    available = [v.strip() for v in found.group(1).split(",") if v.strip()]
    if _found_in(available, wanted):
        _write_list(seen, available)
        return
    where = "pip's package index" + (f" and {plan.index_url}" if plan.index_url else "")
    named = ", ".join(available[:VERSIONS_NAMED])
    more = f", … ({len(available)} versions, the oldest {available[-1]})" if len(available) > VERSIONS_NAMED else ""
    raise TorchSpecError(f"--torch {plan.spec.raw}: {where} has no torch {plan.spec.value}; it has {named}{more}")


def _found_in(versions: list[str], wanted: SpecifierSet) -> bool:
    return any(_is_version(v) and wanted.contains(v, prereleases=True) for v in versions)


def _read_list(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").split()
    except OSError:
        return []


def _write_list(path: Path, versions: list[str]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(path, "\n".join(versions) + "\n")
    except OSError:
        pass  # only a shortcut for the next run


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def _wheel_file(spec: TorchSpec, python: str | os.PathLike | None) -> TorchPlan:
    path = spec.path
    _check_installable(path.name, python)
    sha = downloads.sha256_of(path)
    return TorchPlan(spec, [str(path)], f"sha256:{sha}", str(path),
                     [f"pip install {path} (sha256 {sha})"], version=_wheel_version(path.name), wheel=path)


def _wheel_url(spec: TorchSpec, cache: Path, dry_run: bool) -> TorchPlan:
    url, fragment = urldefrag(spec.value)
    sha = torch_index.fragment_sha256(fragment)
    filename = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    check_torch_wheel_name(filename, what=spec.raw)
    dest = cache / "wheels" / f"url-{digest(url, length=12)}" / filename
    steps = [f"download {url} -> {dest}" + (f" (checking sha256 {sha})" if sha else ""), f"pip install {dest}"]
    if dry_run:
        key = f"sha256:{sha}" if sha else f"url:{url}"
        return TorchPlan(spec, [str(dest)], key, url, steps, version=_wheel_version(filename), wheel=dest)
    downloads.fetch(url, dest, sha256=sha)
    return TorchPlan(spec, [str(dest)], f"sha256:{downloads.sha256_of(dest)}", url, steps,
                     version=_wheel_version(filename), wheel=dest)


def _nightly(spec: TorchSpec, index_url: str | None, python: str | os.PathLike | None, cache: Path,
             dry_run: bool) -> TorchPlan:
    index = torch_index.nightly_index(index_url)
    target = torch_index.target(python)
    found = torch_index.newest_nightly(torch_index.fetch_project(index), target, index)
    dest = cache / "wheels" / found.filename
    steps = [
        f"newest nightly at {index} for {target.describe()}: {found.filename}",
        f"download {found.url} -> {dest}" + (f" (checking sha256 {found.sha256})" if found.sha256 else ""),
        f"pip install --extra-index-url {index} {dest}",
    ]
    if not dry_run:
        downloads.fetch(found.url, dest, sha256=found.sha256)
    # The index also serves torch's own dependencies that PyPI lacks (e.g. pytorch-triton).
    return TorchPlan(spec, ["--extra-index-url", index, str(dest)], found.filename, found.url, steps,
                     version=str(found.version), wheel=dest, index_url=index)


def _source(spec: TorchSpec, repo: str | None, python: str | os.PathLike | None, cache: Path, jobs: int | None,
            dry_run: bool, log: Path | None) -> TorchPlan:
    source_plan = torch_source.plan_source(spec, repo_url=repo, cache=cache, python=python, jobs=jobs)
    commands = [c.to_json() for c in source_plan.commands]
    if dry_run:
        wheel = source_plan.cached_wheel
        install = [str(wheel)] if wheel else [str(source_plan.layout.wheel_dir(source_plan.commit or "<commit>")
                                                   / "torch-<version>.whl")]
        return TorchPlan(spec, install, _source_key(source_plan.commit, source_plan.ref), _source_origin(source_plan),
                         source_plan.steps, commit=source_plan.commit, wheel=wheel, commands=commands)
    default_log = cache / "logs" / f"torch-source-{spec.kind}-{re.sub(r'[^A-Za-z0-9._-]', '_', spec.value)}.log"
    built = torch_source.build(source_plan, log=log or default_log)
    steps = source_plan.steps
    if not source_plan.cached_wheel:
        steps.append(f"{'reused' if built.reused else 'built'} {built.wheel}")
    return TorchPlan(spec, [str(built.wheel)], _source_key(built.commit, source_plan.ref), _source_origin(source_plan),
                     steps, version=_wheel_version(built.wheel.name), commit=built.commit, wheel=built.wheel,
                     commands=commands)


def _source_key(commit: str | None, ref: str) -> str:
    return f"git:{commit or ref}"


def _source_origin(source_plan: torch_source.SourcePlan) -> str:
    return f"{source_plan.repo_url} {source_plan.ref}" + (f" @ {source_plan.commit}" if source_plan.commit else "")


def _wheel_version(filename: str) -> str | None:
    try:
        return str(parse_wheel_filename(filename.replace("%2B", "+"))[1])
    except ValueError:
        return None


def _check_installable(filename: str, python: str | os.PathLike | None) -> None:
    """Refuse a wheel the target interpreter cannot install, before pip says it less clearly."""
    _, _, _, tags = parse_wheel_filename(filename)
    target = torch_index.target(python)
    if not tags & set(target.tags):
        wanted = ", ".join(sorted(str(t) for t in tags))
        raise TorchSpecError(f"torch wheel {filename} ({wanted}) cannot be installed on this interpreter "
                             f"({target.describe()})")


def place(plan_: TorchPlan, out_dir: Path, *, python: str | os.PathLike | None = None,
          log: Path | None = None) -> Path:
    """Put the plan's wheel into out_dir (for a version: downloaded there by pip); returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if plan_.wheel is not None:
        dest = out_dir / plan_.wheel.name
        tmp = out_dir / f".{plan_.wheel.name}.part"
        shutil.copyfile(plan_.wheel, tmp)
        os.replace(tmp, dest)
        return dest
    if plan_.spec.kind == "version":
        return _pip_download(plan_, out_dir, python, log)
    raise UsageError(f"--out: torch spec '{plan_.spec.raw}' yields no wheel to place")


def _pip_download(plan_: TorchPlan, out_dir: Path, python: str | os.PathLike | None, log: Path | None) -> Path:
    before = set(out_dir.glob("torch-*.whl"))
    argv = procs.python_argv(python or sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
                             "--no-deps", "--only-binary=:all:", "-d", os.fspath(out_dir), *plan_.install_args)
    result = procs.run(argv, timeout=1800, log=log)
    if not result.ok:
        last = (result.output_tail.strip().splitlines() or ["no output"])[-1]
        raise PackageIndexError(f"pip could not download {' '.join(plan_.install_args)}: {last[:300]}")
    wanted = [p for p in out_dir.glob("torch-*.whl") if _wheel_version(p.name) == _normal(plan_.version)]
    new = sorted(set(out_dir.glob("torch-*.whl")) - before) or wanted
    if not new:
        raise PackageIndexError(f"pip download of torch=={plan_.version} left no torch wheel in {out_dir}")
    plan_.wheel = new[0]
    return new[0]


def _normal(version: str | None) -> str | None:
    return str(Version(version)) if version else None
