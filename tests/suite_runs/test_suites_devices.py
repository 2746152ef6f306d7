"""The device-generic suites for real: on the host CPU as a backend that claims only some
capabilities (tests/fixtures/backends/cpu-partial), and on the bundled OpenReg backend,
which claims all of them. The environments under test have torch and pytest but no
pydantic: the suites must run there without importing the `runner` package."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ootci.runner.models import Outcome, Status
from ootci.runner.records import record_files
from tests.support.cli import ootci

REPO = Path(__file__).resolve().parents[2]
CPU_PARTIAL = REPO / "tests" / "fixtures" / "backends" / "cpu-partial" / "backend.toml"

ISOLATION_PROBE = '''
import json, os, sys

def pytest_sessionfinish(session):
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("ootci", "runner", "pydantic"))
    with open(os.environ["ISOLATION_REPORT"], "w") as f:
        json.dump(leaked, f)
'''


def ootci_test(python: Path, backend: str | Path, suite: str, out: Path, *extra: str, env: dict | None = None):
    done = ootci("test", "--python", str(python), "--backend", str(backend), "--suite", suite, "--out", str(out),
                 *extra, timeout=900, cwd=REPO, env=env)
    record = record_files.read(out / "record.json")
    return done, record


@pytest.mark.slow
def test_smoke_on_cpu_without_pydantic_skips_what_is_not_claimed(torch_layer, tmp_path):
    no_pydantic = subprocess.run([str(torch_layer.python), "-c", "import pydantic"], capture_output=True, text=True)
    assert "No module named 'pydantic'" in no_pydantic.stderr, "the torch layer must lack pydantic for this test"
    (tmp_path / "isolation_probe.py").write_text(ISOLATION_PROBE)
    report = tmp_path / "leaked.json"
    done, record = ootci_test(torch_layer.python, CPU_PARTIAL, "smoke", tmp_path / "out", env={
        "PYTHONPATH": str(tmp_path), "PYTEST_PLUGINS": "isolation_probe", "ISOLATION_REPORT": str(report)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(report.read_text()) == [], "the suite imported runner or pydantic in the target"
    stage = record.stage("smoke")
    assert stage.status is Status.passed
    skips = {t.id: t.message for t in record.tests if t.outcome is Outcome.skipped}
    assert skips["test_runtime.py::test_streams"] == "capability 'streams' not claimed"
    assert skips["test_runtime.py::test_events_order_streams"] == "capability 'streams' not claimed"
    assert skips["test_runtime.py::test_event_timing"] == "capability 'events' not claimed"
    assert skips["test_runtime.py::test_pinned_non_blocking_copies"] == "capability 'pinned_memory' not claimed"
    assert skips["test_device_api.py::test_second_device"] == "capability 'multi_device' not claimed"
    assert skips["test_layouts.py::test_sparse_coo_round_trip_and_matmul"] == "capability 'sparse' not claimed"
    assert skips["test_layouts.py::test_quantized_per_tensor_round_trip"] == "capability 'quantized' not claimed"
    assert skips["test_tensors.py::test_create[bfloat16]"] == "dtype 'bfloat16' not claimed"
    assert skips["test_tensors.py::test_matmul[float16]"] == "dtype 'float16' not claimed"
    ran = {t.id for t in record.tests if t.outcome is Outcome.passed}
    assert {"test_runtime.py::test_autocast", "test_runtime.py::test_save_load", "test_runtime.py::test_autograd_mlp",
            "test_runtime.py::test_device_generator_reproducible", "test_tensors.py::test_create[int64]",
            "test_tensors.py::test_matmul[float32]"} <= ran
    assert {t.dtype for t in record.tests if t.id.startswith("test_tensors.py::test_create[")} == {
        "float32", "int64", "bool", None}
    assert (tmp_path / "out" / "junit" / "smoke.xml.gz").is_file()


@pytest.mark.slow
def test_integration_subset_on_cpu_with_xdist(torch_layer, tmp_path):
    done, record = ootci_test(torch_layer.python, CPU_PARTIAL, "integration", tmp_path / "out", "--jobs", "2",
                              env={"OOTCI_OPS": "add,matmul,empty_like,bernoulli,nn.functional.conv2d,to"})
    assert done.returncode == 0, done.stdout + done.stderr
    by_id = {t.id: t for t in record.tests}
    assert by_id["test_opinfo.py::test_compare_cpu[add-float32]"].outcome is Outcome.passed
    assert (by_id["test_opinfo.py::test_compare_cpu[add-int64]"].op,
            by_id["test_opinfo.py::test_compare_cpu[add-int64]"].dtype) == ("add", "int64")
    assert by_id["test_opinfo.py::test_compare_cpu[bernoulli-float32]"].outcome is Outcome.passed
    assert "test_opinfo.py::test_compare_cpu[add-float16]" not in by_id, "float16 is not claimed"
    parity = [t for t in record.tests if t.id.startswith("test_model_parity.py::")]
    assert len(parity) == 6 and all(t.outcome is Outcome.passed for t in parity)


@pytest.mark.slow
def test_smoke_on_openreg_runs_everything(openreg_env, tmp_path):
    done, record = ootci_test(openreg_env.python, "openreg", "smoke", tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    outcomes = {t.id: t.outcome for t in record.tests}
    assert len(outcomes) >= 50
    # OpenReg claims every capability and dtype the smoke suite knows but the layouts (it
    # has dense kernels only), and has two devices.
    skipped = {t.id: t.message for t in record.tests if t.outcome is not Outcome.passed}
    assert skipped == {"test_layouts.py::test_sparse_coo_round_trip_and_matmul": "capability 'sparse' not claimed",
                       "test_layouts.py::test_quantized_per_tensor_round_trip": "capability 'quantized' not claimed"}
    assert "test_device_api.py::test_second_device" in outcomes


@pytest.mark.slow
def test_integration_on_openreg_reports_ops_and_expected_failures(openreg_env, tmp_path):
    ops = ("add,mul,matmul,to,tensor_split,as_strided*,zeros_like,empty_like,bernoulli,to_sparse,sparse.mm*,"
           "group_norm,nn.functional.group_norm")
    done, record = ootci_test(openreg_env.python, "openreg", "integration", tmp_path / "out", "--jobs", "1",
                              env={"OOTCI_OPS": ops})
    assert done.returncode == 0, done.stdout + done.stderr
    assert record.problems == []
    by_id = {t.id: t for t in record.tests}

    def outcome(op, dtype):
        return by_id[f"test_opinfo.py::test_compare_cpu[{op}-{dtype}]"].outcome

    for op in ("add", "matmul", "to", "tensor_split", "as_strided.partial_views", "zeros_like", "empty_like",
               "bernoulli"):
        for dtype in ("float32", "bfloat16", "int64"):
            if f"test_opinfo.py::test_compare_cpu[{op}-{dtype}]" in by_id:
                assert outcome(op, dtype) is Outcome.passed, by_id[f"test_opinfo.py::test_compare_cpu[{op}-{dtype}]"]
    # openreg does not claim `sparse`: the sparse-only OpInfos are skipped, naming it.
    assert outcome("to_sparse", "float32") is Outcome.skipped
    assert by_id["test_opinfo.py::test_compare_cpu[to_sparse-float32]"].message == "capability 'sparse' not claimed"
    assert outcome("nn.functional.group_norm", "bfloat16") is Outcome.xfailed
    assert outcome("nn.functional.group_norm", "float32") is Outcome.passed
    covered = {(t.op, t.dtype) for t in record.tests if t.op}
    assert ("matmul", "float64") in covered and ("add", "bool") in covered
    parity = [t for t in record.tests if t.id.startswith("test_model_parity.py::")]
    assert len(parity) == 6 and all(t.outcome is Outcome.passed for t in parity)


@pytest.mark.slow
def test_a_backend_that_cannot_be_imported_fails_every_test_with_the_import_error(torch_layer, tmp_path):
    """No result is lost to a broken import: the suite collects as usual and each test fails
    with the import error, which is also the stage's root cause, with its hint."""
    broken = tmp_path / "backend.toml"
    broken.write_text(CPU_PARTIAL.read_text().replace('import_name = "torch"', 'import_name = "torch_nosuchbackend"'))
    done, record = ootci_test(torch_layer.python, broken, "smoke", tmp_path / "out")
    assert done.returncode == 1
    smoke = record.stage("smoke")
    assert smoke.status is Status.failed and record.problems == []
    error = ("--ootci-import: cannot import 'torch_nosuchbackend': "
             "ModuleNotFoundError: No module named 'torch_nosuchbackend'")
    ran = [t for t in record.tests if t.outcome is not Outcome.skipped]
    assert len(ran) > 20 and all(t.outcome is Outcome.failed and error in t.message for t in ran), ran[:3]
    assert error in smoke.root_cause.summary and smoke.root_cause.hint.startswith("a module is missing")


