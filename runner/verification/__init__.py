"""The autoload contract, checked: does `import torch` load the backend, and is its device usable?

Owns the checks of `ootci verify` and the autoload stage (`verify`) and the probe of what a
device can do that `ootci init` writes into a manifest (`device_probe`). The probes they start
live in `runner/probes/`, which runs inside the environment under test (stdlib and torch
only). May import `core`, `manifests`, `torch_supply`, `records` and `models`.
"""
