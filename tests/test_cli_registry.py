"""`ootci list`, `show`, `matrix`, `schema` through the real console script."""

from __future__ import annotations

import json

from tests.support.cli import ootci


def test_list_shows_registered_backends():
    result = ootci("list")
    assert result.returncode == 0
    assert "ascend-npu" in result.stdout and "torch_npu" in result.stdout
    data = json.loads(ootci("list", "--json").stdout)
    assert {"name": "gaudi-hpu", "device": "hpu"}.items() <= next(d for d in data if d["name"] == "gaudi-hpu").items()


def test_show_prints_manifest_fields():
    result = ootci("show", "ascend-npu", "--json")
    data = json.loads(result.stdout)
    assert data["entry_point"] == "torch_npu = torch_npu:_autoload"
    assert data["manifest"].endswith("backends/ascend-npu/backend.toml")


def test_matrix_is_a_strategy_matrix():
    data = json.loads(ootci("matrix").stdout)
    names = [e["name"] for e in data["include"]]
    assert "ascend-npu" in names
    entry = next(e for e in data["include"] if e["name"] == "ascend-npu")
    assert entry["runs-on"] == ["self-hosted", "linux-aarch64-a2-1"]
    assert entry["container"].startswith("ascendai/cann")
    assert entry["torch"] == "2.13.0"
    pinned = json.loads(ootci("matrix", "gaudi-hpu", "--torch", "nightly").stdout)
    assert pinned == {"include": [{"name": "gaudi-hpu", "device": "hpu", "runs-on": ["self-hosted", "gaudi2"],
                                   "container": entry_container("gaudi-hpu"), "torch": "nightly"}]}


def entry_container(name: str) -> str:
    return json.loads(ootci("show", name, "--json").stdout)["ci"]["container"]


def test_unknown_backend_is_one_line_with_its_own_exit_code():
    result = ootci("show", "nope")
    assert result.returncode == 4
    assert result.stderr.strip().count("\n") == 0
    assert "unknown backend 'nope'" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_manifest_exit_code(tmp_path):
    bad = tmp_path / "backend.toml"
    bad.write_text('name = "x"\n')
    result = ootci("show", str(bad))
    assert result.returncode == 3
    assert f"{bad}: field 'device': Field required" in result.stderr
