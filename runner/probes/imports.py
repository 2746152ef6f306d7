"""Probe: import modules in the given order in this fresh interpreter (circular-import check).

Phases: `import:<module>` for each argument, stopping at the first failure.
Usage: imports.py --deadline S MODULE [MODULE ...]
"""

from __future__ import annotations

import argparse
import importlib

from _probe import arm, attempt, emit, leave


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deadline", type=float, default=0)
    parser.add_argument("modules", nargs="+")
    args = parser.parse_args()
    arm(args.deadline)
    for module in args.modules:
        result = attempt(lambda module=module: importlib.import_module(module).__name__)
        emit(f"import:{module}", **result)
        if not result["ok"]:
            return
    emit("done", ok=True)


if __name__ == "__main__":
    main()
    leave()
