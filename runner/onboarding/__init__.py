"""`ootci init`: a vendor's repository onboarded in one command.

Owns reading what a Python project declares about itself through its own build backend
(`project_metadata`), proposing the upstream suite's files from those of PyTorch's test files
that collect for the device (`upstream_proposal`), writing the manifest and workflows from all
that and from probes of the built backend (`onboard`), and the one run of the suites whose
failures become the backend's baseline (`first_run`). May import `stages`, `verification` and
everything below them.
"""
