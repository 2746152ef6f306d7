"""pytest plugin for PyTorch's own device-generic test files (the `upstream` suite).

Runs in the environment under test beside ootci_plugin (torch, pytest and the standard library
only), loaded with `-p ootci_upstream`. The runner selects the device the way PyTorch's own
runner does, by environment (`PYTORCH_TESTING_DEVICE_ONLY_FOR`), runs each file from a folder
with no `torch/` in it, and gives ootci_plugin `--ootci-device-type-ids` for stable ids. This
plugin adds what only PyTorch's files need:

- the same start as PyTorch's test/conftest.py: `common_utils.parse_cmd_line_args()`, which
  sets the JIT executor and the seed the files expect (the rest of that conftest is PyTorch's
  CI: its sharding, rerun reports and disabled-test reruns);
- a refusal to run when `import torch` would find a source tree instead of the installed torch;
- per test, from the instantiation's own arguments: the `dtype` and `op` properties (the op
  coverage), and a skip for a dtype the backend does not claim, with that reason, so that the
  tests of unclaimed dtypes are counted as lost coverage and never as the backend's failures.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    try:
        from _probe import shadowing  # runner/probes, on PYTHONPATH when ootci runs the suite
    except ImportError:
        shadowing = None
    found = shadowing("torch") if shadowing else None
    if found:
        raise pytest.UsageError(f"import torch finds {found['imported_from']} (a source tree) instead of the "
                                f"installed {found['installed_at']}: run the upstream files from a folder "
                                "without torch/")
    try:
        from torch.testing._internal import common_utils
    except Exception:  # noqa: BLE001 - every file will fail to import with the real reason
        return
    parse = getattr(common_utils, "parse_cmd_line_args", None)
    if parse is not None:
        try:
            parse()
        except SystemExit:  # argparse refused pytest's own argv: the defaults stand
            pass


def _instantiation_kwargs(item: pytest.Item) -> dict:
    """The keyword arguments instantiate_device_type_tests bound to this test (device, dtype, op),
    kept as the default of the instantiated function's `param_kwargs` parameter."""
    cls = getattr(item, "cls", None)
    function = cls.__dict__.get(getattr(item, "name", "")) if cls is not None else None
    defaults = getattr(function, "__defaults__", None) or ()
    return next((d for d in defaults if isinstance(d, dict)), {})


def _dtype_names(kwargs: dict) -> list[str]:
    value = kwargs.get("dtypes", kwargs.get("dtype"))
    values = value if isinstance(value, (list, tuple)) else [value] if value is not None else []
    return [str(v).removeprefix("torch.") for v in values]


def _op_name(kwargs: dict) -> str | None:
    op = kwargs.get("op")
    if op is None:
        return None
    name = getattr(op, "name", None)
    if not isinstance(name, str):
        return None
    variant = getattr(op, "variant_test_name", "")
    return name + (f".{variant}" if variant else "")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    claimed = {d.strip() for d in (config.getoption("ootci_dtypes", "") or "").split(",") if d.strip()}
    for item in items:
        kwargs = _instantiation_kwargs(item)
        dtypes = _dtype_names(kwargs)
        if dtypes:
            item.user_properties.append(("dtype", ",".join(dtypes)))
        op = _op_name(kwargs)
        if op:
            item.user_properties.append(("op", op))
        unclaimed = [d for d in dtypes if d not in claimed]
        if claimed and unclaimed:
            item.add_marker(pytest.mark.skip(reason=f"dtype '{unclaimed[0]}' not claimed"))
