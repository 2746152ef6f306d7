"""The run history on the data branch, and how records reach it.

Owns what is kept of a run and for how long (`history_store`) and reading the artifacts of a
workflow's runs from GitHub's REST API (`github_artifacts`). May import `core`, `records`,
`manifests` and `models`.
"""
