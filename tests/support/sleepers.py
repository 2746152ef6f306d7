"""Processes a test starts on purpose and must find gone: a `sleep` nobody else on the machine runs."""

from __future__ import annotations

import secrets
import subprocess


def unique_sleep() -> str:
    """`sleep N` with an N no other process on the machine uses, so pgrep finds only this test's."""
    return f"sleep {secrets.randbelow(10**6) + 10**6}"


def running(command_line: str) -> list[str]:
    """The pids of the processes whose command line contains `command_line`."""
    return subprocess.run(["pgrep", "-f", command_line], capture_output=True, text=True).stdout.split()
