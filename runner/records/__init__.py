"""Run records on disk: where they are, how they are read and written.

Owns `record.json` and `tests.json` beside it, the finder of the run records under a
directory (`record_files`), the history's compact form of a run's tests (`packed_tests`), and what
names a run: its id and the CI run it belongs to (`run_identity`). May import `core` and `models`.
"""
