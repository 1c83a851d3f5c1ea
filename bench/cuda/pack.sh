#!/usr/bin/env bash
# Packs a CUDA build for one device call (the device has no Debian -dev packages and no network):
# build-pack/bc.tar.xz holding build-cuda/{basalt, tests/gpu/test_cuda_kernels,
# tests/gpu/test_cuda_model, bench/cuda/bench_cuda_kernels, rtlib (the Debian shared libraries
# basalt links), tok (Llama 3's tokenizer files from ../shared/fixtures, for serve)}, stripped.
# OLD=DIR adds DIR/basalt (and DIR/bench_cuda_kernels if present) as build-cuda/old/ for the A/B
# scripts (ab_session.sh). PEER=FILE adds a peer engine's benchmark binary (llama.cpp's
# llama-bench built with CUDA for sm_90a, outside this repository) as build-cuda/peer/ for
# peer_session.sh; with it the archive nears the 64 MiB a call may carry (llama-bench alone is
# ~42 MB compressed, 41 MB at xz -9e): NO_TESTS=1 leaves the GPU test binaries out, and the
# tracked tree (~30 MB, mostly models/ and tests/golden/) must leave the checkout for that call
# (`rm -rf models tests/golden`, then `git checkout -- models tests/golden`). build-pack is
# git-ignored; carry it and start the call with `tar -xJf build-pack/bc.tar.xz`. BUILD (default
# build) is the build folder.
set -eu
BUILD=${BUILD:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
tmp=$(mktemp -d)
P=$tmp/build-cuda
mkdir -p "$P/tests/gpu" "$P/bench/cuda" "$P/rtlib" "$P/tok"
cp "$BUILD/basalt" "$P/"
[ "${NO_TESTS:-0}" = 1 ] ||
  cp "$BUILD/tests/gpu/test_cuda_kernels" "$BUILD/tests/gpu/test_cuda_model" "$P/tests/gpu/"
cp "$BUILD/bench/cuda/bench_cuda_kernels" "$P/bench/cuda/"
# The source path the build was configured in (test_cuda_model reads tests/golden under it).
echo "$root" > "$P/source_dir"
ldd "$BUILD/basalt" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
  grep -E 'pcre2|utf8proc|hwy|httplib|spdlog|fmt|brotli' | while read -r name path; do
  cp -L "$path" "$P/rtlib/$name"
done
tokdir=${TOKENIZER_DIR:-$root/../shared/fixtures/llama3-tokenizer}
[ -d "$tokdir" ] && cp "$tokdir"/tokenizer* "$P/tok/" 2>/dev/null || true
if [ -n "${OLD:-}" ]; then
  mkdir -p "$P/old"
  cp "$OLD/basalt" "$P/old/"
  [ -f "$OLD/bench_cuda_kernels" ] && cp "$OLD/bench_cuda_kernels" "$P/old/"
fi
if [ -n "${PEER:-}" ]; then
  mkdir -p "$P/peer"
  cp "$PEER" "$P/peer/"
fi
find "$P" -type f -perm -u+x ! -name '*.so*' -exec strip {} \;
mkdir -p build-pack
tar -C "$tmp" -cf - build-cuda | xz -T2 -3 > build-pack/bc.tar.xz.part
# (renamed into place: a device call starting meanwhile carries the old archive or the new, whole)
mv build-pack/bc.tar.xz.part build-pack/bc.tar.xz
rm -rf "$tmp"
ls -la build-pack/bc.tar.xz
