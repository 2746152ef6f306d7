"""init's first run of the suites, and the baseline it leaves.

init claims every dtype and capability the device supports at all, so some tests fail in them:
a dtype the device can hold is a dtype to test. Once the manifest is written, init verifies
autoload and runs the suites once (smoke, integration, and upstream with the files it proposed)
through the very stages `ootci run` runs them with (runner/stages), in the environment its own
install stage made, and writes that run's failures as the backend's known failures through the code `ootci
expect` uses (known_failures.record_run). The first nightly is then green, and every failure
stays in sight: one line a test in the baseline file, and per dtype and capability on the
terminal. What no baseline of tests can hold (a broken autoload contract, a suite that could not
run) is said apart: the first `ootci run` would be red on it.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

from ootci.runner.manifests import known_failures
from ootci.runner.manifests.manifest import Manifest
from ootci.runner.models import SUITES, RunRecord, StageResult, Status, TestResult, overall_status
from ootci.runner.records import record_files
from ootci.runner.stages import pipeline
from ootci.runner.stages.base import RunContext

WRITTEN_BY = "`ootci init` (its first run) and `ootci expect --from RUN`"
STAGES = ("autoload", *SUITES)
"""what init's first run runs after its own install: `ootci run`'s stages from autoload on (the probe
imports the backend only after a plain `import torch`; the autoload checks import it every way)"""
FIRST_OPS = 4
"""ops (or tests) a line of the summary names before it says how many more"""


@dataclass
class FirstRun:
    manifest: Manifest
    """as init wrote it, before the baseline was named in it"""
    record: RunRecord
    record_path: Path
    recorded: known_failures.Recorded
    """the baseline written from the run's failures"""
    beyond_baseline: list[str]
    """what fails that a baseline of tests cannot hold (a suite that did not run, a problem of the
    configuration): `ootci run` is red until it is fixed"""


def run_suites(ctx: RunContext, manifest: Manifest, stage) -> tuple[RunRecord, Path]:
    """The autoload stage, then the suite stages `ootci run` would run for this manifest
    (ctx.options.suites), in order, with its rules: a stage that leaves the device unusable blocks
    the rest. `stage(name)` runs and reports one. The record, with init's own stages before them,
    is written to ctx.run_dir."""
    ctx.manifest = manifest
    record = ctx.record
    record.backend, record.device = manifest.name, manifest.device
    blocker: str | None = None
    despite: list[str] = []
    for name in STAGES:
        if not pipeline.wanted(name, manifest, ctx.options):
            continue
        if blocker:
            result = StageResult(name=name, status=Status.blocked, summary=f"blocked: stage '{blocker}' did not pass")
        elif reason := pipeline.skip_reason(manifest, ctx.options, name):
            result = StageResult(name=name, status=Status.skipped, summary=reason)
        else:
            result = stage(name)
            if pipeline.blocks_the_rest(result, despite):
                blocker = name
            continue  # stage() keeps it in the record
        record.stages.append(result)
    record.finished_at = dt.datetime.now(dt.UTC)
    record.status = overall_status(record.stages)
    return record, record_files.write(ctx.run_dir, record)


def record_baseline(manifest: Manifest, record: RunRecord) -> known_failures.Recorded:
    """The run's failures into the baseline beside the (written) manifest, as `ootci expect` does."""
    comment = ("# recorded by `ootci init`: the tests that failed in its first run of the suites, in every dtype\n"
               "# and capability claimed above; a run passes on them and names only new failures\n")
    return known_failures.record_run(manifest, record.tests, record.torch.version or record.torch.spec,
                                     written_by=WRITTEN_BY, comment=comment)


def beyond_baseline(record: RunRecord) -> list[str]:
    """One line for each failure of the run that is not a failing test (which the baseline holds)."""
    lines = list(record.problems)
    for stage in record.stages:
        if stage.status.ok:
            continue
        cause = stage.root_cause
        if stage.status is Status.failed and cause is not None and cause.kind == "test":
            continue
        why = cause.summary if cause else stage.summary
        if not any(why in line for line in lines):
            lines.append(f"{stage.name} {stage.status.value}: {why}")
    return lines


# -- the summary init prints --------------------------------------------------------------------

_PARAMETERS = re.compile(r"\[([^\[\]]*)\]$")


