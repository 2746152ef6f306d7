"""What every probe shares: the result channel and exception capture (stdlib only).

A probe reports each phase as one line `\n<marker> <json>` written straight to a
duplicate of the original stdout descriptor, so a backend that replaces
sys.stdout, floods it, or closes it cannot hide or fake a result (the marker holds
a nonce the verifier chose). Phases are reported as they finish, so a later crash
or hang leaves the earlier results intact.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import traceback
from typing import NoReturn

MARKER = "@@OOTCI-PROBE"

_fd = os.dup(1)
_nonce = os.environ.get("OOTCI_PROBE_NONCE", "0")


def arm(deadline: float | None) -> None:
    """Dump every thread's stack on a fatal signal, and shortly before the verifier's time limit."""
    # sys.__stderr__ is None only in an interpreter started without one; the probes always have it.
    stderr = sys.__stderr__ or sys.stderr
    faulthandler.enable(file=stderr, all_threads=True)
    if deadline and deadline > 0:
        faulthandler.dump_traceback_later(deadline, repeat=False, file=stderr, exit=False)


def emit(phase: str, **data) -> None:
    data["phase"] = phase
    line = f"\n{MARKER}:{_nonce}@@ {json.dumps(data, default=repr)}\n".encode()
    view = memoryview(line)
    while view:
        written = os.write(_fd, view)
        view = view[written:]


def leave(code: int = 0) -> NoReturn:
    """End the probe once it has reported everything, without the interpreter's teardown.

    Finalizing torch costs about a second of CPU (measured here: 3.3 s for `import torch`
    and a normal exit, 2.3 s with os._exit), in every probe of every run. Nothing after the
    last phase can change a verdict, which rests on the phases alone; a backend's crash at
    finalization (autograd workers dying without the GIL) no longer fills the log either.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a backend may have closed or replaced either stream
            pass
    os._exit(code)


def _frames(exc: BaseException) -> list[str]:
    # importlib's frozen frames say nothing; the 12 innermost others reach the backend's
    # line that started importing torch (rootcause.first_torch_import).
    return [f"{f.filename}:{f.lineno} in {f.name}" for f in traceback.extract_tb(exc.__traceback__)
            if not f.filename.startswith("<frozen")][-12:]


def describe(exc: BaseException) -> dict:
    """The chain from the outermost exception to the innermost cause, each with where it was raised."""
    chain: list[dict[str, object]] = []
    seen = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        entry: dict[str, object] = {"type": type(current).__qualname__, "module": type(current).__module__,
                 "message": str(current)[:2000], "frames": _frames(current)}
        if isinstance(current, SystemExit):
            entry["exit_code"] = current.code if isinstance(current.code, int) else (0 if current.code is None else 1)
        chain.append(entry)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return {"ok": False, "chain": chain}


def attempt(action) -> dict:
    """Run action(); its result or the exception chain it raised (SystemExit included)."""
    try:
        value = action()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a backend may raise anything, SystemExit too
        return describe(exc)
    return {"ok": True, "value": value}


def loaded(modules: list[str]) -> dict[str, bool]:
    return {m: m in sys.modules for m in modules}


def split_list(text: str | None) -> list[str]:
    return [p for p in (text or "").split(",") if p]


def device_modules() -> dict[str, str]:
    """Device modules registered on torch by torch._register_device_module: name -> module.__name__.

    torch's own submodules are named `torch.<attr>`; a registered backend module
    carries its own package's name, which is what tells them apart.
    """
    found = {}
    for key, module in list(sys.modules.items()):
        if not key.startswith("torch.") or key.count(".") != 1 or module is None:
            continue
        name = getattr(module, "__name__", key)
        if name != key:
            found[key.split(".", 1)[1]] = str(name)
    return found


def sample_tensor(dtype):
    """A small 3x4 CPU tensor of `dtype` with distinct values, for a round trip to a device."""
    import torch

    if dtype.is_complex:  # arange has no complex kernel: built from two real parts
        parts = torch.arange(12, dtype=torch.float64).reshape(3, 4).div(4)
        return torch.complex(parts, -parts).to(dtype)
    if dtype.is_floating_point:
        return torch.arange(12, dtype=torch.float64).reshape(3, 4).div(4).to(dtype)
    if dtype == torch.bool:
        return torch.arange(12).reshape(3, 4).remainder(3).eq(0)
    # Converted, not made: the CPU has no arange for uint16, uint32 and uint64, only copies.
    return torch.arange(12, dtype=torch.int64).reshape(3, 4).to(dtype)


def comparable(tensor):
    """The tensor in a dtype the CPU compares in: float8, complex32 and the wide unsigned ints have
    no `equal` kernel, only conversions; their small sample values are exact in the wider dtype."""
    import torch

    dtype = tensor.dtype
    wide = torch.complex128 if dtype.is_complex else torch.float64 if dtype.is_floating_point \
        else tensor.dtype if dtype == torch.bool else torch.int64
    return tensor.to(wide)


def torch_dtypes() -> list[str]:
    """Every dtype this torch has that a CPU tensor can hold (so a device's copy can be compared with
    it), by its name (`float32`, not the alias `float`): complex and float8 included; not the
    quantized ones (the `quantized` capability), nor the shell dtypes without kernels (bits8, int3)."""
    import torch

    names = []
    for value in vars(torch).values():
        if not isinstance(value, torch.dtype) or str(value).removeprefix("torch.") in names:
            continue
        name = str(value).removeprefix("torch.")
        if name.startswith("q"):
            continue
        try:
            sample = sample_tensor(value)
            made = torch.ones((2, 3), dtype=value)
            held = torch.equal(comparable(sample.clone()), comparable(sample)) and bool(comparable(made).eq(1).all())
        except (RuntimeError, NotImplementedError, TypeError):
            held = False
        if held:
            names.append(name)
    return names


def torch_state() -> dict:
    import torch

    state = {"privateuse1": torch._C._get_privateuse1_backend_name(), "device_modules": device_modules()}
    try:
        acc = torch.accelerator.current_accelerator()
        state["accelerator"] = None if acc is None else acc.type
    except Exception as exc:  # the accelerator query itself may fail on a broken backend
        state["accelerator_error"] = f"{type(exc).__name__}: {exc}"[:500]
    return state


def installed_location(top: str, dist=None) -> str | None:
    """Where a distribution installed the top-level module `top` (its directory or file), or
    None when nothing installed it there (an editable install, or no distribution at all)."""
    import importlib.metadata

    if dist is None:
        names = importlib.metadata.packages_distributions().get(top, [])
        dists = [importlib.metadata.distribution(n) for n in names]
    else:
        dists = [dist]
    for d in dists:
        for file in d.files or []:
            head = file.parts[0] if file.parts else ""
            if head in (top, f"{top}.py") or (head.startswith(f"{top}.") and head.endswith((".so", ".pyd"))):
                path = os.path.realpath(str(d.locate_file(head)))
                if os.path.exists(path):
                    return path
    return None


def shadowing(module: str, dist=None) -> dict | None:
    """{"module", "imported_from", "installed_at"} when `import module` would find another copy
    than the installed one, typically the same-named package directory of a source checkout
    that lies on sys.path (the working directory, a test root). Nothing is imported."""
    import importlib.util

    top = module.split(".")[0]
    installed = installed_location(top, dist)
    if installed is None:
        return None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    found = locations[0] if locations else spec.origin
    if not found or found in ("built-in", "frozen"):
        return None
    found = os.path.realpath(found)
    if found == installed or found.startswith(installed.rstrip(os.sep) + os.sep):
        return None
    return {"module": top, "imported_from": found, "installed_at": installed}
