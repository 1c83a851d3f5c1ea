#!/usr/bin/env bash
# Cross-builds basalt for 64-bit Arm Linux (Debian's aarch64 cross toolchain and multiarch arm64
# libraries, cmake/toolchains/aarch64-linux-gnu.cmake) into build-arm64 and runs the CPU test
# suite (ctest; everything but the `gpu` label) under qemu-aarch64 user-mode emulation, once per
# emulated CPU in BASALT_ARM64_CPUS: "cortex-a72" (Armv8.0, NEON, no SVE) and "max" (SVE/SVE2;
# basalt compiles no SVE targets, so Highway must still dispatch to NEON there). Before each run
# it checks the Highway target `basalt info` reports and fails unless it is NEON. docs/arm64.md.
#
# Installs what it needs from Debian packages (apt-get; sudo when not root; apt is skipped when
# everything is installed) and registers qemu-aarch64 with binfmt_misc when it is not already
# (the CLI tests start the aarch64 basalt program through /bin/sh); exits 77 when it cannot.
#
# Environment:
#   BASALT_ARM64_BUILD  build directory (default build-arm64)
#   BASALT_ARM64_CPUS   QEMU_CPU values, one ctest run each (default "cortex-a72 max")
#   BASALT_ARM64_JOBS   parallel compile and test jobs (default: nproc)
# Arguments go to every ctest run (e.g. -R Golden).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BASALT_ARM64_BUILD:-build-arm64}
cpus=${BASALT_ARM64_CPUS:-cortex-a72 max}
jobs=${BASALT_ARM64_JOBS:-$(nproc)}
triple=aarch64-linux-gnu
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

# --- packages: host tools and header-only libraries, arm64 builds of the linked libraries -------
host_pkgs=(cmake ninja-build pkg-config g++-$triple qemu-user qemu-user-binfmt
           nlohmann-json3-dev libcli11-dev)
arm64_pkgs=(libc6 libstdc++6 libhwy-dev libpcre2-dev libutf8proc-dev libfmt-dev libspdlog-dev
            libgtest-dev libgmock-dev libcpp-httplib-dev)
missing=()
for p in "${host_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
for p in "${arm64_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p:arm64" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p:arm64")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
fi

# --- binfmt_misc: run aarch64 ELF files started by the tests (popen/system) through qemu ---------
binfmt=/proc/sys/fs/binfmt_misc
if [ "$(head -n1 "$binfmt/qemu-aarch64" 2>/dev/null)" != enabled ]; then
  [ -e "$binfmt/register" ] || $SUDO mount -t binfmt_misc binfmt_misc "$binfmt" || true
  if [ -e "$binfmt/qemu-aarch64" ]; then
    echo 1 | $SUDO tee "$binfmt/qemu-aarch64" >/dev/null
  elif [ -e "$binfmt/register" ]; then
    grep -v '^#' /usr/lib/binfmt.d/qemu-aarch64.conf | $SUDO tee "$binfmt/register" >/dev/null
  fi
  if [ "$(head -n1 "$binfmt/qemu-aarch64" 2>/dev/null)" != enabled ]; then
    echo "test-arm64: cannot register qemu-aarch64 with binfmt_misc; the CLI tests need it" >&2
    exit 77  # .ci/run reports this as a skipped step
  fi
fi
# Every aarch64 program runs on the multiarch loader and libc (libc6:arm64): a QEMU_LD_PREFIX
# of /usr/aarch64-linux-gnu would mix the cross toolchain's ld.so with that libc.so.6 (see the
# toolchain file), which hangs.
unset QEMU_LD_PREFIX

# --- build ---------------------------------------------------------------------------------------
t0=$SECONDS
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/toolchains/$triple.cmake" \
  -DBASALT_WITH_CUDA=OFF -DBASALT_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$jobs"
echo "test-arm64: build took $((SECONDS - t0)) s" >&2

# --- tests, once per emulated CPU ----------------------------------------------------------------
# SVE targets are compiled out (src/CMakeLists.txt, basalt_cpu), so every CPU, with or without
# SVE, must dispatch to NEON.
expect=NEON
for cpu in $cpus; do
  export QEMU_CPU=$cpu
  target=$("$build/basalt" info 2>/dev/null | sed -n 's/^cpu kernels: *//p')
  echo "test-arm64: QEMU_CPU=$cpu: basalt dispatches to Highway target '$target'" >&2
  if [ "$target" != "$expect" ]; then
    echo "test-arm64: expected '$expect' on QEMU_CPU=$cpu" >&2
    exit 1
  fi
  t0=$SECONDS
  ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$jobs" -LE gpu "$@"
  echo "test-arm64: QEMU_CPU=$cpu: tests took $((SECONDS - t0)) s" >&2
done
