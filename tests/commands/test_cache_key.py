"""`ootci cache-key`: the actions/cache key and path of the torch layer backend.yml keeps.

Nightly resolution is asked of a real HTTP server on 127.0.0.1 (pytest-httpserver, as in
test_nightly.py). Nothing is installed or built.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ootci.runner import cli
from ootci.runner.commands import cache_key
from ootci.runner.core.errors import UnknownBackendError, UsageError
from ootci.runner.torch_supply import envs, torchspec
from tests.support import nightly_index
from tests.support.nightly_index import NEWEST_OURS, OLDER_OURS, html_page, serve_wheels

# The fixture from tests/support/nightly_index.py, which the tests below take by name.
cache = nightly_index.cache

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def toy(tmp_path) -> Path:
    """The toy backend's manifest and sources, in a directory the test may change."""
    root = tmp_path / "toy"
    shutil.copytree(FIXTURES / "registry" / "toy", root)
    return root / "backend.toml"


def keys(name: str | Path, torch: str = "2.13.0", trigger: str = "manual", **kwargs) -> dict[str, str]:
    """What `ootci cache-key NAME` prints (the layer does not depend on the backend)."""
    return cache_key.cache_keys(torchspec.parse(torch), trigger, **kwargs)


def test_the_torch_key_and_path_name_exactly_the_layer_ootci_run_would_build(cache, toy, monkeypatch):
    """Issue 43: the path was all of $OOTCI_CACHE/torch (and /wheels), so a runner that keeps its cache
    saved every layer it ever built, each night again; it is the one layer directory of this run."""
    built = []
    monkeypatch.setattr(envs, "_build_layer", lambda env, *a, **k: built.append(env.root))
    envs.torch_layer(["torch==2.13.0"], "torch==2.13.0")
    (cache / "torch" / "an-older-layer").mkdir()
    got = keys(toy)
    [layer] = built
    assert got["torch-key"].endswith(f"-torch-{layer.name}")
    assert Path(got["torch-path"]) == layer == cache / "torch" / layer.name
    assert set(got) == {"torch-path", "torch-key", "torch-fallback"}  # no wheels: keyed by the torch's version
    # Another torch, another layer; the same torch, the same keys.
    other = keys(toy, torch="2.14.0")
    assert other["torch-key"] != got["torch-key"] and other["torch-path"] != got["torch-path"]
    assert keys(toy) == got


def test_pr_runs_never_write_where_the_nightly_reads(cache, toy):
    main, nightly, pr = keys(toy, trigger="manual"), keys(toy, trigger="nightly"), keys(toy, trigger="pr")
    assert main == nightly  # both are started by the repository itself
    assert pr["torch-key"].startswith("ootci-pr-") and nightly["torch-key"].startswith("ootci-main-")
    assert not pr["torch-key"].startswith(nightly["torch-key"]) and nightly["torch-fallback"] == ""
    # A pr run may start from the nightly's entry, read-only (and the same path: actions/cache keys by it).
    assert pr["torch-fallback"] == nightly["torch-key"] and pr["torch-path"] == nightly["torch-path"]


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


def test_make_makes_the_one_layer_the_key_names_and_only_once(cache, toy, monkeypatch, capsys):
    """Issue 54: the run job saved the layer after the backend's build and tests had run in it (vendor
    code, PR code), and code in a job can save any key with the job's token. backend.yml's `layer` job
    makes it with `--make`, in a job that runs nothing else: torch alone, at the path the key names."""
    built = []

    def build(env, install_args, *args, **kwargs):
        built.append((env.root, install_args))
        env.python.parent.mkdir(parents=True)
        env.python.write_text("")  # ready: the interpreter and ootci's marker are there
        env.ready_marker.write_text("{}")

    monkeypatch.setattr(envs, "_build_layer", build)
    assert cli.main(["cache-key", str(toy), "--torch", "2.13.0", "--trigger", "nightly", "--make"]) == 0
    out, err = capsys.readouterr()
    printed = dict(line.split("=", 1) for line in out.splitlines())
    [(root, install)] = built
    assert Path(printed["torch-path"]) == root and install == ["torch==2.13.0"]
    assert err.strip() == f"torch layer {root}: made"
    assert cli.main(["cache-key", str(toy), "--torch", "2.13.0", "--trigger", "nightly", "--make"]) == 0
    assert len(built) == 1 and capsys.readouterr().err.strip() == f"torch layer {root}: already made"
