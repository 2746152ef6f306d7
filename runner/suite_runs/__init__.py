"""Running a test suite in the environment under test, from the orchestrator's side.

Owns starting pytest there with ootci's plugin (`suite_runner`), retries, crash isolation and
time limits, reading JUnit XML into TestResults (`junit`), and judging outcomes against
expected and known failures (`classify`), and the shards of a suite run: `--shard K/N`
and one record from the N shards' records (`shards`), and the jobs planned from recorded times
(`shard_plan`: the upstream files, a long one cut into ranges of its test ids). The suites
themselves, and the plugin, live in `runner/suites/`, which runs inside the environment under
test and imports only torch, pytest and the stdlib. May import `core`, `manifests`, `records` and `models`.
"""
