"""The one small interface every pipeline stage implements.

A stage is a module with `NAME` and `run(ctx) -> StageResult`. The pipeline times
it, gives it a log file, turns an unexpected exception into a `crashed` result and
marks later stages `blocked` after a failure. Adding a stage is one new module and
one line in `runner.stages.STAGES`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ootci.runner.core import procs, rootcause
from ootci.runner.manifests.manifest import Manifest
from ootci.runner.models import SUITES, RootCause, RunRecord, StageResult, Status, TorchInfo, reproduce_command
from ootci.runner.suite_runs.shard_plan import Part
from ootci.runner.torch_supply.envs import Env
from ootci.runner.torch_supply.torch_pin import TorchUnderTest
from ootci.runner.torch_supply.wheel_metadata import BuildTorch


@dataclass
class RunOptions:
    torch: str = "nightly"
    out: Path = Path("out")
    python: Path | None = None
    index_url: str | None = None
    torch_repo: str | None = None
    suites: tuple[str, ...] = SUITES
    bench: bool | None = None
    """the bench stage: True where `--suites` named it, False for `--suites none`, None as the
    manifest says ([suites] bench)"""
    bench_only: tuple[str, ...] = ()
    """the bench measurements to time (empty: all of them); a slowdown's bisection times one"""
    bench_time: bool = True
    """False: the bench stage counts instructions and times nothing (a bisection step on counts)"""
    trigger: str = "manual"
    pr: int | None = None
    pr_head_sha: str | None = None
    relay_delivery_id: str | None = None
    dry_run: bool = False
    cache: Path | None = None
    jobs: int | None = None
    only_tests: dict[str, list[str]] | None = None
    """suite -> test ids: run only these (a bisection step); suites not named do not run"""
    last_stage: str | None = None
    """the stages after it are not run (a bisection step needs only the stage it judges)"""
    shard: str | None = None
    """"K/N": the suite stages run only the tests of shard K of N (`ootci run --shard`)"""
    shard_group: str | None = None
    """the id the N shards of one run share, so that `ootci shards merge` finds them"""
    shard_part: Part | None = None
    """the part of a plan (`--shard-plan`) this shard runs of the upstream suite: its files and id ranges"""
    upstream_files: tuple[str, ...] = ()
    """the upstream suite runs only these files (paths under PyTorch's test/; empty: the manifest's)"""
    upstream_tests: Path | None = None
    """PyTorch's test/ folder to take the upstream files from, instead of fetching them at the torch's commit"""

    def reproduce(self, backend: str, torch: TorchInfo) -> str:
        """The command that runs this again, the torch named as given (later: as resolved)."""
        return reproduce_command(backend, torch, self.suites, self.shard, self.bench, self.bench_only,
                                 self.upstream_files, str(self.upstream_tests) if self.upstream_tests else None,
                                 self.shard_part.path if self.shard_part else None)


@dataclass
class RunContext:
    manifest: Manifest
    options: RunOptions
    record: RunRecord
    run_dir: Path
    cache: Path
    reporter: object
    stage_name: str = ""
    torch_env: Env | None = None
    env: Env | None = None
    wheels: list[Path] = field(default_factory=list)
    source_dir: Path | None = None  # the backend's sources (a git checkout lives in the cache)
    torch_install_args: list[str] = field(default_factory=list)
    torch_under_test: TorchUnderTest | None = None
    """what `import torch` must load in the environment under test (set by the torch stage)"""
    constraint: Path | None = None
    """pip constraint file pinning torch to the torch under test"""
    build_torch: BuildTorch | None = None
    """the torch the backend's wheel was compiled against, when known (set by the build stage)"""

    @property
    def python(self) -> Path:
        """Interpreter of the environment under test."""
        if self.env is not None:
            return self.env.python
        if self.options.python is not None:
            return self.options.python
        raise RuntimeError("no environment under test yet")

    def constraint_args(self) -> list[str]:
        """`-c FILE` for a pip call ootci makes in the environment under test (pins torch)."""
        return ["-c", str(self.constraint)] if self.constraint is not None else []

    def pip_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment for a command that may run pip in the environment under test:
        PIP_CONSTRAINT pins torch (added to any constraint the user already set)."""
        env = dict(os.environ if base is None else base)
        if self.constraint is not None:
            env["PIP_CONSTRAINT"] = " ".join(p for p in (env.get("PIP_CONSTRAINT", ""), str(self.constraint)) if p)
        return env

    def log_path(self, stage: str | None = None) -> Path:
        logs = self.run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        return logs / f"{stage or self.stage_name}.log"

    def run(
        self,
        argv: Sequence[str | os.PathLike],
        *,
        timeout: float,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> procs.ProcResult:
        """A subprocess of the current stage, logged to its log file."""
        return procs.run(argv, timeout=timeout, log=self.log_path(), env=env, cwd=cwd,
                         on_line=getattr(self.reporter, "line", None))


class Stage(Protocol):
    NAME: str

    def run(self, ctx: RunContext) -> StageResult: ...


def proc_failure(stage: str, result: procs.ProcResult, what: str) -> StageResult:
    """A stage result for a subprocess that did not succeed, with its root cause."""
    cause = rootcause.from_proc(result, what=what)
    status = Status.timeout if result.timed_out else Status.crashed if result.signal_name else Status.failed
    return StageResult(name=stage, status=status, summary=cause.summary if cause else f"{what} failed",
                       root_cause=cause)


def config_failure(stage: str, message: str) -> StageResult:
    return StageResult(name=stage, status=Status.failed, summary=message,
                       root_cause=RootCause(kind="error", summary=message))
