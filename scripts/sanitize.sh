#!/usr/bin/env bash
# The std-only C++ libraries (io/, lookahead/, kernels/: the safetensors and config parsers, the lookahead
# algorithm, the linear kernel on every path this CPU has) and their unit tests built with AddressSanitizer
# and UndefinedBehaviorSanitizer, then run; any report fails the run. `scripts/test.sh` runs this.
# Usage: bash scripts/sanitize.sh
set -euo pipefail
cd "$(dirname "$0")/.."
flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1"
cmake -S . -B build/sanitize -G Ninja -DPYLOOKAHEAD_WITH_TORCH=OFF -DPYLOOKAHEAD_BUILD_TESTS=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS=$flags" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" \
  >/dev/null
cmake --build build/sanitize -j 2
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/sanitize --output-on-failure -j 2
