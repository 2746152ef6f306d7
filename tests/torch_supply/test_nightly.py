"""Nightly resolution against a real HTTP server on 127.0.0.1 serving index pages.

Both forms of a simple repository are served: PEP 503 HTML (what download.pytorch.org
serves) and PEP 691 JSON. The wheels are small byte strings: downloading, hashing and
caching are real, installing them is not attempted.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.tags import sys_tags

from ootci.runner.core.errors import PackageIndexError
from ootci.runner.torch_supply import torch_acquire, torch_index, torchspec
from tests.support import nightly_index
from tests.support.nightly_index import (
    DECOYS,
    NEWEST_OURS,
    OLDER_OURS,
    OUR,
    PY,
    html_page,
    payload,
    serve_wheels,
    sha256,
    wheel_name,
)

# The fixture from tests/support/nightly_index.py, which the tests below take by name.
cache = nightly_index.cache

REPO = Path(__file__).resolve().parents[2]
OOTCI = REPO / ".venv" / "bin" / "ootci"


def test_html_index_newest_nightly_for_this_python_and_platform_is_downloaded(httpserver, cache):
    names = OLDER_OURS + [NEWEST_OURS] + DECOYS
    paths = serve_wheels(httpserver, names)
    # Relative hrefs (as download.pytorch.org writes them), '+' percent-encoded, hash fragment.
    entries = [(f"../../files/{paths[n].rsplit('/', 1)[1]}#sha256={sha256(payload(n))}", n) for n in names]
    httpserver.expect_request("/simple/torch/").respond_with_data(html_page(entries), content_type="text/html")
    index = httpserver.url_for("/simple")

    plan = torch_acquire.plan(torchspec.parse("nightly"), index_url=index, cache=cache)

    wheel = cache / "wheels" / NEWEST_OURS
    assert plan.install_args == ["--extra-index-url", index, str(wheel)]
    assert plan.key == NEWEST_OURS
    assert plan.version == "2.14.0.dev20261120+cpu"
    assert plan.source == httpserver.url_for(f"/files/{NEWEST_OURS.replace('+', '%2B')}")
    assert wheel.read_bytes() == payload(NEWEST_OURS)
    assert [p.name for p in wheel.parent.iterdir() if p.name.endswith(".part")] == []


def test_json_index_is_asked_for_and_used(httpserver, cache):
    from werkzeug import Response

    names = [NEWEST_OURS] + OLDER_OURS + DECOYS
    serve_wheels(httpserver, names)
    seen_accept = []

    def project_page(request):
        seen_accept.append(request.headers.get("Accept", ""))
        files = [{"filename": n, "url": f"/files/{n.replace('+', '%2B')}", "hashes": {"sha256": sha256(payload(n))},
                  "requires-python": ">=3.10"} for n in names]
        body = json.dumps({"meta": {"api-version": "1.1"}, "name": "torch", "files": files})
        return Response(body, content_type="application/vnd.pypi.simple.v1+json")

    httpserver.expect_request("/json-index/torch/").respond_with_handler(project_page)
    found = torch_index.resolve_nightly(httpserver.url_for("/json-index"))
    assert "application/vnd.pypi.simple.v1+json" in seen_accept[0]
    assert found.filename == NEWEST_OURS
    assert found.sha256 == sha256(payload(NEWEST_OURS))
    assert found.url == httpserver.url_for(f"/files/{NEWEST_OURS.replace('+', '%2B')}")


def test_requires_python_yanked_and_tag_preference(httpserver):
    best_tag = wheel_name("2.14.0.dev20261120+cpu")
    worse_tag = wheel_name("2.14.0.dev20261120+cpu", plat=_least_preferred_platform())
    too_new_python = wheel_name("2.14.0.dev20261122+cpu")
    yanked = wheel_name("2.14.0.dev20261123+cpu")
    page = (
        "<html><body>"
        f'<a href="/f/{worse_tag}">{worse_tag}</a>'
        f'<a href="/f/{best_tag}">{best_tag}</a>'
        f'<a href="/f/{too_new_python}" data-requires-python="&gt;=3.99">{too_new_python}</a>'
        f'<a href="/f/{yanked}" data-yanked="broken">{yanked}</a>'
        "</body></html>"
    )
    httpserver.expect_request("/idx/torch/").respond_with_data(page, content_type="text/html")
    found = torch_index.resolve_nightly(httpserver.url_for("/idx"))
    assert found.filename == best_tag


def _least_preferred_platform() -> str:
    platforms = [t.platform for t in sys_tags() if t.interpreter == PY and t.abi == PY]
    return platforms[-1] if platforms[-1] != OUR.platform else "linux_x86_64"


def test_nothing_for_this_platform_names_what_was_looked_for(httpserver):
    entries = [(f"/f/{n}", n) for n in DECOYS]
    httpserver.expect_request("/idx/torch/").respond_with_data(html_page(entries), content_type="text/html")
    index = httpserver.url_for("/idx")
    with pytest.raises(PackageIndexError) as info:
        torch_index.resolve_nightly(index)
    message = info.value.message
    assert message.startswith(f"no matching torch wheel at {index}: ")
    assert f"Python tag {PY}, platform {torch_index.target().platform}" in message
    assert "5 torch wheels listed (1 for another Python, 3 for another platform, 1 not a .dev build)" in message


def test_corrupted_download_is_reported_and_not_cached(httpserver, cache):
    paths = serve_wheels(httpserver, [NEWEST_OURS])
    wrong = sha256(b"what the index promised")
    entries = [(f"{paths[NEWEST_OURS]}#sha256={wrong}", NEWEST_OURS)]
    httpserver.expect_request("/simple/torch/").respond_with_data(html_page(entries), content_type="text/html")
    with pytest.raises(PackageIndexError) as info:
        torch_acquire.plan(torchspec.parse("nightly"), index_url=httpserver.url_for("/simple"), cache=cache)
    assert f"sha256 mismatch for {httpserver.url_for(paths[NEWEST_OURS])}" in info.value.message
    assert f"index says {wrong}, download has {sha256(payload(NEWEST_OURS))}" in info.value.message
    leftovers = [p.name for p in (cache / "wheels").iterdir() if not p.name.endswith(".lock")]
    assert leftovers == []


def test_cached_wheel_is_not_downloaded_again(httpserver, cache):
    paths = serve_wheels(httpserver, [NEWEST_OURS])
    entries = [(f"{paths[NEWEST_OURS]}#sha256={sha256(payload(NEWEST_OURS))}", NEWEST_OURS)]
    httpserver.expect_request("/simple/torch/").respond_with_data(html_page(entries), content_type="text/html")
    index = httpserver.url_for("/simple")
    first = torch_acquire.plan(torchspec.parse("nightly"), index_url=index, cache=cache)
    second = torch_acquire.plan(torchspec.parse("nightly"), index_url=index, cache=cache)
    assert first.install_args == second.install_args
    downloads = [req for req, _ in httpserver.log if req.path.startswith("/files/")]
    assert len(downloads) == 1


def test_dry_run_resolves_but_downloads_nothing(httpserver, cache):
    paths = serve_wheels(httpserver, [NEWEST_OURS])
    httpserver.expect_request("/simple/torch/").respond_with_data(
        html_page([(paths[NEWEST_OURS], NEWEST_OURS)]), content_type="text/html")
    plan = torch_acquire.plan(torchspec.parse("nightly"), index_url=httpserver.url_for("/simple"), cache=cache,
                              dry_run=True)
    assert plan.key == NEWEST_OURS
    assert not (cache / "wheels" / NEWEST_OURS).exists()
    assert [req.path for req, _ in httpserver.log] == ["/simple/torch/"]


def test_wheel_url_spec_downloads_with_its_hash(httpserver, cache):
    paths = serve_wheels(httpserver, [NEWEST_OURS])
    url = httpserver.url_for(paths[NEWEST_OURS])
    plan = torch_acquire.plan(torchspec.parse(f"{url}#sha256={sha256(payload(NEWEST_OURS))}"), cache=cache)
    assert Path(plan.install_args[0]).read_bytes() == payload(NEWEST_OURS)
    assert Path(plan.install_args[0]).name == NEWEST_OURS
    assert plan.key == f"sha256:{sha256(payload(NEWEST_OURS))}"


def test_another_interpreter_is_asked_for_its_own_tags():
    asked = torch_index.interpreter_target(sys.executable)
    assert asked.tags == tuple(sys_tags())
    assert asked.python_tag == PY


def test_an_index_that_never_answers_times_out_clearly():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # accepted by the kernel, never answered
        index = f"http://127.0.0.1:{listener.getsockname()[1]}/simple"
        with pytest.raises(PackageIndexError, match=r"did not answer within 0.5 s"):
            torch_index.fetch_project(index, timeout=0.5)


def test_http_500_is_reported(httpserver):
    httpserver.expect_request("/broken/torch/").respond_with_data("oops", status=500)
    with pytest.raises(PackageIndexError, match=r"failed: HTTP 500 INTERNAL SERVER ERROR for http://127\.0\.0\.1"):
        torch_index.fetch_project(httpserver.url_for("/broken"))


def test_a_5xx_is_asked_again_and_a_404_is_not(httpserver):
    httpserver.expect_oneshot_request("/flaky/torch/").respond_with_data("busy", status=503)
    httpserver.expect_request("/flaky/torch/").respond_with_data(html_page([]), content_type="text/html")
    sleeps: list[float] = []
    assert torch_index.fetch_project(httpserver.url_for("/flaky"), sleep=sleeps.append) == []
    assert sleeps == [torch_index.RETRY.backoff_s]
    httpserver.expect_request("/gone/torch/").respond_with_data("Not Found", status=404)
    with pytest.raises(PackageIndexError, match="has no project 'torch'"):
        torch_index.fetch_project(httpserver.url_for("/gone"), sleep=sleeps.append)
    assert sleeps == [torch_index.RETRY.backoff_s]

def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ootci_torch(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, OOTCI_CACHE=str(cache))
    env.pop("OOTCI_TORCH_INDEX", None)
    return subprocess.run([OOTCI, "torch", *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("problem", ["empty", "404", "closed-port"])
def test_cli_reports_index_problems_in_one_line_with_exit_code_6(problem, httpserver, tmp_path):
    if problem == "empty":
        httpserver.expect_request("/simple/torch/").respond_with_data(html_page([]), content_type="text/html")
        index = httpserver.url_for("/simple")
        expected = "no torch wheels at {index}; looked for a nightly (.dev) torch wheel for Python tag"
    elif problem == "404":
        httpserver.expect_request("/simple/torch/").respond_with_data("Not Found", status=404)
        index, expected = httpserver.url_for("/simple"), "package index {index} has no project 'torch' (HTTP 404"
    else:
        index = f"http://127.0.0.1:{_closed_port()}/whl/nightly"
        expected = "cannot reach package index {index}: connection refused"
    result = _ootci_torch("nightly", "--index-url", index, "--dry-run", cache=tmp_path)
    assert result.returncode == 6, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("ootci: " + expected.format(index=index))


def test_cli_index_comes_from_the_environment_and_json_plan(httpserver, tmp_path):
    paths = serve_wheels(httpserver, [NEWEST_OURS])
    httpserver.expect_request("/env-index/torch/").respond_with_data(
        html_page([(paths[NEWEST_OURS], NEWEST_OURS)]), content_type="text/html")
    env = dict(os.environ, OOTCI_CACHE=str(tmp_path), OOTCI_TORCH_INDEX=httpserver.url_for("/env-index"))
    out = tmp_path / "dist"
    result = subprocess.run([OOTCI, "torch", "nightly", "--json", "--out", str(out)], capture_output=True,
                            text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["kind"] == "nightly" and data["key"] == NEWEST_OURS
    assert data["install_args"][-1] == str(tmp_path / "wheels" / NEWEST_OURS)
    assert data["placed"] == str(out / NEWEST_OURS)
    assert (out / NEWEST_OURS).read_bytes() == payload(NEWEST_OURS)
