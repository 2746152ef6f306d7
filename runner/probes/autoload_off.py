"""Probe: `import torch` with TORCH_DEVICE_BACKEND_AUTOLOAD=0, then load one backend by hand.

Phases: `import` (torch alone: no backend module may be loaded), `explicit`
(`import <module>`, the torch_npu pattern, when --import is given), `entry_point`
(load the named entry point and call it, exactly as torch's autoload would; what
it registered on torch is reported, which is how a device's name is learned).
The verifier sets the variable; this probe only reports what happened.
Usage: autoload_off.py --modules m1,m2 [--import MOD] [--entry-point NAME] --deadline S
"""

from __future__ import annotations

import argparse
import importlib
import os

from _probe import arm, attempt, emit, leave, loaded, split_list, torch_state


def load_entry_point(name: str):
    # Imported here, not at the top: the import phase is timed and must cost what a plain import costs.
    import importlib.metadata

    matches = [ep for ep in importlib.metadata.entry_points(group="torch.backends") if ep.name == name]
    if not matches:
        raise LookupError(f"no entry point named '{name}' in group torch.backends")
    hook = matches[0].load()
    hook()
    return matches[0].value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--modules", default="")
    parser.add_argument("--import", dest="module", default="")
    parser.add_argument("--entry-point", default="")
    parser.add_argument("--deadline", type=float, default=0)
    args = parser.parse_args()
    arm(args.deadline)
    modules = split_list(args.modules)

    result = attempt(lambda: __import__("torch").__version__)
    if not result["ok"]:
        emit("import", **result, switch=os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD"))
        return
    before = torch_state()
    emit("import", **result, loaded=loaded(modules), state=before,
         switch=os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD"))
    if args.module:
        emit("explicit", **attempt(lambda: importlib.import_module(args.module).__name__),
             loaded=loaded(modules), state=torch_state())
    if args.entry_point:
        outcome = attempt(lambda: load_entry_point(args.entry_point))
        emit("entry_point", **outcome, loaded=loaded(modules), state=torch_state(), before=before)
    emit("done", ok=True)


if __name__ == "__main__":
    main()
    leave()
