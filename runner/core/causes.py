"""A failing test's cause: a short signature of its error, so that hundreds of failures read as
the handful of things that are broken.

The signature is the innermost exception's type and first line, found by looking through the
wrappers ootci itself puts around a test's error (`sample 3 (Tensor[2, 3]): raised on openreg but
not on CPU: ...`, `making sample input ...`, `known failure (...); it failed: ...`, the second
opinion's `fails on CPU too: ...`) and PyTorch's own (`Caused by sample input at index 3: ...`).
What differs from one test of the same bug to the next is masked: numbers, memory addresses,
shapes and other number lists, dtypes, the device's name and directories. What names the broken
thing is kept: the exception class, quoted op and kernel names (`aten::_fft_r2c`, `abs_cpu`),
words. A crash's cause is its signal and the op family it died in (`SIGSEGV in fft`), or, where no
op is known, the function its process died in, else the test function; a hang's the same with `timeout`.

It is computed here only, on the orchestrator's side, from what a TestResult already holds
(message, log_tail, op, dtype), so the record, the baseline, the second opinion, the terminal,
the page and the relay all agree; it depends on no torch version's wording beyond the text
itself. The core package holds it because the baseline (manifests) keeps each known failure's
cause and may import nothing above core.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ootci.runner.core.rootcause import hint_for
from ootci.runner.models import Cause, Outcome, RootCause, StageResult, TestResult

SIGNATURE_CHARS = 160
TESTS_KEPT = 20
"""test ids a cause lists in the record (its count is exact); the test list holds them all"""
CHANGED = "known failure, now failing differently"
"""how a known failure whose cause changed begins its message (runner/suite_runs/classify.py)"""

FAILING = frozenset({Outcome.failed, Outcome.error, Outcome.crashed, Outcome.timeout})
"""outcomes that have a cause of the backend's; `upstream` and `xfailed` have one too, kept apart"""
NOVELTY_ORDER = ("new", "changed", "known", "upstream")


# -- the wrappers looked through: (what the record says was masked, pattern) --------------
# Each is matched at the start of the text, after an optional exception class of its own (the
# wrapper is itself raised as an AssertionError or an Exception); the text after the match is
# the wrapped error. They are tried again after each strip: wrappers nest.
_OUTER = r"(?:[A-Za-z_][\w.]*(?:Error|Exception): )?"
_IT = r"(?P<outcome>failed|error|crashed|timeout|xpassed)"  # how the wrapped test ended
_WRAPPER_TEXTS = (
    ("the known failure's wrapper", rf"{CHANGED} \(listed as .*?\); it {_IT}: "),
    ("the known failure's wrapper", rf"known failure \([^)]*\); it {_IT}: "),
    ("the expected failure's wrapper", rf"expected failure: .*?; it {_IT}: "),
    ("the second opinion's wrapper", rf"fails on CPU too: not the backend's \({_IT} on [^:]+: "),
    ("the retry's wrapper", rf"passed on attempt \d+ after it {_IT}: "),
    ("the sample's wrapper", r"sample \d+ \(.*?\): raised on \S+ but not on CPU: "),
    ("the sample's wrapper", r"sample \d+ \(.*?\): (?=\S+ and CPU differ: |result on |results differ )"),
    ("the sample's wrapper", r"making sample inputs? (?:\d+ )?on \S+ failed: "),
)
_WRAPPERS = tuple((name, re.compile(_OUTER + pattern, re.DOTALL)) for name, pattern in _WRAPPER_TEXTS)
# Where the wrapped error's text ends: the second opinion's CPU half, PyTorch's sample-input
# note and repro line (PYTORCH_PRINT_REPRO_ON_FAILURE), an added hint.
_TAILS = re.compile(r" \| \w+ on cpu: |\n\s*Caused by (?:sample input|reference input|error input)|"
                    r"\n\s*To execute this test, run the following|\n\s*Exception raised from |"
                    r" \(a module the suite's tests need: ")
_PYTEST_E = re.compile(r"^E\s+(\S.*)$", re.MULTILINE)

# -- what is masked: (what the record says was masked, pattern, replacement) ---------------
_ATEN_DTYPES = (r"Float|Double|Half|BFloat16|Long|Int|Short|Char|Byte|Bool|ComplexFloat|ComplexDouble|"
                r"ComplexHalf|Float8_\w+|UInt\d+|Int\d+|QInt8|QUInt8|QInt32|QUInt4x2|Bits\w+")