def op_and_dtypes(test: TestResult, dtypes: list[str]) -> tuple[str | None, list[str]]:
    """A test's op and dtypes: its own properties, else what its id says, for a test that crashed before
    it could report them: `[<op>-<dtype>]` or `[<dtype>]` (ootci's suites), `..._<dtype>` (PyTorch's)."""
    if test.dtype:
        return test.op, test.dtype.split(",")
    name = test.id.rsplit("::", 1)[-1]
    found = _PARAMETERS.search(name)
    if found:
        op, _, last = found.group(1).rpartition("-")
        if last in dtypes:
            return test.op or op or None, [last]
        return test.op, []
    return test.op, [d for d in dtypes if name.endswith(f"_{d}")][:1]


def label(test: TestResult, dtypes: list[str] | None = None) -> str:
    """What a known failure is called in the summary: its op, else its suite and test."""
    op, _ = op_and_dtypes(test, dtypes or [])
    if op:
        return op
    name = test.id.rsplit("::", 1)[-1].split("[", 1)[0]
    return f"{test.suite} {name}"


def known_by_claim(record: RunRecord, manifest: Manifest, recorded: known_failures.Recorded,
                   smoke_tests: dict[str, list[str]]) -> list[tuple[str, list[TestResult]]]:
    """(claim, the run's known failures in it) for every claimed dtype and capability, then
    "other" for the failures in neither. A capability's are its smoke tests' (`smoke_tests`:
    capability -> smoke test ids without parameters)."""
    listed = {(suite, test_id) for suite, entries in recorded.baseline.items() for test_id in entries}
    known = [t for t in record.tests if (t.suite, t.id) in listed]
    placed: set[tuple[str, str]] = set()
    rows: list[tuple[str, list[TestResult]]] = []
    for dtype in manifest.dtypes:
        found = [t for t in known if dtype in op_and_dtypes(t, manifest.dtypes)[1]]
        rows.append((f"dtype {dtype}", found))
        placed.update((t.suite, t.id) for t in found)
    for capability in manifest.capabilities:
        tests = set(smoke_tests.get(capability.value, []))
        found = [t for t in known if t.suite == "smoke" and t.id.split("[", 1)[0] in tests]
        rows.append((f"capability {capability.value}", found))
        placed.update((t.suite, t.id) for t in found)
    other = [t for t in known if (t.suite, t.id) not in placed]
    if other:
        rows.append(("other", other))
    return rows


def first_few(tests: list[TestResult], limit: int = FIRST_OPS, dtypes: list[str] | None = None) -> str:
    names = list(dict.fromkeys(label(t, dtypes) for t in tests))
    shown = ", ".join(names[:limit])
    return shown + (f", +{len(names) - limit} more" if len(names) > limit else "")


def summary_lines(first: FirstRun, smoke_tests: dict[str, list[str]], repo: Path) -> list[str]:
    """What init prints of its run: how each suite went and where every result is, then the known
    failures per claimed dtype and capability (those without any named on one line each)."""
    stages = ", ".join(f"{s.name} {s.status.value}" for s in first.record.stages if s.name in STAGES)
    lines = [f"init's run of the suites: {stages or 'none'} (every result: {first.record_path})"]
    path = first.recorded.path
    where = path.relative_to(repo) if path.is_relative_to(repo) else path
    lines.append(f"known failures: {first.recorded.total} recorded in {where}, by claim (count, first ops):")
    rows = known_by_claim(first.record, first.manifest, first.recorded, smoke_tests)
    failing = [(name, tests) for name, tests in rows if tests]
    width = max((len(name) for name, _ in failing), default=0)
    dtypes = first.manifest.dtypes
    lines += [f"  {name:<{width}}  {len(tests):>4}  {first_few(tests, dtypes=dtypes)}" for name, tests in failing]
    for kind in ("dtype", "capability"):
        clean = [name.removeprefix(f"{kind} ") for name, tests in rows if name.startswith(f"{kind} ") and not tests]
        if clean:
            lines.append(f"  none in {'dtypes' if kind == 'dtype' else 'capabilities'} {', '.join(clean)}")
    if first.recorded.total:
        lines.append(f"known failures by cause ({len(known_failures.by_cause(first.recorded.baseline))} causes; "
                     f"tests, cause):")
        lines += known_failures.cause_lines(first.recorded.baseline)
    return lines
