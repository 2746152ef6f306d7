"""JUnit XML in and out: test results as suites leave them, TestResults as ootci keeps them.

Reading is incremental and forgiving, because the files come from processes that
may have died: ootci's own suite plugin appends one <testcase> at a time and writes
the closing tags only at the end, and a vendor's pytest may be killed while writing.
Every test case that was complete before the file broke off is kept.

The classified file ootci keeps of a suite is gzip'd (`<suite>.xml.gz`, SUFFIX): a run of
100,000 tests is about 35 MB of XML and 2 MB compressed. `parse` reads either form, by content.

Understood dialects: ootci's plugin (authoritative `ootci.outcome` and `nodeid`
properties), pytest's junitxml (xunit1 and xunit2, xfail as `skipped
type="pytest.xfail"`), and generic JUnit (`failure`, `error`, `skipped`).
"""

from __future__ import annotations

import gzip
import os
import re
import tempfile
import xml.etree.ElementTree as ET
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from ootci.runner.models import Outcome, TestResult

SUFFIX = ".xml.gz"
"""a suite's classified JUnit file is `<suite>.xml.gz` (see suite_file)"""
_GZIP_MAGIC = b"\x1f\x8b"
MESSAGE_CHARS = 1000
TAIL_CHARS = 4000
_TIMEOUT_TEXT = re.compile(r"\bTimeout\b|\btimed out\b|OotciTestTimeout", re.IGNORECASE)
_CRASH_TEXT = re.compile(r"crashed while running|Fatal Python error|Segmentation fault")
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@dataclass
class JUnitCase:
    """One <testcase> as read, before retries and expected failures are applied."""

    id: str
    outcome: Outcome
    duration_s: float = 0.0
    message: str = ""
    detail: str = ""
    output: str = ""
    properties: dict[str, str] = field(default_factory=dict)

    def to_result(self, suite: str, *, attempts: int = 1) -> TestResult:
        return TestResult(
            id=self.id,
            suite=suite,
            outcome=self.outcome,
            duration_s=round(self.duration_s, 3),
            message=self.message[:MESSAGE_CHARS],
            log_tail=_tail("\n".join(p for p in (self.detail, self.output) if p)),
            attempts=attempts,
            op=self.properties.get("op") or None,
            dtype=self.properties.get("dtype") or None,
        )


@dataclass
class JUnitFile:
    cases: list[JUnitCase]
    complete: bool
    """False when the file ended before its root element was closed, or broke off."""
    error: str | None = None


def _tail(text: str, limit: int = TAIL_CHARS) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


def _case_id(case: ET.Element, props: dict[str, str]) -> str:
    if props.get("nodeid"):
        return props["nodeid"]
    name = case.get("name", "")
    classname = case.get("classname", "")
    return f"{classname}::{name}" if classname else name or "(unnamed)"


def _outcome(case: ET.Element, props: dict[str, str]) -> tuple[Outcome, ET.Element | None]:
    stated = props.get("ootci.outcome")
    problem = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
    if stated in Outcome.__members__:
        return Outcome(stated), problem
    if problem is None:
        return Outcome.passed, None
    text = f"{problem.get('type', '')} {problem.get('message', '')}"
    if problem.tag == "skipped":
        return (Outcome.xfailed if problem.get("type") == "pytest.xfail" else Outcome.skipped), problem
    if _CRASH_TEXT.search(text):
        return Outcome.crashed, problem
    if _TIMEOUT_TEXT.search(text):
        return Outcome.timeout, problem
    return (Outcome.failed if problem.tag == "failure" else Outcome.error), problem


def _read_case(case: ET.Element) -> JUnitCase:
    props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
    outcome, problem = _outcome(case, props)
    message = detail = ""
    if problem is not None:
        message = problem.get("message", "") or ""
        detail = (problem.text or "").strip()
        if not message and detail:
            message = detail.splitlines()[-1]
    output = "\n".join((e.text or "").strip() for e in case if e.tag in ("system-out", "system-err") and e.text)
    try:
        duration = float(case.get("time", "0") or 0)
    except ValueError:
        duration = 0.0
    return JUnitCase(_case_id(case, props), outcome, duration, message.strip(), detail, output.strip(), props)


def suite_file(junit_dir: Path, suite: str) -> Path:
    """Where a suite's classified JUnit file lies in a run's junit/ folder."""
    return junit_dir / f"{suite}{SUFFIX}"


