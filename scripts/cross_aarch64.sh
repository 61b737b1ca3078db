#!/usr/bin/env bash
# Proves that the engine builds for aarch64 (the portable paths: no x86 intrinsics reach it):
#  1. cross-compiles the std-only libraries (io/, lookahead/, kernels/) and their C++ unit tests
#     with Debian's g++-aarch64-linux-gnu, and runs the tests under qemu-aarch64 (user mode);
#  2. cross-compiles the libtorch-side kernel translation units (attention, linear kernels,
#     transformer) against the installed torch's headers (compile only: no aarch64 libtorch here).
# Usage: bash scripts/cross_aarch64.sh   (after scripts/setup.sh; installs the cross tools if missing)
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || need_apt+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null 2>&1 || need_apt+=(qemu-user)
dpkg -s googletest >/dev/null 2>&1 || need_apt+=(googletest)
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq "${need_apt[@]}"
fi

echo "== std-only libraries and unit tests for aarch64 (run under qemu-aarch64) =="
cmake -S . -B build/cross-aarch64 -G Ninja -DPYLOOKAHEAD_WITH_TORCH=OFF -DPYLOOKAHEAD_BUILD_TESTS=ON \
  -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
  -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc \
  -DPYLOOKAHEAD_GTEST_SOURCE_DIR=/usr/src/googletest \
  "-DCMAKE_CROSSCOMPILING_EMULATOR=qemu-aarch64;-L;/usr/aarch64-linux-gnu" >/dev/null
cmake --build build/cross-aarch64 -j 2
file build/cross-aarch64/tests/cpp/pylookahead_tests | grep -q "ARM aarch64"
ctest --test-dir build/cross-aarch64 --output-on-failure -j 2

echo "== libtorch-side kernel translation units for aarch64 (compile only) =="
torch_includes=$(.venv/bin/python -c \
  "import torch.utils.cpp_extension as c; print(' '.join('-isystem ' + p for p in c.include_paths()))")
out=build/cross-aarch64/engine-objects
mkdir -p "$out"
for src in cpp/src/model/attention.cpp cpp/src/model/bf16_linear.cpp cpp/src/model/fma_linear_op.cpp \
           cpp/src/model/lm_head_screen.cpp cpp/src/model/transformer.cpp; do
  # shellcheck disable=SC2086
  aarch64-linux-gnu-g++ -std=c++17 -O2 -ffp-contract=off -Wall -Wextra -Wno-psabi -Wno-unused-parameter \
    -Icpp/src -Icpp/include $torch_includes -c "$src" -o "$out/$(basename "$src").o"
  echo "compiled $src"
done
echo "aarch64: std-only libraries and tests built and passed under qemu; engine kernels compiled"
