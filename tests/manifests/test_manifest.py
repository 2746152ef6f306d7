"""Backend manifests: the registry, the model's errors, the published schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ootci.runner.core.errors import ManifestError, UnknownBackendError
from ootci.runner.manifests import manifest, registry
from ootci.runner.manifests.manifest import Capability
from tests.support.cli import ootci

REPO = Path(__file__).resolve().parents[2]
SCHEMA_FILE = REPO / "backends" / "backend.schema.json"

VALID = """
name = "demo"
device = "demo"
distribution = "torch_demo"
import_name = "torch_demo"
entry_point = "torch_demo = torch_demo:_autoload"
[source]
path = "."
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "backend.toml"
    path.write_text(text)
    return path


def test_every_registered_manifest_loads():
    manifests = {m.name: m for m in registry.load_all()}
    assert {"ascend-npu", "gaudi-hpu"} <= set(manifests)
    npu = manifests["ascend-npu"]
    assert (npu.device, npu.distribution, npu.import_name) == ("npu", "torch_npu", "torch_npu")
    assert npu.entry_point_parts == ("torch_npu", "torch_npu", "_autoload")
    hpu = manifests["gaudi-hpu"]
    assert hpu.device == "hpu"
    assert hpu.entry_point_parts == ("device_backend", "habana_frameworks", "__autoload")


def test_registered_openreg_is_bundled_when_present():
    names = [p.parent.name for p in registry.manifest_paths()]
    if "openreg" not in names:
        pytest.skip("backends/openreg is not in this checkout")
    m = registry.resolve("openreg")
    assert m.device == "openreg"
    assert m.entry_point == "torch_openreg = torch_openreg:_autoload"
    assert m.source_dir() == (REPO / "backends" / "openreg").resolve()


def test_valid_manifest_defaults(tmp_path):
    m = manifest.load(write(tmp_path, VALID))
    assert m.build.recipe == "pip-wheel"
    assert m.suites.smoke and m.suites.integration
    assert m.source.kind == "path"
    assert m.timeouts.test > 0


@pytest.mark.parametrize(
    "mutation, field, words",
    [
        (lambda t: t.replace('device = "demo"\n', ""), "device", "Field required"),
        (lambda t: t.replace('device = "demo"', "device = 3"), "device", "string"),
        (lambda t: t.replace('device = "demo"', 'devcie = "demo"'), "devcie", "did you mean 'device'?"),
        (lambda t: 'capabilities = ["streams", "teleport"]\n' + t, "capabilities.1", "teleport"),
        (lambda t: t.replace("torch_demo:_autoload", "torch_demo._autoload"), "entry_point", "module:attribute"),
        (lambda t: t.replace('path = "."', 'path = "."\nrequirement = "x"'), "source", "exactly one"),
        (lambda t: t + "[timeouts]\nbuild = \"long\"\n", "timeouts.build", "number"),
        # Recipes that cannot work with what the manifest gives them.
        (lambda t: t.replace('path = "."', 'requirement = "torch_demo==1.0"'), "build.recipe",
         "'pip-wheel' builds from sources, but source.requirement names a published package"),
        (lambda t: t + '[build]\nrecipe = "command"\n', "build.command", 'recipe = "command" needs the command'),
        (lambda t: t + '[[expected_failures]]\ntest = "x"\nreason = "y"\ntorch = "2.15 or later"\n',
         "expected_failures.0.torch", "version specifier"),
        # [ci] container as a table, python, the switches.
        (lambda t: t + '[ci.container]\nimage = "img"\noptoins = "--ipc=host"\n', "ci.container.optoins",
         "did you mean 'options'?"),
        (lambda t: t + '[ci.container]\noptions = "--ipc=host"\n', "ci.container.image", "Field required"),
        (lambda t: t + '[ci.container]\nimage = "img"\nvolumes = "/a:/a"\n', "ci.container.volumes", "valid list"),
        (lambda t: t + '[ci]\ncontainer = 3\n', "ci.container", "valid string"),
        (lambda t: t + '[ci]\npython = "python3"\n', "ci.python", "should match pattern"),
        (lambda t: t + '[ci.container]\nimage = "img"\nenv = { A = "two words" }\n', "ci.container.env.A",
         "should match pattern"),
        (lambda t: t + '[ci]\nlogin_shell = "yes please"\n', "ci.login_shell", "boolean"),
        # [suites.upstream]: discovery and its exclusions.
        (lambda t: t + '[suites.upstream]\nfiles = "discovr"\n', "suites.upstream.files",
         "expected 'discover' or a list of paths under test/"),
        (lambda t: t + '[suites.upstream]\nfiles = []\n', "suites.upstream.files", 'or give "discover"'),
        (lambda t: t + '[suites.upstream]\nfiles = ["test_a.py"]\nexclude = [{ path = "jit/", reason = "r" }]\n',
         "suites.upstream.exclude", 'goes with files = "discover"'),
        (lambda t: t + '[suites.upstream]\nfiles = "discover"\nexclude = [{ path = "jit", reason = "r" }]\n',
         "suites.upstream.exclude.0.path", "a folder ending in /"),
        (lambda t: t + '[suites.upstream]\nfiles = "discover"\nexclude = [{ path = "../x.py", reason = "r" }]\n',
         "suites.upstream.exclude.0.path", "relative path under test/"),
        (lambda t: t + '[suites.upstream]\nfiles = "discover"\nexclude = [{ path = "jit/" }]\n',
         "suites.upstream.exclude.0.reason", "Field required"),
        (lambda t: t + '[suites.upstream]\nfiles = "discover"\nexclude = [{ path = "jit/", reason = "r" }, '
         '{ path = "jit/", reason = "s" }]\n', "suites.upstream.exclude", "'jit/' is listed twice"),
    ],
)
def test_bad_field_is_one_line_naming_file_and_field(tmp_path, mutation, field, words):
    path = write(tmp_path, mutation(VALID))
    with pytest.raises(ManifestError) as err:
        manifest.load(path)
    message = err.value.message
    assert "\n" not in message
    assert str(path) in message
    assert f"field '{field}'" in message
    assert words in message