def _inflate(data: bytes) -> tuple[bytes, str | None]:
    """The XML of a gzip'd file, as far as it goes: a file cut short keeps what came before the cut."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        return inflater.decompress(data) + inflater.flush(), None if inflater.eof else "gzip stream cut short"
    except zlib.error as exc:
        return b"", f"not gzip: {exc}"


def parse(path: Path) -> JUnitFile:
    """Every complete <testcase> of the file (plain or gzip'd XML), in order; duplicates keep the last."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return JUnitFile([], False, f"{path}: no such file")
    except OSError as exc:
        return JUnitFile([], False, f"{path}: cannot read: {exc.strerror}")
    cut = None
    if data.startswith(_GZIP_MAGIC):
        data, cut = _inflate(data)
    parser: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("end",))
    cases: dict[str, JUnitCase] = {}
    error = None
    complete = False
    try:
        parser.feed(data)
        # A syntax error is queued as an event: every case before it is read first.
        for _, element in parser.read_events():  # type: ignore[misc]  # typeshed: end events are pairs
            # Only end events were asked for: each is an element.
            assert isinstance(element, ET.Element)
            if element.tag == "testcase":
                case = _read_case(element)
                cases.pop(case.id, None)
                cases[case.id] = case
                element.clear()
        parser.close()
        complete = True
    except ET.ParseError as exc:
        why = cut or f"XML broke off ({exc})"
        error = f"{path}: {why}; kept the {len(cases)} complete test cases before it"
    return JUnitFile(list(cases.values()), complete, error)


def count_by_outcome(results: list[TestResult]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for result in results:
        counts[result.outcome.value] = counts.get(result.outcome.value, 0) + 1
    return dict(sorted(counts.items()))


_ELEMENT_FOR = {
    Outcome.failed: "failure",
    Outcome.timeout: "failure",
    Outcome.crashed: "error",
    Outcome.error: "error",
    Outcome.skipped: "skipped",
    Outcome.xfailed: "skipped",
}


def _clean(text: str) -> str:
    return _XML_INVALID.sub("\ufffd", text)


def write(path: Path, suite: str, results: list[TestResult]) -> None:
    """The final, classified JUnit file of one suite, written atomically; gzip'd where the name
    ends in .gz (suite_file's name).

    Outcomes JUnit has no word for are kept as properties (`ootci.outcome`,
    `attempts`), and mapped to the nearest element for other JUnit readers: flaky
    and xpassed pass, xfailed is skipped, timeout is a failure, crashed an error.
    """
    counts = count_by_outcome(results)
    failures = sum(counts.get(o.value, 0) for o in (Outcome.failed, Outcome.timeout))
    errors = sum(counts.get(o.value, 0) for o in (Outcome.error, Outcome.crashed))
    skipped = sum(counts.get(o.value, 0) for o in (Outcome.skipped, Outcome.xfailed))
    total_time = sum(r.duration_s for r in results)
    root = ET.Element("testsuites")
    suite_el = ET.SubElement(root, "testsuite", name=suite, tests=str(len(results)), failures=str(failures),
                             errors=str(errors), skipped=str(skipped), time=f"{total_time:.3f}")
    for result in results:
        classname, _, name = result.id.rpartition("::")
        case = ET.SubElement(suite_el, "testcase", classname=_clean(classname or suite), name=_clean(name),
                             time=f"{result.duration_s:.3f}")
        props = ET.SubElement(case, "properties")
        values = {"nodeid": result.id, "ootci.outcome": result.outcome.value, "attempts": str(result.attempts)}
        if result.op:
            values["op"] = result.op
        if result.dtype:
            values["dtype"] = result.dtype
        for key, value in values.items():
            ET.SubElement(props, "property", name=key, value=_clean(value))
        tag = _ELEMENT_FOR.get(result.outcome)
        if tag:
            problem = ET.SubElement(case, tag, type=result.outcome.value, message=_clean(result.message))
            if tag != "skipped":
                problem.text = _clean(result.log_tail)
        elif result.log_tail:
            ET.SubElement(case, "system-out").text = _clean(result.log_tail)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            # No timestamp in the gzip header: the same results are the same bytes.
            out = gzip.GzipFile(fileobj=f, mode="wb", compresslevel=6, mtime=0) if path.suffix == ".gz" else f
            ET.ElementTree(root).write(out, encoding="utf-8", xml_declaration=True)
            if out is not f:
                out.close()
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
