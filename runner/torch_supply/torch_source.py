"""Source builds of torch for `git:REF` and `pr:N` specs.

The repository (default https://github.com/pytorch/pytorch, or `--torch-repo` /
`$OOTCI_TORCH_REPO`) is kept as a bare clone in the cache and refreshed with narrow
fetches: only the ref a spec needs. It is deliberately not `git clone --mirror`, which
on GitHub would download every pull request ref ever made. The build happens in one
reusable checkout per repository, a `git clone --shared` of that bare clone (objects
are read from it, not copied), so rebuilding after a checkout of another commit is
incremental, and ccache covers the rest.

A pull request is built from its merge ref `refs/pull/N/merge` when GitHub has one
(the PR applied to the current base branch, which is what a pull_request workflow
tests) and from its head `refs/pull/N/head` otherwise (conflicting or closed PRs).

`plan_source` resolves the ref to a commit with `git ls-remote` and lists every command
with its environment; `build` runs the same commands. The resulting wheel is cached per
commit, and that commit is what the built torch reports as `torch.version.git_version`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from ootci.runner.core import git, procs, rootcause
from ootci.runner.core.errors import GitError, PackageIndexError, TorchBuildError, TorchSpecError
from ootci.runner.core.procs import ProcResult
from ootci.runner.torch_supply.envs import cache_root, digest
from ootci.runner.torch_supply.torchspec import TorchSpec

DEFAULT_REPO = "https://github.com/pytorch/pytorch"
REPO_ENV = "OOTCI_TORCH_REPO"
REPO_HELP = f"PyTorch git repository for git:/pr: specs (default ${REPO_ENV} or GitHub)"
"""--torch-repo of every command that gets a torch by its spec (run, init, cache-key)"""
READY = ".ootci-ready"

GIT_TIMEOUT = 3600.0
REQUIREMENTS_TIMEOUT = 1800.0
BUILD_TIMEOUT = 6 * 3600.0

# No automatic gc in the bare clone: the build checkout borrows its objects, and a
# commit only an old, since-moved PR ref held must stay readable.
FETCH_OPTIONS = ("--no-tags", "--no-auto-gc")

_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
_SHORT_SHA = re.compile(r"^[0-9a-f]{4,39}$")


def torch_repo(repo_url: str | None = None) -> str:
    return repo_url or os.environ.get(REPO_ENV) or DEFAULT_REPO


# What a command does to the cache, so `build` knows how to run it: creating steps
# first remove what an earlier, interrupted attempt left behind.
NEW_MIRROR, MIRROR, NEW_CHECKOUT, CHECKOUT, NEW_VENV, REQUIREMENTS, WHEEL = (
    "new-mirror", "mirror", "new-checkout", "checkout", "new-venv", "requirements", "wheel")


@dataclass
class Command:
    what: str
    argv: list[str]
    role: str
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    timeout: float = GIT_TIMEOUT

    def render(self) -> str:
        """The command as a shell line, with the environment it sets."""
        words = [f"cd {shlex.quote(str(self.cwd))} &&"] if self.cwd else []
        words += [f"{k}={_quote_env(v)}" for k, v in self.env.items()]
        words += [shlex.quote(a) for a in self.argv]
        return " ".join(words)

    def process_env(self) -> dict[str, str] | None:
        if not self.env:
            return None
        env = dict(os.environ)
        for key, value in self.env.items():
            env[key] = value.replace("$PATH", os.environ.get("PATH", ""))
        return env

    def to_json(self) -> dict:
        return {"what": self.what, "argv": self.argv, "env": self.env,
                "cwd": str(self.cwd) if self.cwd else None, "timeout_s": self.timeout}


def _quote_env(value: str) -> str:
    # Keep "$PATH" expandable in the printed line: it is what the runner does too.
    if value.endswith(":$PATH"):
        return shlex.quote(value[: -len(":$PATH")]) + ":$PATH"
    return shlex.quote(value)


@dataclass(frozen=True)
class Layout:
    """Where a source build keeps its state in the cache."""

    cache: Path
    repo_url: str
    python: str

    @property
    def _repo_id(self) -> str:
        name = self.repo_url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git") or "repo"
        return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}-{digest(self.repo_url, length=10)}"

    @property
    def mirror(self) -> Path:
        return self.cache / "git" / f"{self._repo_id}.git"

    @property
    def checkout(self) -> Path:
        return self.cache / "src" / self._repo_id

    @property
    def build_venv(self) -> Path:
        return self.cache / "build-venv" / digest(str(Path(self.python).resolve()), length=12)

    @property
    def ccache(self) -> Path:
        return self.cache / "ccache"

    def wheel_dir(self, commit: str) -> Path:
        return self.cache / "wheels" / "source" / commit


@dataclass
class SourcePlan:
    spec: TorchSpec
    repo_url: str
    ref: str
    commit: str | None
    note: str
    layout: Layout
    jobs: int
    commands: list[Command]
    cached_wheel: Path | None = None

    @property
    def steps(self) -> list[str]:
        head = f"source build of {self.repo_url} {self.ref}" + (f" at commit {self.commit}" if self.commit else "")
        lines = [f"{head} ({self.note})"]
        if self.cached_wheel:
            return lines + [f"reuse the wheel already built from that commit: {self.cached_wheel}"]
        return lines + [f"{c.what}: {c.render()}" for c in self.commands]


def ls_remote(repo_url: str, *patterns: str, timeout: float = 300) -> dict[str, str]:
    """{ref: commit} of the refs matching patterns at repo_url."""
    try:
        listed = git.git(None, "ls-remote", "--", repo_url, *patterns, timeout=timeout)
    except GitError as exc:
        raise PackageIndexError(f"cannot read torch repository {repo_url}: {exc.detail}") from None
    refs = {}
    for line in listed.splitlines():
        sha, _, ref = line.partition("\t")
        if _FULL_SHA.match(sha) and ref:
            refs[ref.strip()] = sha
    return refs


def resolve(spec: TorchSpec, repo_url: str) -> tuple[str, str | None, str]:
    """(ref to fetch, its commit or None when only known after fetching, note for the record)."""
    if spec.kind == "pr":
        head, merge = f"refs/pull/{spec.value}/head", f"refs/pull/{spec.value}/merge"
        refs = ls_remote(repo_url, head, merge)
        if merge in refs:
            return merge, refs[merge], f"pull request {spec.value} merged into its base; head {refs.get(head, '?')}"
        if head in refs:
            return head, refs[head], f"pull request {spec.value} head; no merge ref (conflicting or closed)"
        raise TorchSpecError(f"pull request {spec.value} not found at {repo_url} (no {head})")
    ref = spec.value
    if _FULL_SHA.match(ref):
        return ref, ref, "commit"
    refs = ls_remote(repo_url, ref)
    for candidate, note in ((f"refs/heads/{ref}", "branch"), (f"refs/tags/{ref}^{{}}", "tag"),
                            (f"refs/tags/{ref}", "tag"), (ref, "ref")):
        if candidate in refs:
            return candidate.removesuffix("^{}"), refs[candidate], note
    if _SHORT_SHA.match(ref):
        return ref, None, "abbreviated commit"
    raise TorchSpecError(f"git ref '{ref}' not found at {repo_url}: not a branch, tag or commit")


def plan_source(spec: TorchSpec, *, repo_url: str | None = None, cache: Path | None = None,
                python: str | os.PathLike | None = None, jobs: int | None = None,
                build_timeout: float = BUILD_TIMEOUT) -> SourcePlan:
    repo = torch_repo(repo_url)
    ref, commit, note = resolve(spec, repo)
    layout = Layout(cache or cache_root(), repo, os.fspath(python or sys.executable))
    jobs = jobs or os.cpu_count() or 1
    plan = SourcePlan(spec, repo, ref, commit, note, layout, jobs, [])
    if commit and _ready_wheel(layout.wheel_dir(commit)):
        plan.cached_wheel = _ready_wheel(layout.wheel_dir(commit))
        return plan
    plan.commands = _commands(layout, ref, commit, jobs, build_timeout)
    return plan


def _commands(layout: Layout, ref: str, commit: str | None, jobs: int, build_timeout: float) -> list[Command]:
    mirror, checkout, venv = layout.mirror, layout.checkout, layout.build_venv
    venv_python = venv / "bin" / "python"
    cmds = []
    if not (mirror / READY).is_file():
        cmds.append(Command("clone the repository (bare, reused by later builds)",
                            git.argv(None, "clone", "--bare", "--", layout.repo_url, mirror), NEW_MIRROR))
    if ref.startswith("refs/"):
        cmds.append(Command(f"fetch {ref}", git.argv(mirror, "fetch", *FETCH_OPTIONS, "origin", f"+{ref}:{ref}"),
                            MIRROR))
    else:
        # A bare commit: whatever branch or tag holds it.
        cmds.append(Command("fetch all branches and tags", git.argv(
            mirror, "fetch", *FETCH_OPTIONS, "origin", "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"),
            MIRROR))
    if not (checkout / ".git").is_dir():
        cmds.append(Command("create the build checkout (shares the clone's objects)",
                            git.argv(None, "clone", "--shared", "--no-checkout", mirror, checkout), NEW_CHECKOUT))
    cmds += [
        Command("check out the commit", git.argv(checkout, "checkout", "--detach", "--force", commit or ref),
                CHECKOUT),
        Command("sync submodule URLs", git.argv(checkout, "submodule", "sync", "--recursive"), CHECKOUT),
        Command("fetch submodules", git.argv(checkout, "submodule", "update", "--init", "--recursive",
                                              f"--jobs={jobs}"), CHECKOUT),
    ]
    if not (venv / READY).is_file():
        cmds.append(Command("create the build venv", [layout.python, "-m", "venv", os.fspath(venv)], NEW_VENV,
                            timeout=600))
    cmds.append(Command("install PyTorch's build requirements",
                        [os.fspath(venv_python), "-m", "pip", "install", "--disable-pip-version-check",
                         "-r", "requirements.txt"], REQUIREMENTS, cwd=checkout, timeout=REQUIREMENTS_TIMEOUT))
    wheel_dir = layout.wheel_dir(commit) if commit else layout.wheel_dir("<commit>")
    cmds.append(Command("build the torch wheel",
                        [os.fspath(venv_python), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                         "--disable-pip-version-check", "-v", "-w", os.fspath(wheel_dir), "."],
                        WHEEL, env=build_env(layout, venv, jobs), cwd=checkout, timeout=build_timeout))
    return cmds


def build_env(layout: Layout, venv: Path, jobs: int) -> dict[str, str]:
    env = {
        # The build venv's cmake and ninja come first.
        "PATH": f"{venv / 'bin'}:$PATH",
        "USE_CUDA": "0",
        "USE_ROCM": "0",
        "BUILD_TEST": "0",
        "MAX_JOBS": str(jobs),
    }
    if shutil.which("ccache"):
        env |= {
            "CMAKE_C_COMPILER_LAUNCHER": "ccache",
            "CMAKE_CXX_COMPILER_LAUNCHER": "ccache",
            "CCACHE_DIR": os.fspath(layout.ccache),
        }
    return env


def _ready_wheel(wheel_dir: Path) -> Path | None:
    if not (wheel_dir / READY).is_file():
        return None
    wheels = sorted(wheel_dir.glob("torch-*.whl"))
    return wheels[0] if len(wheels) == 1 else None


@dataclass
class SourceBuild:
    wheel: Path
    commit: str
    reused: bool


def checkout(plan: SourcePlan, *, log: Path | None = None) -> str:
    """Run the git part of the plan (clone or fetch, checkout, submodules); returns HEAD's commit."""
    _update_clone(plan, log)
    with _checkout_lock(plan.layout):
        return _check_out(plan, log)


