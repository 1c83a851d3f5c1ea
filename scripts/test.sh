#!/usr/bin/env bash
# Installs dependencies, builds basalt and runs every test that this machine can run
# (GPU tests are labelled `gpu` and skip themselves without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
