"""The run history on the data branch, and how records reach it.

Owns what is kept of a run and for how long (`history_store`), pulling and pushing the data
branch (`data_branch`: the only code that sees a token), merging records into it
(`merging`), a `missing` record for a job that left none (`missing_runs`), what a backend's
latest nights took test by test, which plans its shards (`recorded_times`), and taking the
records of a workflow's runs from their artifacts through GitHub's REST API (`collect`,
`github_artifacts`). May import `core`, `records`, `manifests` and `models`.
"""
