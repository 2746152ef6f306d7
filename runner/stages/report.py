"""What `ootci run` shows while it works, on a terminal and on GitHub Actions.

On Actions every stage is a fold (`::group::`) holding its full output, failures
become `::error::` annotations and a Markdown table goes to $GITHUB_STEP_SUMMARY. On
a terminal a long stage shows a ticking line with its elapsed time and last output.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from typing import TextIO

from ootci.runner.core import causes
from ootci.runner.models import RunRecord, StageResult, Status

ICONS = {
    Status.passed: "✅", Status.failed: "❌", Status.crashed: "💥", Status.timeout: "⏱️",
    Status.blocked: "⛔", Status.skipped: "⏭️", Status.missing: "❓",
}


# pytest's own verdicts: its summary ("2 failed, 3680 passed in 60.1s", with or without the
# rule of '='s) and its short summary lines (FAILED x). An expected failure is "failed" to
# pytest until ootci classifies it, so the ticking line never shows these; the stage's own
# line shows the classified counts when it finishes.
PYTEST_VERDICT = re.compile(r"^(?:=+ .* =+|(?:FAILED|ERROR|XFAIL|XPASS) \S.*|"
                            r"\d+ (?:failed|passed|errors?|skipped|xfailed|xpassed|deselected)\b.* in [\d.]+s.*)$")
CLASSIFYING = "pytest finished; classifying the results"


def append_to_github_file(variable: str, text: str) -> None:
    """Append text to the file a workflow command variable names ($GITHUB_OUTPUT,
    $GITHUB_STEP_SUMMARY); outside GitHub Actions the variable is unset and nothing is written."""
    path = os.environ.get(variable)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)


def artifact_name(text: str) -> str:
    """A name upload-artifact accepts: no slashes, colons, quotes or other specials."""
    name = re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9._-]+", "-", text)).strip("-.")
    return name[:200] or "ootci"


def escape_workflow_command(text: str) -> str:
    """Text for a workflow command (`::error::...`): it ends at a newline, so %, CR and LF are encoded."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


class Reporter:
    def __init__(self, stream: TextIO | None = None, *, github: bool | None = None,
                 summary_path: str | None = None, interactive: bool | None = None):
        self.stream = stream or sys.stderr
        self.github = os.environ.get("GITHUB_ACTIONS") == "true" if github is None else github
        self.summary_path = summary_path if summary_path is not None else os.environ.get("GITHUB_STEP_SUMMARY")
        self.interactive = (self.stream.isatty() and not self.github) if interactive is None else interactive
        self._label = ""
        self._started = 0.0
        self._last_line = ""
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def _print(self, text: str) -> None:
        with self._lock:
            if self.interactive:
                self.stream.write("\r\033[K")
            self.stream.write(text + "\n")
            self.stream.flush()

    def run_started(self, record: RunRecord, run_dir: os.PathLike) -> None:
        self._print(f"ootci: {record.backend} ({record.device}) with torch {record.torch.spec} -> {run_dir}")

    def stage_started(self, backend: str, stage: str) -> None:
        self._label = f"{backend} {stage}"
        self._started = time.monotonic()
        self._last_line = ""
        if self.github:
            self._print(f"::group::ootci {self._label}")
        elif self.interactive:
            self._stop.clear()
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            elapsed = time.monotonic() - self._started
            last = self._last_line[:60]
            with self._lock:
                self.stream.write(f"\r\033[K  {self._label}  {elapsed:5.0f}s  {last}")
                self.stream.flush()

    def note(self, text: str) -> None:
        """A line of ootci's own between runs (e.g. a bisection's progress), always shown."""
        self._print(text)

    def line(self, text: str) -> None:
        """One line of a stage's subprocess output."""
        text = text.rstrip("\n")
        if self.github:
            with self._lock:
                self.stream.write(text + "\n")
        else:
            text = text.strip()
            if PYTEST_VERDICT.match(text):
                text = CLASSIFYING if "=" in text[:1] or text[:1].isdigit() else self._last_line
            self._last_line = text

    def stage_finished(self, backend: str, result: StageResult) -> None:
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            self._ticker = None
        if self.github:
            self._print("::endgroup::")
            if result.status in (Status.failed, Status.crashed, Status.timeout):
                detail = result.root_cause.summary if result.root_cause else result.summary
                if result.root_cause and result.root_cause.hint:
                    detail += f" (hint: {result.root_cause.hint})"
                self._print(f"::error title=ootci {backend} {result.name} {result.status.value}::"
                            f"{escape_workflow_command(detail)}")
        line = (f"  {ICONS[result.status]} {result.name:<12} {result.status.value:<8} {result.duration_s:7.1f}s  "
                f"{result.summary}")
        self._print(line[:300])
        if result.root_cause and result.status not in (Status.passed, Status.skipped, Status.blocked):
            self._print(f"      root cause: {result.root_cause.summary[:400]}")
            if result.root_cause.hint:
                self._print(f"      hint: {result.root_cause.hint}")

    def run_finished(self, record: RunRecord, record_path: os.PathLike) -> None:
        self._print(f"ootci: {record.backend}: {record.status.value} -> {record_path}")
        line = novelty_line(record)
        if line:
            self._print(f"  {line}")
        if self.summary_path:
            with open(self.summary_path, "a", encoding="utf-8") as f:
                f.write(markdown_summary(record))


def novelty_line(record: RunRecord) -> str:
    """What is new since the baseline, in one line ('' when nothing failed): by cause, largest
    first, where the record has its causes (older and pruned ones name the first tests)."""
    found = record.novelty()
    parts = []
    by_cause = causes.merge(s.causes for s in record.stages)
    if found["new"] and by_cause:
        parts += [line for line in (causes.summary_line(by_cause, "new"), causes.summary_line(by_cause, "changed"))
                  if line]
    elif found["new"]:
        shown = ", ".join(found["new"][:3]) + (f" and {len(found['new']) - 3} more" if len(found["new"]) > 3 else "")
        parts.append(f"{len(found['new'])} new failures ({shown})")
    if found["known"]:
        parts.append(f"{len(found['known'])} known failures failed as expected")
    if found["fixed"]:
        parts.append(f"{len(found['fixed'])} fixed (known failures that passed: `ootci expect --prune` removes them)")
    return "; ".join(parts)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:300]


def markdown_summary(record: RunRecord) -> str:
    lines = [
        f"### ootci: {record.backend} {ICONS[record.status]} {record.status.value}",
        "",
        f"torch `{record.torch.version or record.torch.spec}` "
        f"(commit `{(record.torch.git_version or 'unknown')[:12]}`), run `{record.run_id}`",
        "",
        "| stage | status | time | summary |",
        "|---|---|---:|---|",
    ]
    for s in record.stages:
        summary = s.root_cause.summary if s.root_cause and not s.status.ok else s.summary
        lines.append(f"| {s.name} | {ICONS[s.status]} {s.status.value} | {s.duration_s:.1f}s | {_md_cell(summary)} |")
    if novelty_line(record):
        lines += ["", _md_cell(novelty_line(record))]
    if record.problems:
        lines += ["", "**Problems**", ""] + [f"- {_md_cell(p)}" for p in record.problems]
    lines += ["", f"Reproduce: `{record.command}`", "", ""]
    return "\n".join(lines)