def test_invalid_toml_is_reported(tmp_path):
    with pytest.raises(ManifestError, match=r"not valid TOML"):
        manifest.load(write(tmp_path, 'name = "x\n'))


def test_capability_enum_matches_schema():
    schema = json.loads(SCHEMA_FILE.read_text())
    assert schema["$defs"]["Capability"]["enum"] == [c.value for c in Capability]


def test_schema_file_is_current():
    """backends/backend.schema.json must be what `ootci schema` prints today."""
    result = ootci("schema")
    assert result.returncode == 0, result.stderr
    assert SCHEMA_FILE.read_text() == result.stdout, "run: ootci schema --output backends/backend.schema.json"


def test_check_jsonschema_validates_every_manifest(tmp_path):
    manifests = [str(p) for p in registry.manifest_paths()]
    manifests += [str(p) for p in (REPO / "tests" / "fixtures" / "registry").glob("*/backend.toml")]
    tool = Path(sys.executable).with_name("check-jsonschema")
    ok = subprocess.run([str(tool), "--schemafile", str(SCHEMA_FILE), *manifests], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = write(tmp_path, VALID.replace('device = "demo"', 'device = "Demo Device"'))
    rejected = subprocess.run([str(tool), "--schemafile", str(SCHEMA_FILE), str(bad)], capture_output=True, text=True)
    assert rejected.returncode == 1
    assert "device" in rejected.stdout


def test_resolve_by_path_and_unknown_name(tmp_path):
    path = write(tmp_path, VALID)
    assert registry.resolve(str(path)).name == "demo"
    assert registry.resolve(str(tmp_path)).name == "demo"
    with pytest.raises(UnknownBackendError, match="unknown backend 'nope'.*ascend-npu"):
        registry.resolve("nope")
    with pytest.raises(UnknownBackendError, match="no such manifest"):
        registry.resolve(str(tmp_path / "missing.toml"))


def test_ci_container_as_an_image_string_still_loads(tmp_path):
    m = manifest.load(write(tmp_path, VALID + '[ci]\ncontainer = "ascendai/cann:8.2"\n'))
    assert m.ci.container == "ascendai/cann:8.2"
    assert m.ci.container_spec == manifest.Container(image="ascendai/cann:8.2")
    assert m.ci.container_input() == "ascendai/cann:8.2"
    assert (m.ci.python, m.ci.login_shell, m.ci.use_image_python) == ("", False, False)
    assert manifest.load(write(tmp_path, VALID)).ci.container_input() == ""


def test_ci_container_as_a_table_becomes_backend_yml_json(tmp_path):
    m = manifest.load(write(tmp_path, VALID + """
[ci]
python = "/usr/bin/python3"
login_shell = true
use_image_python = true
[ci.container]
image = "reg.example/img:1"
options = "--runtime=habana --ipc=host"
volumes = ["/usr/local/dcmi:/usr/local/dcmi"]
env = { HABANA_VISIBLE_DEVICES = "all" }
"""))
    assert (m.ci.python, m.ci.login_shell, m.ci.use_image_python) == ("/usr/bin/python3", True, True)
    # The environment travels in options, as docker -e.
    assert json.loads(m.ci.container_input()) == {
        "image": "reg.example/img:1", "options": "--runtime=habana --ipc=host -e HABANA_VISIBLE_DEVICES=all",
        "volumes": ["/usr/local/dcmi:/usr/local/dcmi"]}
    # A table with only an image is the plain image, as the old form.
    only = manifest.load(write(tmp_path, VALID + '[ci.container]\nimage = "img"\n'))
    assert only.ci.container_input() == "img"


def test_registered_accelerators_carry_their_runner_settings():
    gaudi, ascend = registry.resolve("gaudi-hpu"), registry.resolve("ascend-npu")
    assert gaudi.ci.torch == "installed" and gaudi.ci.python == "/usr/bin/python3"
    assert "--runtime=habana" in gaudi.ci.container_spec.options
    assert gaudi.ci.container_spec.env["HABANA_VISIBLE_DEVICES"] == "all"
    assert ascend.ci.login_shell and ascend.ci.use_image_python and not ascend.ci.python
    assert "/dev/davinci_manager" in ascend.ci.container_spec.options
    assert "/usr/local/dcmi:/usr/local/dcmi" in ascend.ci.container_spec.volumes
    # Each says where its values come from.
    assert "huggingface/optimum-habana" in gaudi.path.read_text()
    assert "Ascend/pytorch" in ascend.path.read_text() and "Ascend/cann-container-image" in ascend.path.read_text()


def test_every_problem_is_listed_one_a_line(tmp_path):
    """Two mistakes: both named, each on its own line with the file, none hidden behind 'and 1 more'."""
    text = VALID.replace('device = "demo"', 'devcie = "demo"') + '[timeouts]\nbuild = "long"\n'
    path = write(tmp_path, text)
    result = ootci("show", str(path))
    assert result.returncode == 3
    lines = result.stderr.splitlines()
    assert lines == [f"ootci: {path}: field 'devcie': Extra inputs are not permitted (did you mean 'device'?)",
                     f"ootci: {path}: field 'timeouts.build': Input should be a valid number, "
                     f"unable to parse string as a number (got 'long')"], result.stderr
    assert "more" not in result.stderr and "Traceback" not in result.stderr
