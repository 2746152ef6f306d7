"""The autoload verification: does `import torch` load a backend, and is its device usable?

Every probe runs as a script (runner/probes/) in a fresh interpreter of the
environment under test, through `procs.run` with a time limit, and reports each
phase as a marked JSON line; whatever the backend does to that interpreter
(raising, exiting, aborting, hanging, flooding stdout) becomes a classified
CheckResult with a RootCause. The orchestrator never imports torch.

Checks, in the order a root cause is chosen from:
  entry_point, plain_import, build_torch, device, tensor, opt_out, circular_import, neighbours, import_cost

build_torch compares the torch a backend was compiled against (when that is known)
with the torch under test: PyTorch's C++ ABI is not stable across releases, and an
extension built against another torch can load and still call the wrong function.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name
from pydantic import BaseModel, Field

from ootci.runner.core import procs, rootcause
from ootci.runner.core.errors import TargetEnvironmentError, UsageError
from ootci.runner.manifests.manifest import Manifest
from ootci.runner.models import CheckResult, RootCause, Status
from ootci.runner.torch_supply import envs
from ootci.runner.torch_supply.wheel_metadata import BuildTorch, WheelMetadata

PROBES = Path(__file__).resolve().parents[1] / "probes"
MARKER = "@@OOTCI-PROBE"
SWITCH = "TORCH_DEVICE_BACKEND_AUTOLOAD"
DEFAULT_TIMEOUT = 120.0
DEFAULT_RUNS = 5
# Each timed pair after the first costs two interpreter starts with `import torch` (seconds
# of CPU each): a busy CI machine, or a test suite running hundreds of pipelines, may ask
# for fewer. The check stays informational whatever the number.
RUNS_VARIABLE = "OOTCI_IMPORT_COST_RUNS"
# Bytes of each probe's output kept in memory and in the log: a backend flooding
# stdout costs the verifier nothing beyond this.
PROBE_TAIL = 16 * 1024
CHECK_ORDER = ["entry_point", "plain_import", "build_torch", "device", "tensor", "opt_out", "circular_import",
               "neighbours", "import_cost"]
BLOCKING_CHECKS = ("plain_import", "device", "tensor", "build_torch")
"""The checks whose failure makes the suites meaningless: all of them come from the plain-import
probe (and build_torch from no probe at all). The others cost two more interpreters importing torch."""
PER_BACKEND_CHECKS = ("entry_point", "device", "tensor", "opt_out", "circular_import")
"""The checks made once for each backend verified, named `check:entry_point` when there are several;
the rest are made once for the environment."""
ABI_HINT = ("PyTorch's C++ ABI is not stable across releases: an extension built against another torch may load "
            "and still call the wrong functions (a virtual method added in a newer release shifts every later "
            "one); rebuild it against the torch under test")


class Verification(BaseModel):
    """What `ootci verify` prints with --json, and what the autoload stage records."""

    status: Status
    root_cause: RootCause | None = None
    python: str
    torch_version: str | None = None
    backends: list[str] = Field(default_factory=list, description="entry points verified")
    checks: list[CheckResult] = Field(default_factory=list)
    duration_s: float = 0.0

    def summary(self) -> str:
        failed = [c for c in self.checks if not c.status.ok and c.status is not Status.blocked]
        if not failed:
            if not self.checks:
                return "nothing to verify"
            skipped = sum(1 for c in self.checks if c.status is Status.skipped)
            passed = len(self.checks) - skipped
            return f"{passed} checks passed" + (f", {skipped} skipped" if skipped else "")
        why = self.root_cause.summary if self.root_cause else failed[0].detail
        return f"{failed[0].name} {failed[0].status.value}: {why}"


# ---------------------------------------------------------------- probes


@dataclass
class Probe:
    """One finished probe: how its process ended and the phases it reported."""

    proc: procs.ProcResult
    phases: dict[str, dict]

    def get(self, phase: str) -> dict | None:
        return self.phases.get(phase)

    def value(self, phase: str) -> dict:
        """What a phase that passed reported (KeyError if it did not report)."""
        return self.phases[phase]["value"]


@dataclass
class Runner:
    """Starts probes with the interpreter under test; writes a bounded record of each to `log`."""

    python: Path
    timeout: float
    log: Path | None = None
    _log_lock: threading.Lock = field(default_factory=threading.Lock)
    # Set when a probe that imports the backend ran into its time limit: every later one
    # would hang the same way, so a hanging backend costs one limit, not one per probe.
    hung: str | None = None

    def env(self, autoload: bool | None, nonce: str) -> dict[str, str]:
        env = procs.target_env(dict(os.environ, OOTCI_PROBE_NONCE=nonce, PYTHONFAULTHANDLER="1"))
        # The probes import their shared _probe module, which safe-path mode no longer finds
        # beside the script by itself.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.fspath(PROBES), env.get("PYTHONPATH", "")) if p)
        if autoload is None:
            env.pop(SWITCH, None)
        else:
            env[SWITCH] = "1" if autoload else "0"
        return env

    def _not_started(self, argv: list[str]) -> procs.ProcResult | None:
        if self.hung is None:
            return None
        return procs.ProcResult(argv=argv, returncode=None, duration_s=0.0, timed_out=False, output_tail="",
                                extra={"not_started": self.hung})

    def _note_hang(self, result: procs.ProcResult, what: str) -> None:
        if result.timed_out and self.hung is None:
            self.hung = f"the backend hung in an earlier probe ({what} timed out after {result.timeout_s:g} s)"

    def probe(self, script: str, *args: str, autoload: bool | None = True, timeout: float | None = None,
              imports_backend: bool = True, prefix: tuple[str, ...] = (),
              env: dict[str, str] | None = None) -> Probe:
        """imports_backend=False: the probe loads none of the backends under verification (the
        inventory, a neighbour's entry point alone), so a hang of theirs does not stop it.
        prefix: a command the interpreter runs under (the bench stage's valgrind); env: variables
        added to the probe's environment."""
        imports_backend = imports_backend and script != "entry_points.py"
        if imports_backend and (skipped := self._not_started([script, *args])) is not None:
            return Probe(skipped, {})
        timeout = timeout or self.timeout
        nonce = secrets.token_hex(8)
        tag = f"{MARKER}:{nonce}@@ "
        phases: dict[str, dict] = {}

        def on_line(line: str) -> None:
            at = line.find(tag)
            if at < 0:
                return
            try:
                data = json.loads(line[at + len(tag):])
            except ValueError:
                return
            if isinstance(data, dict) and isinstance(data.get("phase"), str):
                # When the line arrived, from the start: the import phase's is the import's wall time.
                data["_arrived_s"] = time.monotonic() - started
                phases.setdefault(data["phase"], data)

        # The probe dumps its stacks shortly before the limit, so a hang says where it hung.
        deadline = max(timeout - 2.0, timeout * 0.8)
        argv = [*prefix, *procs.python_argv(self.python, os.fspath(PROBES / script), *args)]
        if script != "entry_points.py":
            argv += ["--deadline", f"{deadline:.1f}"]
        started = time.monotonic()
        result = procs.run(argv, timeout=timeout, env={**self.env(autoload, nonce), **(env or {})}, on_line=on_line,
                           tail_bytes=PROBE_TAIL, cwd=procs.neutral_dir())
        self._record(result, autoload)
        if imports_backend:
            self._note_hang(result, script.removesuffix(".py"))
        return Probe(result, phases)

    def timed_import(self, *, autoload: bool) -> tuple[float | None, procs.ProcResult]:
        """Seconds from starting `python -c "import torch"` until the import returned (None if it failed)."""
        nonce = secrets.token_hex(8)
        tag = f"{MARKER}:{nonce}@@ imported"
        arrived: list[float] = []
        started = time.monotonic()

        def on_line(line: str) -> None:
            if tag in line and not arrived:
                arrived.append(time.monotonic() - started)

        # os._exit: the teardown of torch after the timed part is a second of CPU the check never reads.
        code = f"import torch, os; os.write(1, b'\\n{tag}\\n'); os._exit(0)"
        if (skipped := self._not_started(["-c", code])) is not None:
            return None, skipped
        result = procs.run(procs.python_argv(self.python, "-c", code), timeout=self.timeout,
                           env=self.env(autoload, nonce), on_line=on_line, tail_bytes=PROBE_TAIL,
                           cwd=procs.neutral_dir())
        self._record(result, autoload)
        self._note_hang(result, "timed import torch")
        return (arrived[0] if arrived and result.ok else None), result

    def command(self, code: str, *, autoload: bool) -> procs.ProcResult:
        if (skipped := self._not_started(["-c", code])) is not None:
            return skipped
        result = procs.run(procs.python_argv(self.python, "-c", code), timeout=self.timeout,
                           env=self.env(autoload, "-"), tail_bytes=PROBE_TAIL, cwd=procs.neutral_dir())
        self._record(result, autoload)
        self._note_hang(result, "python -c")
        return result

    def _record(self, result: procs.ProcResult, autoload: bool | None) -> None:
        if self.log is None:
            return
        end = ("timed out" if result.timed_out else result.signal_name or f"exit {result.returncode}")
        text = (f"$ {SWITCH}={'unset' if autoload is None else int(autoload)} {' '.join(result.argv)}\n"
                f"[{end}, {result.duration_s:.2f} s]\n{result.output_tail[-4000:]}\n")
        with self._log_lock, open(self.log, "a", encoding="utf-8") as f:
            f.write(text)


# ---------------------------------------------------------------- targets


@dataclass
class Target:
    """One backend under test: an entry point, expected by a manifest or found installed."""

    ep_name: str
    module: str
    attr: str
    import_name: str
    device: str | None
    dtypes: list[str]
    tensors_required: bool
    distribution: str | None = None
    manifest: Manifest | None = None
    installed: dict | None = None  # the entry_points probe's record of it

    def key(self, name: str, many: bool) -> str:
        return f"{name}:{self.ep_name}" if many else name


def import_cost_runs() -> int:
    """Timed import pairs of the import_cost check: OOTCI_IMPORT_COST_RUNS, else DEFAULT_RUNS."""
    text = os.environ.get(RUNS_VARIABLE, "").strip()
    if not text:
        return DEFAULT_RUNS
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"{RUNS_VARIABLE}={text[:40]!r}: must be a whole number of at least 1 "
                         f"(timed imports for the import cost; default {DEFAULT_RUNS})")
    return int(text)


def resolve_python(path: Path | str) -> Path:
    """The interpreter: PATH itself, or PATH/bin/python for a venv directory."""
    path = Path(path)
    if path.is_dir() and (path / "bin" / "python").exists():
        path = path / "bin" / "python"
    if not path.exists():
        raise TargetEnvironmentError(f"--python {path}: no such file")
    if path.is_dir() or not os.access(path, os.X_OK):
        raise TargetEnvironmentError(f"--python {path}: not an executable Python interpreter")
    return path


def _inventory(runner: Runner) -> dict:
    probe = runner.probe("entry_points.py", autoload=False, timeout=min(runner.timeout, 60))
    data = probe.get("entry_points")
    if data is None:
        cause = rootcause.from_proc(probe.proc, what="the interpreter")
        why = cause.summary if cause else "it printed no result"
        raise TargetEnvironmentError(f"--python {runner.python}: not a usable Python interpreter ({why[:200]})")
    if not data.get("torch_found"):
        raise TargetEnvironmentError(f"--python {runner.python}: torch is not installed in this environment")
    return data


def _targets(inventory: dict, manifest: Manifest | None) -> list[Target]:
    installed = inventory["entry_points"]
    if manifest is not None:
        name, module, attr = manifest.entry_point_parts
        ours = [e for e in installed
                if e.get("distribution")
                and canonicalize_name(e["distribution"]) == canonicalize_name(manifest.distribution)]
        match = next((e for e in ours if e["name"] == name), None) or next(iter(ours), None)
        return [Target(ep_name=match["name"] if match else name, module=module, attr=attr,
                       import_name=manifest.import_name, device=manifest.device, dtypes=list(manifest.dtypes),
                       tensors_required=bool(manifest.dtypes), distribution=manifest.distribution,
                       manifest=manifest, installed=match)]
    return [Target(ep_name=e["name"], module=e["module"], attr=e["attr"], import_name=e["module"], device=None,
                   dtypes=["float32"], tensors_required=False, distribution=e.get("distribution"), installed=e)
            for e in installed]


# ---------------------------------------------------------------- verification


def verify(
    python: Path | str,
    manifest: Manifest | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    runs: int = DEFAULT_RUNS,
    jobs: int = 2,
    log: Path | None = None,
    build_torch: BuildTorch | None = None,
    torch_under_test: tuple[str, str | None] | None = None,
    blocking_only: bool = False,
) -> Verification:
    """Verify `manifest`'s backend, or every installed torch.backends entry point, at `python`.

    blocking_only: run only the probe behind BLOCKING_CHECKS (a run that judges a later stage,
    such as a bisection step, needs no more); opt_out, circular_import, neighbours and
    import_cost are recorded as skipped, saying so. Only where every device name is known (a
    manifest gives it): otherwise the entry points are loaded alone to learn them, and every
    check runs.

    build_torch: the torch the backend was compiled against, when the caller knows it
    (the build stage); otherwise what the installed distribution's metadata records.
    torch_under_test: (torch.__version__, git_version); asked of `python` when needed.
    Both feed the build_torch check and the hint for an undefined symbol.

    Raises TargetEnvironmentError when `python` is not an interpreter or has no torch.
    """
    started = time.monotonic()
    runner = Runner(resolve_python(python), timeout, log)
    inventory = _inventory(runner)
    targets = _targets(inventory, manifest)
    if not targets:
        check = CheckResult(name="entry_point", status=Status.skipped,
                            detail="no torch.backends entry point is installed in this environment")
        return Verification(status=Status.skipped, python=str(runner.python),
                            torch_version=inventory.get("torch_version"),
                            checks=[check], duration_s=time.monotonic() - started)
    work = _Verifier(runner, inventory, targets, runs=max(1, runs), jobs=max(1, jobs), blocking_only=blocking_only)
    checks = work.run()
    if build_torch is None:
        build_torch = next((b for b in map(_recorded_build_torch, targets) if b is not None), None)
    # The torch under test costs a probe when the caller did not say: asked at most once, only if needed.
    under_test = functools.cache(lambda: torch_under_test or _ask_torch(runner.python))
    # Listed where it ranks: right after plain_import.
    at = next((i + 1 for i, c in enumerate(checks) if c.name.startswith("plain_import")), len(checks))
    checks.insert(at, _timed(lambda: _build_torch_check(build_torch, under_test, targets)))
    _explain_undefined_symbols(checks, build_torch, under_test)
    status, cause = _overall(checks)
    return Verification(status=status, root_cause=cause, python=str(runner.python),
                        torch_version=inventory.get("torch_version"), backends=[t.ep_name for t in targets],
                        checks=checks, duration_s=round(time.monotonic() - started, 3))


def _ask_torch(python: Path) -> tuple[str | None, str | None]:
    try:
        info = envs.torch_found(python, timeout=60)
    except TargetEnvironmentError:
        return None, None
    return info["version"], info.get("git_version")


def _build_torch_check(build: BuildTorch | None, under_test: Callable[[], tuple[str | None, str | None]],
                       targets: list[Target]) -> CheckResult:
    name = targets[0].distribution or targets[0].ep_name if len(targets) == 1 else "the backends"
    if build is None:
        return CheckResult(name="build_torch", status=Status.skipped,
                           detail=f"{name} does not record the torch it was built against")
    version, git_version = under_test()
    data = {"build_torch": build.to_json(), "torch_under_test": {"version": version, "git_version": git_version}}
    if version is None:
        return CheckResult(name="build_torch", status=Status.skipped, data=data,
                           detail="the torch under test could not be asked for its version")
    if build.matches(version, git_version):
        return CheckResult(name="build_torch", status=Status.passed, data=data,
                           detail=f"built against the torch under test, {build.describe()}")
    under = f"{version} ({git_version[:12]})" if git_version else version
    summary = f"{name} was built against torch {build.describe()}, but the torch under test is {under}"
    return CheckResult(name="build_torch", status=Status.failed, detail=f"{summary} ({build.how})", data=data,
                       root_cause=RootCause(kind="error", summary=summary, hint=ABI_HINT, culprit=name))


def _explain_undefined_symbols(checks: list[CheckResult], build: BuildTorch | None,
                               under_test: Callable[[], tuple[str | None, str | None]]) -> None:
    causes = [c.root_cause for c in checks if c.root_cause and "undefined symbol" in c.root_cause.summary]
    if causes:
        hint = rootcause.undefined_symbol_hint(build, *under_test())
        for cause in causes:
            cause.hint = hint


def _recorded_build_torch(target: Target) -> BuildTorch | None:
    found = target.installed or {}
    if not found.get("distribution"):
        return None
    return WheelMetadata(name=found["distribution"], version=found.get("version") or "",
                         requires=found.get("requires") or [], torch_build=found.get("torch_build")).build_torch()


def _overall(checks: list[CheckResult]) -> tuple[Status, RootCause | None]:
    def rank(check: CheckResult) -> int:
        base = check.name.split(":", 1)[0]
        return CHECK_ORDER.index(base) if base in CHECK_ORDER else len(CHECK_ORDER)

    for check in sorted(checks, key=rank):
        if check.status in (Status.failed, Status.crashed, Status.timeout):
            return check.status, check.root_cause
    return (Status.skipped if checks and all(c.status is Status.skipped for c in checks) else Status.passed), None


def _timed(fn: Callable[[], CheckResult]) -> CheckResult:
    started = time.monotonic()
    check = fn()
    check.duration_s = round(time.monotonic() - started, 3)
    return check


class _Verifier:
    def __init__(self, runner: Runner, inventory: dict, targets: list[Target], *, runs: int, jobs: int,
                 blocking_only: bool = False):
        self.runner = runner
        self.blocking_only = blocking_only
        self.inventory = inventory
        self.targets = targets
        self.many = len(targets) > 1
        self.runs = runs
        self.jobs = jobs
        self.installed: list[dict] = inventory["entry_points"]
        # Package directories of every installed backend: a stack frame inside one names the culprit.
        self.code_dirs: dict[str, str] = {}
        for entry in self.installed:
            for where in entry.get("locations") or [os.path.dirname(entry.get("origin") or "")]:
                if where:
                    self.code_dirs[where.rstrip("/") + "/"] = entry["name"]

    # -- scheduling

    def run(self) -> list[CheckResult]:
        # One worker more than cores: the first probes are three, and a third running
        # alongside the other two finishes them sooner than a core idling after two.
        with ThreadPoolExecutor(max_workers=self.jobs + 1) as pool:
            checks = self._checks(pool)
        for check in checks:
            # A check whose probe never started says so, and blames nothing: the check that
            # hung carries the root cause.
            if check.status is Status.blocked and check.root_cause is not None and check.root_cause.kind == "blocked":
                check.detail, check.root_cause = f"not run: {check.root_cause.summary}", None
        return checks

    def _checks(self, pool: ThreadPoolExecutor) -> list[CheckResult]:
        learn = any(t.device is None for t in self.targets)
        # The plain-import probe is the longest and matters most: start it first, unless
        # the device names must first be learned from the entry points loaded alone.
        on = None if learn else pool.submit(self._autoload_on)
        if on is not None and self.blocking_only:
            return [*self._entry_point_checks(), *self._blocking_checks(on.result()), *self._not_blocking()]
        off = {t.ep_name: pool.submit(self._autoload_off, t) for t in self.targets}
        before = {t.ep_name: pool.submit(self.runner.probe, "imports.py", t.import_name, "torch") for t in self.targets}
        if on is None:  # learn
            for t in self.targets:
                t.device = t.device or _learned_device(off[t.ep_name].result())
            on = pool.submit(self._autoload_on)
        on_run = on.result()
        off_runs = {k: f.result() for k, f in off.items()}
        checks = [*self._entry_point_checks(), *self._blocking_checks(on_run)]
        plain = checks[len(self.targets)]
        for t in self.targets:
            checks.append(self._opt_out_check(t, off_runs[t.ep_name]))
            checks[-1].duration_s = round(off_runs[t.ep_name].proc.duration_s, 3)
            checks.append(self._circular_check(t, before[t.ep_name].result(), on_run))
            checks[-1].duration_s = round(before[t.ep_name].result().proc.duration_s, 3)
        checks.append(_timed(lambda: self._neighbours_check(pool, plain, off_runs)))
        first_off = off_runs[self.targets[0].ep_name] if self.targets else None
        checks.append(_timed(lambda: self._import_cost_check(pool, plain, on_run, first_off)))
        return checks

    def _entry_point_checks(self) -> list[CheckResult]:
        return [_timed(functools.partial(self._entry_point_check, t)) for t in self.targets]

    def _blocking_checks(self, on_run: Probe) -> list[CheckResult]:
        """plain_import, then each target's device and tensor: what the plain-import probe says."""
        plain = self._plain_import_check(on_run)
        plain.duration_s = round(on_run.proc.duration_s, 3)
        checks = [plain]
        for t in self.targets:
            checks.append(self._device_check(t, on_run))
            checks.append(self._tensor_check(t, on_run))
        return checks

    def _not_blocking(self) -> list[CheckResult]:
        """The checks blocking_only leaves out, each saying why: every check in CHECK_ORDER but the
        entry points (read without importing torch) and BLOCKING_CHECKS."""
        why = "not run: only the checks that block the later stages were asked for"
        left_out = [base for base in CHECK_ORDER if base != "entry_point" and base not in BLOCKING_CHECKS]
        names = [name for base in left_out
                 for name in ([t.key(base, self.many) for t in self.targets] if base in PER_BACKEND_CHECKS else [base])]
        return [CheckResult(name=n, status=Status.skipped, detail=why) for n in names]

    def _autoload_on(self) -> Probe:
        modules = sorted({t.module for t in self.targets} | {t.import_name for t in self.targets})
        devices = [t.device for t in self.targets if t.device]
        dtypes = sorted({d for t in self.targets for d in t.dtypes}, key=lambda d: (d != "float32", d))
        return self.runner.probe("autoload_on.py", "--modules", ",".join(modules),
                                 "--then-import", ",".join(t.import_name for t in self.targets),
                                 "--devices", ",".join(devices),
                                 "--tensor-dtypes", ",".join(dtypes), autoload=True)

    def _autoload_off(self, t: Target) -> Probe:
        modules = sorted({e["module"] for e in self.installed} | {t.module, t.import_name})
        return self.runner.probe("autoload_off.py", "--modules", ",".join(modules), "--import", t.import_name,
                                 "--entry-point", t.ep_name, autoload=False)

    # -- classification of a phase

    def _culprit_of(self, frames: list[str]) -> str | None:
        for frame in reversed(frames):
            for prefix, name in self.code_dirs.items():
                if frame.startswith(prefix):
                    return name
        return None

    def _outcome(self, probe: Probe, phase: str, what: str) -> tuple[Status, RootCause | None]:
        """passed, or how the phase failed: its exception, or how the process ended before reporting it."""
        if "not_started" in probe.proc.extra:
            return Status.blocked, RootCause(kind="blocked", summary=probe.proc.extra["not_started"])
        data = probe.get(phase)
        if data is not None:
            if data.get("ok"):
                return Status.passed, None
            chain = data.get("chain") or [{"type": "Exception", "message": "no detail"}]
            culprit = next((n for n in (rootcause.wrapped_entry_point(c.get("message", "")) for c in chain) if n), None)
            culprit = culprit or self._culprit_of(chain[-1].get("frames", []))
            return Status.failed, rootcause.from_chain(chain, what=what, culprit=culprit)
        proc = probe.proc
        cause = rootcause.from_proc(proc, what=what, code_prefixes=list(self.code_dirs))
        if cause is None:  # exited 0 without reporting: os._exit(0) or sys.exit() swallowed the probe
            cause = RootCause(kind="exit_code", exit_code=0,
                              summary=f"the interpreter exited (code 0) during {what} before reporting a result",
                              hint=rootcause.hint_for("exited with code 0 during import"))
        else:
            where = rootcause.where_stuck(proc.output_tail, list(self.code_dirs)) or ""
            cause.culprit = cause.culprit or self._culprit_of([where])
            if cause.kind == "exit_code":
                cause.summary = f"the interpreter exited with code {proc.returncode} during {what}"
                cause.hint = rootcause.hint_for(cause.summary)
        if proc.timed_out:
            return Status.timeout, cause
        if proc.signal_name:
            return Status.crashed, cause
        return Status.failed, cause

    def _blocked(self, name: str, why: str) -> CheckResult:
        return CheckResult(name=name, status=Status.blocked, detail=why)

    # -- 1. entry points

    def _entry_point_check(self, t: Target) -> CheckResult:
        name = t.key("entry_point", self.many)
        if t.manifest is not None:
            expected = f"{t.ep_name} = {t.module}:{t.attr}" if t.installed else t.manifest.entry_point.strip()
            dist_key = canonicalize_name(t.manifest.distribution)
            dists = {canonicalize_name(k): (k, v) for k, v in self.inventory.get("distributions", {}).items()}
            if dist_key not in dists:
                summary = f"distribution {t.manifest.distribution} is not installed in the environment under test"
                return CheckResult(name=name, status=Status.failed, detail=summary,
                                   root_cause=rootcause.missing(summary, culprit=t.manifest.distribution,
                                                                hint="install the backend first (ootci run does)"))
            if t.installed is None:
                summary = f"{t.manifest.distribution} declares no entry point in group torch.backends"
                return CheckResult(name=name, status=Status.failed, detail=summary,
                                   root_cause=rootcause.missing(summary, culprit=t.manifest.distribution))
            want = t.manifest.entry_point_parts
            got = (t.installed["name"], t.installed["module"], t.installed["attr"])
            if want != got:
                summary = (f"entry point mismatch: the manifest expects '{want[0]} = {want[1]}:{want[2]}', "
                           f"{t.installed['distribution']} declares '{got[0]} = {got[1]}:{got[2]}'")
                return CheckResult(name=name, status=Status.failed, detail=summary, data={"declared": t.installed},
                                   root_cause=RootCause(kind="error", summary=summary, culprit=t.ep_name,
                                                        hint="make backend.toml's entry_point and the package agree"))
        else:
            expected = f"{t.ep_name} = {t.module}:{t.attr}"
        entry = t.installed or {}
        data = {"declared": {k: entry.get(k) for k in ("name", "value", "distribution", "version", "origin")}}
        if not entry.get("module_found"):
            summary = f"module {t.module} of entry point {t.ep_name} cannot be found"
            return CheckResult(name=name, status=Status.failed, detail=summary, data=data,
                               root_cause=rootcause.missing(summary, culprit=t.ep_name,
                                                            hint="the package does not ship the module its entry "
                                                                 "point names"))
        shadowed = entry.get("shadowed")
        if shadowed:
            summary = source_tree_shadowing(shadowed)
            return CheckResult(name=name, status=Status.failed, detail=summary, data=data,
                               root_cause=RootCause(kind="error", summary=summary, culprit=t.module,
                                                    hint=rootcause.hint_for(summary)))
        status, how = entry.get("attr_status"), entry.get("attr_how", "")
        if status != "defined":
            # The source cannot settle it: import the module alone (autoload off) and look.
            check = self.runner.command(
                f"import importlib, functools; m = importlib.import_module({t.module!r}); "
                f"functools.reduce(getattr, {t.attr!r}.split('.'), m)", autoload=False)
            if not check.ok:
                status, cause = self._outcome(Probe(check, {}), "-", f"import {t.module} (autoload off)")
                if cause is not None and cause.exception_type == "AttributeError":
                    cause.summary = f"entry point {t.ep_name}: module {t.module} has no attribute '{t.attr}'"
                    cause.hint = rootcause.hint_for("has no attribute")
                    detail = cause.summary
                else:
                    detail = f"cannot confirm {t.module}:{t.attr} ({how}): importing {t.module} fails"
                if cause is not None:
                    cause.culprit = t.ep_name
                return CheckResult(name=name, status=status, data=data, root_cause=cause, detail=detail)
            how = "found by importing the module with autoload off"
        data["attribute"] = how
        return CheckResult(name=name, status=Status.passed, data=data,
                           detail=f"'{expected}' declared by {entry.get('distribution')} {entry.get('version')}")

    # -- 2. plain import

    def _plain_import_check(self, on: Probe) -> CheckResult:
        status, cause = self._outcome(on, "import", "import torch")
        data: dict = {"entry_points": [e["name"] for e in self.installed]}
        if status is not Status.passed:
            return CheckResult(name="plain_import", status=status, data=data, root_cause=cause,
                               detail=f"import torch fails: {_why(cause)}")
        phase = on.get("import") or {}
        loaded = phase.get("loaded", {})
        data.update(import_s=round(phase.get("value", {}).get("import_s", 0), 3), state=phase.get("state"))
        missing = [t.module for t in self.targets if not loaded.get(t.module)]
        if missing:
            summary = f"{', '.join(missing)} not loaded by `import torch` (autoload)"
            return CheckResult(name="plain_import", status=Status.failed, detail=summary, data=data,
                               root_cause=rootcause.missing(summary, culprit=missing[0]))
        mods = ", ".join(t.module for t in self.targets)
        return CheckResult(name="plain_import", status=Status.passed, data=data,
                           detail=f"import torch loaded {mods} without an explicit import")

    # -- 3. device and tensors

    def _device_check(self, t: Target, on: Probe) -> CheckResult:
        name = t.key("device", self.many)
        if not (on.get("import") or {}).get("ok"):
            return self._blocked(name, "import torch fails")
        if not t.device:
            return CheckResult(name=name, status=Status.skipped,
                               detail="no device learned: the entry point registered no PrivateUse1 name or "
                                      "device module")
        status, cause = self._outcome(on, f"device:{t.device}", f"using device '{t.device}'")
        if status is not Status.passed:
            return CheckResult(name=name, status=status, root_cause=cause,
                               detail=f"device '{t.device}' is not usable: {_why(cause)}")
        report = on.value(f"device:{t.device}")
        state = (on.get("import") or {}).get("state") or {}
        problems = []
        if state.get("privateuse1") not in ("privateuseone", t.device):
            problems.append(f"the backend named PrivateUse1 '{state.get('privateuse1')}', not '{t.device}'")
        if not report.get("is_available"):
            problems.append(f"torch.{t.device}.is_available() is False")
        if report.get("device_count") is None:
            problems.append(f"torch.{t.device} has no device_count()")
        elif report["device_count"] < 1:
            problems.append(f"torch.{t.device}.device_count() is {report['device_count']}")
        if report.get("current_accelerator") != t.device:
            problems.append(f"torch.accelerator.current_accelerator() is {report.get('current_accelerator')!r}")
        if problems:
            summary = f"device '{t.device}': " + "; ".join(problems)
            hint = ("no device is visible: the hardware or its driver is missing on this machine"
                    if "is_available() is False" in summary or "device_count() is 0" in summary else None)
            return CheckResult(name=name, status=Status.failed, detail=summary, data=report,
                               root_cause=RootCause(kind="error", summary=summary, culprit=t.ep_name, hint=hint))
        return CheckResult(name=name, status=Status.passed, data=report,
                           detail=f"torch.device('{t.device}'), is_available() True, device_count() "
                                  f"{report['device_count']}, current accelerator '{t.device}'")

    def _tensor_check(self, t: Target, on: Probe) -> CheckResult:
        name = t.key("tensor", self.many)
        if t.manifest is not None and not t.dtypes:
            return CheckResult(name=name, status=Status.skipped,
                               detail="no tensor support: the manifest lists no dtypes (a device without kernels)")
        if not (on.get("import") or {}).get("ok"):
            return self._blocked(name, "import torch fails")
        if not t.device:
            return self._blocked(name, "no device to put a tensor on")
        phase = f"tensor:{t.device}"
        if on.get(phase) is None and on.get("done") is None and on.get(f"device:{t.device}") is None:
            return self._blocked(name, "the probe ended before the device was used")
        status, cause = self._outcome(on, phase, f"a tensor round trip to '{t.device}'")
        if status is Status.failed and not t.tensors_required and cause and "no tensor support" in (cause.hint or ""):
            return CheckResult(name=name, status=Status.skipped, detail=f"no tensor support: {cause.summary}")
        if status is not Status.passed:
            return CheckResult(name=name, status=status, root_cause=cause,
                               detail=f"tensor round trip to '{t.device}' fails: {_why(cause)}")
        results = on.value(phase)
        wrong = [d for d, r in results.items() if not (r["equal"] and r["literal_ok"] and r["device_type"] == t.device)]
        if wrong:
            summary = f"tensor round trip to '{t.device}' changes the values of {', '.join(wrong)}"
            return CheckResult(name=name, status=Status.failed, detail=summary, data=results,
                               root_cause=RootCause(kind="error", summary=summary, culprit=t.ep_name,
                                                    hint="the backend's copy or allocation kernels are wrong"))
        return CheckResult(name=name, status=Status.passed, data=results,
                           detail=f"cpu -> {t.device} -> cpu equal for {', '.join(results)}")

    # -- 4. opt-out

    def _opt_out_check(self, t: Target, off: Probe) -> CheckResult:
        name = t.key("opt_out", self.many)
        status, cause = self._outcome(off, "import", f"import torch with {SWITCH}=0")
        if status is not Status.passed:
            return CheckResult(name=name, status=status, root_cause=cause,
                               detail=f"import torch with {SWITCH}=0 fails: {_why(cause)}")
        loaded = [m for m, yes in (off.get("import") or {}).get("loaded", {}).items() if yes]
        if loaded:
            summary = f"{', '.join(loaded)}: loaded the backend although autoload is off ({SWITCH}=0)"
            return CheckResult(name=name, status=Status.failed, detail=summary,
                               root_cause=RootCause(kind="error", summary=summary, culprit=t.ep_name,
                                                    hint=rootcause.hint_for(summary)))
        status, cause = self._outcome(off, "explicit", f"import {t.import_name} (autoload off)")
        data = {"entry_point": _entry_point_summary(off)}
        if status is not Status.passed:
            return CheckResult(name=name, status=status, root_cause=cause, data=data,
                               detail=f"autoload off keeps it unloaded, but `import {t.import_name}` then fails: "
                                      f"{_why(cause)}")
        return CheckResult(name=name, status=Status.passed, data=data,
                           detail=f"{SWITCH}=0: import torch loads no backend; `import {t.import_name}` works")

    # -- 5. circular imports

    def _circular_check(self, t: Target, before: Probe, on: Probe) -> CheckResult:
        """`import backend; import torch` in a fresh interpreter, and `import torch; import backend`.

        The second order is the start of the plain-import probe (a fresh interpreter
        too), which imports the backend right after torch, before touching the device.
        """
        name = t.key("circular_import", self.many)
        for first, second, probe, phases in (
            (t.import_name, "torch", before, (f"import:{t.import_name}", "import:torch")),
            ("torch", t.import_name, on, ("import", f"after:{t.import_name}")),
        ):
            for module, phase in zip((first, second), phases, strict=True):
                status, cause = self._outcome(probe, phase, f"import {module}")
                if status is not Status.passed:
                    return CheckResult(name=name, status=status, root_cause=cause,
                                       detail=f"import {first}; import {second}: `import {module}` fails: "
                                              f"{_why(cause)}")
        return CheckResult(name=name, status=Status.passed,
                           detail=f"import {t.import_name} works before and after import torch")

    # -- 7. neighbours

    def _neighbours_check(self, pool: ThreadPoolExecutor, plain: CheckResult,
                          off_runs: dict[str, Probe]) -> CheckResult:
        names = [e["name"] for e in self.installed]
        ours = {t.ep_name for t in self.targets}
        others = [n for n in names if n not in ours]
        if plain.status is Status.passed or (plain.status is Status.failed and plain.root_cause
                                             and plain.root_cause.kind == "missing"):
            return CheckResult(name="neighbours", status=Status.passed, data={"entry_points": names},
                               detail=f"no other entry point breaks import torch ({len(others)} installed"
                                      f"{': ' + ', '.join(others) if others else ''})")
        # Load each entry point alone, with autoload off, exactly as torch would call it.
        alone = {n: off_runs[n] for n in ours if n in off_runs}
        futures = {n: pool.submit(self.runner.probe, "autoload_off.py", "--entry-point", n, autoload=False,
                                  imports_backend=False)
                   for n in names if n not in alone}
        alone.update({n: f.result() for n, f in futures.items()})
        results: dict[str, dict] = {}
        broken: list[tuple[str, Status, RootCause | None]] = []
        for n in names:
            status, cause = self._outcome(alone[n], "entry_point", f"loading entry point {n}")
            if status is Status.passed:
                # A phase missing from `import` itself (autoload off) is torch's problem, not n's.
                status, cause = self._outcome(alone[n], "import", "import torch")
            results[n] = {"status": status.value, "root_cause": cause.summary if cause else None}
            if status is not Status.passed:
                if cause is not None:
                    cause.culprit = n
                broken.append((n, status, cause))
        data = {"entry_points": results}
        bad_others = [b for b in broken if b[0] not in ours]
        if bad_others:
            n, status, cause = bad_others[0]
            dist = next((f"{e['distribution']} {e['version']}" for e in self.installed if e["name"] == n), "?")
            more = f" (and {len(bad_others) - 1} more)" if len(bad_others) > 1 else ""
            return CheckResult(name="neighbours", status=status, data=data, root_cause=cause,
                               detail=f"another backend breaks import torch: entry point '{n}' ({dist}){more}: "
                                      f"{cause.summary if cause else 'no detail'}")
        if broken:
            return CheckResult(name="neighbours", status=Status.passed, data=data,
                               detail=f"no other entry point breaks import torch; the failure is "
                                      f"{', '.join(b[0] for b in broken)}'s own")
        summary = "every entry point loads alone, but not together: the backends conflict"
        return CheckResult(name="neighbours", status=Status.failed, data=data, detail=summary,
                           root_cause=RootCause(kind="error", summary=summary,
                                                hint="two backends claim the same device or PrivateUse1"))

    # -- 6. import cost

    def _import_cost_check(self, pool: ThreadPoolExecutor, plain: CheckResult, on: Probe,
                           off: Probe | None) -> CheckResult:
        """Median wall time from starting an interpreter until `import torch` returned, with and without autoload.

        The plain-import and opt-out probes started side by side and each reported
        when its import returned: they are the first pair of samples. The remaining
        pairs run side by side too, so load on the machine weighs on both alike.
        """
        if plain.status is not Status.passed:
            return self._blocked("import_cost", "import torch fails with autoload on")
        samples: dict[bool, list[float]] = {True: [], False: []}
        first_on = (on.get("import") or {}).get("_arrived_s")
        first_off = ((off.get("import") or {}) if off else {}).get("_arrived_s")
        if off and first_on and first_off and (off.get("import") or {}).get("ok"):
            samples[True].append(first_on * 1000)
            samples[False].append(first_off * 1000)
        while len(samples[True]) < self.runs:
            pair = {autoload: pool.submit(self.runner.timed_import, autoload=autoload) for autoload in (True, False)}
            for autoload, future in pair.items():
                seconds, result = future.result()
                if seconds is None:
                    status, cause = self._outcome(Probe(result, {}), "-", "import torch")
                    return CheckResult(name="import_cost", status=status, root_cause=cause,
                                       detail=f"import torch failed while timing it: {_why(cause)}")
                samples[autoload].append(seconds * 1000)
        with_ms = statistics.median(samples[True])
        without_ms = statistics.median(samples[False])
        data = {"runs": self.runs, "autoload_ms": round(with_ms, 1), "no_autoload_ms": round(without_ms, 1),
                "overhead_ms": round(with_ms - without_ms, 1),
                "samples_ms": {"autoload": [round(s, 1) for s in samples[True]],
                               "no_autoload": [round(s, 1) for s in samples[False]]}}
        return CheckResult(name="import_cost", status=Status.passed, data=data,
                           detail=f"import torch: {with_ms:.0f} ms with autoload, {without_ms:.0f} ms without "
                                  f"({with_ms - without_ms:+.0f} ms, median of {self.runs})")


def source_tree_shadowing(found: dict) -> str:
    return (f"import {found['module']} finds {found['imported_from']} (a same-named directory of a source tree) "
            f"instead of the installed {found['installed_at']}")


def _why(cause: RootCause | None) -> str:
    """A root cause for a detail line: its summary, and the entry point that caused it."""
    if cause is None:
        return "no detail"
    return f"entry point {cause.culprit}: {cause.summary}" if cause.culprit else cause.summary


def _learned_device(off: Probe) -> str | None:
    """The device an entry point registered when loaded alone: PrivateUse1's new name, or a new device module."""
    phase = off.get("entry_point")
    if not phase or not phase.get("ok"):
        return None
    before, after = phase.get("before") or {}, phase.get("state") or {}
    if after.get("privateuse1") and after.get("privateuse1") != before.get("privateuse1"):
        return after["privateuse1"]
    new = sorted(set(after.get("device_modules", {})) - set(before.get("device_modules", {})))
    if new:
        return new[0]
    if after.get("accelerator") and after.get("accelerator") != before.get("accelerator"):
        return after["accelerator"]
    return None


def _entry_point_summary(off: Probe) -> dict:
    phase = off.get("entry_point")
    if phase is None:
        return {"loaded": None}
    if phase.get("ok"):
        return {"loaded": True, "device": _learned_device(off)}
    chain = phase.get("chain") or [{}]
    return {"loaded": False, "error": f"{chain[-1].get('type')}: {chain[-1].get('message', '')}"[:300]}