_DTYPE_WORDS = (r"(?:torch\.)?(?:b?float\d+(?:_\w+)?|u?int\d+|complex\d+|q?u?int\d+x?\d*)|"
                r"torch\.(?:float|double|half|int|long|short|bool|cfloat|cdouble|chalf|uint\d+)")
_MASKS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("addresses", re.compile(r"\b0x[0-9a-fA-F]+\b"), "0x?"),
    ("directories", re.compile(r"(?:(?<=[\s'\"(=])|^)(?:[A-Za-z]:)?(?:[/\\][^\s/\\:'\"()]+)+[/\\]"), "…/"),
    ("dtypes", re.compile(rf"'(?:{_ATEN_DTYPES})'"), "'<dtype>'"),
    ("dtypes", re.compile(rf"(?<![\w.])(?:{_DTYPE_WORDS})(?![\w])"), "<dtype>"),
    ("numbers", re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?(?![\w])"), "N"),
)
# A list of numbers (a shape, sizes, values) of any length is one thing, masked; nested ones too.
_SEQUENCE = re.compile(r"\[\s*(?:(?:N|\[…\]|\(…\))\s*,\s*)*(?:N|\[…\]|\(…\))?\s*,?\s*\]|"
                       r"\(\s*(?:(?:N|\[…\]|\(…\))\s*,\s*)*(?:N|\[…\]|\(…\))\s*,?\s*\)")
_SENTENCE_END = re.compile(r"[.!?](?=\s+[A-Z'\"(])")
_SIGNAL = re.compile(r"\bSIG[A-Z]{2,7}\b")
# ootci's OpInfo ids name the op before the dtype (`test_compare_cpu[fft.rfft-float32]`): a test
# that crashed before it could record its op still says it there.
_ID_OP = re.compile(r"\[([A-Za-z_][\w.]*)-[\w.]+\]$")
_CRASH_FRAME = re.compile(r" at \S+:\d+ in (\w+)")
"""the Python function a crash's test process died in, as ootci's crash message names it"""
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Signature:
    """A failure's cause: its text and what was masked or looked through to get it."""

    text: str
    masked: tuple[str, ...] = ()


@dataclass
class Work:
    """What computing causes cost, counted (bench/causes.py): signatures computed and regular
    expressions applied."""

    signatures: int = 0
    patterns: int = 0


WORK = Work()


def _device_pattern(device: str | None) -> re.Pattern[str] | None:
    if not device or device == "cpu":
        return None
    return _device_patterns.setdefault(device, re.compile(
        rf"(?<![A-Za-z0-9]){re.escape(device)}(?::\d+)?(?![A-Za-z0-9])", re.IGNORECASE))


_device_patterns: dict[str, re.Pattern[str]] = {}


def _innermost(result: TestResult, masked: list[str]) -> tuple[str, Outcome]:
    """The wrapped error's first line, and how the wrapped test ended (a known failure's
    message says whether it crashed)."""
    outcome = result.outcome
    text = result.message or ""
    if not text.strip():
        found = _PYTEST_E.search(result.log_tail or "")
        text = found.group(1) if found else ""
    for _ in range(8):  # wrappers nest a few deep at most; never loop on a pathological text
        for name, pattern in _WRAPPERS:
            WORK.patterns += 1
            match = pattern.match(text)
            if match:
                text = text[match.end():]
                if match.groupdict().get("outcome"):
                    outcome = Outcome(match.group("outcome"))
                if name not in masked:
                    masked.append(name)
                break
        else:
            break
    WORK.patterns += 1
    tail = _TAILS.search(text)
    if tail:
        text = text[:tail.start()]
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    if len(line) > SIGNATURE_CHARS:
        # A long first line: its first sentence names the error (torch's dispatcher goes on to
        # list every backend the op has, which differs from op to op).
        end = _SENTENCE_END.search(line, 20)
        if end:
            line = line[:end.start() + 1]
    return line, outcome


def mask(text: str, device: str | None = None, masked: list[str] | None = None) -> str:
    """The text with what differs from one failure of the same bug to the next masked; the kinds
    masked are appended to `masked`."""
    found = masked if masked is not None else []
    steps = list(_MASKS)
    device_pattern = _device_pattern(device)
    if device_pattern is not None:
        steps.insert(0, ("the device's name", device_pattern, "<device>"))
    for name, pattern, replacement in steps:
        WORK.patterns += 1
        text, n = pattern.subn(replacement, text)
        if n and name not in found:
            found.append(name)
    for _ in range(4):  # nested lists fold from the inside out
        WORK.patterns += 1
        text, n = _SEQUENCE.subn(lambda m: "[…]" if m.group(0)[0] == "[" else "(…)", text)
        if not n:
            break
        if "shapes and number lists" not in found:
            found.append("shapes and number lists")
    text = _WHITESPACE.sub(" ", text).strip()
    if len(text) > SIGNATURE_CHARS:
        text = text[:SIGNATURE_CHARS - 1].rstrip() + "…"
    return text


