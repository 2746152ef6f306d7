#!/usr/bin/env bash
# Sets up a fresh machine for ootci: system tools, then the orchestrator venv (.venv).
# Idempotent; safe to run again. torch is never installed here: it lives only in the
# environments under test that `ootci run` creates.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v git >/dev/null || need+=(git)
command -v chromium >/dev/null || need+=(chromium)
command -v shellcheck >/dev/null || need+=(shellcheck)
command -v ccache >/dev/null || need+=(ccache)
command -v ninja >/dev/null || need+=(ninja-build)
if ((${#need[@]})); then
  if [[ $(id -u) -eq 0 ]]; then SUDO=(); else SUDO=(sudo); fi
  echo "setup: installing ${need[*]}"
  "${SUDO[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "setup: ootci needs Python >= 3.11 (tomllib); $PY is $("$PY" -V 2>&1). Set PYTHON=python3.11 or newer." >&2
  exit 1
fi
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.ootci-setup
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
  touch "$stamp"
fi
