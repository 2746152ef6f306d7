"""`ootci cache-key NAME --torch SPEC [--trigger T]`: the actions/cache keys and paths of a run.

A hosted runner starts with an empty $OOTCI_CACHE, so backend.yml keeps two of its folders
with actions/cache: the torch layers (`torch/`) and the built wheels (`wheels/`). Only ootci
knows what a good key is: the torch a spec resolves to (tonight's nightly, a wheel's hash, a
PR's commit), the layer directory that torch gets, and the hash of the backend's sources.
This resolves all of that the way `ootci run` would, installing and building nothing.

The keys start with the trigger's class: `pr` for runs of PyTorch pull requests, whose code
is untrusted, `main` for everything else (nightly and manual runs, started by the repository
itself). A PR run saves only under `pr`, and may restore from `main` (its `*-fallback`
outputs); a `main` run never reads `pr`, so a pull request can never put a layer or a wheel
in front of the nightly.

Printed as `name=value` lines, ready for $GITHUB_OUTPUT:

    torch-path      $OOTCI_CACHE/torch (absolute: actions/cache keys its entries by path too)
    torch-key       ootci-<class>-<os>-<arch>-py<X.Y>-torch-<layer>: exact, <layer> is the layer's directory name
    torch-fallback  for a pr run, main's torch-key; empty otherwise
    wheels-path     $OOTCI_CACHE/wheels
    wheels-key      <prefix>-wheels-<layer>-<backend>-<source hash>
    wheels-prefix   wheels-key without the source hash: the newest wheels of this torch and backend
    wheels-fallback for a pr run, main's wheels-prefix; empty otherwise
"""

from __future__ import annotations

import argparse
import platform
import re

from ootci.runner.commands import torch_options
from ootci.runner.torch_supply import envs, torch_acquire, torchspec
from ootci.runner.manifests import registry
from ootci.runner.stages import sources
from ootci.runner.torch_supply.envs import cache_root
from ootci.runner.core.errors import UsageError
from ootci.runner.manifests.manifest import Manifest

TRIGGERS = ("manual", "nightly", "pr")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache-key", help="the actions/cache keys of a run's torch layer and wheels",
                       description="Print the actions/cache keys and paths of the torch layer and the built "
                                   "wheels that `ootci run NAME --torch SPEC` would use, as name=value lines. "
                                   "Resolves the torch (nightly: the index; git:/pr: git ls-remote) and the "
                                   "backend's sources without installing or building anything.")
    p.add_argument("name", metavar="NAME", help="registered backend, or path of a backend.toml")
    p.add_argument("--torch", default="nightly", metavar="SPEC",
                   help="torch spec as given to `ootci run` (default nightly; not installed)")
    p.add_argument("--trigger", default="manual", choices=TRIGGERS,
                   help="what starts the run: pr keys never meet the others' (default manual)")
    torch_options.add_torch_source(p)
    p.set_defaults(func=cmd_cache_key)


def trigger_class(trigger: str) -> str:
    return "pr" if trigger == "pr" else "main"


def key_prefix(cls: str) -> str:
    """What a cache entry is only good for besides its torch: the machine and the Python
    (a layer is a venv, its interpreter and compiled modules are this platform's)."""
    return f"ootci-{cls}-{platform.system()}-{platform.machine()}-py{envs.python_tag()}"


def source_hash(m: Manifest) -> str:
    """What the build stage keys the backend's wheels by, short of the torch (runner/stages/build.py)."""
    if m.source.kind == "path":
        source_dir = m.source_dir()
        if source_dir is None or not source_dir.is_dir():
            raise UsageError(f"{m.path}: field 'source.path': {source_dir} is not a directory")
        source_id = sources.tree_hash(source_dir)
    elif m.source.kind == "git":
        source_id = f"{sources.remote_commit(m)}:{m.source.subdir}"
    else:
        source_id = m.source.requirement
    return envs.digest(source_id, m.build.model_dump(mode="json"))


def cache_keys(m: Manifest, spec: torchspec.TorchSpec, trigger: str, *, index_url: str | None = None,
               torch_repo: str | None = None) -> dict[str, str]:
    if spec.kind == "installed":
        raise UsageError("--torch installed: the environment's own torch has no layer, there is nothing to cache")
    plan = torch_acquire.plan(spec, dry_run=True, index_url=index_url, cache=cache_root(), torch_repo=torch_repo)
    layer = envs.layer_key(plan.key)
    backend = re.sub(r"[^A-Za-z0-9._-]+", "_", m.name)
    wheels = source_hash(m)

    def keys(cls: str) -> tuple[str, str]:
        prefix = key_prefix(cls)
        return f"{prefix}-torch-{layer}", f"{prefix}-wheels-{layer}-{backend}-"

    torch_key, wheels_prefix = keys(trigger_class(trigger))
    # A PR run may start from what the nightly left; never the other way round.
    torch_fallback, wheels_fallback = keys("main") if trigger_class(trigger) == "pr" else ("", "")
    return {
        "torch-path": str(cache_root().absolute() / "torch"),
        "torch-key": torch_key,
        "torch-fallback": torch_fallback,
        "wheels-path": str(cache_root().absolute() / "wheels"),
        "wheels-key": wheels_prefix + wheels,
        "wheels-prefix": wheels_prefix,
        "wheels-fallback": wheels_fallback,
    }


def cmd_cache_key(args: argparse.Namespace) -> int:
    manifest = registry.resolve(args.name)
    source = torch_options.from_args(args)
    keys = cache_keys(manifest, torchspec.parse(args.torch), args.trigger, index_url=source.index_url,
                      torch_repo=source.torch_repo)
    for name, value in keys.items():
        print(f"{name}={value}")
    return 0
