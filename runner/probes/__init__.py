"""Probes: scripts the verifier runs with the interpreter of the environment under test.

They are files, not modules of the runner: each is started as
`python -X utf8 runner/probes/<probe>.py ...`, needs only torch and the standard
library, and must never import the `runner` package (whose imports pull pydantic).
This file exists only so that the scripts ship inside the wheel; keep it empty.
"""
