"""`[suites] integration_dtypes`: the integration suite's op_db passes, fewer than the claimed dtypes,
while the vendor (and upstream) suites run in every claimed dtype."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ootci.runner.core.errors import ManifestError
from ootci.runner.manifests import manifest
from ootci.runner.suite_runs import suite_runner

MANIFEST = """\
name = "wide"
device = "wide"
distribution = "torch_wide"
import_name = "torch_wide"
entry_point = "torch_wide = torch_wide:_autoload"
dtypes = ["float32", "int8", "complex64", "float8_e4m3fn"]
[source]
path = "."
[suites]
{integration}
vendor = [{{ name = "own", path = "tests" }}]
"""


def load(tmp_path: Path, integration: str) -> manifest.Manifest:
    path = tmp_path / "backend.toml"
    path.write_text(MANIFEST.format(integration=f"integration_dtypes = {integration}" if integration else ""))
    return manifest.load(path)


def dtypes_given(m: manifest.Manifest, spec: suite_runner.SuiteSpec, tmp_path: Path) -> str:
    runner = suite_runner.SuiteRunner(python=Path("python"), manifest=m, junit_dir=tmp_path, log=None,
                                      deadline=time.monotonic() + 60)
    args = runner._backend_args(spec)
    return args[args.index("--ootci-dtypes") + 1]


def test_the_integration_suite_runs_in_its_dtypes_and_the_vendor_suites_in_every_claimed_one(tmp_path):
    m = load(tmp_path, '["float32", "int8"]')
    ctx = SimpleNamespace(manifest=m, options=SimpleNamespace(jobs=2), source_dir=None)
    integration, vendor = suite_runner.stage_specs(ctx, "integration")
    assert (integration.name, vendor.name) == ("integration", "own")
    assert dtypes_given(m, integration, tmp_path) == "float32,int8"
    assert dtypes_given(m, vendor, tmp_path) == "float32,int8,complex64,float8_e4m3fn"
    # Unset: every claimed dtype.
    unset = load(tmp_path, "")
    [default, _] = suite_runner.stage_specs(SimpleNamespace(manifest=unset, options=ctx.options, source_dir=None),
                                            "integration")
    assert dtypes_given(unset, default, tmp_path) == "float32,int8,complex64,float8_e4m3fn"


@pytest.mark.parametrize("given, words", [
    ('["float32", "uint16"]', "'uint16' is not among the claimed dtypes (float32, int8, complex64, float8_e4m3fn)"),
    ("[]", "List should have at least 1 item after validation, not 0 (got [])"),
])
def test_a_dtype_the_backend_does_not_claim_or_none_at_all_is_one_line(tmp_path, given, words):
    with pytest.raises(ManifestError) as err:
        load(tmp_path, given)
    assert err.value.message == f"{tmp_path / 'backend.toml'}: field 'suites.integration_dtypes': {words}"
