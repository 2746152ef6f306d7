"""Every OpInfo of torch's op_db, run on the device and on CPU, compared.

One test per (op, dtype) for the dtypes the backend claims and CPU supports for the
op: the OpInfo's sample inputs are made on the device (as PyTorch's device-generic
tests make them, so that arguments a sample deliberately keeps on CPU stay there),
each gets a CPU twin with the same storage layout, and the op's results on the two
are compared. The test records `op` and `dtype` as JUnit properties, so a run can
show which operators a backend covers.

Ops whose result is not determined by their inputs (random ops, uninitialized
memory: empty*, rand*, bernoulli, dropout..., and the ops op_db itself excludes from
CPU comparison) run on the device too, but only the metadata of their results is
compared: shape, dtype and device.
"""

import fnmatch
import random
import re
import unittest
import zlib

import ootci_plugin
import pytest
import torch
from torch.utils._pytree import tree_flatten

# (atol, rtol) by dtype; integer and bool results must match exactly.
TOLERANCE = {
    torch.float32: (1e-3, 1e-3),
    torch.float64: (1e-5, 1e-5),
    torch.complex64: (1e-3, 1e-3),
    torch.complex128: (1e-5, 1e-5),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 1.6e-2),
}
# Random or uninitialized results that op_db does not already exclude from comparison.
NONDETERMINISTIC = re.compile(r"^(rand|randn|randint|randperm|.*_like\b.*rand.*|bernoulli|multinomial|normal|"
                              r"empty.*|new_empty.*|.*dropout.*|uniform|cauchy|exponential|geometric|log_normal)$")


# OpInfos that exist only for a tensor layout, and the capability that layout needs.
LAYOUT_OPS = {"sparse": re.compile(r"^(to_sparse.*|sparse\..*)$")}


def layout_capability(name: str) -> str | None:
    return next((cap for cap, pattern in LAYOUT_OPS.items() if pattern.match(name)), None)


def op_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def _cpu_comparison_skip(op):
    """op_db's own reason not to compare this op with CPU (meant for all devices), if any."""
    for info in op.decorators:
        if getattr(info, "test_name", None) != "test_compare_cpu" or getattr(info, "device_type", None):
            continue
        if info.dtypes is not None:
            continue
        for decorator in info.decorators:
            try:
                decorator(lambda: None)()
            except unittest.SkipTest as skip:
                return str(skip)
            except Exception:
                continue
    return None


def metadata_only_reason(op):
    reason = _cpu_comparison_skip(op)
    if reason:
        return f"op_db: {reason}"
    if NONDETERMINISTIC.match(op.name):
        return "random or uninitialized output"
    return None


def pytest_generate_tests(metafunc):
    if "opinfo" not in metafunc.fixturenames:
        return
    from torch.testing._internal.common_methods_invocations import op_db

    config = metafunc.config
    dtype_names = ootci_plugin.claimed_dtype_names(config)
    patterns = [p.strip() for p in config.getoption("ootci_ops").split(",") if p.strip()]
    params = []
    for op in op_db:
        name = op_name(op)
        if patterns and not any(fnmatch.fnmatchcase(name, p) for p in patterns):
            continue
        supported = op.supported_dtypes("cpu")
        chosen = [d for d in dtype_names if getattr(torch, d) in supported]
        # A layout op is skipped, naming the capability, by the plugin's capability marker.
        layout = layout_capability(name)
        marks = [pytest.mark.capability(layout)] if layout else []
        if not chosen:
            params.append(pytest.param(op, None, id=f"{name}-none", marks=marks))
        params.extend(pytest.param(op, d, id=f"{name}-{d}", marks=marks) for d in chosen)
    metafunc.parametrize("opinfo,dtype_name", params)


