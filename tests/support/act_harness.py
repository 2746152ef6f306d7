"""Run this repository's workflows with act, offline, in host mode.

act runs every job as a process on this machine (`-P ubuntu-latest=-self-hosted`).
It cannot download remote actions here: each pinned one is replaced, through
`--local-repository`, by a working stand-in (tests/support/act_stand_ins.py: artifacts,
Pages, the cache and setup-python, kept in $OOTCI_ACT_DIR), so the workflows run as they
are, with no branch for act. A remote action without a stand-in (PyPI's publish) fails if it
ever runs. act intercepts `actions/checkout` of the repository itself and copies the working
tree instead, which works offline. The data branch's remote is $OOTCI_ACT_DIR/data.git,
given to ootci as $OOTCI_DATA_REMOTE.

Two translations are needed, both in the copy that act runs (`as_act_reads`):
- the workflows reference their own actions and reusable workflows with GitHub's
  self-repository syntax (`uses: $/actions/setup`), which keeps them on the ootci revision a
  vendor's workflow called, and act does not know it yet. It is rewritten to what GitHub
  resolves it to: when ootci runs its own workflows, the workspace *is* this repository at
  this revision, so `$/` means `./`; when another repository calls
  `ootci/ootci/.github/workflows/backend.yml@<sha>`, `$/actions/setup` means
  `ootci/ootci/actions/setup@<sha>`, which act finds through `--local-repository
  ootci/ootci@<sha>=<the copy>` (see `as_called_from_elsewhere`);
- act's workflow schema predates GitHub's `cache-mode` and refuses the key, so it is left
  out. It is GitHub's cache service that enforces it, and the stand-in cache has no cache
  token to limit: what the act tests show about the cache is what holds without it;
- the same for a concurrency group's `queue: max`: act runs one workflow at a time, and nothing
  queues behind anything (tests/workflows/test_workflows.py checks the key, actionlint knows it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support import act_stand_ins

SELF_REFERENCE = re.compile(r"(\buses:\s*)\$/([^\s@#]+)")
CACHE_MODE = re.compile(r"^[ ]*cache-mode:[^\n]*\n", re.M)
QUEUE = re.compile(r"^[ ]*queue:[^\n]*\n", re.M)
OOTCI_REPOSITORY = "ootci/ootci"
REMOTE_ACTION = re.compile(r"\buses:\s*([\w.-]+/[\w.-]+)((?:/[\w.-]+)*)@([0-9a-f]{40})")
# act copies the working tree for a checkout of the repository itself, offline.
INTERCEPTED = {"actions/checkout"}
NO_STAND_IN = """\
name: no stand-in for {name}
description: Resolves act's offline pre-fetch of {name}, which no act test may run.
runs:
  using: composite
  steps:
    - shell: bash
      run: echo "::error::{name} has no stand-in under act (tests/support/act_stand_ins.py)"; exit 1
