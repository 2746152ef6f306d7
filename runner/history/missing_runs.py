"""A `missing` record for every matrix entry whose job left none (`ootci history fill-missing`),
so that no backend drops off the dashboard because its job never got as far as `ootci run`.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from ootci.runner import __version__
from ootci.runner.core.errors import UnknownBackendError, UsageError
from ootci.runner.manifests import registry
from ootci.runner.manifests.manifest import Manifest
from ootci.runner.models import RootCause, RunRecord, StageResult, Status, TorchInfo, reproduce_command
from ootci.runner.records import record_files
from ootci.runner.records.run_identity import ci_run_url, new_run_id

MISSING_STAGE = "job"
MISSING_WHY = "it never started, was cancelled, lost its runner or failed before ootci ran"
RUNNER_FOR_SELF_REFERENCES = "2.336.0"
"""the oldest runner that resolves ootci's `uses: $/...` references (docs/workflows.md, "Runner requirements")"""
HOSTED_LABELS = ("ubuntu-", "windows-", "macos-")


def self_hosted(entry: dict) -> bool:
    """Whether a matrix entry's job runs on a runner of the vendor's own (`runs-on` labels)."""
    labels = entry.get("runs-on") or ["ubuntu-latest"]
    labels = [labels] if isinstance(labels, str) else labels
    return "self-hosted" in labels or not any(str(label).startswith(HOSTED_LABELS) for label in labels)


def read_matrix(text: str) -> tuple[str, list[dict]]:
    """(how to name it in errors, the entries) of a matrix given as JSON text or as a file."""
    where = "--matrix"
    if not text.lstrip().startswith(("{", "[")):
        where = f"--matrix {text}"
        try:
            text = Path(text).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{where}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})") from None
    entries = data.get("include") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise UsageError(f'{where}: expected {{"include": [...]}} as `ootci matrix` prints it')
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise UsageError(f"{where}: include[{i}]: expected an object, got {json.dumps(entry)[:80]}")
        for key in ("name", "torch"):
            value = entry.get(key)
            if (key == "name" or value is not None) and (not isinstance(value, str) or not value.strip()):
                shown = "missing" if value is None else f"expected a non-empty string, got {json.dumps(value)[:80]}"
                raise UsageError(f"{where}: include[{i}].{key}: {shown}")
    return where, entries


def missing_record(manifest: Manifest, torch_spec: str, reason: str, *, trigger: str, pr: int | None,
                   now: dt.datetime, on_own_runner: bool = False) -> RunRecord:
    """The record of a run that left none: status missing, one stage saying why. A job on a runner of the
    vendor's own may have failed before any step for its version, which no step of it can say: this says it."""
    summary = f"no record from the backend job: {reason}"
    url = ci_run_url()
    hint = f"see the backend job in {url}" if url else "see the backend job's log in the workflow run"
    if on_own_runner:
        hint += (f"; its runner is self-hosted: one older than {RUNNER_FOR_SELF_REFERENCES} fails while it sets up "
                 f"the job, on ootci's `uses: $/...` references, before any step (`./config.sh --version` on the "
                 f"runner prints its version)")
    torch = TorchInfo(spec=torch_spec)
    stage = StageResult(name=MISSING_STAGE, status=Status.missing, started_at=now, summary=summary,
                        root_cause=RootCause(kind="missing", summary=summary, hint=hint))
    return RunRecord(
        run_id=new_run_id(manifest.name, now), backend=manifest.name,
        device=manifest.device, trigger=trigger, pr=pr, torch=torch, ootci_version=__version__,
        started_at=now, finished_at=now, status=Status.missing, stages=[stage], ci_run_url=url,
        command=reproduce_command(registry.reference(manifest), torch))


def fill_missing(entries: list[dict], runs: Path, reason: str, *, trigger: str, pr: int | None = None,
                 where: str = "--matrix") -> tuple[list[RunRecord], int]:
    """Write a missing record under `runs` for every entry whose backend has no record there;
    returns the records written and how many record files under `runs` did not load."""
    manifests: dict[str, tuple[Manifest, dict]] = {}
    for i, entry in enumerate(entries):
        try:
            manifest = registry.resolve(entry["name"])
        except UnknownBackendError as exc:
            raise UnknownBackendError(f"{where}: include[{i}].name: {exc.message}") from None
        manifests.setdefault(manifest.name, (manifest, entry))
    found = record_files.find_runs(runs) if runs.is_dir() else []
    present = {record.backend for _, record in found if record is not None}
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    written = []
    for name, (manifest, entry) in manifests.items():
        if name in present:
            continue
        record = missing_record(manifest, entry.get("torch") or manifest.ci.torch, reason, trigger=trigger,
                                pr=pr, now=now, on_own_runner=self_hosted(entry))
        record_files.write(runs / record.run_id, record)
        written.append(record)
    return written, sum(1 for _, record in found if record is None)
