"""Working stand-ins for the remote actions the workflows use, for act runs offline.

act cannot download `actions/upload-artifact` and the others here, so the act harness maps each
pinned remote action (`--local-repository owner/repo@sha=DIR`) to a composite action that runs
this module with the action's inputs. Each keeps the service's contract as the workflows rely on
it, in $OOTCI_ACT_DIR:

- artifacts (`artifacts/<name>/`, and `artifact-digest`, the SHA-256 of the zip `zip_of` makes of them, as
  GitHub's API lists it): a name is taken once per run, or the upload fails (409), unless
  `overwrite`; hidden files stay out unless `include-hidden-files`; a download without a token and
  a run id sees only what this attempt uploaded; `pattern` is a glob with `{a,b}` alternatives, and
  each match goes to `path/<name>/` unless `merge-multiple`;
- Pages (`upload-pages-artifact` tars the site into an artifact, hidden files left out unless
  `include-hidden-files`, as v5 does; `deploy-pages` unpacks the named artifact, of any attempt, into
  `site/`, the deployed site);
- the cache keeps keys, not contents (`cache/<key>.json`: the paths, files and bytes saved), and a key
  is saved once; a lookup (`lookup-only`) finds a saved key, a restore finds none, but for an entry a
  test planted with contents (`plant`: what a PR's code could have saved), which it really restores;
  every restore and lookup is logged in `cache/requests.jsonl`, for the tests to read who asked for what;
- setup-python: the Python first on PATH stands in for the toolcache's.

So the workflows run under act exactly as on GitHub, with no `env.ACT` branch for these services.
Runs with the standard library only (it runs in whatever Python a job has on PATH).
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

SCRIPT = Path(__file__).resolve()


# -- the action.yml files ------------------------------------------------------------------

def _action(name: str, kind: str, inputs: dict[str, str], outputs: tuple[str, ...]) -> str:
    lines = [f"name: stand-in for {name}",
             f"description: {name} as act runs it offline (tests/support/act_stand_ins.py).",
             "inputs:"]
    for key, default in inputs.items():
        lines += [f"  {key}:", f"    default: {json.dumps(default)}"]
    if outputs:
        lines.append("outputs:")
        for key in outputs:
            lines += [f"  {key}:", f"    value: ${{{{ steps.stand-in.outputs.{key} }}}}"]
    lines += ["runs:", "  using: composite", "  steps:", "    - id: stand-in", "      shell: bash", "      env:"]
    for key in inputs:
        lines.append(f"        INPUT_{key.upper().replace('-', '_')}: ${{{{ inputs.{key} }}}}")
    lines.append(f"      run: python3 {json.dumps(str(SCRIPT))} {kind}")
    return "\n".join(lines) + "\n"


STAND_INS = {
    # "owner/repo/subpath" -> the action.yml act runs in its place
    "actions/setup-python": _action("actions/setup-python", "setup-python", {"python-version": ""},
                                    ("python-version", "python-path")),
    "actions/upload-artifact": _action(
        "actions/upload-artifact", "upload-artifact",
        {"name": "artifact", "path": "", "if-no-files-found": "warn", "retention-days": "0",
         "overwrite": "false", "include-hidden-files": "false", "compression-level": "6"},
        ("artifact-id", "artifact-url", "artifact-digest")),
    "actions/download-artifact": _action(
        "actions/download-artifact", "download-artifact",
        {"name": "", "pattern": "", "path": "", "merge-multiple": "false", "github-token": "", "run-id": "",
         "repository": ""},
        ("download-path",)),
    "actions/cache/restore": _action(
        "actions/cache/restore", "cache-restore",
        {"path": "", "key": "", "restore-keys": "", "fail-on-cache-miss": "false", "lookup-only": "false"},
        ("cache-hit", "cache-primary-key", "cache-matched-key")),
    "actions/cache/save": _action("actions/cache/save", "cache-save", {"path": "", "key": ""}, ()),
    "actions/upload-pages-artifact": _action(
        "actions/upload-pages-artifact", "upload-pages-artifact",
        {"path": "_site/", "name": "github-pages", "retention-days": "1", "include-hidden-files": "false"},
        ("artifact_id",)),
    "actions/deploy-pages": _action("actions/deploy-pages", "deploy-pages",
                                    {"artifact_name": "github-pages", "token": ""}, ("page_url",)),
}


def stand_in(repo: str, subpath: str) -> str | None:
    """The stand-in action.yml for `uses: repo/subpath@...`, or None when there is none."""
    return STAND_INS.get(repo + subpath)


# -- what the actions do -------------------------------------------------------------------

class Refused(Exception):
    """The service says no: the step fails with this message, as on GitHub."""


def _input(name: str) -> str:
    return os.environ.get(f"INPUT_{name.upper().replace('-', '_')}", "").strip()


def _flag(name: str) -> bool:
    return _input(name).lower() == "true"


def _lines(name: str) -> list[str]:
    return [line.strip() for line in _input(name).splitlines() if line.strip()]


def _output(**values: str) -> None:
    with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
        for key, value in values.items():
            out.write(f"{key}={value}\n")


def _state_dir() -> Path:
    root = os.environ.get("OOTCI_ACT_DIR")
    if not root:
        raise Refused("OOTCI_ACT_DIR is not set: the act harness keeps artifacts, Pages and the cache there")
    return Path(root)


def _workspace_path(text: str) -> Path:
    path = Path(os.path.expanduser(text))
    return path if path.is_absolute() else Path(os.environ.get("GITHUB_WORKSPACE", os.getcwd())) / path


def _attempt() -> int:
    return int(os.environ.get("GITHUB_RUN_ATTEMPT") or 1)


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def _search_root(pattern: str) -> Path:
    """The directory a pattern's files are stored relative to: the pattern itself when it is a
    directory, else the deepest directory above its first wildcard."""
    path = _workspace_path(pattern)
    if path.is_dir():
        return path
    text = str(path)
    wild = min((i for i in (text.find(c) for c in "*?[{") if i >= 0), default=-1)
    if wild < 0:
        return path.parent
    return Path(text[:wild]).parent if not text[:wild].endswith("/") else Path(text[:wild])


def _upload_files(patterns: list[str], include_hidden: bool) -> tuple[Path | None, list[Path]]:
    found: set[Path] = set()
    for pattern in patterns:
        for match in glob.glob(str(_workspace_path(pattern)), recursive=True):
            path = Path(match)
            found.update(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else found.add(path)
    if not found:
        return None, []
    roots = [_search_root(p) for p in patterns]
    root = Path(os.path.commonpath([str(r) for r in roots]))
    files = sorted(p for p in found if include_hidden or not _hidden(p.relative_to(root)))
    return root, files


def _store(name: str, root: Path, files: list[Path], overwrite: bool) -> Path:
    state = _state_dir()
    target, meta = state / "artifacts" / name, state / ".artifacts" / f"{name}.json"
    if target.exists() and not overwrite:
        raise Refused(f"Failed to CreateArtifact: (409) Conflict: an artifact with this name already exists on "
                      f"the workflow run: {name}")
    shutil.rmtree(target, ignore_errors=True)
    for path in files:
        dest = target / path.relative_to(root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    target.mkdir(parents=True, exist_ok=True)
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps({"name": name, "attempt": _attempt(), "files": len(files)}))
    return target


def upload_artifact() -> None:
    name, patterns = _input("name") or "artifact", _lines("path")
    if not patterns:
        raise Refused("Input required and not supplied: path")
    root, files = _upload_files(patterns, _flag("include-hidden-files"))
    if not files:
        message = f"No files were found with the provided path: {' '.join(patterns)}. No artifacts will be uploaded."
        behaviour = _input("if-no-files-found") or "warn"
        if behaviour == "error":
            raise Refused(message)
        if behaviour == "warn":
            print(f"::warning::{message}")
        return
    stored = _store(name, root, files, _flag("overwrite"))
    print(f"Artifact {name} has been successfully uploaded ({len(files)} files)")
    _output(**{"artifact-id": name, "artifact-url": f"file://{stored}", "artifact-digest": digest_of(stored)})


def zip_of(directory: Path) -> bytes:
    """The artifact's zip as GitHub would serve it: the same bytes for the same files, every time (names
    sorted, one fixed date), so that the digest the upload reports is the digest of what a download gets."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            info = zipfile.ZipInfo(path.relative_to(directory).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
            archive.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


