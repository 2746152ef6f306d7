"""`ootci cache-key NAME --torch SPEC [--trigger T]`: the actions/cache key and path of a run's torch layer.

A hosted runner starts with an empty $OOTCI_CACHE, so backend.yml keeps the run's torch layer with
actions/cache. Only ootci knows what a good key is: the torch a spec resolves to (tonight's nightly,
a wheel's hash, a PR's commit) and the layer directory that torch gets. This resolves it the way
`ootci run` would, installing nothing.

The path is that one layer directory, never all of `$OOTCI_CACHE/torch`: on a runner that keeps its
cache (self-hosted) the directory holds every layer the host ever built, and an entry of all of them
grows every night. Built wheels are not kept with actions/cache: they are keyed by the torch's own
version, known only once the layer is installed, and a new torch is a new layer anyway.

Who saves and who restores is backend.yml's trust boundary (docs/workflows.md, "The trust
boundary"): a trusted run (the nightly, a run by hand) only saves, a PR run only restores. The
keys start with the trigger's class, `pr` or `main`; a PR run's restore falls back to main's key.

With --make it also makes that layer (torch and nothing else installed), for backend.yml's `layer` job:
the job that saves a layer runs no vendor or PR code, so nothing a backend's build or tests did can be
in what it saves (docs/workflows.md, "The trust boundary").

Printed as `name=value` lines, ready for $GITHUB_OUTPUT:

    torch-path      $OOTCI_CACHE/torch/<layer> (absolute: actions/cache keys its entries by path too)
    torch-key       ootci-<class>-<os>-<arch>-py<X.Y>-torch-<layer>: exact, <layer> is the layer's directory name
    torch-fallback  for a pr run, main's torch-key; empty otherwise
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

from ootci.runner.commands import torch_options
from ootci.runner.core.errors import UsageError
from ootci.runner.manifests import registry
from ootci.runner.torch_supply import envs, torch_acquire, torchspec
from ootci.runner.torch_supply.envs import cache_root

TRIGGERS = ("manual", "nightly", "pr")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache-key", help="the actions/cache key and path of a run's torch layer",
                       description="Print the actions/cache key and path of the torch layer that `ootci run "
                                   "NAME --torch SPEC` would use, as name=value lines. Resolves the torch "
                                   "(nightly: the index; git:/pr: git ls-remote) without installing anything.")
    p.add_argument("name", metavar="NAME", help="registered backend, or path of a backend.toml")
    p.add_argument("--torch", default="nightly", metavar="SPEC",
                   help="torch spec as given to `ootci run` (default nightly; not installed)")
    p.add_argument("--trigger", default="manual", choices=TRIGGERS,
                   help="what starts the run: pr keys never meet the others' (default manual)")
    p.add_argument("--make", action="store_true",
                   help="also make the layer (torch alone, the way `ootci run` would), ready to be saved")
    torch_options.add_torch_source(p)
    p.set_defaults(func=cmd_cache_key)


def trigger_class(trigger: str) -> str:
    return "pr" if trigger == "pr" else "main"


def key_prefix(cls: str) -> str:
    """What a cache entry is only good for besides its torch: the machine and the Python
    (a layer is a venv, its interpreter and compiled modules are this platform's)."""
    return f"ootci-{cls}-{platform.system()}-{platform.machine()}-py{envs.python_tag()}"


def cache_keys(spec: torchspec.TorchSpec, trigger: str, *, index_url: str | None = None,
               torch_repo: str | None = None) -> dict[str, str]:
    """The key and path of the torch layer a run of `spec` uses (the same for every backend)."""
    if spec.kind == "installed":
        raise UsageError("--torch installed: the environment's own torch has no layer, there is nothing to cache")
    plan = torch_acquire.plan(spec, dry_run=True, index_url=index_url, cache=cache_root(), torch_repo=torch_repo)
    layer = envs.layer_key(plan.key)
    cls = trigger_class(trigger)
    return {
        "torch-path": str(envs.layer_env(plan.key).root.absolute()),
        "torch-key": f"{key_prefix(cls)}-torch-{layer}",
        # A PR run may start from what the nightly left; never the other way round.
        "torch-fallback": f"{key_prefix('main')}-torch-{layer}" if cls == "pr" else "",
    }


def cmd_cache_key(args: argparse.Namespace) -> int:
    registry.resolve(args.name)  # a backend that does not resolve has no run, and no key
    source = torch_options.from_args(args)
    keys = cache_keys(torchspec.parse(args.torch), args.trigger, index_url=source.index_url,
                      torch_repo=source.torch_repo)
    for name, value in keys.items():
        print(f"{name}={value}")
    if args.make:
        plan = torch_acquire.plan(torchspec.parse(args.torch), index_url=source.index_url, cache=cache_root(),
                                  torch_repo=source.torch_repo)
        layer, reused = envs.torch_layer(plan.install_args, plan.key, cache=cache_root())
        if layer.root.absolute() != Path(keys["torch-path"]):
            # The key names one directory; saving another under it would restore the wrong torch.
            raise UsageError(f"--make: {args.torch} resolved to layer {layer.root.name} after the key named "
                             f"{Path(keys['torch-path']).name} (a new torch was published in between): run it again")
        print(f"torch layer {layer.root}: {'already made' if reused else 'made'}", file=sys.stderr)
    return 0
