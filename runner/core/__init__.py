"""The ground floor: everything ootci does to the outside world, done one way.

Owns running subprocesses (`procs`: own process group, time limit, bounded output), running
git (`git`: one GitError), HTTP with the one retry policy (`http`), hash-checked downloads
(`downloads`), files that are complete or absent (`atomic`), turning how a subprocess ended
into a RootCause (`rootcause`), a failing test's cause and failures grouped by it (`causes`),
and every error a user sees with its exit code (`errors`).
May import only `ootci.runner.models` (and, for type hints alone, what sits above it).
"""
