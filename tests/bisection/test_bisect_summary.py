"""`ootci summary OUT --bisection`: what bisect.yml says of a bisection, and the outputs its later steps read."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from ootci.runner.models import BisectCandidate, BisectRecord, BisectResult, BisectRound, BisectStep, Verdict
from tests.support.cli import ootci

BISECT_ID = "bisect-openreg-20261126T000000Z-abc123"


def outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def write_bisection(out: Path, result: BisectResult | None, state: str = "finished") -> None:
    round_ = BisectRound(axis="backend", fixed="torch 2.13.0",
                         candidates=[BisectCandidate(label=f"commit {c}", spec=c) for c in "abc"],
                         steps=[BisectStep(candidate=1, verdict=Verdict.bad)], result=result)
    record = BisectRecord(bisect_id=BISECT_ID, backend="open`reg", started_at=dt.datetime(2026, 11, 26, tzinfo=dt.UTC),
                          state=state, good="a", bad="c", rounds=[round_], error=None if result else "the build broke")
    (out / BISECT_ID).mkdir(parents=True)
    (out / BISECT_ID / "bisect.json").write_text(record.model_dump_json())


def summarize(out: Path, tmp_path: Path):
    env = {"GITHUB_OUTPUT": str(tmp_path / "output"), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}
    (tmp_path / "output").write_text("")
    return ootci("summary", str(out), "--bisection", "--artifact", "ootci-bisect-open/reg-1-1", "--step-summary",
                 env=env)


def test_a_found_culprit_is_a_notice_a_step_summary_and_the_outputs_the_upload_reads(tmp_path):
    out = tmp_path / "bisect"
    write_bisection(out, BisectResult(kind="found", summary="first bad: commit b", first_bad=1, last_good=0,
                                      cause="smoke: test_add failed", links={"commit": "https://example.invalid/b"}))
    done = summarize(out, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "::notice title=ootci bisect found::first bad: commit b" in done.stdout
    assert outputs(tmp_path / "output") == {"bisect-id": BISECT_ID, "artifact": "ootci-bisect-open-reg-1-1",
                                            "result": "found"}
    summary = (tmp_path / "summary.md").read_text()
    assert summary.startswith("### ootci bisect: `` open`reg ``")  # record text is untrusted: a code span
    for part in ("**found**: ` first bad: commit b `", "cause: ` smoke: test_add failed `",
                 "- commit: https://example.invalid/b", "1 step(s); good ` a `, bad ` c `",
                 f"`{BISECT_ID}/bisect.json` in the artifact `ootci-bisect-open-reg-1-1`"):
        assert part in summary, part


def test_a_bisection_without_a_result_says_its_state_and_error(tmp_path):
    out = tmp_path / "bisect"
    write_bisection(out, None, state="failed")
    done = summarize(out, tmp_path)
    assert done.returncode == 0, done.stderr
    assert outputs(tmp_path / "output")["result"] == "failed"
    assert "**failed**: ` failed: the build broke `" in (tmp_path / "summary.md").read_text()


def test_no_record_is_an_error_annotation_and_result_missing(tmp_path):
    done = summarize(tmp_path / "nothing", tmp_path)
    assert done.returncode == 0
    assert "::error title=ootci bisect::no bisect.json was written" in done.stdout
    assert outputs(tmp_path / "output") == {"result": "missing"}


def test_a_record_that_does_not_load_is_still_named_for_the_upload_and_fails_the_step(tmp_path):
    out = tmp_path / "bisect"
    (out / BISECT_ID).mkdir(parents=True)
    (out / BISECT_ID / "bisect.json").write_text("{not json")
    done = summarize(out, tmp_path)
    assert done.returncode == 1
    assert outputs(tmp_path / "output") == {"bisect-id": BISECT_ID, "artifact": "ootci-bisect-open-reg-1-1",
                                            "result": "unreadable"}
    assert "::error title=ootci bisect::" in done.stdout and "does not load" in done.stdout
