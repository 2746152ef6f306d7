"""Whether the self-hosted runner a PR run is on keeps PR code away from what trusted runs use.

ootci names the cache roots of PR runs and trusted runs apart (`~/.cache/ootci-pr`, the volume
`ootci-cache-pr`), but names do not keep code apart. On a runner that is not ephemeral, PR code
runs as the same user as the nightly after it, on the same disk: it can rewrite the runner's
`_work/_actions`, the tool cache, `~/.cache/ootci`. A job that reaches the Docker socket can
`docker run -v ootci-cache:/x` and write the trusted volume, whatever volume its own container got.
So a PR run on such a runner is refused, in one line at the start of the job, unless the vendor
has said that it accepts the risk (backend.yml's input `allow-pr-on-shared-runner`).

What counts as ephemeral: the runner's own configuration (`.runner`, written by `config.sh
--ephemeral` in the runner's directory, which holds the work folder and so `$RUNNER_TEMP`) says
so, or the machine says so by `OOTCI_EPHEMERAL_RUNNER=true` in the job's environment (a vendor's
just-in-time runners, or a container job, where the runner's directory is not visible).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

DOCKER_SOCKET = Path("/var/run/docker.sock")
EPHEMERAL_ENV = "OOTCI_EPHEMERAL_RUNNER"
RUNNER_SETTINGS = ".runner"
ALLOW_INPUT = "allow-pr-on-shared-runner"
"""backend.yml's and build-torch.yml's input (and pr.yml's) by which a vendor accepts the risk"""


@dataclass(frozen=True)
class RunnerCheck:
    checked: bool
    """False: nothing to check (a trusted run, or a GitHub-hosted runner: a fresh machine per job)"""
    reasons: tuple[str, ...] = ()

    @property
    def safe(self) -> bool:
        return not self.reasons


def _settings_say_ephemeral(start: Path) -> Path | None:
    """The `.runner` above `start` that says the runner is ephemeral, or None."""
    for directory in [start, *start.parents]:
        settings = directory / RUNNER_SETTINGS
        if settings.is_file():
            try:
                data = json.loads(settings.read_text(encoding="utf-8-sig"))
            except (OSError, ValueError):
                return None
            said = {str(k).lower(): v for k, v in data.items()} if isinstance(data, dict) else {}
            return settings if said.get("ephemeral") is True else None
    return None


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.stat().st_mode)
    except OSError:
        return False


def check(env: dict[str, str] | None = None, docker_socket: Path = DOCKER_SOCKET) -> RunnerCheck:
    """What makes this runner unsafe for the PR run in it (none: safe, or nothing to check)."""
    env = dict(os.environ if env is None else env)
    if env.get("OOTCI_TRUST") != "pr" or env.get("RUNNER_ENVIRONMENT") != "self-hosted":
        return RunnerCheck(checked=False)
    reasons = []
    temp = env.get("RUNNER_TEMP")
    declared = env.get(EPHEMERAL_ENV, "").strip().lower() == "true"
    if not declared and not (temp and _settings_say_ephemeral(Path(temp))):
        reasons.append(f"it is not ephemeral (no {RUNNER_SETTINGS} above $RUNNER_TEMP says \"ephemeral\": true, "
                       f"and {EPHEMERAL_ENV} is not true), so the trusted runs after it share its user and disk")
    if _is_socket(docker_socket):
        reasons.append(f"{docker_socket} is reachable, so a job can mount the trusted cache volume ootci-cache")
    elif env.get("DOCKER_HOST"):
        reasons.append(f"$DOCKER_HOST ({env['DOCKER_HOST'][:60]}) is set, so a job can mount the trusted cache "
                       "volume ootci-cache")
    return RunnerCheck(checked=True, reasons=tuple(reasons))


def refusal(result: RunnerCheck, runner_name: str, *, allowed: bool = False) -> str:
    """The one line that says why, and what to do (allowed: that the caller accepted it)."""
    where = f"a PR run on self-hosted runner {runner_name or '(unnamed)'}"
    why = "; and ".join(result.reasons)
    if allowed:
        return (f"{where} goes on, as the caller allows ({ALLOW_INPUT}), though {why}: the PR's code can reach "
                "what the trusted runs use")
    return (f"{where} is refused: {why}. Run the PR path on ephemeral runners without a Docker socket, or set the "
            f"input {ALLOW_INPUT} to accept that the PR's code can reach what the trusted runs use "
            "(docs/workflows.md, \"Self-hosted runners and PR code\")")
