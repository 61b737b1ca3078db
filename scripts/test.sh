#!/usr/bin/env bash
# Sets up and runs the whole test suite: C++ unit tests (GoogleTest via CTest) and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
. .venv/bin/activate

echo "== C++ unit tests (ctest) =="
cmake -S . -B build/cpp-tests -G Ninja -DPYLOOKAHEAD_WITH_TORCH=OFF -DPYLOOKAHEAD_BUILD_TESTS=ON >/dev/null
cmake --build build/cpp-tests -j 2
ctest --test-dir build/cpp-tests --output-on-failure -j 2

echo "== Python tests (pytest) =="
pytest tests/python "$@"
