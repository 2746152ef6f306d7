"""Which of PyTorch's device-generic test files `ootci init` proposes for the upstream suite.

The candidates are the files PyTorch's own CI runs on its OpenReg device (its allow-list,
pytorch#177565), as far as the torch's test/ folder has them. They come as the upstream stage
gets them (runner/stages/upstream.py: at the torch's own commit, or from `--upstream-tests DIR`)
and are collected once, every file in one `pytest --collect-only`, for the device the way the
upstream suite runs them: PYTORCH_TESTING_DEVICE_ONLY_FOR, ootci_upstream's dtype filter, from a
folder without torch/ (runner/suites/ootci_collect.py counts what each file gives). A file is
proposed when it collects at least one test for the device in a claimed dtype; one that does not
import is reported with its error, not proposed. Where the files cannot be had at all (no
network), nothing fails: the manifest gets the candidates in a commented-out [suites.upstream].
"""

from __future__ import annotations

import json
import os
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from ootci.runner.core import procs, rootcause
from ootci.runner.core.errors import UpstreamTestsError, UpstreamUnreachable
from ootci.runner.manifests.manifest import UpstreamSuite
from ootci.runner.stages import upstream as upstream_stage
from ootci.runner.stages.base import RunContext
from ootci.runner.suite_runs import suite_runner, upstream_runs
from ootci.runner.suite_runs.suite_runner import PROBES_DIR, SUITES_DIR, SuiteSpec

# The test files PyTorch's CI runs on its OpenReg device (run_openreg_tests.py, pytorch#177565).
OPENREG_ALLOW_LIST = (
    "nn/test_convolution.py", "nn/test_dropout.py", "nn/test_embedding.py", "nn/test_init.py",
    "nn/test_multihead_attention.py", "nn/test_parametrization.py", "nn/test_pooling.py", "test_autograd.py",
    "test_binary_ufuncs.py", "test_custom_ops.py", "test_dataloader.py", "test_indexing.py", "test_modules.py",
    "test_native_mha.py", "test_nn.py", "test_ops.py", "test_ops_fwd_gradients.py", "test_ops_gradients.py",
    "test_optim.py", "test_reductions.py", "test_scatter_gather_ops.py", "test_segment_reductions.py",
    "test_serialization.py", "test_shape_ops.py", "test_sort_and_select.py", "test_tensor_creation_ops.py",
    "test_testing.py", "test_torch.py", "test_transformers.py", "test_type_promotion.py", "test_unary_ufuncs.py",
    "test_utils.py", "test_view_ops.py",
)
ALLOW_LIST_SOURCE = "PyTorch's OpenReg allow-list, pytorch#177565"
COLLECT_TIMEOUT_S = 900.0
PLUGIN = "ootci_collect"
STEP = "collect"
"""how init reports this step, as `ootci run` reports a stage"""


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

    candidates: list[str] = field(default_factory=lambda: list(OPENREG_ALLOW_LIST))
    """the allow-list's files that the torch's test/ has (all of the list when the files could not be had)"""
    collected: list[Collected] = field(default_factory=list)
    source: str = ""
    """where the files came from (UpstreamTests.describe())"""
    unavailable: str | None = None
    """why nothing was collected: the files could not be had, or were not asked for"""
    absent: list[str] = field(default_factory=list)
    """the allow-list's files the torch's test/ does not have"""

    @property
    def files(self) -> list[str]:
        return [c.file for c in self.collected if c.proposed]


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
    candidates = [f for f in OPENREG_ALLOW_LIST if (tests.test_dir / f).is_file()]
    absent = [f for f in OPENREG_ALLOW_LIST if f not in candidates]
    proposal = Proposal(candidates=candidates, source=tests.describe(), absent=absent)
    if not candidates:
        proposal.candidates = list(OPENREG_ALLOW_LIST)
        proposal.unavailable = f"{tests.test_dir} has none of the files of {ALLOW_LIST_SOURCE}"
        return proposal
    requirements = SuiteSpec(name=upstream_runs.SUITE, cwd=ctx.run_dir, requirements=list(UpstreamSuite(
        files=candidates).requirements))
    failure = suite_runner.install_requirements(ctx, requirements)
    if failure:
        proposal.unavailable = failure
        return proposal
    proposal.collected = _collect(ctx, tests.test_dir, candidates, device, dtypes, capabilities, import_name)
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
    return (f"{len(proposal.files)} of {len(proposal.candidates)} candidate files collect tests for {device}; "
            f"{proposal.source}")


def terminal_lines(proposal: Proposal, device: str) -> list[str]:
    """What init prints of the proposal: one line where nothing was collected, else one per file."""
    if proposal.unavailable:
        return [f"upstream: not proposed: {proposal.unavailable}; [suites.upstream] is written commented out with "
                f"the {len(proposal.candidates)} candidates ({ALLOW_LIST_SOURCE}); `ootci init --upstream-tests DIR` "
                "collects them from a folder"]
    width = max(len(c.file) for c in proposal.collected)
    lines = [f"upstream: {len(proposal.files)} of the {len(proposal.candidates)} candidate files "
             f"({ALLOW_LIST_SOURCE}) collect tests for {device} ({proposal.source}):"]
    lines += [f"  {c.file:<{width}}  {c.describe(device)}" for c in proposal.collected]
    return lines


def manifest_lines(proposal: Proposal, device: str) -> list[str]:
    """[suites.upstream] with the proposed files, each with a comment saying what it collected; or,
    when none is proposed, the candidates in a commented-out table."""
    files = proposal.files
    if not files:
        why = proposal.unavailable or f"none of the candidates collects a test for {device}"
        lines = _comment(f"not proposed: {why}. The candidates ({ALLOW_LIST_SOURCE}) are below: uncomment the "
                         "table to run them on the device, or run `ootci init --force --upstream-tests DIR` to keep "
                         "those that collect tests for it:")
        lines += [f"#   {c.file}: {c.describe(device)}" for c in proposal.collected]
        lines += ["# [suites.upstream]", "# files = ["]
        lines += textwrap.wrap(" ".join(f"{json.dumps(name)}," for name in proposal.candidates), 96,
                               initial_indent="#     ", subsequent_indent="#     ")
        return lines + ["# ]"]
    lines = _comment(f"proposed: the files of {ALLOW_LIST_SOURCE} that collect tests for {device!r} (collected "
                     f"as the upstream suite runs them; {proposal.source}):")
    lines += [f"#   {c.file}: {c.describe(device)}" for c in proposal.collected if not c.proposed]
    if proposal.absent:
        lines += _comment(f"not in this torch's test/: {', '.join(proposal.absent)}", first="#   ", rest="#     ")
    lines += ["[suites.upstream]", "files = ["]
    width = max(len(name) for name in files) + 3
    for c in proposal.collected:
        if c.proposed:
            lines.append(f"    {json.dumps(c.file) + ',':<{width}}  # {c.describe(device)}")
    return lines + ["]"]


def _comment(text: str, first: str = "# ", rest: str = "# ") -> list[str]:
    return textwrap.wrap(text, 100, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False)
