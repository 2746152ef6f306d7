"""The `--torch SPEC` grammar: which torch a run tests against.

    installed        the torch already in the environment under test (needs --python)
    2.13.0           a released (or pinned dev/local) version, installed with pip
    PATH.whl         a torch wheel on disk
    https://….whl    a torch wheel to download
    nightly          the newest nightly build for this Python and platform
    git:REF          a source build of a branch, tag or commit of pytorch/pytorch
    pr:N             a source build of pull request N

`parse` only reads the text (and checks that a wheel path exists); resolving and
acquiring is `runner.torch_supply.torch_acquire`'s job.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ootci.runner.core.errors import TorchSpecError, TorchWheelNotFound

KEYWORDS = ("installed", "nightly")
EXPECTED = "expected installed, nightly, a version like 2.13.0, a wheel path or URL, git:REF or pr:N"

# A git ref or commit as a user would type it. A leading '-' is refused so the value
# can never be read as an option by git.
_GIT_REF = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./+@-]*$")
# Things people type when they mean pr:N ("pr123", "PR#123", "pull/123").
_PR_LIKE = re.compile(r"^(?:pr|pull)[\s#:/=-]*(\d+)$", re.IGNORECASE)


@dataclass(frozen=True)
class TorchSpec:
    kind: str
    value: str
    raw: str

    @property
    def path(self) -> Path:
        """The wheel file of a `wheel` spec."""
        return Path(self.value)

    def __str__(self) -> str:
        return self.raw


def parse(raw: str) -> TorchSpec:
    text = (raw or "").strip()
    if not text:
        raise TorchSpecError(f"empty torch spec: {EXPECTED}")
    lowered = text.lower()
    if lowered in KEYWORDS:
        return TorchSpec(lowered, lowered, text)
    if lowered.startswith("git:"):
        return _git(text, text[4:].strip())
    if lowered.startswith("pr:"):
        return _pull_request(text, text[3:].strip())
    if lowered.startswith(("http://", "https://")):
        return _url(text)
    if lowered.endswith(".whl"):
        return _wheel_path(text)
    try:
        Version(text)
    except InvalidVersion:
        raise TorchSpecError(_unknown(text)) from None
    return TorchSpec("version", text, text)


def _git(raw: str, ref: str) -> TorchSpec:
    if not ref:
        raise TorchSpecError(f"torch spec '{raw}' names no git ref: write git:main, git:v2.13.0 or git:<commit>")
    if not _GIT_REF.match(ref) or ".." in ref or ref.endswith((".", "/", ".lock")):
        raise TorchSpecError(f"torch spec '{raw}': '{ref}' is not a valid git branch, tag or commit")
    return TorchSpec("git", ref, raw)


def _pull_request(raw: str, number: str) -> TorchSpec:
    number = number.lstrip("#")
    if not number.isdigit() or int(number) <= 0:
        raise TorchSpecError(f"torch spec '{raw}': pull request number must be a positive integer, like pr:12345")
    return TorchSpec("pr", str(int(number)), raw)


def _url(raw: str) -> TorchSpec:
    parts = urlsplit(raw)
    if not parts.netloc:
        raise TorchSpecError(f"torch spec '{raw}': URL has no host")
    filename = parts.path.rsplit("/", 1)[-1]
    if not filename.lower().endswith(".whl"):
        raise TorchSpecError(f"torch spec '{raw}': a URL must point at a .whl file")
    return TorchSpec("url", raw, raw)


def _wheel_path(raw: str) -> TorchSpec:
    path = Path(raw).expanduser()
    if not path.is_file():
        raise TorchWheelNotFound(f"torch wheel not found: {path}")
    check_torch_wheel_name(path.name, what=str(path))
    return TorchSpec("wheel", str(path.resolve()), raw)


def check_torch_wheel_name(filename: str, *, what: str) -> None:
    try:
        name, _, _, _ = parse_wheel_filename(_unquote_plus_sign(filename))
    except InvalidWheelFilename as exc:
        raise TorchSpecError(f"{what}: not a valid wheel file name ({exc})") from None
    if canonicalize_name(name) != "torch":
        raise TorchSpecError(f"{what}: a wheel of '{name}', not of torch")


def _unquote_plus_sign(filename: str) -> str:
    # Wheel URLs often carry the local-version '+' percent-encoded.
    return filename.replace("%2B", "+").replace("%2b", "+")


def _unknown(text: str) -> str:
    message = f"unknown torch spec '{text}': {EXPECTED}"
    pr = _PR_LIKE.match(text)
    if pr:
        return f"{message} (did you mean pr:{int(pr.group(1))}?)"
    close = difflib.get_close_matches(text.lower(), KEYWORDS, n=1, cutoff=0.6)
    if close:
        return f"{message} (did you mean {close[0]}?)"
    return message
