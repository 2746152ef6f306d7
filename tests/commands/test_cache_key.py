"""`ootci cache-key`: the actions/cache keys backend.yml restores and saves ootci's cache under.

Nightly resolution is asked of a real HTTP server on 127.0.0.1 (pytest-httpserver, as in
test_nightly.py); git sources are local repositories. Nothing is installed or built.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ootci.runner import cli
from ootci.runner.torch_supply import envs, torchspec
from ootci.runner.commands import cache_key
from ootci.runner.core.errors import ManifestError, UnknownBackendError, UsageError
from tests.support.nightly_index import NEWEST_OURS, OLDER_OURS, cache, html_page, serve_wheels

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def toy(tmp_path) -> Path:
    """The toy backend's manifest and sources, in a directory the test may change."""
    root = tmp_path / "toy"
    shutil.copytree(FIXTURES / "registry" / "toy", root)
    return root / "backend.toml"


def keys(name: str | Path, torch: str = "2.13.0", trigger: str = "manual", **kwargs) -> dict[str, str]:
    from ootci.runner.manifests import registry
    return cache_key.cache_keys(registry.resolve(str(name)), torchspec.parse(torch), trigger, **kwargs)


def test_the_torch_key_names_exactly_the_layer_ootci_run_would_build(cache, toy, monkeypatch):
    built = []
    monkeypatch.setattr(envs, "_build_layer", lambda env, *a, **k: built.append(env.root))
    envs.torch_layer(["torch==2.13.0"], "torch==2.13.0")
    got = keys(toy)
    [layer] = built
    assert got["torch-key"].endswith(f"-torch-{layer.name}")
    assert Path(got["torch-path"]) == layer.parent == cache / "torch"
    assert Path(got["wheels-path"]) == cache / "wheels"
    assert got["wheels-key"].startswith(got["wheels-prefix"]) and got["wheels-prefix"] in got["wheels-key"]
    assert f"-wheels-{layer.name}-toy-" in got["wheels-prefix"]
    # Another torch, another layer and other wheels; the same torch, the same keys.
    other = keys(toy, torch="2.14.0")
    assert other["torch-key"] != got["torch-key"] and not other["wheels-key"].startswith(got["wheels-prefix"])
    assert keys(toy) == got


def test_pr_runs_never_write_where_the_nightly_reads(cache, toy):
    main, nightly, pr = keys(toy, trigger="manual"), keys(toy, trigger="nightly"), keys(toy, trigger="pr")
    assert main == nightly  # both are started by the repository itself
    assert pr["torch-key"].startswith("ootci-pr-") and nightly["torch-key"].startswith("ootci-main-")
    # What a pr run saves (its keys) is never a key, or under a prefix, that a main run restores.
    for saved in (pr["torch-key"], pr["wheels-key"]):
        for restored in (nightly["torch-key"], nightly["wheels-key"], nightly["wheels-prefix"]):
            assert not saved.startswith(restored)
    assert nightly["torch-fallback"] == nightly["wheels-fallback"] == ""
    # A pr run may start from the nightly's entries, read-only.
    assert pr["torch-fallback"] == nightly["torch-key"] and pr["wheels-fallback"] == nightly["wheels-prefix"]
    assert pr["wheels-key"].removeprefix(pr["wheels-prefix"]) == nightly["wheels-key"].removeprefix(
        nightly["wheels-prefix"])


def test_keys_are_safe_for_actions_cache(cache, toy):
    for value in keys(toy, trigger="pr").values():
        # actions/cache splits restore-keys on newlines and refuses a ',' in a key; at most 512 characters.
        assert "," not in value and "\n" not in value and len(value) <= 512


