"""`ootci init`: a vendor's repository onboarded in one command.

Owns reading what a Python project declares about itself through its own build backend
(`project_metadata`) and writing the manifest and workflows from it and from probes of the
built backend (`onboard`). May import `stages`, `verification` and everything below them.
"""