def op_family(op: str) -> str:
    """The family an op belongs to: its namespace (`fft.rfft` -> `fft`, `nn.functional.conv2d` ->
    `nn.functional`), or the op itself."""
    return op.rsplit(".", 1)[0] if "." in op else op


def test_function(test_id: str, device: str | None) -> str:
    """The test function of an id, without its parameters or the device and dtypes
    instantiate_device_type_tests appends (`TestFft::test_fft_openreg_float32` -> `test_fft`)."""
    name = test_id.rpartition("::")[2].partition("[")[0]
    if device:
        name = re.split(rf"_{re.escape(device)}(?:_|$)", name, maxsplit=1, flags=re.IGNORECASE)[0]
    return name.removesuffix("@cpu")


_MEMO_SIZE = 20_000
_memo: dict[tuple, Signature] = {}


def signature(result: TestResult, device: str | None = None) -> Signature:
    """The cause of one test that did not pass. A known failure's is asked for more than once in
    a run (whether to re-run it, then how to classify it, then to group it): it is computed once."""
    key = (result.id, result.outcome, result.message, result.op, device, "" if result.message else result.log_tail)
    found = _memo.get(key)
    if found is None:
        if len(_memo) >= _MEMO_SIZE:
            _memo.clear()
        found = _memo[key] = _signature(result, device)
    return found


def _signature(result: TestResult, device: str | None) -> Signature:
    WORK.signatures += 1
    masked: list[str] = []
    text, outcome = _innermost(result, masked)
    if outcome in (Outcome.crashed, Outcome.timeout):
        named = _ID_OP.search(result.id)
        op = result.op or (named.group(1) if named else None)
        # No op known: the function it died in, which an OpInfo test's id does not give apart from its op
        # (`test_fn_gradgrad_linalg_eigh_openreg_float64` died in `test_fn_gradgrad`), else the test's function.
        frame = _CRASH_FRAME.search(result.message or "")
        where = f"`{op_family(op) if op else frame.group(1) if frame else test_function(result.id, device)}`"
        if outcome is Outcome.timeout:
            return Signature(f"timeout in {where}", ("the time it ran",))
        WORK.patterns += 1
        found = _SIGNAL.search(result.message or "") or _SIGNAL.search(result.log_tail or "")
        what = found.group(0) if found else "crashed"
        return Signature(f"{what} in {where}", ("the crash's frame and exit details",))
    text = mask(text, device, masked)
    return Signature(text or f"{result.outcome.value} with no message", tuple(masked))


def cause_of(result: TestResult, device: str | None = None) -> str:
    """The cause's text of one test that did not pass (the relay orders its examples by it)."""
    return signature(result, device).text


def novelty_of(result: TestResult) -> str | None:
    """new, changed, known or upstream: which of a stage's cause tables the result belongs to;
    None for a result that has no cause (passed, skipped, flaky, fixed)."""
    if result.outcome in FAILING:
        return "changed" if result.message.startswith(CHANGED) else "new"
    if result.outcome is Outcome.xpassed:
        return "new"
    if result.outcome is Outcome.xfailed:
        return "known"
    if result.outcome is Outcome.upstream:
        return "upstream"
    return None


def was_of(result: TestResult) -> str | None:
    """A changed known failure's cause as its baseline listed it."""
    found = re.match(rf"{CHANGED} \(listed as `(.*?)`\); it ", result.message)
    return found.group(1) if found else None


@dataclass
class _Group:
    text: str
    novelty: str
    masked: dict[str, None]
    tests: list[str] = field(default_factory=list)
    count: int = 0
    ops: dict[str, None] = field(default_factory=dict)
    dtypes: dict[str, None] = field(default_factory=dict)
    was: str | None = None