def test_nightly_is_resolved_through_the_index_without_downloading(httpserver, cache, toy):
    paths = serve_wheels(httpserver, [NEWEST_OURS, *OLDER_OURS])
    httpserver.expect_ordered_request("/simple/torch/").respond_with_data(
        html_page([(paths[OLDER_OURS[0]], OLDER_OURS[0])]), content_type="text/html")
    httpserver.expect_ordered_request("/simple/torch/").respond_with_data(
        html_page([(paths[n], n) for n in (NEWEST_OURS, *OLDER_OURS)]), content_type="text/html")
    index = httpserver.url_for("/simple")
    yesterday = keys(toy, torch="nightly", index_url=index)
    tonight = keys(toy, torch="nightly", index_url=index)
    # Tonight's nightly gets its own layer: yesterday's is never restored for it.
    assert tonight["torch-key"] == yesterday["torch-key"].replace(
        yesterday["torch-key"].rsplit("-", 1)[1], envs.layer_key(NEWEST_OURS))
    assert tonight["torch-key"] != yesterday["torch-key"]
    assert [req.path for req, _ in httpserver.log] == ["/simple/torch/", "/simple/torch/"]
    assert not (cache / "wheels").exists()


def test_the_wheels_key_follows_the_backends_sources(cache, toy):
    before = keys(toy)
    (toy.parent / "pkg" / "torch_toy" / "added.py").write_text("x = 1\n")
    after = keys(toy)
    assert after["torch-key"] == before["torch-key"]
    assert after["wheels-prefix"] == before["wheels-prefix"] and after["wheels-key"] != before["wheels-key"]


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_a_git_source_is_keyed_by_the_commit_its_ref_names_now(cache, tmp_path):
    repo = tmp_path / "upstream"
    shutil.copytree(FIXTURES / "registry" / "toy" / "pkg", repo)
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "one", cwd=repo)
    manifest = tmp_path / "m" / "backend.toml"
    manifest.parent.mkdir()
    toml = (FIXTURES / "registry" / "toy" / "backend.toml").read_text()
    manifest.write_text(toml.replace('path = "pkg"', f'git = "{repo}"\nref = "main"'))
    first = keys(manifest)
    (repo / "new.py").write_text("y = 2\n")
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "two", cwd=repo)
    second = keys(manifest)
    assert second["wheels-prefix"] == first["wheels-prefix"] and second["wheels-key"] != first["wheels-key"]
    # A commit is its own answer; a ref the remote does not have is one line naming it.
    pinned = manifest.read_text().replace('ref = "main"', f'ref = "{git("rev-parse", "HEAD", cwd=repo)}"')
    manifest.write_text(pinned)
    assert keys(manifest)["wheels-key"] == second["wheels-key"]
    manifest.write_text(toml.replace('path = "pkg"', f'git = "{repo}"\nref = "no-such-branch"'))
    with pytest.raises(ManifestError, match="no such ref 'no-such-branch'"):
        keys(manifest)


@pytest.mark.parametrize("argv, error, code", [
    (["cache-key", "openreg", "--torch", "installed"], "--torch installed: the environment's own torch has no layer",
     UsageError.exit_code),
    (["cache-key", "no-such-backend"], "unknown backend 'no-such-backend'", UnknownBackendError.exit_code),
    (["cache-key", "openreg", "--torch", "bogus:1"], "unknown torch spec 'bogus:1'", 5),
])
def test_bad_input_is_one_line_and_an_exit_code(argv, error, code, cache, capsys):
    assert cli.main(argv) == code
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"ootci: {error}") and err.count("\n") == 1


def test_an_index_that_does_not_answer_is_one_line(httpserver, cache, capsys):
    httpserver.expect_request("/down/torch/").respond_with_data("gone", status=503)
    code = cli.main(["cache-key", "openreg", "--torch", "nightly", "--index-url", httpserver.url_for("/down")])
    out, err = capsys.readouterr()
    assert code != 0 and out == "" and err.startswith("ootci: ") and err.count("\n") == 1


def test_printed_as_lines_for_github_output(cache, toy, capsys):
    assert cli.main(["cache-key", str(toy), "--torch", "2.13.0", "--trigger", "pr"]) == 0
    printed = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines())
    assert printed == keys(toy, trigger="pr")
