#!/usr/bin/env bash
# Installs everything pylookahead needs on a fresh Debian machine, into ./.venv:
# Debian packages for the C++ build, torch pinned to the CPU wheel, and the package itself.
# Usage: bash scripts/setup.sh [EXTRAS]   (EXTRAS e.g. "convert" or "test,bench")
# EXTRAS may also name "llama": llama-cpp-python, for the llama.cpp rows of benchmarks/quantized.py
# (PyPI ships it as source: it builds llama.cpp, ~10 min on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-convert}"
with_llama=0
if [[ ",${extras}," == *",llama,"* ]]; then
  with_llama=1
  extras=$(echo ",${extras}," | sed 's/,llama,/,/g; s/^,//; s/,$//')
fi

need_apt=()
dpkg -s nlohmann-json3-dev >/dev/null 2>&1 || need_apt+=(nlohmann-json3-dev)
dpkg -s libgtest-dev >/dev/null 2>&1 || need_apt+=(libgtest-dev)
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
command -v ninja >/dev/null 2>&1 || need_apt+=(ninja-build)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq "${need_apt[@]}"
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
# Pin torch first so that nothing ever pulls a multi-GB CUDA build.
python -m pip install -q "torch==2.13.0"
# The build tools go into .venv and the package builds against .venv's torch (no build isolation):
# this install, scripts/wheel.sh and developers' rebuilds then share one incremental build dir.
python -m pip install -q "scikit-build-core>=0.10" "pybind11>=2.12"
python -m pip install -q --no-build-isolation ".${extras:+[${extras}]}"
if [ "${with_llama}" -eq 1 ]; then
  # Built for AVX2 + FMA + F16C, not for this CPU's own ISA: the same llama.cpp on every x86-64
  # machine (the benchmarks compare it with the engine's AVX2 path), and its AMX code, which the
  # native build turns on where the CPU has AMX, crashed on such a CPU here.
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF" \
    python -m pip install -q --no-cache-dir "llama-cpp-python==0.3.36"
fi
