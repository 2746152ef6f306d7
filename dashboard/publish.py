"""Publishing a workflow's results: new records (runs or bisections) join the history on the
data branch, and the site is built from the branch's tip as it is after the push.

The site comes from the tip, not from this job's own merge: what other publishers pushed is on
it too, and a re-run of an older run can never put an older history on the page. Without
pushing (`push=False`: a run that may not write the data branch) the merged history is all
there is, and the site is built from it.

What a workflow run publishes is only what it can have made (`accepted`): a record of another
trigger or another PR came from code that is not ootci's (a PR's code can upload artifacts into
its own run) and is refused, named in the output, never pushed.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ootci.dashboard import site as site_builder
from ootci.runner.history import data_branch
from ootci.runner.history.merging import ANY, Accepted, merge, merge_bisections


@dataclass
class Published:
    added: list[str] = field(default_factory=list)
    bisections: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    pushed: str = "not pushed"
    site_line: str = ""
    data_tip: str = ""
    """the data branch commit the site was built from (empty: a history never pushed)"""

    def lines(self) -> list[str]:
        rejected = [f"ootci: publish: skipped {path}: its record does not load or names another run"
                    for path in self.rejected]
        refused = [f"ootci: publish: refused {why}" for why in self.refused]
        return [*rejected, *refused,
                f"ootci: publish: {len(self.added)} run(s) and {len(self.bisections)} bisection(s) added; "
                f"data branch: {self.pushed}",
                self.site_line]


def publish(records: Path, history: Path, site: Path, *, branch: str, remote: str | None,
            push: bool = True, accepted: Accepted = ANY) -> Published:
    """records: directory of run directories and bisections (e.g. downloaded artifacts; may be
    missing when every job failed before uploading); history: where the data branch is checked
    out (must not exist or be empty); the tip is checked out beside it, at `<history>-tip`;
    accepted: what the publishing workflow run can have made (anything else is refused)."""
    outcome = Published()
    if push:
        data_branch.pull(history, branch, remote)
    merged = merge([records], history / data_branch.RUNS_DIR, missing_ok=True, accepted=accepted)
    bisected = merge_bisections([records], history / data_branch.RUNS_DIR, accepted=accepted)
    outcome.added, outcome.rejected = merged["added"], merged["rejected"] + bisected["rejected"]
    outcome.refused = merged["refused"] + bisected["refused"]
    outcome.bisections = bisected["added"] + bisected["updated"]
    data = history
    if push:
        outcome.pushed = data_branch.push(history, branch, remote, "ootci: add run records")
        tip = history.with_name(history.name + "-tip")
        shutil.rmtree(tip, ignore_errors=True)
        data_branch.pull(tip, branch, remote)
        data = tip
    outcome.data_tip = data_branch.commit_of(data) if push else ""
    runs = data / data_branch.RUNS_DIR
    runs.mkdir(parents=True, exist_ok=True)
    report = site_builder.build(runs, site, background_cleanup=True)
    outcome.site_line = report.line()
    return outcome