def _same_layout_on_cpu(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy with the same storage, offset and strides, not just the same values:
    ops on partial or overlapping views (as_strided, expand) then see the same memory."""
    t = t.detach()
    if t.layout is not torch.strided or t.is_conj() or t.is_neg():
        return t.clone() if t.device.type == "cpu" else t.cpu()
    storage = t.untyped_storage()
    whole = torch.empty(0, dtype=t.dtype, device=t.device).set_(
        storage, 0, (storage.nbytes() // t.element_size(),), (1,))
    whole = whole.clone() if t.device.type == "cpu" else whole.cpu()
    return whole.as_strided(t.size(), t.stride(), t.storage_offset())


def _is_device(value, device) -> bool:
    try:
        return isinstance(value, (str, torch.device)) and torch.device(value).type == device
    except (RuntimeError, TypeError, ValueError):
        return False


def _reference(value, device):
    """The CPU twin of a sample made on the device: its tensors copied, and any device
    argument (factory functions' device=, Tensor.to's target) turned into "cpu". Tensors
    the sample deliberately made on CPU (e.g. tensor_split's indices) stay as they are."""
    if isinstance(value, torch.Tensor):
        return _same_layout_on_cpu(value)
    if isinstance(value, list):
        return [_reference(v, device) for v in value]
    if isinstance(value, tuple):
        return tuple(_reference(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _reference(v, device) for k, v in value.items()}
    if _is_device(value, device):
        return "cpu" if isinstance(value, str) else torch.device("cpu")
    return value


def _names_cpu(sample) -> bool:
    """The sample asks for a CPU result itself (zeros_like(x, device="cpu"))."""
    leaves = tree_flatten((sample.args, sample.kwargs))[0]
    return any(_is_device(leaf, "cpu") for leaf in leaves if not isinstance(leaf, torch.Tensor))


def _devices_of(result):
    return {leaf.device.type for leaf in tree_flatten(result)[0] if isinstance(leaf, torch.Tensor)}


def _to_cpu(result):
    leaves, spec = tree_flatten(result)
    return spec.unflatten([leaf.cpu() if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves])


def _metadata(result):
    return [(tuple(leaf.shape), leaf.dtype) if isinstance(leaf, torch.Tensor) else type(leaf).__name__
            for leaf in tree_flatten(result)[0]]


def _describe(sample) -> str:
    def shape(v):
        return f"Tensor{list(v.shape)}" if isinstance(v, torch.Tensor) else repr(v)[:40]

    parts = [shape(sample.input)] + [shape(a) for a in sample.args]
    parts += [f"{k}={shape(v)}" for k, v in sample.kwargs.items()]
    return f"({', '.join(parts)})"


def _compare(actual, expected, dtype):
    atol, rtol = TOLERANCE.get(dtype, (0, 0))
    try:
        torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, equal_nan=True,
                                   check_device=False, check_layout=False)
    except TypeError:
        # Results assert_close cannot pair (e.g. torch.Size against a tuple): plain equality.
        assert actual == expected, f"{actual!r} != {expected!r}"


def seed_cpu_and(device: str, seed: int) -> None:
    """What torch.manual_seed does for the generators a comparison draws from: the CPU's and the
    device's (its module's manual_seed_all, which torch.manual_seed calls for a PrivateUse1
    backend, CUDA and XPU alike).

    torch.manual_seed also queues a seeding of CUDA, XPU and MTIA wherever they are not
    initialised, and formats the whole call stack for each: on a machine without them that was
    a sixth of this suite's time (about 4 of 25 s of CPU on OpenReg)."""
    torch.default_generator.manual_seed(seed)
    if device == "cpu":
        return
    try:
        module = torch.get_device_module(device)
    except (RuntimeError, AttributeError, ValueError):
        module = None
    seed_all = getattr(module, "manual_seed_all", None) or getattr(module, "manual_seed", None)
    if seed_all is None:
        torch.manual_seed(seed)  # no module of its own to ask: whatever torch itself does
    else:
        seed_all(seed)


def test_compare_cpu(opinfo, dtype_name, device, record_property, request):
    name = op_name(opinfo)
    record_property("op", name)
    if dtype_name is None:
        record_property("dtype", "none")
        pytest.skip("CPU supports none of the claimed dtypes for this op")
    record_property("dtype", dtype_name)
    dtype = getattr(torch, dtype_name)
    metadata_reason = metadata_only_reason(opinfo)
    if metadata_reason:
        record_property("compare", "metadata")
    limit = request.config.getoption("ootci_max_samples") or None
    compared = 0
    # The same inputs on every run: a seed from the test's own name. (OpInfo.sample_inputs
    # would seed too, but it inspects the call stack per call, which costs more than the
    # comparisons under pytest.)
    seed = zlib.crc32(f"{name}-{dtype_name}".encode())
    seed_cpu_and(device, seed)
    random.seed(seed)
    try:
        samples = iter(opinfo.sample_inputs_func(opinfo, device, dtype, False))
    except Exception as exc:
        raise AssertionError(f"making sample inputs on {device} failed: {type(exc).__name__}: {exc}") from exc
    index = 0
    while limit is None or index < limit:
        try:
            sample = next(samples)
        except StopIteration:
            break
        except Exception as exc:
            raise AssertionError(f"making sample input {index} on {device} failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
        where = f"sample {index} {_describe(sample)}"
        index += 1
        # The CPU twin first: in-place ops change their inputs.
        cpu_input, cpu_args, cpu_kwargs = (_reference(sample.input, device), _reference(sample.args, device),
                                           _reference(sample.kwargs, device))
        try:
            expected = opinfo(cpu_input, *cpu_args, **cpu_kwargs)
        except Exception:
            continue  # not a valid input on CPU either: nothing to compare with
        try:
            actual = opinfo(sample.input, *sample.args, **sample.kwargs)
        except Exception as exc:
            raise AssertionError(f"{where}: raised on {device} but not on CPU: {type(exc).__name__}: {exc}") from exc
        actual = sample.output_process_fn_grad(actual)
        expected = sample.output_process_fn_grad(expected)
        if device != "cpu" and not _names_cpu(sample) and _devices_of(expected) == {"cpu"}:
            strays = _devices_of(actual) - {device}
            assert not strays, f"{where}: result on {', '.join(sorted(strays))}, not on {device}"
        if metadata_reason:
            assert _metadata(actual) == _metadata(expected), f"{where}: results differ in shape or dtype"
        else:
            try:
                _compare(_to_cpu(actual), expected, dtype)
            except AssertionError as exc:
                raise AssertionError(f"{where}: {device} and CPU differ: {exc}") from None
        compared += 1
    if compared == 0:
        pytest.skip("no sample input that CPU accepts")
