"""`ootci summary OUT`: one table of every run under OUT, and the job's outputs.

Workflows call it after `ootci run` (even when that failed) to learn the worst status
and a safe artifact name without parsing JSON in shell. On GitHub Actions it writes
`status`, `runs`, `artifact` and `unforeseen` (the name to upload under when another job of the run
took `artifact` first: nobody can know it in advance) to $GITHUB_OUTPUT; `--step-summary` also appends the
table to $GITHUB_STEP_SUMMARY. `--bisection` does the same for a bisection's record
(runner/bisection/summary.py), after `ootci bisect` in bisect.yml.
"""

from __future__ import annotations

import argparse
import secrets
from pathlib import Path

from ootci.runner.bisection import summary as bisection_summary
from ootci.runner.models import RunRecord, Status, worst_of
from ootci.runner.records.record_files import find_runs
from ootci.runner.stages.report import ICONS, append_to_github_file, artifact_name

NO_RUNS = Status.missing.value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("summary", help="summarise the run records under a directory (Markdown, job outputs)")
    p.add_argument("out", type=Path, help="directory holding <run_id>/record.json files")
    p.add_argument("--artifact", metavar="NAME",
                   help="artifact name to make safe and write to $GITHUB_OUTPUT as 'artifact'")
    p.add_argument("--step-summary", action="store_true", help="also append the table to $GITHUB_STEP_SUMMARY")
    p.add_argument("--bisection", action="store_true",
                   help="OUT holds a bisection (<id>/bisect.json): say its verdict, and write result, bisect-id "
                        "and artifact to $GITHUB_OUTPUT")
    p.set_defaults(func=cmd_summary)


def worst_status(records: list[RunRecord]) -> str:
    if not records:
        return NO_RUNS
    return worst_of(r.status for r in records).value


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:200]


def markdown_table(records: list[RunRecord], rejected: int) -> str:
    lines = [f"### ootci: {len(records)} run(s), {worst_status(records)}", ""]
    if records:
        lines += ["| backend | status | torch | trigger | first problem | run |", "|---|---|---|---|---|---|"]
        for r in sorted(records, key=lambda r: (r.backend, r.run_id)):
            trigger = f"pr #{r.pr}" if r.trigger == "pr" and r.pr else r.trigger
            lines.append(f"| {r.backend} | {ICONS[r.status]} {r.status.value} "
                         f"| {_cell(r.torch.version or r.torch.spec)} "
                         f"| {trigger} | {_cell(r.first_problem())} | `{r.run_id}` |")
    else:
        lines.append("No run records were written: see the log of the run step.")
    if rejected:
        lines += ["", f"{rejected} record file(s) did not load and were left out."]
    return "\n".join(lines) + "\n\n"


def unforeseen_name(name: str) -> str:
    """`name` with a random suffix: where another backend's code in the run uploaded under `name` first (it
    is known in advance), the records go up under this one, which nobody could have taken before."""
    return f"{name[:160]}-taken-{secrets.token_hex(8)}"


def cmd_summary(args: argparse.Namespace) -> int:
    if args.bisection:
        return bisection_summary.summarize(args.out, artifact=args.artifact, step_summary=args.step_summary)
    runs = find_runs(args.out) if args.out.is_dir() else []
    records = [record for _, record in runs if record is not None]
    table = markdown_table(records, rejected=len(runs) - len(records))
    print(table, end="")
    outputs = [f"status={worst_status(records)}", f"runs={len(records)}"]
    if args.artifact:
        name = artifact_name(args.artifact)
        outputs += [f"artifact={name}", f"unforeseen={unforeseen_name(name)}"]
    append_to_github_file("GITHUB_OUTPUT", "".join(line + "\n" for line in outputs))
    if args.step_summary:
        append_to_github_file("GITHUB_STEP_SUMMARY", table)
    return 0