def group(results: Iterable[TestResult], device: str | None = None) -> list[Cause]:
    """The causes of the results that did not pass, largest first within each novelty (new,
    changed, known, upstream in that order)."""
    groups: dict[tuple[str, str], _Group] = {}
    for result in results:
        novelty = novelty_of(result)
        if novelty is None:
            continue
        sig = signature(result, device)
        key = (novelty, sig.text)
        found = groups.get(key)
        if found is None:
            found = groups[key] = _Group(sig.text, novelty, {},
                                         was=was_of(result) if novelty == "changed" else None)
        found.masked.update(dict.fromkeys(sig.masked))
        found.count += 1
        if len(found.tests) < TESTS_KEPT:
            found.tests.append(result.id)
        if result.op:
            found.ops[result.op] = None
        if result.dtype:
            for dtype in result.dtype.split(","):
                found.dtypes[dtype] = None
    ordered = sorted(groups.values(), key=lambda g: (NOVELTY_ORDER.index(g.novelty), -g.count, g.text))
    return [Cause(text=g.text, novelty=g.novelty, count=g.count, tests=g.tests, ops=sorted(g.ops),
                  dtypes=sorted(g.dtypes), masked=list(g.masked), was=g.was) for g in ordered]


def merge(lists: Iterable[list[Cause]]) -> list[Cause]:
    """Several stages' causes as one list (the run's): the same cause in two stages is one, its
    counts added; ordered as `group` orders them."""
    merged: dict[tuple[str, str], Cause] = {}
    for causes in lists:
        for cause in causes:
            found = merged.get((cause.novelty, cause.text))
            if found is None:
                merged[(cause.novelty, cause.text)] = cause.model_copy(deep=True)
                continue
            found.count += cause.count
            found.tests = (found.tests + cause.tests)[:TESTS_KEPT]
            found.ops = sorted({*found.ops, *cause.ops})
            found.dtypes = sorted({*found.dtypes, *cause.dtypes})
    return sorted(merged.values(), key=lambda c: (NOVELTY_ORDER.index(c.novelty), -c.count, c.text))


def order_by_cause(results: Iterable[TestResult], device: str | None = None) -> list[TestResult]:
    """The failing results with one example of each cause first, largest cause first, then the
    rest in the same order: for a report that can show only the first few (the relay's
    failed_tests_detail)."""
    by_cause: dict[str, list[TestResult]] = {}
    for result in results:
        by_cause.setdefault(cause_of(result, device), []).append(result)
    ordered = sorted(by_cause.values(), key=len, reverse=True)
    return [tests[0] for tests in ordered] + [t for tests in ordered for t in tests[1:]]


def summary_line(causes: list[Cause], novelty: str = "new", shown: int = 3) -> str:
    """`56 new failures in 5 causes: 18 `...` (ops, dtypes); 14 `...`; ...`, largest first; '' when
    there are none of that novelty."""
    mine = [c for c in causes if c.novelty == novelty]
    if not mine:
        return ""
    total = sum(c.count for c in mine)
    label = {"new": "new failures", "changed": "known failures now failing differently",
             "known": "known failures", "upstream": "upstream failures"}[novelty]
    parts = [describe(c) for c in mine[:shown]]
    more = f"; and {len(mine) - shown} more" if len(mine) > shown else ""
    causes_word = "cause" if len(mine) == 1 else "causes"
    return f"{total} {label} in {len(mine)} {causes_word}: " + "; ".join(parts) + more


def describe(cause: Cause, listed: int = 3) -> str:
    """One cause in a line: its count, its text, and the first ops and dtypes it hit."""
    def few(items: list[str]) -> str:
        return ", ".join(items[:listed]) + (f" +{len(items) - listed}" if len(items) > listed else "")

    hit = "; ".join(part for part in (few(cause.ops), few(cause.dtypes)) if part)
    return f"{cause.count} `{cause.text}`" + (f" ({hit})" if hit else "")


def root_cause(causes: list[Cause]) -> RootCause | None:
    """A stage's root cause when its tests failed: its largest new cause (a changed known
    failure's when nothing else is new), naming one of its tests."""
    first = next((c for c in causes if c.novelty in ("new", "changed")), None)
    if first is None:
        return None
    example = first.tests[0] if first.tests else None
    share = f"{first.count} of {sum(c.count for c in causes if c.novelty == first.novelty)} {first.novelty} failures"
    summary = f"{first.text} ({share}, e.g. {example})" if example else f"{first.text} ({share})"
    return RootCause(kind="test", summary=summary[:500], culprit=example, hint=hint_for(first.text))


def attach(stage: StageResult, tests: Iterable[TestResult], device: str | None) -> None:
    """Group a suite stage's tests by cause into its record; a root cause that only named its
    first failing test becomes its largest new cause."""
    stage.causes = group(tests, device)
    if stage.root_cause is None or stage.root_cause.kind == "test":
        stage.root_cause = root_cause(stage.causes) or stage.root_cause
