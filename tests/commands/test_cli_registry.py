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
    assert json.loads(entry["container"])["image"].startswith("ascendai/cann")
    assert entry["torch"] == "2.13.0"
    pinned = json.loads(ootci("matrix", "gaudi-hpu", "--torch", "nightly").stdout)
    assert pinned == {"include": [{"name": "gaudi-hpu", "device": "hpu", "runs-on": ["self-hosted", "gaudi2"],
                                   "container": entry_container("gaudi-hpu"), "torch": "nightly",
                                   "python": "/usr/bin/python3", "login-shell": False, "use-image-python": False}]}


def entry_container(name: str) -> str:
    """backend.yml's container input for a manifest's ci.container, as `ootci show` has it."""
    container = json.loads(ootci("show", name, "--json").stdout)["ci"]["container"]
    if isinstance(container, str):
        return container
    options = " ".join([container["options"], *(f"-e {k}={v}" for k, v in container["env"].items())]).strip()
    given = {key: value for key, value in {"image": container["image"], "options": options,
                                           "volumes": container["volumes"]}.items() if value}
    return container["image"] if list(given) == ["image"] else json.dumps(given, separators=(",", ":"))


def test_matrix_carries_the_container_python_and_shell_of_gaudi_and_ascend():
    entries = {e["name"]: e for e in json.loads(ootci("matrix", "gaudi-hpu", "ascend-npu").stdout)["include"]}
    gaudi, ascend = entries["gaudi-hpu"], entries["ascend-npu"]
    container = json.loads(gaudi["container"])
    assert container["options"] == ("--runtime=habana --cap-add=sys_nice --ipc=host -e HABANA_VISIBLE_DEVICES=all "
                                    "-e OMPI_MCA_btl_vader_single_copy_mechanism=none")
    assert (gaudi["torch"], gaudi["python"], gaudi["login-shell"], gaudi["use-image-python"]) == \
        ("installed", "/usr/bin/python3", False, False)
    container = json.loads(ascend["container"])
    assert "--device /dev/davinci_manager" in container["options"]
    assert "/usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/" in container["volumes"]
    assert (ascend["python"], ascend["login-shell"], ascend["use-image-python"]) == ("", True, True)


MANIFEST = """name = "image-torch"
device = "cpu"
distribution = "torch_demo"
import_name = "torch_demo"
entry_point = "torch_demo = torch_demo:_autoload"
[source]
requirement = "torch_demo"
[build]
recipe = "prebuilt"
[ci]
torch = "installed"
"""


def test_run_with_torch_installed_takes_the_manifests_python(tmp_path):
    """`ootci run NAME --torch installed` without --python: the manifest's [ci] python, else a clear error
    before anything is written."""
    without = tmp_path / "without" / "backend.toml"
    without.parent.mkdir()
    without.write_text(MANIFEST)
    result = ootci("run", str(without), "--torch", "installed", "--out", str(tmp_path / "runs"))
    assert result.returncode == 2
    assert "--torch installed needs --python (the environment that has it), or [ci] python in the manifest" \
        in result.stderr
    with_python = tmp_path / "with" / "backend.toml"
    with_python.parent.mkdir()
    with_python.write_text(MANIFEST + 'python = "/nonexistent/bin/python3"\n')
    result = ootci("run", str(with_python), "--torch", "installed", "--out", str(tmp_path / "runs"))
    assert result.returncode == 2
    assert "--python: /nonexistent/bin/python3 is not an interpreter" in result.stderr
    assert not (tmp_path / "runs").exists()


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
