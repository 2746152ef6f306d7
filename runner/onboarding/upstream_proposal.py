"""Which of PyTorch's device-generic test files `ootci init` proposes for the upstream suite.

init proposes discovery (`[suites.upstream] files = "discover"`): every file of the torch's
test/ that makes tests per device type (runner/torch_supply/upstream_discovery.py), less the
blocklist of PyTorch's own OpenReg runner (pytorch#177565), kept as data with a reason per group
in `upstream_exclusions.toml` beside this module. The files come as the upstream stage gets them
(runner/stages/upstream.py: at the torch's own commit, or from `--upstream-tests DIR`) and are
collected once, every file in one `pytest --collect-only`, for the device the way the upstream
suite runs them: PYTORCH_TESTING_DEVICE_ONLY_FOR, ootci_upstream's dtype filter, from a folder
without torch/ (runner/suites/ootci_collect.py counts what each file gives). A file that
collects no test for the device in a claimed dtype, or does not import, is excluded too, its
reason the collection's words. The manifest's `exclude` holds the entries that left out a file
of this torch, each with its reason. Where the files cannot be had at all (no network), nothing
fails: the manifest gets a commented-out [suites.upstream] with every default exclusion.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from ootci.runner.core import procs, rootcause
from ootci.runner.core.errors import UpstreamTestsError, UpstreamUnreachable
from ootci.runner.manifests.manifest import DISCOVER, UpstreamExclusion, UpstreamSuite
from ootci.runner.stages import upstream as upstream_stage
from ootci.runner.stages.base import RunContext
from ootci.runner.suite_runs import suite_runner, upstream_runs
from ootci.runner.suite_runs.suite_runner import PROBES_DIR, SUITES_DIR, SuiteSpec
from ootci.runner.torch_supply import upstream_discovery

EXCLUSIONS_FILE = Path(__file__).with_name("upstream_exclusions.toml")
EXCLUSIONS_SOURCE = "PyTorch's OpenReg runner"
COLLECT_TIMEOUT_S = 900.0
PLUGIN = "ootci_collect"
STEP = "collect"
"""how init reports this step, as `ootci run` reports a stage"""


@cache
def default_exclusions() -> tuple[UpstreamExclusion, ...]:
    """The blocklist of PyTorch's OpenReg runner, each path with its group's reason."""
    data = tomllib.loads(EXCLUSIONS_FILE.read_text(encoding="utf-8"))
    return tuple(UpstreamExclusion(path=path, reason=f"{group['reason']} ({group['group']}, {EXCLUSIONS_SOURCE})")
                 for group in data["groups"] for path in group["paths"])


@dataclass
class Collected:
    """What one candidate file collected for the device."""

    file: str
    tests: int = 0
    """tests for the device in dtypes the backend claims"""
    unclaimed: int = 0
    other: int = 0
    """tests of classes not instantiated per device type"""
    seconds: float = 0.0
    error: str | None = None
    """why it is not proposed although it is there: its import error, a skip, no test for the device"""

    @property
    def proposed(self) -> bool:
        return self.error is None and self.tests > 0

    def describe(self, device: str) -> str:
        if self.error is not None:
            return f"not proposed: {self.error}"
        more = f" ({self.unclaimed} more in dtypes not claimed)" if self.unclaimed else ""
        return f"{self.tests} tests for {device}{more}, collected in {self.seconds:.2f} s"


@dataclass
class Proposal:
    """The upstream files init proposes, or why it proposes none."""

    candidates: list[str] = field(default_factory=list)
    """the device-generic files discovered that no default exclusion covers"""
    excluded: dict[str, UpstreamExclusion] = field(default_factory=dict)
    """discovered files a default exclusion covers: file -> the entry"""
    scanned: int = 0
    """test files read by the discovery"""
    collected: list[Collected] = field(default_factory=list)
    source: str = ""
    """where the files came from (UpstreamTests.describe())"""
    unavailable: str | None = None
    """why nothing was collected: the files could not be had, or were not asked for"""

    @property
    def files(self) -> list[str]:
        return [c.file for c in self.collected if c.proposed]

    def exclusions(self, device: str) -> list[UpstreamExclusion]:
        """The manifest's `exclude`: the default entries that left out a file of this torch, then
        each candidate that collects nothing for the device, with the collection's words."""
        used = set(self.excluded.values())
        kept = [e for e in default_exclusions() if e in used]
        return kept + [UpstreamExclusion(path=c.file, reason=c.describe(device))
                       for c in self.collected if not c.proposed]


