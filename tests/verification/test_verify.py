"""The autoload verification through its Python API, on real fixture backends in real venvs.

Each fixture under tests/fixtures/backends is a small package built as a real wheel
and installed over the torch 2.13.0 layer; every probe is a real interpreter of
that environment.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ootci.runner.manifests import manifest as manifest_mod
from ootci.runner.models import Status
from ootci.runner.records import record_files
from ootci.runner.verification.verify import verify
from tests.support.cli import ootci
from tests.support.fixture_backends import manifest_path

pytestmark = pytest.mark.slow


def run(env, fixture: str | None, **kwargs):
    manifest = manifest_mod.load(manifest_path(fixture)) if fixture else None
    kwargs.setdefault("runs", 1)
    kwargs.setdefault("timeout", 60)
    return verify(env.python, manifest, **kwargs)


def checks(result) -> dict:
    return {c.name: c for c in result.checks}


def test_python_backend_with_tensors_passes_every_check(backend_env):
    result = run(backend_env("pyd"), "pyd", runs=3)
    by_name = checks(result)
    assert result.status is Status.passed, result.model_dump_json(indent=1)
    assert result.root_cause is None
    assert list(by_name) == ["entry_point", "plain_import", "build_torch", "device", "tensor", "opt_out",
                             "circular_import", "neighbours", "import_cost"]
    # A fixture wheel records no build torch: that check has nothing to compare.
    assert by_name["build_torch"].status is Status.skipped
    assert by_name["build_torch"].detail == "torch_pyd does not record the torch it was built against"
    assert all(c.status is Status.passed for c in result.checks if c.name != "build_torch")
    assert by_name["device"].data["current_accelerator"] == "pyd"
    assert by_name["device"].data["device_count"] == 1
    assert set(by_name["tensor"].data) == {"float32", "int64", "bool"}
    assert all(r["equal"] and r["device_type"] == "pyd" for r in by_name["tensor"].data.values())
    cost = by_name["import_cost"].data
    assert cost["runs"] == 3 and len(cost["samples_ms"]["autoload"]) == 3 == len(cost["samples_ms"]["no_autoload"])
    assert cost["autoload_ms"] > 0 and cost["no_autoload_ms"] > 0
    assert cost["overhead_ms"] == pytest.approx(cost["autoload_ms"] - cost["no_autoload_ms"], abs=0.2)


def test_tutorial_torch_foo_passes_without_tensor_support(backend_env):
    result = run(backend_env("foo"), "foo")
    by_name = checks(result)
    assert result.status is Status.passed, result.model_dump_json(indent=1)
    assert by_name["device"].status is Status.passed
    assert by_name["device"].data["is_available"] is True
    assert by_name["tensor"].status is Status.skipped
    assert by_name["tensor"].detail.startswith("no tensor support: the manifest lists no dtypes")
    assert by_name["opt_out"].data["entry_point"] == {"loaded": True, "device": "foo"}


def test_without_a_manifest_the_device_name_is_learned(backend_env):
    result = run(backend_env("foo"), None)
    by_name = checks(result)
    assert result.backends == ["torch_foo"]
    assert result.status is Status.passed, result.model_dump_json(indent=1)
    assert "torch.device('foo')" in by_name["device"].detail
    # No manifest promises tensors: the missing kernels are reported, not failed.
    assert by_name["tensor"].status is Status.skipped
    assert ("no tensor support: RuntimeError: PyTorch is not linked with support for foo devices"
            in by_name["tensor"].detail)


def test_habana_style_loaded_flag_guard_passes(backend_env):
    result = run(backend_env("hab"), "hab")
    by_name = checks(result)
    assert result.status is Status.passed, result.model_dump_json(indent=1)
    assert by_name["circular_import"].detail == "import hab_frameworks.torch works before and after import torch"
    assert by_name["entry_point"].detail.startswith("'device_backend = hab_frameworks:__autoload'")


def test_hook_defined_after_import_torch_is_a_circular_import(backend_env):
    result = run(backend_env("circular"), "circular")
    by_name = checks(result)
    assert by_name["plain_import"].status is Status.passed
    assert by_name["device"].status is Status.passed
    circular = by_name["circular_import"]
    assert circular.status is Status.failed
    assert "partially initialized module 'torch_circular'" in circular.root_cause.summary
    # The fix is the order in __init__.py, and the hint names the line that imports torch first.
    hint = circular.root_cause.hint
    assert hint.startswith("circular import: define the autoload hook")
    assert "before the package's `import torch`" in hint
    assert hint.endswith("torch_circular/__init__.py:4 imports torch first)"), hint
    assert result.status is Status.failed and result.root_cause == circular.root_cause


def test_blocking_only_runs_the_plain_import_probe_alone_and_says_what_it_left_out(backend_env, tmp_path):
    """What a bisection step judging a suite asks for: the circular import above blocks no suite,
    so it is not looked for, and the verification passes on the one probe that imports torch."""
    log = tmp_path / "autoload.log"
    result = run(backend_env("circular"), "circular", blocking_only=True, log=log)
    by_name = checks(result)
    assert list(by_name) == ["entry_point", "plain_import", "build_torch", "device", "tensor", "opt_out",
                             "circular_import", "neighbours", "import_cost"]
    # The fixture claims no dtypes (no tensor check) and records no build torch.
    assert [n for n, c in by_name.items() if c.status is Status.passed] == ["entry_point", "plain_import", "device"]
    left_out = {n: c for n, c in by_name.items() if n in ("opt_out", "circular_import", "neighbours", "import_cost")}
    assert all(c.status is Status.skipped and c.detail.startswith("not run: ") for c in left_out.values())
    assert result.status is Status.passed and result.root_cause is None
    assert result.summary() == "3 checks passed, 6 skipped"
    started = re.findall(r"^\$ .*?/probes/(\w+\.py)", log.read_text(), re.M)
    assert sorted(started) == ["autoload_on.py", "entry_points.py"], started


def test_hook_that_raises(backend_env):
    result = run(backend_env("raises"), "raises")
    by_name = checks(result)
    cause = result.root_cause
    assert result.status is Status.failed
    assert by_name["plain_import"].status is Status.failed
    assert cause == by_name["plain_import"].root_cause
    assert (cause.kind, cause.exception_type) == ("exception", "RuntimeError")
    assert cause.message == "torch_raises: device firmware 1.2 is required, found 0.9"
    assert cause.culprit == "torch_raises"
    assert by_name["device"].status is Status.blocked and by_name["import_cost"].status is Status.blocked
    # With autoload off torch imports and the package itself imports: only its hook is broken.
    assert by_name["opt_out"].status is Status.passed
    assert by_name["opt_out"].data["entry_point"]["loaded"] is False


def test_missing_vendor_library_and_the_neighbour_it_breaks(backend_env):
    env = backend_env("pyd", "vendorlib")
    own = run(env, "vendorlib")
    cause = own.root_cause
    assert own.status is Status.failed
    assert cause.exception_type == "OSError"
    assert "libvendor_missing.so: cannot open shared object file" in cause.summary
    assert cause.hint == "a shared library is missing: the vendor runtime is not installed on this machine"
    assert checks(own)["neighbours"].status is Status.passed
    assert "torch_vendorlib's own" in checks(own)["neighbours"].detail

    healthy = run(env, "pyd")
    by_name = checks(healthy)
    assert healthy.status is Status.failed
    assert healthy.root_cause.culprit == "torch_vendorlib"
    neighbours = by_name["neighbours"]
    assert neighbours.status is Status.failed
    assert neighbours.detail.startswith(
        "another backend breaks import torch: entry point 'torch_vendorlib' (torch_vendorlib 1.0)")
    assert neighbours.data["entry_points"]["torch_pyd"]["status"] == "passed"
    assert neighbours.data["entry_points"]["torch_vendorlib"]["status"] == "failed"
    # The healthy backend itself still works when it is imported by hand.
    assert by_name["opt_out"].status is Status.passed


@pytest.mark.parametrize("fixture, signal", [("aborts", "SIGABRT"), ("segfaults", "SIGSEGV")])
def test_hook_that_kills_the_interpreter(backend_env, fixture, signal):
    result = run(backend_env(fixture), fixture)
    cause = result.root_cause
    assert result.status is Status.crashed
    assert checks(result)["plain_import"].status is Status.crashed
    assert (cause.kind, cause.signal) == ("signal", signal)
    # faulthandler's stack dump says where: in the backend's hook.
    assert f"torch_{fixture}/__init__.py" in cause.summary and "in _autoload" in cause.summary
    assert cause.culprit == f"torch_{fixture}"


def test_hook_that_hangs_is_killed_at_the_time_limit(backend_env):
    # The limit leaves `import torch` itself time enough on a loaded machine (it took over 10 s at a
    # load of 4 on 2 cores): the process must be killed in the backend's hook, not before it.
    result = run(backend_env("hangs"), "hangs", timeout=30)
    cause = result.root_cause
    assert result.status is Status.timeout
    assert (cause.kind, cause.timeout_s) == ("timeout", 30)
    assert "torch_hangs/__init__.py" in cause.summary and "in _autoload" in cause.summary
    assert cause.culprit == "torch_hangs"
    assert cause.hint.startswith("the process hung")
    # The first probes run side by side, and none is started after one has hung.
    assert result.duration_s < 30 + 6, result.duration_s


def test_a_hang_costs_one_probe_limit_even_one_probe_at_a_time(backend_env):
    # jobs=1: the plain-import and opt-out probes run first; the import-order probe would
    # have waited for them and hung for a second limit.
    result = run(backend_env("hangs"), "hangs", timeout=10, jobs=1)
    by_name = checks(result)
    assert result.status is Status.timeout
    assert result.duration_s < 10 + 6, result.duration_s
    assert by_name["plain_import"].status is Status.timeout
    circular = by_name["circular_import"]
    assert circular.status is Status.blocked and circular.root_cause is None
    assert circular.detail.startswith("not run: the backend hung in an earlier probe (")
    assert "timed out after 10 s" in circular.detail


def _checkout_of(fixture: str, root: Path) -> Path:
    """A vendor checkout with the package at its root, whose sources cannot be imported (as
    a C++ backend's cannot before its extension is built)."""
    package = root / "checkout" / f"torch_{fixture}"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise StopIteration  # no compiled extension in the source tree\n")
    return package.parent


def test_the_source_tree_in_the_working_directory_is_never_imported(backend_env, tmp_path, monkeypatch):
    monkeypatch.chdir(_checkout_of("pyd", tmp_path))
    result = run(backend_env("pyd"), "pyd", runs=2)
    assert result.status is Status.passed, result.summary()
    assert checks(result)["import_cost"].data["runs"] == 2


def test_a_source_tree_on_sys_path_is_named_with_the_installed_copy(backend_env, tmp_path, monkeypatch):
    checkout = _checkout_of("pyd", tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(checkout))
    result = run(backend_env("pyd"), "pyd")
    entry = checks(result)["entry_point"]
    assert entry.status is Status.failed
    summary = entry.root_cause.summary
    assert summary.startswith(f"import torch_pyd finds {checkout / 'torch_pyd'} (a same-named directory of a source "
                              f"tree) instead of the installed "), summary
    assert summary.endswith("site-packages/torch_pyd")
    assert entry.root_cause.hint.startswith("the checkout shadows the installed package")


def test_backend_that_exits_during_import(backend_env):
    result = run(backend_env("exits"), "exits")
    cause = result.root_cause
    assert result.status is Status.failed
    assert (cause.kind, cause.exit_code, cause.exception_type) == ("exit_code", 3, "SystemExit")
    assert cause.summary.startswith("the interpreter exited with code 3 during import torch (sys.exit) at ")
    assert "torch_exits/__init__.py:3" in cause.summary


def test_entry_point_naming_a_missing_attribute(backend_env):
    result = run(backend_env("badattr"), "badattr")
    entry = checks(result)["entry_point"]
    assert entry.status is Status.failed
    assert (entry.root_cause.summary
            == "entry point torch_badattr: module torch_badattr has no attribute '_autoload_missing'")
    assert entry.root_cause.hint == "the entry point names an attribute the module does not define"
    assert result.root_cause == entry.root_cause
    assert checks(result)["plain_import"].root_cause.exception_type == "AttributeError"


def test_package_without_entry_point(backend_env):
    result = run(backend_env("noep"), "noep")
    by_name = checks(result)
    assert by_name["entry_point"].status is Status.failed
    assert by_name["entry_point"].root_cause.summary == "torch_noep declares no entry point in group torch.backends"
    assert by_name["entry_point"].root_cause.kind == "missing"
    assert by_name["plain_import"].status is Status.failed
    assert by_name["plain_import"].detail == "torch_noep not loaded by `import torch` (autoload)"
    # The explicit-import pattern still works.
    assert by_name["opt_out"].status is Status.passed
    assert by_name["circular_import"].status is Status.passed


def test_stdout_flood_neither_confuses_nor_bloats_the_result(backend_env):
    result = run(backend_env("floods"), "floods")
    assert result.status is Status.passed, result.model_dump_json(indent=1)[:3000]
    assert len(result.model_dump_json()) < 20_000


def test_a_backend_that_aborts_at_finalization_costs_no_probe_its_result_or_its_teardown(backend_env, tmp_path):
    """Each probe leaves once it has reported every phase (runner/probes/_probe.py: leave), without
    finalizing torch: the backend's abort at exit never runs in a probe, and neither does the
    second of CPU torch's teardown costs. (The suites still end their interpreters as a vendor's
    do, where a crash at exit is a finding.)"""
    log = tmp_path / "autoload.log"
    result = run(backend_env("finalizer"), "finalizer", log=log)
    assert result.status is Status.passed, result.model_dump_json(indent=1)[:3000]
    ends = re.findall(r"^\[(.+), [0-9.]+ s\]$", log.read_text(), re.M)
    # entry_points, plain import, opt-out and circular import (runs=1: import_cost reads the first two)
    assert len(ends) >= 4 and set(ends) == {"exit 0"}, ends


def test_the_same_abort_at_finalization_is_found_by_a_suite_whose_interpreter_ends_as_a_vendors_does(
        backend_env, tmp_path):
    out = tmp_path / "run"
    done = ootci("test", "--python", str(backend_env("finalizer").python), "--backend",
                 str(manifest_path("finalizer")), "--suite", "smoke", "--out", str(out))
    record = record_files.read(out / "record.json")
    smoke = record.stage("smoke")
    assert done.returncode != 0 and smoke.status is Status.failed, done.stdout + done.stderr
    # Every test had its result (no tensors on this device: most skip); then the interpreter ended.
    assert "suite 'smoke': pytest stopped outside any test: pytest (smoke) was killed by SIGABRT" in smoke.summary, \
        smoke.summary
    assert smoke.root_cause is not None


def test_autoload_stage_records_the_verification(backend_env, tmp_path):
    import datetime as dt

    from ootci.runner.models import RunRecord, TorchInfo
    from ootci.runner.stages import autoload
    from ootci.runner.stages.base import RunContext, RunOptions

    manifest = manifest_mod.load(manifest_path("raises"))
    env = backend_env("raises")
    record = RunRecord(run_id="r1", backend=manifest.name, device=manifest.device, torch=TorchInfo(spec="2.13.0"),
                       started_at=dt.datetime.now(dt.UTC))
    ctx = RunContext(manifest=manifest, options=RunOptions(), record=record, run_dir=tmp_path, cache=tmp_path,
                     reporter=None, stage_name=autoload.NAME, env=env)
    stage = autoload.run(ctx)
    assert autoload.NAME == "autoload" and stage.name == "autoload"
    assert stage.status is Status.failed
    assert stage.root_cause.message == "torch_raises: device firmware 1.2 is required, found 0.9"
    assert [c.name for c in stage.checks][:2] == ["entry_point", "plain_import"]
    assert stage.summary.startswith("plain_import failed: RuntimeError: torch_raises: device firmware")
    log = (tmp_path / "logs" / "autoload.log").read_text()
    assert "autoload_on.py" in log and "torch_raises: device firmware" in log


def test_manifest_entry_point_must_match_the_declared_one(backend_env, tmp_path):
    # The badattr package declares `torch_badattr = torch_badattr:_autoload_missing`.
    text = manifest_path("badattr").read_text().replace(
        'entry_point = "torch_badattr = torch_badattr:_autoload_missing"',
        'entry_point = "torch_badattr = torch_badattr:_autoload"')
    (tmp_path / "backend.toml").write_text(text.replace('path = "."', f'path = "{manifest_path("badattr").parent}"'))
    result = verify(backend_env("badattr").python, manifest_mod.load(tmp_path / "backend.toml"), runs=1, timeout=60)
    entry = checks(result)["entry_point"]
    assert entry.status is Status.failed
    assert entry.detail == ("entry point mismatch: the manifest expects 'torch_badattr = torch_badattr:_autoload', "
                            "torch_badattr declares 'torch_badattr = torch_badattr:_autoload_missing'")
    assert result.root_cause == entry.root_cause


def test_backend_not_installed_in_the_environment(backend_env):
    result = run(backend_env("foo"), "pyd")
    by_name = checks(result)
    assert (by_name["entry_point"].root_cause.summary
            == "distribution torch_pyd is not installed in the environment under test")
    assert by_name["plain_import"].detail == "torch_pyd not loaded by `import torch` (autoload)"
    assert result.root_cause == by_name["entry_point"].root_cause


def _ootci_test(python: Path, manifest: Path, suite: str, out: Path):
    done = ootci("test", "--python", str(python), "--backend", str(manifest), "--suite", suite, "--out", str(out),
                 timeout=600, cwd=manifest.parent)
    return done, record_files.read(out / "record.json")


def test_a_vendor_suite_imports_the_installed_backend_and_names_a_shadowing_checkout(backend_env, tmp_path):
    env = backend_env("pyd")
    checkout = _checkout_of("pyd", tmp_path)
    manifest = checkout / "backend.toml"
    manifest.write_text(manifest_path("pyd").read_text() + '\n[[suites.vendor]]\nname = "own"\npath = "tests"\n')
    (checkout / "tests").mkdir()
    (checkout / "tests" / "test_own.py").write_text(
        "import torch_pyd\n\n\ndef test_the_installed_package():\n"
        "    assert 'site-packages' in torch_pyd.__file__, torch_pyd.__file__\n")
    # The suite runs from the checkout (its tests need their files), yet imports the wheel.
    done, record = _ootci_test(env.python, manifest, "own", tmp_path / "first")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (test,) = record.tests
    assert test.id.endswith("tests/test_own.py::test_the_installed_package") and test.outcome.value == "passed"
    # A tests/__init__.py makes pytest put the checkout itself on sys.path: said, with both paths.
    (checkout / "tests" / "__init__.py").write_text("")
    (checkout / "tests" / "conftest.py").write_text("")
    done, record = _ootci_test(env.python, manifest, "own", tmp_path / "second")
    assert done.returncode != 0
    text = record.model_dump_json()
    assert f"import torch_pyd finds {checkout / 'torch_pyd'}" in text, text[-3000:]
    assert "site-packages/torch_pyd" in text
    assert "--import-mode=importlib" in record.stage("integration").root_cause.hint
