"""What a workflow says of a finished bisection: its verdict as a notice, a step summary in
Markdown, and the job outputs the steps after it need (`result`, `bisect-id`, `artifact`).

`ootci summary OUT --bisection` calls it after `ootci bisect`, even when that failed or
found no single culprit: what the bisection has is said and kept.
"""

from __future__ import annotations

import re
from pathlib import Path

from ootci.runner.models import BisectRecord
from ootci.runner.stages.report import append_to_github_file, artifact_name, escape_workflow_command

EXIT_UNREADABLE = 1


def code(text: object) -> str:
    """Record text is untrusted: a code span renders it literally, whatever backticks it holds."""
    text = " ".join(str(text).split())[:500]
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}" if text else ""


def _output(**values: str) -> None:
    append_to_github_file("GITHUB_OUTPUT",
                          "".join(f"{key.replace('_', '-')}={value}\n" for key, value in values.items()))


def markdown(record: BisectRecord, artifact: str | None) -> str:
    result = record.result
    kind = result.kind if result else record.state
    verdict = result.summary if result else f"{record.state}: {record.error or 'no result'}"
    lines = [f"### ootci bisect: {code(record.backend)}", "", f"**{kind}**: {code(verdict)}", ""]
    if result and result.cause:
        lines += [f"cause: {code(result.cause)}", ""]
    if result and result.links:
        lines += [*(f"- {name}: {url}" for name, url in result.links.items()), ""]
    where = f" in the artifact `{artifact}`" if artifact else ""
    lines += [f"{record.steps_taken()} step(s); good {code(record.good)}, bad {code(record.bad)}; record "
              f"`{record.bisect_id}/bisect.json`{where}"]
    return "\n".join(lines) + "\n\n"


def summarize(out: Path, *, artifact: str | None, step_summary: bool) -> int:
    """Say the newest bisection under `out`; 0 unless its record is there but does not load."""
    found = sorted(out.glob("*/bisect.json")) if out.is_dir() else []
    if not found:
        _output(result="missing")
        print("::error title=ootci bisect::no bisect.json was written: see the log of the bisect step")
        return 0
    # The directory is uploaded even when its record does not load: name it first.
    safe = artifact_name(artifact) if artifact else None
    _output(bisect_id=found[-1].parent.name, **({"artifact": safe} if safe else {}))
    try:
        record = BisectRecord.model_validate_json(found[-1].read_bytes())
    except ValueError as exc:
        _output(result="unreadable")
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"::error title=ootci bisect::{escape_workflow_command(f'{found[-1]} does not load: {first}')}")
        return EXIT_UNREADABLE
    result = record.result
    kind = result.kind if result else record.state
    _output(result=kind)
    verdict = result.summary if result else f"{record.state}: {record.error or 'no result'}"
    print(f"::notice title=ootci bisect {kind}::{escape_workflow_command(verdict)}")
    text = markdown(record, safe)
    print(text, end="")
    if step_summary:
        append_to_github_file("GITHUB_STEP_SUMMARY", text)
    return 0
