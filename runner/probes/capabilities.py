"""Probe: what a freshly installed backend can do, asked of torch after a plain `import torch` (`ootci init`).

Phases (one result line each): `import`; `device` (the device name: the PrivateUse1
backend's, or a device module registered by --package when the backend uses a built-in
device type; --device overrides); `fork` (a child forked before this process touches the
device can use it: the suites' crash isolation by fork); `tensor` (a float32 tensor to the
device and back);
then `capability:<name>` and `dtype:<name>` for each one asked, every one preceded by
`start:<item>` so that a crash or a hang names the check it happened in. Each capability
check is a tiny real operation on the device, like the smoke suite's test of the same
capability; each dtype is a round trip and a tensor made on the device. A dtype the device
can hold is claimed even where some of its ops fail: `ootci init` then runs the suites in it and
records those failures as known ones, so that they stay in sight instead of out of the suites.
Results: {"ok": true, "value": {"works": bool, "detail": str}}, or an exception chain.
Usage: capabilities.py --package P [--device D] --capabilities a,b --dtypes x,y|all --deadline S
"""

from __future__ import annotations

import argparse
import io
import os

from _probe import arm, attempt, comparable, emit, leave, sample_tensor, split_list, torch_dtypes, torch_state

ALL = "all"
"""--dtypes all: every dtype this torch has that the CPU holds (_probe.torch_dtypes), listed in a
`dtypes` phase before they are tried"""


class Unsupported(Exception):
    """A clear "not supported" that is not an error of the backend (one device, no autocast)."""


def find_device(package: str, given: str) -> dict:
    state = torch_state()
    name = given or state["privateuse1"]
    how = "--device" if given else "torch._C._get_privateuse1_backend_name()"
    if name == "privateuseone":
        # Not renamed: a backend of a built-in device type (hpu, xpu) registers a device module instead.
        own = sorted(d for d, module in state["device_modules"].items() if module.split(".")[0] == package)
        name, how = (own[0], f"torch.{own[0]} is {package}'s module") if own else (None, "")
    return {"device": name, "how": how, **state}


def tensor(dev: str) -> str:
    import torch

    host = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    on_device = host.to(dev)
    if on_device.device.type != dev:
        raise AssertionError(f"a tensor sent to {dev!r} landed on {on_device.device}")
    if not torch.equal(on_device.cpu(), host):
        raise AssertionError("a tensor copied to the device and back changed")
    return str(on_device.device)


FORK_TIMEOUT_S = 60.0


def fork_safe(dev: str) -> str:
    """A child forked after `import torch` (the backend loaded, the device untouched) uses the
    device: the suites can then contain a crash with a fork instead of a new interpreter."""
    import signal
    import time

    if not hasattr(os, "fork"):
        raise Unsupported("no os.fork on this platform")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            import torch

            code = 0 if torch.arange(6.0).to(dev).mul(2).cpu().tolist() == [0.0, 2, 4, 6, 8, 10] else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + FORK_TIMEOUT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise Unsupported(f"a child forked after `import torch` hung on the device for {FORK_TIMEOUT_S:g} s")
        time.sleep(0.05)
    if os.WIFSIGNALED(status):
        raise Unsupported(f"a child forked after `import torch` was killed by "
                          f"{signal.Signals(os.WTERMSIG(status)).name} when it used the device")
    if os.WEXITSTATUS(status):
        raise Unsupported(f"a child forked after `import torch` could not use the device "
                          f"(exit code {os.WEXITSTATUS(status)})")
    return "a child forked after `import torch` uses the device"


def synchronize(dev: str) -> str:
    import torch

    module = torch.get_device_module(dev)
    if not callable(getattr(module, "synchronize", None)):
        raise Unsupported(f"torch.{dev} has no synchronize()")
    y = torch.arange(4, device=dev) + 1
    module.synchronize()
    assert y.cpu().tolist() == [1, 2, 3, 4], "work before synchronize() computed wrong values"
    return f"torch.{dev}.synchronize()"


