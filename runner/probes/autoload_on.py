"""Probe: plain `import torch` with autoload on, then use each device without importing its backend.

Phases (one result line each): `import`; `after:<module>` for each --then-import
(`import <backend>` after `import torch`: one half of the circular-import check);
for each --device `device:<name>`; then `tensor:<name>` unless --tensor-dtypes is empty. The probe never imports a
backend module itself: whatever is in sys.modules afterwards, autoload put there.
Usage: autoload_on.py --modules m1,m2 --then-import m1 --devices d1,d2 --tensor-dtypes float32,int64 --deadline S
"""

from __future__ import annotations

import argparse
import importlib
import time
from functools import partial

from _probe import arm, attempt, comparable, emit, leave, loaded, sample_tensor, split_list, torch_state


def import_torch():
    started = time.perf_counter()
    import torch

    return {"import_s": time.perf_counter() - started, "version": torch.__version__}


def use_device(name: str) -> dict:
    import torch

    report: dict = {}
    report["device"] = str(torch.device(name))
    module = getattr(torch, name, None)
    report["module"] = getattr(module, "__name__", None) if module is not None else None
    if module is None:
        raise AttributeError(f"torch has no attribute '{name}': the backend registered no device module "
                             f"(torch._register_device_module('{name}', ...))")
    report["is_available"] = bool(module.is_available())
    count = getattr(module, "device_count", None)
    report["device_count"] = int(count()) if callable(count) else None
    acc = torch.accelerator.current_accelerator()
    report["current_accelerator"] = None if acc is None else acc.type
    return report


def round_trip(name: str, dtypes: list[str]) -> dict:
    import torch

    results = {}
    for dtype_name in dtypes:
        host = sample_tensor(getattr(torch, dtype_name))
        on_device = host.to(name)
        back = on_device.to("cpu")
        literal = torch.tensor([1, 2, 3], device=name).cpu().tolist()
        results[dtype_name] = {
            "device_type": on_device.device.type,
            "equal": bool(torch.equal(comparable(back), comparable(host))) and back.dtype == host.dtype,
            "literal_ok": literal == [1, 2, 3],
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--modules", default="")
    parser.add_argument("--then-import", default="")
    parser.add_argument("--devices", default="")
    parser.add_argument("--tensor-dtypes", default="")
    parser.add_argument("--deadline", type=float, default=0)
    args = parser.parse_args()
    arm(args.deadline)
    modules = split_list(args.modules)

    result = attempt(import_torch)
    if not result["ok"]:
        emit("import", **result)
        return
    emit("import", **result, loaded=loaded(modules), state=torch_state())
    for module in split_list(args.then_import):
        emit(f"after:{module}", **attempt(lambda module=module: importlib.import_module(module).__name__))
    devices = split_list(args.devices)
    for name in devices:
        emit(f"device:{name}", **attempt(partial(use_device, name)))
    dtypes = split_list(args.tensor_dtypes)
    if dtypes:
        for name in devices:
            emit(f"tensor:{name}", **attempt(partial(round_trip, name, dtypes)), state=torch_state())
    emit("done", ok=True)


if __name__ == "__main__":
    main()
    leave()
