#!/usr/bin/env bash
# Installs dependencies, builds basalt and runs every test that this machine can run
# (GPU tests are labelled `gpu` and skip themselves without a GPU), then the end-to-end tests
# of `basalt serve` with the official OpenAI and Anthropic SDKs (tests/e2e, pytest) in a venv
# at build/venv-e2e (pip needs network the first time and when tools/requirements-e2e.txt
# changes), then the GGUF and safetensors parser fuzzers (libFuzzer, ASan/UBSan, clang 14) for
# a bounded time in build-fuzz (docs/formats.md, "Fuzzing"). Arguments go to the first ctest.
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

# Fuzzers: an instrumented build of their own, only the fuzz targets and what they link.
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DBASALT_FUZZ=ON \
  -DBASALT_WITH_CUDA=OFF -DBASALT_BUILD_TESTS=OFF -DBASALT_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target fuzz_gguf fuzz_safetensors
ctest --test-dir build-fuzz --output-on-failure --no-tests=error -j 2 -L fuzz