def build(plan: SourcePlan, *, log: Path | None = None) -> SourceBuild:
    """Run the whole plan; the wheel is cached per commit."""
    if plan.cached_wheel:
        return SourceBuild(plan.cached_wheel, plan.commit or "", True)
    _update_clone(plan, log)
    # One lock from checkout to wheel: another run must not switch the tree mid-build.
    with _checkout_lock(plan.layout):
        commit = _check_out(plan, log)
        wheel_dir = plan.layout.wheel_dir(commit)
        ready = _ready_wheel(wheel_dir)
        if ready:
            return SourceBuild(ready, commit, True)
        venv = plan.layout.build_venv
        for cmd in plan.commands:
            if cmd.role == NEW_VENV:
                _clear(venv)
                _run(cmd, log)
                (venv / READY).write_text(plan.layout.python + "\n")
            elif cmd.role == REQUIREMENTS:
                _run(cmd, log)
            elif cmd.role == WHEEL:
                _clear(wheel_dir)
                _run(_with_wheel_dir(cmd, wheel_dir), log)
        wheels = sorted(wheel_dir.glob("torch-*.whl"))
        if len(wheels) != 1:
            raise TorchBuildError(f"source build of {commit} produced {len(wheels)} torch wheels in {wheel_dir}")
        (wheel_dir / READY).write_text(json.dumps({"commit": commit, "ref": plan.ref, "repo": plan.repo_url}))
    return SourceBuild(wheels[0], commit, False)


