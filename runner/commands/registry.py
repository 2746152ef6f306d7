"""`ootci list`, `show`, `schema`, `matrix`: read-only views of the registry."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ootci.runner.manifests import manifest as manifest_mod
from ootci.runner.manifests import registry


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("list", help="list registered backends")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="show one backend's manifest")
    p.add_argument("name", help="registered name or path of a backend.toml")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("schema", help="print the JSON Schema of backend manifests")
    p.add_argument("--output", type=Path, help="write to this file instead of stdout")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("matrix", help="JSON for a GitHub Actions strategy.matrix")
    p.add_argument("names", nargs="*", help="backends (default: all registered)")
    p.add_argument("--torch", help="torch spec for every entry (default: each manifest's ci.torch)")
    p.add_argument("--trigger", default="nightly", choices=["manual", "nightly", "pr"],
                   help="what the jobs run for: pr leaves out the volume a manifest mounts for ootci's cache "
                        "(the nightly's), which a PR run must never get (default nightly)")
    p.set_defaults(func=cmd_matrix)


def _selected(names: list[str]) -> list[manifest_mod.Manifest]:
    # dict.fromkeys: a name given twice (openreg plus a selection that has it) runs once.
    return [registry.resolve(n) for n in dict.fromkeys(names)] if names else registry.load_all()


def cmd_list(args: argparse.Namespace) -> int:
    manifests = registry.load_all()
    if not manifests:
        print(f"ootci: no backends registered (searched {registry.describe_dirs()})", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([{"name": m.name, "device": m.device, "distribution": m.distribution,
                           "source": m.source.kind, "description": m.description} for m in manifests], indent=2))
        return 0
    width = max((len(m.name) for m in manifests), default=4)
    for m in manifests:
        print(f"{m.name:<{width}}  {m.device:<8}  {m.distribution:<20}  {m.description}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    m = registry.resolve(args.name)
    data = m.model_dump(mode="json")
    data["manifest"] = str(m.path)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    for key, value in data.items():
        if isinstance(value, (dict, list)):
            value = json.dumps(value)
        print(f"{key:<18} {value}")
    return 0


def schema_text() -> str:
    return json.dumps(manifest_mod.json_schema(), indent=2) + "\n"


def cmd_schema(args: argparse.Namespace) -> int:
    text = schema_text()
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def left_out(m: manifest_mod.Manifest, torch: str | None) -> str | None:
    """Why a backend cannot run against `torch` at all, or None.

    A prebuilt backend pinned to one torch (torch-npu==2.13.0) would need a second
    torch to run: it is left out rather than reported red every night.
    """
    pinned = m.pinned_torch
    if torch is None or pinned is None or _same_release(torch, pinned):
        return None
    return f"pinned to torch {pinned}, torch under test is {torch}"


def _same_release(spec: str, pinned: str) -> bool:
    try:
        return Version(spec).public == Version(pinned).public
    except InvalidVersion:
        return False  # nightly, a wheel, a source build: another torch than a pinned release


CACHE_MOUNT = ":/var/cache/ootci"
"""Where backend.yml's container jobs keep ootci's cache: a manifest's volume mounted there is the one the
nightly reads, and backend.yml refuses a PR run any volume whose text holds this."""


def container_input(m: manifest_mod.Manifest, for_pr: bool) -> str:
    """backend.yml's `container` input for the manifest: for a PR run, without the volume it mounts for
    ootci's cache (backend.yml gives a PR run a volume of its own there)."""
    spec = m.ci.container_spec
    if spec is None:
        return ""
    if for_pr:
        spec = spec.model_copy(update={"volumes": [v for v in spec.volumes if CACHE_MOUNT not in v]})
    return spec.workflow_input()


def matrix_entries(manifests: list[manifest_mod.Manifest], torch: str | None, *, for_pr: bool = False) -> list[dict]:
    return [
        {
            "name": m.name,
            "device": m.device,
            "runs-on": m.ci.runs_on,
            # backend.yml's inputs as they are: the container as an image or as JSON, the rest as given.
            "container": container_input(m, for_pr),
            "torch": torch or m.ci.torch,
            "python": m.ci.python,
            "login-shell": m.ci.login_shell,
            "use-image-python": m.ci.use_image_python,
        }
        for m in manifests
        if left_out(m, torch) is None
    ]


def cmd_matrix(args: argparse.Namespace) -> int:
    manifests = _selected(args.names)
    for m in manifests:
        if why := left_out(m, args.torch):
            print(f"ootci matrix: {m.name} left out: {why}", file=sys.stderr)
    print(json.dumps({"include": matrix_entries(manifests, args.torch, for_pr=args.trigger == "pr")}))
    return 0