def unavailable(reason: str) -> Proposal:
    return Proposal(unavailable=reason)


def propose(ctx: RunContext, device: str, dtypes: list[str], capabilities: list[str], import_name: str) -> Proposal:
    """The candidates, collected for the device in the environment under test (ctx, after init's
    install stage); never raises for files that cannot be had."""
    ctx.stage_name = STEP  # the fetch's and the installs' log
    try:
        tests = upstream_stage.files_of(ctx)
    except UpstreamUnreachable as exc:
        return unavailable(exc.message)
    except UpstreamTestsError as exc:
        return unavailable(exc.message)
    found = upstream_discovery.discover(tests.test_dir, list(default_exclusions()))
    proposal = Proposal(candidates=found.files, excluded=found.excluded, scanned=found.scanned,
                        source=tests.describe())
    if not found.files:
        proposal.unavailable = (f"{tests.test_dir} has no device-generic test file that {EXCLUSIONS_SOURCE} does not "
                                f"exclude ({found.describe()})")
        return proposal
    requirements = SuiteSpec(name=upstream_runs.SUITE, cwd=ctx.run_dir, requirements=list(UpstreamSuite(
        files=DISCOVER).requirements))
    failure = suite_runner.install_requirements(ctx, requirements)
    if failure:
        proposal.unavailable = failure
        return proposal
    proposal.collected = _collect(ctx, tests.test_dir, found.files, device, dtypes, capabilities, import_name)
    return proposal


def _collect(ctx: RunContext, test_dir: Path, files: list[str], device: str, dtypes: list[str],
             capabilities: list[str], import_name: str) -> list[Collected]:
    cwd = ctx.run_dir / "upstream-cwd"  # no torch/ in it
    cwd.mkdir(parents=True, exist_ok=True)
    report = ctx.run_dir / "upstream-collected.json"
    report.unlink(missing_ok=True)
    suite = UpstreamSuite(files=files)
    selection = upstream_runs.device_selection(device, ctx.record.torch.version)
    spec = upstream_runs.spec(test_dir, files, device=device, cwd=cwd, env={}, workers=0, part="collect")
    argv = [*procs.python_argv(ctx.python, "-m", "pytest"), *spec.pytest_args, "-p", suite_runner.PLUGIN,
            "-p", PLUGIN, "-p", "no:xdist", "--collect-only", "-q", "--continue-on-collection-errors",
            "--ootci-device", device, "--ootci-dtypes", ",".join(dtypes),
            "--ootci-capabilities", ",".join(capabilities), "--ootci-import", import_name,
            f"--ootci-collect-report={report}"]
    env = ctx.pip_env()
    env.update(upstream_runs.environment(selection, suite))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SUITES_DIR), str(PROBES_DIR), env.get("PYTHONPATH", "")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["OOTCI_DEVICE"] = device
    started = time.monotonic()
    proc = procs.run(argv, timeout=COLLECT_TIMEOUT_S, log=ctx.log_path(STEP), env=procs.target_env(env), cwd=cwd,
                     on_line=getattr(ctx.reporter, "line", None))
    try:
        found = json.loads(report.read_text(encoding="utf-8")).get("files", {})
    except (OSError, ValueError):
        found = {}
    if not found:
        cause = rootcause.from_proc(proc, what="pytest --collect-only")
        why = cause.summary if cause else f"pytest --collect-only wrote no report (exit code {proc.returncode})"
        return [Collected(f, seconds=round(time.monotonic() - started, 1), error=why) for f in files]
    return [_collected(f, found.get(f), device) for f in files]