def _update_clone(plan: SourcePlan, log: Path | None) -> None:
    mirror = plan.layout.mirror
    mirror.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(os.fspath(mirror) + ".lock"):
        for cmd in plan.commands:
            if cmd.role == NEW_MIRROR:
                if (mirror / READY).is_file():
                    continue  # another run cloned it meanwhile
                _clear(mirror)  # a clone that never finished
                _run(cmd, log)
                (mirror / READY).write_text(plan.repo_url + "\n")
            elif cmd.role == MIRROR:
                _run(cmd, log)


def _checkout_lock(layout: Layout) -> FileLock:
    layout.checkout.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(os.fspath(layout.checkout) + ".lock")


def _check_out(plan: SourcePlan, log: Path | None) -> str:
    """The checkout part of the plan, under the checkout lock; returns HEAD's commit."""
    work = plan.layout.checkout
    for cmd in plan.commands:
        if cmd.role == NEW_CHECKOUT:
            if (work / ".git").is_dir():
                continue
            _clear(work)
            _run(cmd, log)
        elif cmd.role == CHECKOUT:
            _run(cmd, log)
    head = _run(Command("read the commit", git.argv(work, "rev-parse", "HEAD"), CHECKOUT, timeout=60), log)
    commit = head.output_tail.strip().splitlines()[-1].strip()
    if plan.commit and commit != plan.commit:
        # The ref moved between ls-remote and fetch: build what was fetched, and say so.
        plan.note += f"; ref moved from {plan.commit}"
    plan.commit = commit
    return commit


def _with_wheel_dir(cmd: Command, wheel_dir: Path) -> Command:
    argv = list(cmd.argv)
    argv[argv.index("-w") + 1] = os.fspath(wheel_dir)
    return Command(cmd.what, argv, cmd.role, cmd.env, cmd.cwd, cmd.timeout)


def _clear(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _run(cmd: Command, log: Path | None) -> ProcResult:
    if log:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as f:
            f.write(f"\n[ootci] {cmd.what}\n")
    env = cmd.process_env() or dict(os.environ)
    env.setdefault("GIT_TERMINAL_PROMPT", "0")
    result = procs.run(cmd.argv, timeout=cmd.timeout, log=log, env=env, cwd=cmd.cwd)
    if not result.ok:
        cause = rootcause.from_proc(result, what=cmd.what)
        assert cause is not None  # the process failed
        where = f" (log: {log})" if log else ""
        raise TorchBuildError(f"source build: {cmd.what} failed: {cause.summary}{where}", result, cause)
    return result
