"""Probe: the `torch.backends` entry points installed, resolved WITHOUT importing torch.

Nothing here executes backend code: modules are located through the import system's
finders (parent packages are not imported), and the attribute an entry point names
is looked for in the module's source with ast. Usage: entry_points.py
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import sys

from _probe import emit, shadowing

GROUP = "torch.backends"


def find_module(dotted: str):
    """The module spec of `dotted`, found without running any package's __init__."""
    parts = dotted.split(".")
    spec = importlib.util.find_spec(parts[0])
    for i in range(1, len(parts)):
        if spec is None or not spec.submodule_search_locations:
            return None
        name = ".".join(parts[: i + 1])
        locations = list(spec.submodule_search_locations)
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            try:
                spec = find(name, locations)
            except Exception:
                spec = None
            if spec is not None:
                break
    return spec


class _Names(ast.NodeVisitor):
    """Names a module binds at its top level (inside if/try/with blocks too, not in functions)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.dynamic = False

    def visit_FunctionDef(self, node):
        self.names.add(node.name)
        if node.name == "__getattr__":
            self.dynamic = True

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self.names.add(node.name)

    def visit_Lambda(self, node):
        pass

    def _target(self, target):
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                self.names.add(node.id)

    def visit_Assign(self, node):
        for target in node.targets:
            self._target(target)

    def visit_AnnAssign(self, node):
        self._target(node.target)

    def visit_AugAssign(self, node):
        self._target(node.target)

    def visit_NamedExpr(self, node):
        self._target(node.target)

    def visit_For(self, node):
        self._target(node.target)
        self.generic_visit(node)

    def visit_Import(self, node):
        for alias in node.names:
            self.names.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node):
        for alias in node.names:
            if alias.name == "*":
                self.dynamic = True
            else:
                self.names.add(alias.asname or alias.name)

    def visit_Global(self, node):
        self.names.update(node.names)

    def visit_Call(self, node):
        # globals()[...] = ..., setattr(sys.modules[__name__], ...): cannot be read statically
        if isinstance(node.func, ast.Name) and node.func.id in ("globals", "setattr", "exec"):
            self.dynamic = True
        self.generic_visit(node)


def attribute_status(spec, attr: str) -> tuple[str, str]:
    """('defined' | 'missing' | 'unknown', how it was decided)."""
    origin = spec.origin if spec is not None else None
    if not origin or not origin.endswith(".py") or not os.path.isfile(origin):
        return "unknown", f"no Python source to read ({origin or 'namespace package'})"
    try:
        with open(origin, "rb") as f:
            tree = ast.parse(f.read(), filename=origin)
    except (OSError, SyntaxError, ValueError) as exc:
        return "unknown", f"cannot parse {origin}: {exc}"
    names = _Names()
    for node in tree.body:
        names.visit(node)
    head = attr.split(".")[0]
    if head in names.names:
        return "defined", f"bound at the top level of {origin}"
    if names.dynamic:
        return "unknown", f"{origin} binds names dynamically"
    return "missing", f"not bound at the top level of {origin}"


def describe(ep) -> dict:
    module, _, attr = ep.value.partition(":")
    module, attr = module.strip(), attr.strip()
    dist = getattr(ep, "dist", None)
    entry = {
        "name": ep.name,
        "value": ep.value,
        "module": module,
        "attr": attr,
        "distribution": dist.metadata["Name"] if dist is not None else None,
        "version": dist.version if dist is not None else None,
        # What the distribution says of the torch it was built against (runner/wheel_metadata.py reads it).
        "requires": list(dist.requires or []) if dist is not None else [],
        "torch_build": torch_build(dist),
    }
    try:
        spec = find_module(module)
    except Exception as exc:  # a finder may fail on a malformed package
        spec = None
        entry["find_error"] = f"{type(exc).__name__}: {exc}"[:500]
    entry["module_found"] = spec is not None
    if spec is not None and dist is not None:
        entry["shadowed"] = shadowing(module, dist)
    if spec is not None:
        entry["origin"] = spec.origin
        entry["locations"] = list(spec.submodule_search_locations or [])
        entry["attr_status"], entry["attr_how"] = attribute_status(spec, attr) if attr else ("missing", "no attribute")
    return entry


def torch_build(dist):
    """The distribution's torch_build.json ({"version", "git_version"}), or None."""
    if dist is None:
        return None
    try:
        text = dist.read_text("torch_build.json")
        return json.loads(text) if text else None
    except (OSError, ValueError):
        return None


def distributions() -> dict[str, str]:
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(name, dist.version)
    return found


def main() -> None:
    torch_spec = importlib.util.find_spec("torch")
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    seen = set()
    entries = []
    for ep in importlib.metadata.entry_points(group=GROUP):
        # torch loads every entry point it is given, duplicates included; report each once per distribution.
        key = (ep.name, ep.value, getattr(getattr(ep, "dist", None), "_path", None))
        if key in seen:
            continue
        seen.add(key)
        entries.append(describe(ep))
    emit(
        "entry_points",
        python=sys.version.split()[0],
        executable=sys.executable,
        torch_found=torch_spec is not None,
        torch_version=torch_version,
        torch_origin=getattr(torch_spec, "origin", None),
        entry_points=entries,
        distributions=distributions(),
    )


if __name__ == "__main__":
    main()
