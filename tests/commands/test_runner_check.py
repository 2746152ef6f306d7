"""`ootci runner-check`: a PR run on a self-hosted runner that is not ephemeral, or that reaches the
Docker socket, is refused in one line before any PR code runs (issue 54), unless the caller accepts it.

The runner's directory (its `.runner` settings above `$RUNNER_TEMP`) and the Docker socket (a real
unix socket) are made in a temporary directory; `ootci` runs as the real console script.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.support.cli import ootci


def runner_dir(tmp_path: Path, settings: dict | None) -> Path:
    """A self-hosted runner's directory as config.sh leaves it; returns its $RUNNER_TEMP."""
    root = tmp_path / "actions-runner"
    temp = root / "_work" / "_temp"
    temp.mkdir(parents=True)
    if settings is not None:
        (root / ".runner").write_text(json.dumps({"agentId": 7, "agentName": "npu-3", "workFolder": "_work",
                                                  **settings}))
    return temp


@pytest.fixture
def docker_socket(tmp_path):
    path = tmp_path / "docker.sock"
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(path))
    yield path
    listening.close()


def check(temp: Path, socket_path: Path, *extra: str, trust: str = "pr", environment: str = "self-hosted",
          **env: str):
    return ootci("runner-check", "--docker-socket", str(socket_path), *extra,
                 env={"OOTCI_TRUST": trust, "RUNNER_ENVIRONMENT": environment, "RUNNER_TEMP": str(temp),
                      "RUNNER_NAME": "npu-3", "DOCKER_HOST": "", "OOTCI_EPHEMERAL_RUNNER": "", **env})


def test_a_pr_run_on_a_persistent_runner_is_refused_in_one_line(tmp_path):
    temp = runner_dir(tmp_path, {})
    refused = check(temp, tmp_path / "no-socket")
    assert refused.returncode == 7 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1
    assert refused.stderr.startswith("ootci: a PR run on self-hosted runner npu-3 is refused: it is not ephemeral "
                                     "(no .runner above $RUNNER_TEMP says \"ephemeral\": true")
    assert "set the input allow-pr-on-shared-runner" in refused.stderr


def test_a_pr_run_on_an_ephemeral_runner_goes_on_unless_it_reaches_the_docker_socket(tmp_path, docker_socket):
    temp = runner_dir(tmp_path, {"ephemeral": True})
    fine = check(temp, tmp_path / "no-socket")
    assert fine.returncode == 0, fine.stderr
    assert fine.stdout.strip() == "ootci: runner check: an ephemeral runner without a Docker socket"
    reaching = check(temp, docker_socket)
    assert reaching.returncode == 7
    assert f"is refused: {docker_socket} is reachable, so a job can mount the trusted cache volume" in reaching.stderr
    by_host = check(temp, tmp_path / "no-socket", DOCKER_HOST="tcp://docker:2375")
    assert by_host.returncode == 7 and "$DOCKER_HOST (tcp://docker:2375) is set" in by_host.stderr


def test_a_runner_that_says_it_is_ephemeral_in_its_environment_counts_as_one(tmp_path):
    """A container job does not see the runner's directory; a just-in-time runner's machine says so itself."""
    temp = runner_dir(tmp_path, None)
    assert check(temp, tmp_path / "no-socket").returncode == 7
    assert check(temp, tmp_path / "no-socket", OOTCI_EPHEMERAL_RUNNER="true").returncode == 0


def test_the_caller_can_accept_the_risk_by_the_input_named_for_it(tmp_path, docker_socket):
    temp = runner_dir(tmp_path, {"ephemeral": False})
    allowed = check(temp, docker_socket, "--allow-pr-on-shared-runner")
    assert allowed.returncode == 0, allowed.stderr
    [line] = allowed.stdout.splitlines()
    assert line.startswith("::warning::a PR run on self-hosted runner npu-3 goes on, as the caller allows "
                           "(allow-pr-on-shared-runner), though it is not ephemeral")
    assert f"{docker_socket} is reachable" in line


@pytest.mark.parametrize("trust, environment", [("trusted", "self-hosted"), ("pr", "github-hosted"), ("", "")])
def test_a_trusted_run_or_a_hosted_runner_has_nothing_to_check(tmp_path, docker_socket, trust, environment):
    temp = runner_dir(tmp_path, {})
    done = check(temp, docker_socket, trust=trust, environment=environment)
    assert done.returncode == 0 and "nothing to check" in done.stdout
