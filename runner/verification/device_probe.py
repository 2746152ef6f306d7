"""What an installed backend's device can do, asked of torch in the environment under test.

`ootci init` cannot read a device's name, capabilities or dtypes from a repository, so it
asks: the probe script runner/probes/capabilities.py runs in a fresh interpreter of the
environment under test (through verify.Runner: a time limit, the probes' result markers,
a stack dump before a hang is killed), does a plain `import torch` (autoload loads the
backend), finds the device and tries one small real operation per capability, and for each
dtype a round trip and a tensor made on the device. What it finds is what the device supports at
all (every dtype the torch has, complex and float8 included, as the probe lists them); which tests
fail in a claimed dtype or capability is for the suites to say (init records
them as known failures). A check that crashes or hangs the interpreter is a "no" naming the
signal or the time limit, and the probe goes on in a fresh interpreter without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ootci.runner.core import rootcause
from ootci.runner.manifests.manifest import Capability
from ootci.runner.models import RootCause
from ootci.runner.verification.verify import Runner

# Every dtype the torch under test has and a CPU tensor can hold (complex and float8 included) is
# asked of the device: the probe lists them itself (capabilities.py --dtypes all), so a torch with a
# new dtype is asked about it. A manifest claims those that survive a round trip and can be made on
# the device. They are listed in this order first, then the others in torch's.
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
          "complex64", "complex128", "complex32", "uint16", "uint32", "uint64")
ALL_DTYPES = "all"
MAX_DTYPES = 64
"""more than any torch has: bounds the probe's runs"""
PROBE_TIMEOUT = 120.0
DETAIL = 100  # characters of a finding that a manifest's comment keeps


@dataclass
class Finding:
    works: bool
    detail: str


@dataclass
class Probed:
    """What the capabilities probe found; `failure` says why it found less than it asked."""

    device: str | None = None
    how: str = ""
    capabilities: dict[str, Finding] = field(default_factory=dict)
    dtypes: dict[str, Finding] = field(default_factory=dict)
    failure: str | None = None
    fork: Finding | None = None
    """can a child forked after `import torch` use the device (Suites.crash_isolation = "fork")"""
    notes: list[str] = field(default_factory=list)
    """what the vendor should know that no field says"""


def clip(text: str, limit: int = DETAIL) -> str:
    """The first line of text, cut at a word before `limit` characters."""
    line = (text.strip().splitlines() or [""])[0]
    if len(line) <= limit:
        return line
    return line[:limit - 3].rsplit(" ", 1)[0].rstrip(" ,;:") + "..."


def _chain_detail(phase: dict) -> str:
    chain = phase.get("chain") or [{}]
    inner = chain[-1]
    text = f"{inner.get('type', 'Exception')}: {inner.get('message', '')}".strip().rstrip(":")
    return clip(text) if text else "failed"


def _finding(phase: dict) -> Finding:
    if phase.get("ok"):
        value = phase.get("value") or {}
        return Finding(bool(value.get("works")), clip(str(value.get("detail", ""))))
    return Finding(False, _chain_detail(phase))


def probe(python: Path, package: str, device: str | None, *, log: Path, timeout: float = PROBE_TIMEOUT) -> Probed:
    """Run the capabilities probe in the environment under test; a crash or a hang in one
    check marks that check and the probe goes on in a fresh interpreter without it."""
    runner = Runner(python=python, timeout=timeout, log=log)
    items = [f"capability:{c.value}" for c in Capability]
    listed = False  # the dtypes are known once the first run has listed those of its torch
    answers: dict[str, Finding] = {}
    found = Probed()
    for _ in range(len(items) + MAX_DTYPES + 1):  # every run answers at least one item, or the loop ends
        pending = [i for i in items if i not in answers]
        args = ["--package", package, "--capabilities", ",".join(_names(pending, "capability")),
                "--dtypes", ",".join(_names(pending, "dtype")) if listed else ALL_DTYPES]
        result = runner.probe("capabilities.py", *args, *(["--device", device] if device else []), autoload=True)
        if found.fork is None and "fork" in result.phases:
            found.fork = _finding(result.phases["fork"])
        if not _read_head(result, found):
            return found
        if not listed and "dtypes" in result.phases:
            listed = True
            items += [f"dtype:{d}" for d in _ordered(result.phases["dtypes"].get("value") or [])]
            pending = [i for i in items if i not in answers]
        for item in pending:
            if item in result.phases:
                answers[item] = _finding(result.phases[item])
            elif f"start:{item}" in result.phases:
                cause = rootcause.from_proc(result.proc, what=f"the {item.replace(':', ' ')} check")
                answers[item] = Finding(False, clip(cause.summary) if cause else "the probe stopped here")
        if "done" in result.phases or all(i in answers for i in items):
            break
        if not any(i in answers for i in pending):
            cause = rootcause.from_proc(result.proc, what="the capabilities probe")
            found.failure = f"the probe stopped before it answered: {cause.summary if cause else 'no output'}"
            break
    if not answers:
        return found
    for item in items:
        kind, name = item.split(":", 1)
        finding = answers.get(item, Finding(False, "not probed"))
        (found.capabilities if kind == "capability" else found.dtypes)[name] = finding
    return found


def _ordered(names: list) -> list[str]:
    """The torch's dtypes, the usual ones first (DTYPES), then the others in torch's order."""
    names = [str(n) for n in names][:MAX_DTYPES]
    return [d for d in DTYPES if d in names] + [d for d in names if d not in DTYPES]


def _names(items: list[str], kind: str) -> list[str]:
    return [i.split(":", 1)[1] for i in items if i.startswith(kind + ":")]


def _read_head(result, found: Probed) -> bool:
    """The import, device and tensor phases; False (with found.failure) when the probe cannot go on."""
    phases = result.phases
    imported = phases.get("import")
    if imported is None or not imported.get("ok"):
        cause: RootCause | None
        if imported is not None:
            cause = rootcause.from_chain(imported.get("chain") or [{}], what="import torch")
        else:
            cause = rootcause.from_proc(result.proc, what="import torch")
        found.failure = f"a plain `import torch` failed: {cause.summary if cause else 'no output'}"
        return False
    located = phases.get("device")
    if located is None or not located.get("ok"):
        found.failure = f"asking torch for the device failed: {_chain_detail(located or {})}"
        return False
    value = located.get("value") or {}
    found.device, found.how = value.get("device"), value.get("how", "")
    renamed = value.get("privateuse1")
    note = f"the backend named PrivateUse1 {renamed!r}, not {found.device!r} (--device)"
    if found.device and renamed not in (None, "privateuseone", found.device) and note not in found.notes:
        found.notes.append(note)
    if not found.device:
        found.failure = ("`import torch` registered no device: torch._C._get_privateuse1_backend_name() is still "
                         "'privateuseone' and no torch.<device> module belongs to the backend")
        return False
    basic = phases.get("tensor")
    if basic is None or not basic.get("ok"):
        why = _chain_detail(basic) if basic else (rootcause.from_proc(result.proc, what="a first tensor") or
                                                  RootCause(kind="error", summary="no answer")).summary
        found.failure = f"a tensor cannot be copied to device {found.device!r} ({found.how}): {why}"
        return False
    return True
