"""ootci: continuous integration for PyTorch's out-of-tree accelerator backends.

The orchestrator side. Nothing in this package imports torch: torch lives only in
the environment under test, which the runner drives through subprocesses.
"""

from importlib import metadata

try:
    __version__ = metadata.version("ootci")
except metadata.PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "0.0.0"