"""
ACT_TIMEOUT_S = 900
RUN_ID = 4711
"""the workflow run id of a run by hand (`main`)"""


def act_binary() -> str | None:
    beside = Path(sys.executable).parent / "act"
    return str(beside) if beside.is_file() else shutil.which("act")


def resolve_self_references(text: str, called_at: str | None = None) -> str:
    """`$/path` as GitHub resolves it: `./path` in ootci's own runs, `ootci/ootci/path@<sha>`
    in a run of another repository that called ootci at `called_at` (a commit SHA)."""
    if called_at is None:
        return SELF_REFERENCE.sub(r"\1./\2", text)
    return SELF_REFERENCE.sub(lambda m: f"{m.group(1)}{OOTCI_REPOSITORY}/{m.group(2)}@{called_at}", text)


def as_act_reads(text: str, called_at: str | None = None) -> str:
    """A workflow or action as act can run it: `$/` resolved, `cache-mode` and `queue` left out (module docstring)."""
    return QUEUE.sub("", CACHE_MODE.sub("", resolve_self_references(text, called_at)))


def copy_repository(repo: Path, dest: Path, called_at: str | None = None) -> Path:
    """The working tree (tracked and untracked files, not ignored ones) as a fresh git repository.
    called_at: the SHA another repository's workflow calls ootci at (None: ootci runs itself)."""
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            check=True, capture_output=True, text=True).stdout
    for name in filter(None, listed.split("\0")):
        source = repo / name
        if not source.is_file():  # deleted but not yet staged
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    for path in workflow_files(dest):
        path.write_text(as_act_reads(path.read_text(), called_at))
    git = ["git", "-C", str(dest), "-c", "user.name=ootci-test", "-c", "user.email=test@example.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "snapshot for act"], check=True)
    return dest


def workflow_files(root: Path) -> list[Path]:
    return sorted([*root.glob(".github/workflows/*.yml"), *root.glob("actions/*/action.yml"),
                   *root.glob("tests/workflows/*.yml")])


def remote_action_stand_ins(root: Path, stubs: Path, *, local: frozenset[str] = frozenset()) -> list[str]:
    """`--local-repository` mappings for every pinned remote action the workflows use.

    act fetches every action of a job before running it, even those whose `if:` is false:
    each one is replaced by its stand-in, or by an action that fails if it ever runs.
    """
    mappings = {}
    for path in workflow_files(root):
        for repo, subpath, sha in REMOTE_ACTION.findall(path.read_text()):
            if repo in INTERCEPTED or repo in local:
                continue
            stub = stubs / f"{repo.replace('/', '-')}-{sha[:12]}"
            action_dir = stub / subpath.lstrip("/")
            action_dir.mkdir(parents=True, exist_ok=True)
            action = act_stand_ins.stand_in(repo, subpath) or NO_STAND_IN.format(name=f"{repo}{subpath}")
            (action_dir / "action.yml").write_text(action)
            mappings[f"{repo}@{sha}"] = f"{repo}@{sha}={stub}"
    return sorted(mappings.values())


STAND_IN_PIP = "pip==25.3"
"""The pip of the stand-in for setup-python's interpreter. setup-python's come with a recent pip;
the venv module's own (ensurepip's: 23.2 for Python 3.11.7) weighs every file on every index
page against the whole list of tags, and each job's setup resolves ootci's dependencies with it:
7.5 against 6.2 s of CPU per job, measured."""


def prepare(repo: Path, root: Path) -> tuple[Path, dict[str, str]]:
    """A snapshot of `repo` under `root`, and the environment act passes to its jobs.

    A fresh venv put first on PATH stands in for setup-python: `setup` makes each job's venv
    for ootci with it, as it would with the toolcache Python on GitHub.
    """
    workdir = copy_repository(repo, root / "repo")
    python_home = root / "python"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(python_home)],
                   check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python_home / "bin" / "python"), "install", "--quiet",
                    "--disable-pip-version-check", STAND_IN_PIP], check=True)
    env = {
        "PATH": f"{python_home / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "OOTCI_CACHE": os.environ.get("OOTCI_CACHE", str(repo / ".cache" / "ootci")),
        # Every job's setup installs ootci into a venv of its own (about 45 jobs a test session);
        # pip's byte-compiling of each package is a sixth of that, and Python compiles what a job
        # imports anyway. ("0" is pip's spelling of "--no-compile" in the environment.)
        "PIP_NO_COMPILE": "0",
        # ... which holds only where Python may write byte-code, as on GitHub's runners. Some
        # containers set PYTHONDONTWRITEBYTECODE (this test machine's does): then a job's venv and a
        # torch layer installed in a job would never be compiled, and every `ootci` call would
        # compile ootci, pydantic and requests again (0.67 against 0.31 s of CPU), every
        # `import torch` of that layer torch again (3.3 against 1.5 s). Empty is Python's "unset".
        "PYTHONDONTWRITEBYTECODE": "",
        **{k: os.environ[k] for k in ("OOTCI_IMPORT_COST_RUNS",) if k in os.environ},
    }
    return workdir, env


def data_remote(act_dir: Path) -> Path:
    """$OOTCI_ACT_DIR/data.git, the bare repository that stands in for the data branch's remote
    under act ($OOTCI_DATA_REMOTE of every act run); made empty when missing."""
    data = act_dir / "data.git"
    if not data.exists():
        subprocess.run(["git", "init", "-q", "--bare", str(data)], check=True)
    return data


@dataclass
class ActResult:
    returncode: int
    output: str

    def job_lines(self, marker: str) -> list[str]:
        return [line for line in self.output.splitlines() if marker in line]


@dataclass
class CalledOotci:
    """A copy of ootci that another repository's workflow calls at `sha`."""

    root: Path
    sha: str

    @property
    def mapping(self) -> str:
        return f"{OOTCI_REPOSITORY}@{self.sha}={self.root}"


def as_called_from_elsewhere(repo: Path, dest: Path, sha: str) -> CalledOotci:
    return CalledOotci(copy_repository(repo, dest, called_at=sha), sha)