def multi_device(dev: str) -> str:
    import torch

    count = int(torch.get_device_module(dev).device_count())
    if count < 2:
        raise Unsupported(f"{count} device visible")
    second = torch.arange(6.0, device=f"{dev}:0").to(f"{dev}:1")
    assert second.device.index == 1, f"a copy to {dev}:1 landed on {second.device}"
    assert second.cpu().tolist() == [0.0, 1, 2, 3, 4, 5], "a copy between devices changed the values"
    return f"{count} devices"


def generator(dev: str) -> str:
    import torch

    g = torch.Generator(device=dev)
    g.manual_seed(1234)
    first = torch.randn(32, generator=g, device=dev).cpu()
    g.manual_seed(1234)
    assert torch.equal(torch.randn(32, generator=g, device=dev).cpu(), first), "same seed, different numbers"
    torch.manual_seed(7)
    a = torch.rand(16, device=dev).cpu()
    torch.manual_seed(7)
    assert torch.equal(torch.rand(16, device=dev).cpu(), a), "torch.manual_seed does not seed the device"
    return "seeded generators repeat"


def streams(dev: str) -> str:
    import torch

    stream = torch.Stream(device=dev)
    x = torch.ones(64, 64)
    with stream:
        y = (x.to(dev) * 2).sum()
    stream.synchronize()
    assert stream.query(), "query() is False after synchronize()"
    assert y.item() == 8192.0, f"work on the stream computed {y.item()}, not 8192"
    return "torch.Stream"


def events(dev: str) -> str:
    import torch

    start, end = torch.Event(device=dev, enable_timing=True), torch.Event(device=dev, enable_timing=True)
    start.record()
    torch.ones(128, 128, device=dev).sum()
    end.record()
    end.synchronize()
    assert end.query(), "query() is False after synchronize()"
    assert start.elapsed_time(end) >= 0.0, "elapsed_time() is negative"
    return "torch.Event with timing"


def autocast(dev: str) -> str:
    import torch

    if not torch.amp.is_autocast_available(dev):
        raise Unsupported("torch.amp.is_autocast_available() is False")
    low = torch.get_autocast_dtype(dev)
    a = torch.randn(8, 8, device=dev)
    with torch.autocast(device_type=dev, dtype=low):
        product = a @ a
    assert product.dtype is low, f"matmul under autocast gave {product.dtype}, expected {low}"
    return f"matmul in {str(low).replace('torch.', '')}"


def pinned_memory(dev: str) -> str:
    import torch

    host = torch.arange(64, dtype=torch.float32).pin_memory()
    assert host.is_pinned() and torch.empty(8, pin_memory=True).is_pinned(), "pin_memory() did not pin"
    on_device = host.to(dev, non_blocking=True)
    torch.accelerator.synchronize()
    assert torch.equal(on_device.cpu(), host), "a non-blocking copy changed the values"
    return "pinned host memory, non-blocking copies"


def serialization(dev: str) -> str:
    import torch

    x = torch.randn(3, 5, device=dev)
    buffer = io.BytesIO()
    torch.save({"x": x}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)["x"]
    assert loaded.device.type == dev, f"a saved {dev} tensor loaded onto {loaded.device}"
    assert torch.equal(loaded.cpu(), x.cpu()), "save and load changed the values"
    return "torch.save / torch.load"


def autograd(dev: str) -> str:
    import torch

    leaf = torch.randn(4, device=dev, requires_grad=True)
    (leaf * leaf).sum().backward()
    assert leaf.grad is not None and leaf.grad.device.type == dev, "no gradient on the device"
    torch.testing.assert_close(leaf.grad.cpu(), 2 * leaf.detach().cpu())
    return "backward()"


