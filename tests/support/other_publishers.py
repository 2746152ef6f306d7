"""Another publisher on the data branch: a commit that lands on the tip right after the next push,
between a publisher's push and its pull of the tip (a hook on the bare repository standing in
for the data branch's remote)."""

from __future__ import annotations

import sys
from pathlib import Path

ANOTHER_PUBLISHER_HOOK = """\
#!{python}
# post-receive: right after the first push this hook sees, another publisher's records land on the tip.
import os, pathlib, subprocess
done = pathlib.Path("another-publisher-pushed")
if not done.exists():
    done.touch()
    env = {{**os.environ, "GIT_INDEX_FILE": os.path.abspath("another-publisher-index"),
            "GIT_AUTHOR_NAME": "another publisher", "GIT_AUTHOR_EMAIL": "other@example.invalid",
            "GIT_COMMITTER_NAME": "another publisher", "GIT_COMMITTER_EMAIL": "other@example.invalid"}}
    def git(*args):
        return subprocess.run(["git", *args], env=env, check=True, capture_output=True, text=True).stdout.strip()
    git("read-tree", "refs/heads/ootci-data")
    files = pathlib.Path({files!r})
    for path in sorted(p for p in files.rglob("*") if p.is_file()):
        blob = git("hash-object", "-w", str(path))
        git("update-index", "--add", "--cacheinfo", f"100644,{{blob}},{{path.relative_to(files).as_posix()}}")
    commit = git("commit-tree", git("write-tree"), "-p", "refs/heads/ootci-data", "-m", "another publisher")
    git("update-ref", "refs/heads/ootci-data", commit)
"""


def push_after_the_next_push(data: Path, files: Path) -> None:
    """Another publisher's commit (files, laid out as on the data branch) lands on the tip right
    after the next push to `data`: between a publisher's push and the pull of the tip it builds from."""
    hook = data / "hooks" / "post-receive"
    hook.write_text(ANOTHER_PUBLISHER_HOOK.format(python=sys.executable, files=str(files)))
    hook.chmod(0o755)
