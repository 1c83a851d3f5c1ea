# Cross-compiling basalt for 64-bit Arm Linux with Debian's cross toolchain and multiarch
# libraries (docs/arm64.md; scripts/test-arm64.sh installs both):
#   apt-get install g++-aarch64-linux-gnu qemu-user libhwy-dev:arm64 libfmt-dev:arm64 ...
#   cmake -S . -B build-arm64 -G Ninja \
#     -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake -DBASALT_WITH_CUDA=OFF
# No sysroot: the arm64 libraries live in /usr/lib/aarch64-linux-gnu, their headers in /usr/include
# (shared with the host's identical versions), header-only packages (nlohmann-json, CLI11) come
# from the host's /usr/share.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(BASALT_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${BASALT_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${BASALT_CROSS_TRIPLE}-g++)
set(CMAKE_ASM_COMPILER ${BASALT_CROSS_TRIPLE}-gcc)
# find_library/find_package search <prefix>/lib/aarch64-linux-gnu, never the host's x86_64 one.
set(CMAKE_LIBRARY_ARCHITECTURE ${BASALT_CROSS_TRIPLE})

# pkg-config (hwy, pcre2, utf8proc, cpp-httplib): only the arm64 .pc files and arch-independent ones.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/${BASALT_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# Test programs (gtest discovery at build time, ctest) run under qemu user-mode emulation;
# QEMU_CPU in the environment picks the emulated CPU (docs/arm64.md).
# Where Debian's multiarch libc6:arm64 is installed (it is whenever the :arm64 dev packages are)
# qemu runs its dynamic loader, /lib/ld-linux-aarch64.so.1, with no -L: `-L /usr/aarch64-linux-gnu`
# would pair the cross toolchain's ld.so (libc6-arm64-cross) with the multiarch libc.so.6, which
# ld.so.cache finds first; the two are different builds of glibc (2.36-8cross1 vs 2.36-9+deb12uN),
# and that pairing hangs in pthread_create once thread stacks are reused. Without libc6:arm64,
# -L points qemu at the cross toolchain's loader and libraries.
if(NOT DEFINED CMAKE_CROSSCOMPILING_EMULATOR)
  find_program(BASALT_QEMU_AARCH64 qemu-aarch64)
  if(BASALT_QEMU_AARCH64 AND EXISTS /lib/ld-linux-aarch64.so.1)
    set(CMAKE_CROSSCOMPILING_EMULATOR "${BASALT_QEMU_AARCH64}")
  elseif(BASALT_QEMU_AARCH64)
    set(CMAKE_CROSSCOMPILING_EMULATOR "${BASALT_QEMU_AARCH64};-L;/usr/${BASALT_CROSS_TRIPLE}")
  endif()
endif()
