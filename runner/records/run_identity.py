"""What names a run: its id (the directory of its record) and the CI run it belongs to.

The pipeline names every run with these, and so does `ootci history fill-missing` for the
record of a backend job that never ran.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
from collections.abc import Mapping


def new_run_id(backend: str, started: dt.datetime) -> str:
    return f"{backend}-{started:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def ci_run_url(env: Mapping[str, str] = os.environ) -> str | None:
    """The GitHub Actions run this process belongs to (where its artifacts are), or None outside one."""
    server, repository, run = (env.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    if not (server and repository and run and run.isdigit()):
        return None
    return f"{server}/{repository}/actions/runs/{run}"