@pytest.mark.slow
def test_a_torch_that_cannot_be_imported_is_named_and_its_import_error_is_the_root_cause(make_env, tmp_path):
    """`ootci test` names the torch of --python from its version.py, without importing it: a torch
    whose import fails is still named in the record, which says why the suite could not start
    (before, `ootci test` stopped with "cannot import torch" and wrote no record)."""
    env = make_env(name="broken-torch")
    [site] = env.root.glob("lib/python3*/site-packages")
    (site / "torch").mkdir()  # in front of the layer's torch, as a stray checkout or a bad wheel would be
    (site / "torch" / "__init__.py").write_text("raise ImportError('this torch is broken on purpose')\n")
    (site / "torch" / "version.py").write_text(f"__version__ = '2.99.0+broken'\ngit_version = '{'b' * 40}'\n")
    done, record = ootci_test(env.python, CPU_PARTIAL, "smoke", tmp_path / "out")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert (record.torch.version, record.torch.git_version) == ("2.99.0+broken", "b" * 40)
    smoke = record.stage("smoke")
    assert smoke.status is Status.failed and "ImportError: this torch is broken on purpose" in smoke.root_cause.summary


@pytest.mark.slow
def test_ootci_test_default_out_is_resolved_once_against_the_working_directory(torch_layer, tmp_path):
    """Without --out, `ootci test` writes out/test under the directory it was started in: the
    JUnit file and the record together, and nothing under the suite's own directory."""
    suite_dir = REPO / "runner" / "suites" / "smoke"
    before = sorted(p for p in suite_dir.rglob("*") if "__pycache__" not in p.parts)
    done = ootci("test", "--python", str(torch_layer.python), "--backend", str(CPU_PARTIAL), "--suite", "smoke",
                 timeout=900, cwd=tmp_path, env={"PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "out" / "test"
    record = record_files.read(out / "record.json")
    assert record.stage("smoke").status is Status.passed
    assert (out / "junit" / "smoke.xml.gz").is_file()
    assert len(record.tests) > 20
    assert sorted(p for p in suite_dir.rglob("*") if "__pycache__" not in p.parts) == before


@pytest.mark.slow
def test_layout_tests_run_when_the_capabilities_are_claimed(torch_layer, tmp_path):
    backend = tmp_path / "backend.toml"
    backend.write_text(CPU_PARTIAL.read_text().replace('capabilities = [', 'capabilities = ["sparse", "quantized", '))
    done, record = ootci_test(torch_layer.python, backend, "smoke", tmp_path / "out")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    layouts = {t.id: t.outcome for t in record.tests if t.id.startswith("test_layouts.py::")}
    assert layouts == {"test_layouts.py::test_sparse_coo_round_trip_and_matmul": Outcome.passed,
                       "test_layouts.py::test_quantized_per_tensor_round_trip": Outcome.passed}


@pytest.mark.slow
@pytest.mark.parametrize("claims_sparse", [False, True])
def test_sparse_opinfos_need_the_sparse_capability(torch_layer, tmp_path, claims_sparse):
    """to_sparse and sparse.* exist only for a sparse layout: a backend that does not claim
    `sparse` gets them skipped, naming the capability; one that does gets them compared."""
    backend = CPU_PARTIAL
    if claims_sparse:
        backend = tmp_path / "backend.toml"
        backend.write_text(CPU_PARTIAL.read_text().replace('capabilities = [', 'capabilities = ["sparse", '))
    done, record = ootci_test(torch_layer.python, backend, "integration", tmp_path / "out",
                              env={"OOTCI_OPS": "to_sparse,sparse.*,add"})
    sparse = [t for t in record.tests if "sparse" in t.id]
    # test_compare_cpu[<op>-<dtype>]: a skipped test never ran, so the op comes from its id.
    assert {t.id.split("[", 1)[1].rsplit("-", 1)[0] for t in sparse} == {
        "to_sparse", "sparse.mm.reduce", "sparse.sampled_addmm"}
    if claims_sparse:
        assert not [t for t in sparse if t.outcome is Outcome.skipped]
    else:
        assert all(t.outcome is Outcome.skipped and t.message == "capability 'sparse' not claimed" for t in sparse)
        assert done.returncode == 0, done.stdout + done.stderr
    assert record.tests and any(t.op == "add" and t.outcome is Outcome.passed for t in record.tests)
