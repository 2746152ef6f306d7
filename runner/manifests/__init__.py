"""Backend manifests and the registry that finds them.

Owns the `backend.toml` model and its validation (`manifest`), the registry directories and
their lookup by name (`registry`), and a backend's baseline of known failures
(`known_failures`). May import `core` and `models`.
"""
