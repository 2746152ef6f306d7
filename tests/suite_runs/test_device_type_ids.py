"""Stable ids of PyTorch's device-type tests (runner/suites/device_type_ids.py, target side), and the
orchestrator's name for a CPU copy kept in step with it."""

from __future__ import annotations


def test_the_runner_names_cpu_copies_as_the_target_side_does():
    import importlib.util

    from ootci.runner.suite_runs import upstream_runs

    path = upstream_runs.SUITES_DIR / "device_type_ids.py"
    loaded = importlib.util.spec_from_file_location("device_type_ids", path)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    assert module.CPU_TWIN == upstream_runs.CPU_TWIN
    ids = module.DeviceTypeIds("openreg", cpu_twins=True)
    assert ids("test_view_ops.py::TestViewOpsCPU::test_flip_cpu_float32") == \
        "test_view_ops.py::TestViewOps::test_flip_openreg_float32" + upstream_runs.CPU_TWIN
    assert ids("test_view_ops.py::TestViewOpsPRIVATEUSE1::test_flip_openreg_float32") == \
        ids("test_view_ops.py::TestViewOpsOPENREG::test_flip_openreg_float32") == \
        "test_view_ops.py::TestViewOps::test_flip_openreg_float32"
    assert ids("test_x.py::TestPlain::test_y") == "test_x.py::TestPlain::test_y"
    assert module.swap_device("test_to_cpu_cpu_float32", "cpu", "openreg") == "test_to_cpu_openreg_float32"
