"""ootci: continuous integration for PyTorch's out-of-tree accelerator backends.

The orchestrator side. Nothing in this package imports torch: torch lives only in
the environment under test, which the runner drives through subprocesses.
"""

__version__ = "0.1.0"
