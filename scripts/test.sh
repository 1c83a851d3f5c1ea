#!/usr/bin/env bash
# Installs dependencies, builds basalt and runs every test that this machine can run
# (GPU tests are labelled `gpu` and skip themselves without a GPU), then the end-to-end tests
# of `basalt serve` with the official OpenAI and Anthropic SDKs (tests/e2e, pytest) in a venv
# at build/venv-e2e (pip needs network the first time and when tools/requirements-e2e.txt
# changes). Arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"

venv=build/venv-e2e
req=tools/requirements-e2e.txt
stamp="$venv/.requirements.sha256"
if [ ! -x "$venv/bin/python" ] || ! sha256sum --status -c "$stamp" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
  sha256sum "$req" >"$stamp"
fi
BASALT_BIN=build/basalt "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/e2e