def sparse(dev: str) -> str:
    import torch

    dense = torch.eye(3)
    on_device = dense.to(dev).to_sparse()
    assert on_device.layout == torch.sparse_coo, f"to_sparse() gave layout {on_device.layout}"
    assert on_device.device.type == dev, f"to_sparse() moved the tensor to {on_device.device}"
    assert torch.equal(on_device.to_dense().cpu(), dense), "to_dense() changed the values"
    other = torch.arange(6.0).reshape(3, 2)
    assert torch.equal(torch.sparse.mm(on_device, other.to(dev)).cpu(), other), "sparse.mm computed wrong values"
    return "to_sparse, to_dense, sparse.mm"


def quantized(dev: str) -> str:
    import torch

    host = torch.linspace(-2, 2, 17)
    on_device = torch.quantize_per_tensor(host.to(dev), scale=0.05, zero_point=10, dtype=torch.quint8)
    assert on_device.is_quantized, "quantize_per_tensor() gave a tensor that is not quantized"
    assert on_device.device.type == dev, f"quantize_per_tensor() moved the tensor to {on_device.device}"
    expected = torch.quantize_per_tensor(host, scale=0.05, zero_point=10, dtype=torch.quint8)
    assert torch.equal(on_device.int_repr().cpu(), expected.int_repr()), "int_repr() differs from the CPU's"
    return "quantize_per_tensor, int_repr"


CHECKS = {f.__name__: f for f in (synchronize, multi_device, generator, streams, events, autocast, pinned_memory,
                                  serialization, autograd, sparse, quantized)}


def dtype_works(dev: str, name: str) -> str:
    """The device holds the dtype: a tensor of it copied there and back, and one made there.

    Nothing more: which of its ops fail is for the suites to find (and `ootci init` to record as
    known failures), not a reason to leave the dtype out of every suite."""
    import torch

    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise Unsupported(f"torch has no dtype {name!r}")
    host = sample_tensor(dtype)
    back = host.to(dev).cpu()
    assert back.dtype == dtype and torch.equal(comparable(back), comparable(host)), "the copy back differs"
    made = torch.ones((2, 3), dtype=dtype, device=dev)
    assert made.device.type == dev, f"torch.ones(device={dev!r}) made a tensor on {made.device}"
    assert made.dtype == dtype and torch.equal(comparable(made.cpu()), comparable(torch.ones((2, 3), dtype=dtype))), \
        "torch.ones made on the device differs from the CPU's"
    return "round trip, torch.ones on the device"


def check(item: str, action) -> None:
    emit(f"start:{item}")

    def answer():
        try:
            return {"works": True, "detail": action()}
        except Unsupported as exc:
            return {"works": False, "detail": str(exc)}

    emit(item, **attempt(answer))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--package", required=True, help="the backend's top-level package")
    parser.add_argument("--device", default="")
    parser.add_argument("--capabilities", default="")
    parser.add_argument("--dtypes", default="")
    parser.add_argument("--deadline", type=float, default=0)
    args = parser.parse_args()
    arm(args.deadline)

    def import_torch():
        import torch

        return torch.__version__

    result = attempt(import_torch)
    emit("import", **result)
    if not result["ok"]:
        return
    found = attempt(lambda: find_device(args.package, args.device))
    emit("device", **found)
    dev = found.get("value", {}).get("device")
    if not dev:
        return
    # Before this process touches the device: can a fork of it use the device? (crash isolation by fork)
    check("fork", lambda: fork_safe(dev))
    basic = attempt(lambda: tensor(dev))
    emit("tensor", **basic)
    if not basic["ok"]:
        return
    dtypes = split_list(args.dtypes)
    if dtypes == [ALL]:
        dtypes = torch_dtypes()
        emit("dtypes", ok=True, value=dtypes)
    for name in split_list(args.capabilities):
        if name in CHECKS:
            check(f"capability:{name}", lambda name=name: CHECKS[name](dev))
        else:
            emit(f"capability:{name}", ok=True, value={"works": False, "detail": "this probe has no check for it"})
    for name in dtypes:
        check(f"dtype:{name}", lambda name=name: dtype_works(dev, name))
    emit("done", ok=True)


if __name__ == "__main__":
    main()
    leave()
