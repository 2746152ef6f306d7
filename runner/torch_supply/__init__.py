"""Getting the torch under test: from a `--torch SPEC` to an environment that has it.

Owns the spec grammar (`torchspec`), the plan of what pip installs (`torch_acquire`), nightly
indexes (`torch_index`), source builds at a git ref or PR (`torch_source`), the constraint
that keeps torch untouched (`torch_pin`), what a wheel says about itself (`wheel_metadata`),
and the cached torch layers and venvs over them (`envs`). May import `core`, `manifests` and
`models`; no subpackage here is named `torch`, so `import torch` is never shadowed.
"""
