"""Reading what `ootci run` wrote."""

from __future__ import annotations

from pathlib import Path

from ootci.runner.models import RunRecord
from ootci.runner.records import record_files


def records_under(out: Path) -> list[RunRecord]:
    return [record_files.read(p) for p in sorted(out.glob("*/record.json"))]


def only_record(out: Path) -> RunRecord:
    records = records_under(out)
    assert len(records) == 1, f"expected one record under {out}, found {len(records)}"
    return records[0]
