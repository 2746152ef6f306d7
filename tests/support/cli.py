"""Run the real `ootci` console script of the orchestrator venv."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

OOTCI = Path(sys.executable).with_name("ootci")


def ootci(*args: str, env: dict[str, str] | None = None, timeout: float = 900,
          cwd: Path | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.pop("GITHUB_ACTIONS", None)
    full_env.pop("GITHUB_STEP_SUMMARY", None)
    full_env.update(env or {})
    return subprocess.run([str(OOTCI), *args], capture_output=True, text=True, env=full_env,
                          timeout=timeout, cwd=cwd)