def _collected(file: str, data: dict | None, device: str) -> Collected:
    if data is None:
        return Collected(file, error="pytest did not collect it (the collection stopped before this file)")
    found = Collected(file, tests=int(data.get("tests", 0)), unclaimed=int(data.get("unclaimed", 0)),
                      other=int(data.get("other", 0)), seconds=float(data.get("seconds", 0.0)))
    if data.get("error"):
        found.error = f"does not collect: {data['error']}"
    elif data.get("skipped"):
        found.error = f"skips itself: {data['skipped']}"
    elif not found.tests:
        kinds = [f"{found.unclaimed} in dtypes not claimed" if found.unclaimed else "",
                 f"{found.other} in classes not instantiated per device type" if found.other else ""]
        found.error = f"no test for {device} to run" + (f" ({', '.join(k for k in kinds if k)})"
                                                          if any(kinds) else "")
    return found


# -- what init writes and prints -------------------------------------------------------------------

def summary(proposal: Proposal, device: str) -> str:
    """The collect step's line."""
    if proposal.unavailable:
        return f"upstream files not proposed: {proposal.unavailable}"
    return (f"{len(proposal.files)} of {len(proposal.candidates)} device-generic files collect tests for {device} "
            f"({len(proposal.excluded)} more excluded by {EXCLUSIONS_SOURCE}); {proposal.source}")


def terminal_lines(proposal: Proposal, device: str) -> list[str]:
    """What init prints of the proposal: what it excluded and why, then one line per candidate."""
    excluded = _excluded_lines(proposal)
    if proposal.unavailable:
        return [f"upstream: not proposed: {proposal.unavailable}; [suites.upstream] is written commented out, "
                f"discovering with {EXCLUSIONS_SOURCE}'s {len(default_exclusions())} exclusions; "
                "`ootci init --upstream-tests DIR` collects the files from a folder", *excluded]
    width = max(len(c.file) for c in proposal.collected)
    lines = [f"upstream: discovery: {len(proposal.files)} of the {len(proposal.candidates)} device-generic files "
             f"collect tests for {device} ({proposal.source}); {len(proposal.excluded)} excluded by "
             f"{EXCLUSIONS_SOURCE}:", *excluded]
    lines += [f"  {c.file:<{width}}  {c.describe(device)}" for c in proposal.collected]
    return lines


def _excluded_lines(proposal: Proposal) -> list[str]:
    grouped: dict[str, list[str]] = {}
    for file, entry in proposal.excluded.items():
        grouped.setdefault(entry.reason, []).append(file)
    return [f"  excluded, {reason}: {', '.join(files)}" for reason, files in grouped.items()]


def manifest_lines(proposal: Proposal, device: str) -> list[str]:
    """[suites.upstream] discovering, with the exclusions that left out a file, each with its reason,
    and a comment per candidate saying what it collected; or, when none is proposed, the table
    commented out with every default exclusion."""
    if not proposal.files:
        why = proposal.unavailable or f"none of the candidates collects a test for {device}"
        lines = _comment(f"not proposed: {why}. Uncomment the table to run every device-generic file of the torch's "
                         f"test/ less {EXCLUSIONS_SOURCE}'s exclusions, or run `ootci init --force --upstream-tests "
                         "DIR` to keep those that collect tests for it:")
        lines += [f"#   {c.file}: {c.describe(device)}" for c in proposal.collected]
        lines += ["# [suites.upstream]", f"# files = {json.dumps(DISCOVER)}", "# exclude = ["]
        lines += [f"#     {_entry(e)}" for e in (proposal.exclusions(device) if proposal.collected
                                                   else default_exclusions())]
        return lines + ["# ]"]
    lines = _comment(f"proposed: discovery, every device-generic file of the torch's test/ (a text scan for "
                     f"instantiate_device_type_tests) less the exclusions below: {EXCLUSIONS_SOURCE}'s that left out "
                     f"a file here, and the files that collect no test for {device!r} (collected as the upstream "
                     f"suite runs them; {proposal.source}). What each file collected:")
    lines += [f"#   {c.file}: {c.describe(device)}" for c in proposal.collected if c.proposed]
    lines += ["[suites.upstream]", f"files = {json.dumps(DISCOVER)}", "exclude = ["]
    lines += [f"    {_entry(e)}" for e in proposal.exclusions(device)]
    return lines + ["]"]


def _entry(exclusion: UpstreamExclusion) -> str:
    return f"{{ path = {json.dumps(exclusion.path)}, reason = {json.dumps(exclusion.reason)} }},"


def _comment(text: str, first: str = "# ", rest: str = "# ") -> list[str]:
    return textwrap.wrap(text, 100, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False)