def digest_of(directory: Path) -> str:
    """`sha256:<hex>` of the artifact's zip, as upload-artifact outputs it and the API lists it."""
    return "sha256:" + hashlib.sha256(zip_of(directory)).hexdigest()


def _braces(pattern: str) -> list[str]:
    """`a-{x,y}-b` as ['a-x-b', 'a-y-b'] (minimatch's brace expansion, which fnmatch lacks)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[:match.start()], pattern[match.end():]
    return [expanded for option in match.group(1).split(",") for expanded in _braces(head + option + tail)]


def _visible_artifacts() -> dict[str, Path]:
    """Name -> directory: every attempt's with a token and a run id, else this attempt's own."""
    state = _state_dir()
    every_attempt = bool(_input("github-token") and _input("run-id"))
    found = {}
    for meta in sorted((state / ".artifacts").glob("*.json")):
        described = json.loads(meta.read_text())
        if every_attempt or described["attempt"] == _attempt():
            found[described["name"]] = state / "artifacts" / described["name"]
    return found


def download_artifact() -> None:
    visible = _visible_artifacts()
    target = _workspace_path(_input("path") or ".")
    if _input("name"):
        if _input("name") not in visible:
            raise Refused(f"Unable to download artifact(s): Artifact not found for name: {_input('name')}")
        chosen, into_own_directory = {_input("name"): visible[_input("name")]}, False
    else:
        patterns = _braces(_input("pattern")) if _input("pattern") else ["*"]
        chosen = {name: path for name, path in visible.items()
                  if any(fnmatch.fnmatchcase(name, p) for p in patterns)}
        into_own_directory = not _flag("merge-multiple")
    for name, source in chosen.items():
        shutil.copytree(source, target / name if into_own_directory else target, dirs_exist_ok=True)
    print(f"Total of {len(chosen)} artifact(s) downloaded: {', '.join(chosen) or 'none matched'}")
    _output(**{"download-path": str(target)})


def _cache_entry(key: str, state: Path | None = None) -> Path:
    return (state or _state_dir()) / "cache" / (re.sub(r"[^A-Za-z0-9._-]", "_", key)[:200] + ".json")


def plant(state: Path, key: str, path: Path, files: dict[str, bytes]) -> None:
    """An entry saved under `key` for `path` with `files` (relative name -> bytes), as a PR's code can
    save one with its job's cache token: the one kind of entry a restore here extracts."""
    entry = _cache_entry(key, state)
    entry.parent.mkdir(parents=True, exist_ok=True)
    archive = entry.with_suffix(".tar")
    with tarfile.open(archive, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    entry.write_text(json.dumps({"key": key, "paths": [str(path)], "files": len(files),
                                 "bytes": sum(map(len, files.values())), "archive": str(archive)}))


def _matching_entry(key: str, restore_keys: list[str]) -> dict | None:
    """The entry GitHub would find: the exact key, else the newest whose key starts with a restore key."""
    entries = [json.loads(p.read_text()) for p in sorted((_state_dir() / "cache").glob("*.json"))]
    exact = [e for e in entries if e["key"] == key]
    if exact:
        return exact[0]
    for prefix in restore_keys:
        matched = [e for e in entries if e["key"].startswith(prefix)]
        if matched:
            return matched[-1]
    return None


def cache_restore() -> None:
    key = _input("key")
    if not key:
        raise Refused("Input required and not supplied: key")
    lookup = _flag("lookup-only")
    requests = _state_dir() / "cache" / "requests.jsonl"
    requests.parent.mkdir(parents=True, exist_ok=True)
    with requests.open("a") as log:
        log.write(json.dumps({"key": key, "restore-keys": _lines("restore-keys"), "lookup-only": lookup,
                              "path": _input("path"), "job": os.environ.get("GITHUB_JOB", ""),
                              "attempt": _attempt()}) + "\n")
    entry = _matching_entry(key, _lines("restore-keys"))
    if entry is not None and (lookup or "archive" in entry):
        if not lookup:
            target = _workspace_path(_input("path"))
            target.mkdir(parents=True, exist_ok=True)
            with tarfile.open(entry["archive"]) as tar:
                tar.extractall(target, filter="data")
        print(f"Cache {'found' if lookup else 'restored'} from key: {entry['key']}")
        _output(**{"cache-hit": str(entry["key"] == key).lower(), "cache-primary-key": key,
                   "cache-matched-key": entry["key"]})
        return
    if _flag("fail-on-cache-miss"):
        raise Refused(f"Failed to restore cache entry. Exiting as fail-on-cache-miss is set. Input key: {key}")
    print(f"Cache not found for input keys: {', '.join([key, *_lines('restore-keys')])}")
    _output(**{"cache-primary-key": key})


def cache_save() -> None:
    key, paths = _input("key"), [_workspace_path(p) for p in _lines("path")]
    if not key:
        raise Refused("Input required and not supplied: key")
    files = [f for p in paths for f in ([p] if p.is_file() else p.rglob("*") if p.is_dir() else []) if f.is_file()]
    if not files:
        print("::warning::Path Validation Error: Path(s) specified in the action for caching do(es) not exist, "
              "hence no cache is being saved.")
        return
    entry = _cache_entry(key)
    if entry.exists():
        print(f"::warning::Failed to save: Unable to reserve cache with key {key}, another job may be creating "
              "this cache.")
        return
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text(json.dumps({"key": key, "paths": [str(p) for p in paths], "files": len(files),
                                 "bytes": sum(f.stat().st_size for f in files), "attempt": _attempt()}))
    print(f"Cache saved with key: {key}")


def upload_pages_artifact() -> None:
    site = _workspace_path(_input("path") or "_site/")
    if not site.is_dir():
        raise Refused(f"tar: {site}: Cannot open: No such file or directory")
    scratch = Path(os.environ.get("RUNNER_TEMP", "/tmp")) / "pages-stand-in"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    with tarfile.open(scratch / "artifact.tar", "w") as tar:
        for path in sorted(site.rglob("*")):
            relative = path.relative_to(site)
            # v5 leaves every hidden file out unless asked to keep them; .git and .github always.
            if relative.parts[0] in (".git", ".github") or (_hidden(relative) and not _flag("include-hidden-files")):
                continue
            tar.add(path, arcname=f"./{relative.as_posix()}", recursive=False)
    name = _input("name") or "github-pages"
    _store(name, scratch, [scratch / "artifact.tar"], overwrite=False)
    _output(artifact_id=name)


def deploy_pages() -> None:
    name = _input("artifact_name") or "github-pages"
    archive = _state_dir() / "artifacts" / name / "artifact.tar"
    if not archive.is_file():
        raise Refused(f"Fetching artifact metadata failed: no artifact named {name} in this run")
    site = _state_dir() / "site"
    staging = site.with_name("site.deploying")
    shutil.rmtree(staging, ignore_errors=True)
    with tarfile.open(archive) as tar:
        tar.extractall(staging, filter="data")
    shutil.rmtree(site, ignore_errors=True)
    staging.rename(site)
    owner, _, repo = os.environ.get("GITHUB_REPOSITORY", "owner/repo").partition("/")
    print(f"Reported success! Deployed {name} to {site}")
    _output(page_url=f"https://{owner}.github.io/{repo}/")


def setup_python() -> None:
    python = shutil.which("python3") or shutil.which("python")
    if python is None:
        raise Refused("no python on PATH to stand in for the toolcache's")
    version = ".".join(map(str, sys.version_info[:3]))
    wanted = _input("python-version")
    if wanted and not version.startswith(wanted + ".") and version != wanted:
        print(f"::warning::act stands the Python on PATH ({version}) in for python-version {wanted}")
    _output(**{"python-version": version, "python-path": python})


KINDS = {"setup-python": setup_python, "upload-artifact": upload_artifact, "download-artifact": download_artifact,
         "cache-restore": cache_restore, "cache-save": cache_save, "upload-pages-artifact": upload_pages_artifact,
         "deploy-pages": deploy_pages}


def main(argv: list[str]) -> int:
    try:
        KINDS[argv[0]]()
    except Refused as exc:
        print(f"::error::{exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