def run_act(workdir: Path, event: str, workflow: str, *, env: dict[str, str], inputs: dict[str, str],
            log: Path, stubs: Path, event_payload: Path | None = None, ootci: CalledOotci | None = None,
            labels: tuple[str, ...] = ("ubuntu-latest",), variables: dict[str, str] | None = None,
            secrets: dict[str, str] | None = None, on_line: Callable[[str], None] | None = None) -> ActResult:
    """ootci: the ootci copy a vendor repository (workdir) calls; labels: runner labels that
    run on this host; secrets: `secrets.KEY` (GITHUB_TOKEN is also `github.token`); on_line: told each
    line of act's output as it comes (what a job printed, while the run goes on: its annotations)."""
    argv = [act_binary() or "act", event, "-W", workflow,
            *[arg for label in labels for arg in ("-P", f"{label}=-self-hosted")],
            "--pull=false", "--action-offline-mode",
            # Host mode runs every job in this one environment, where GitHub gives each its own
            # runner: jobs at the same time (a matrix of shards) would install into one Python at once.
            "--concurrent-jobs", "1",
            # act probes for a Docker engine even in host mode; there is none here.
            "--container-daemon-socket", "-"]
    action_roots = [workdir] if ootci is None else [workdir, ootci.root]
    local = frozenset() if ootci is None else frozenset({OOTCI_REPOSITORY})
    for mapping in sorted({m for root in action_roots for m in remote_action_stand_ins(root, stubs, local=local)}):
        argv += ["--local-repository", mapping]
    if ootci is not None:
        argv += ["--local-repository", ootci.mapping]
    if event_payload is not None:
        argv += ["--eventpath", str(event_payload)]
    if "OOTCI_ACT_DIR" in env:
        env = {"OOTCI_DATA_REMOTE": str(data_remote(Path(env["OOTCI_ACT_DIR"]))), **env}
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    for key, value in inputs.items():
        argv += ["--input", f"{key}={value}"]
    for key, value in (variables or {}).items():  # repository variables: vars.KEY
        argv += ["--var", f"{key}={value}"]
    for key, value in (secrets or {}).items():
        argv += ["--secret", f"{key}={value}"]
    lines: list[str] = []
    killed = threading.Event()

    def kill(process: subprocess.Popen) -> None:
        killed.set()
        process.kill()

    with subprocess.Popen(argv, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={**os.environ, "NO_COLOR": "1"}) as process:
        timer = threading.Timer(ACT_TIMEOUT_S, kill, args=(process,))
        timer.start()
        try:
            for line in process.stdout or ():
                lines.append(line)
                if on_line is not None:
                    on_line(line)
        finally:
            timer.cancel()
            log.write_text("".join(lines))
        returncode = process.wait()
    if killed.is_set():
        raise subprocess.TimeoutExpired(argv, ACT_TIMEOUT_S, output="".join(lines))
    return ActResult(returncode, "".join(lines))


def main(argv: list[str] | None = None) -> int:
    """python -m tests.support.act_harness WORKFLOW [INPUT=VALUE...] [--dir DIR]"""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m tests.support.act_harness",
                                     description="Run one of this repository's workflows under act, offline.")
    parser.add_argument("workflow", help="e.g. .github/workflows/nightly.yml or tests/workflows/caller.yml")
    parser.add_argument("inputs", nargs="*", metavar="INPUT=VALUE", help="workflow_dispatch inputs")
    parser.add_argument("--dir", type=Path, help="where the snapshot and $OOTCI_ACT_DIR go (default: a new temp dir)")
    args = parser.parse_args(argv)
    root = args.dir or Path(tempfile.mkdtemp(prefix="ootci-act-"))
    root.mkdir(parents=True, exist_ok=True)
    repo = Path(__file__).resolve().parents[2]
    workdir, env = prepare(repo, root)
    out = root / "out"
    out.mkdir(exist_ok=True)
    inputs = dict(item.split("=", 1) for item in args.inputs)
    # GitHub's API for the run's own artifacts and annotations (the publish jobs read them: `ootci history
    # collect --run`), played by a local server that follows act, as in the tests.
    from pytest_httpserver import HTTPServer

    from tests.support.fake_github import REPOSITORY, TOKEN, FakeGitHub
    server = HTTPServer()
    server.start()
    try:
        github = FakeGitHub(server)
        result = run_act(workdir, "workflow_dispatch", args.workflow,
                         env={**env, "OOTCI_ACT_DIR": str(out), "GITHUB_RUN_ID": str(RUN_ID),
                              "GITHUB_API_URL": github.api_url, "GITHUB_REPOSITORY": REPOSITORY},
                         secrets={"GITHUB_TOKEN": TOKEN}, inputs=inputs, log=root / "act.log", stubs=root / "stubs",
                         on_line=github.follow_act(out, RUN_ID))
    finally:
        server.stop()
    print(result.output[-4000:])
    print(f"act exited {result.returncode}; full log {root / 'act.log'}; artifacts, history, site and the data "
          f"branch's remote (data.git) under {out}")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
