#!/usr/bin/env bash
# Sets up and runs the whole test suite: C++ unit tests (GoogleTest via CTest) and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
. .venv/bin/activate

echo "== formatting (clang-format, ruff format) =="
bash scripts/format.sh --check

echo "== C++ unit tests (ctest) =="
cmake -S . -B build/cpp-tests -G Ninja -DPYLOOKAHEAD_WITH_TORCH=OFF -DPYLOOKAHEAD_BUILD_TESTS=ON >/dev/null
cmake --build build/cpp-tests -j 2
ctest --test-dir build/cpp-tests --output-on-failure -j 2

echo "== C++ unit tests under ASan + UBSan (ctest) =="
bash scripts/sanitize.sh

echo "== Python tests (pytest) =="
pytest tests/python "$@"

# The exactness-critical tests again with the engine, oneDNN and ATen capped at AVX2, and the
# tiny-model grid with the engine capped at its generic path: whichever CPU runs this, the lower
# ISA paths are proved too (on a CPU without AVX-512 the AVX2 run repeats the first one). Under the
# AVX2 cap the SmolLM2 lookahead grid keeps, per dtype and prompt, its widest window (8,4,8) and
# its widest draft tree (R16): the whole grid ran above, and these two hold every kind of row the
# others have (the tiny grid, kernels, quantized and GGUF tests run whole).
# (A CPU without AVX-512 took the AVX2 paths in the run above already: the repeat is skipped there.)
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  echo "== exactness under PYLOOKAHEAD_CPU_ISA=avx2 (pytest) =="
  PYLOOKAHEAD_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 \
    pytest tests/python/test_lookahead_exact.py tests/python/test_linear_kernel.py tests/python/test_quantize.py \
    tests/python/test_gguf.py -k "not test_smollm2_lookahead_equals_greedy or W8-N4-G8 or R16" "$@"
else
  echo "== exactness under PYLOOKAHEAD_CPU_ISA=avx2: skipped (no AVX-512 here: the run above took those paths) =="
fi
echo "== exactness under PYLOOKAHEAD_CPU_ISA=generic (pytest) =="
PYLOOKAHEAD_CPU_ISA=generic ONEDNN_MAX_CPU_ISA=SSE41 ATEN_CPU_CAPABILITY=default \
  pytest tests/python/test_lookahead_exact.py tests/python/test_linear_kernel.py tests/python/test_quantize.py \
  tests/python/test_gguf.py -k "tiny or property or kernel or blocks" "$@"

# The shipped artifact: build and repair the wheel, install it into a fresh venv with only torch,
# and run the smoke test (Python, console script, C++ example) from there.
echo "== wheel: build, repair, install into a fresh venv, smoke test =="
bash scripts/wheel.sh
