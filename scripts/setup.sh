#!/usr/bin/env bash
# Sets up a fresh machine for ootci: system tools, then the orchestrator venv (.venv).
#   scripts/setup.sh demo   what `make demo` needs: git, ccache, ninja; ootci in .venv
#   scripts/setup.sh test   what `make test` needs besides: chromium and shellcheck (system-wide),
#                           ootci with its test tools (pytest, playwright, act, ...) in .venv
# Idempotent; safe to run again. torch is never installed here: it lives only in the
# environments under test that `ootci run` creates.
set -euo pipefail
cd "$(dirname "$0")/.."

purpose=${1:-test}
case $purpose in
  demo) extras="" ;;
  test) extras="[test]" ;;
  *) echo "setup: unknown purpose '$purpose': give demo or test" >&2; exit 2 ;;
esac

need=()
command -v git >/dev/null || need+=(git)
command -v ccache >/dev/null || need+=(ccache)
command -v ninja >/dev/null || need+=(ninja-build)
if [[ $purpose == test ]]; then  # only the tests use these: the dashboard in a browser, workflow linting
  command -v chromium >/dev/null || need+=(chromium)
  command -v shellcheck >/dev/null || need+=(shellcheck)
fi
if ((${#need[@]})); then
  if [[ $(id -u) -eq 0 ]]; then SUDO=(); else SUDO=(sudo); fi
  echo "setup: installing ${need[*]} with apt-get (system-wide)"
  "${SUDO[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "setup: ootci needs Python >= 3.11 (tomllib); $PY is $("$PY" -V 2>&1). Set PYTHON=python3.11 or newer." >&2
  exit 1
fi
if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating the orchestrator venv .venv"
  "$PY" -m venv .venv
fi
# One stamp per purpose; a venv set up for the tests has all the demo needs (.ootci-setup: an
# older setup.sh, which always installed the test tools).
fresh() { [[ -f $1 && ! pyproject.toml -nt $1 ]]; }
stamp=.venv/.ootci-setup-$purpose
if ! fresh .venv/.ootci-setup-test && ! fresh .venv/.ootci-setup && ! fresh "$stamp"; then
  if [[ $purpose == test ]]; then
    echo "setup: pip installing ootci and its test tools into .venv (pytest, playwright, act, ...; a few minutes the first time)"
  else
    echo "setup: pip installing ootci and its dependencies into .venv (a minute the first time)"
  fi
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".$extras"
  touch "$stamp"
  echo "setup: .venv is ready"
fi
# Byte-code for ootci's own sources, which the editable install leaves to the first import.
# Where PYTHONDONTWRITEBYTECODE is set (some containers set it, this test machine among them),
# Python never writes it, and every `ootci` call would compile what it imports again: 0.12 of a
# 0.43 s call, measured. compileall writes it whatever that variable says and skips what is up
# to date; Python still checks each file's time, so an edited module is never run stale.
.venv/bin/python -m compileall -q -j 0 runner dashboard >/dev/null
