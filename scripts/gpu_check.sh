#!/usr/bin/env bash
# The prepared check for a CUDA machine with no network (docs/design.md, "CUDA"): builds the engine and
# the _core module against the CUDA torch installed there, runs the `cuda` tests and the GPU benchmark,
# and writes logs and JSON under $OUT (default build/gpu-out). Sized to finish within 8 minutes on a
# 16-core machine with one H200. Needs nvcc, cmake, ninja, pybind11, a CUDA torch >= 2.11, transformers,
# pytest; nlohmann-json comes from a Debian .deb in .gpu/ when the machine lacks it
# (`mkdir -p .gpu && (cd .gpu && apt-get download nlohmann-json3-dev)` on a machine with the registry).
# Usage: bash scripts/gpu_check.sh [build|test|bench]...   (default: all three)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(build test bench)
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }

build() {
  stamp "machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  local prefix="" cuda_root nvrtc jobs
  prefix="$("$PY" -m pybind11 --cmakedir)"
  if [ ! -f /usr/include/nlohmann/json.hpp ]; then
    local deb
    deb=$(ls .gpu/nlohmann-json3-dev_*.deb 2>/dev/null | head -1)
    [ -n "$deb" ] || { echo "nlohmann-json missing and no .gpu/nlohmann-json3-dev_*.deb to unpack"; return 1; }
    dpkg -x "$deb" /tmp/nlohmann && prefix="$prefix;/tmp/nlohmann/usr"
  fi
  cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  # libtorch's CMake config looks for libnvrtc in the toolkit; the pip wheels carry it otherwise.
  nvrtc=$(ls "$cuda_root"/lib64/libnvrtc.so* 2>/dev/null | head -1)
  [ -n "$nvrtc" ] || nvrtc=$("$PY" - <<'PYEOF'
import glob, os, nvidia
hits = [p for d in nvidia.__path__ for p in glob.glob(os.path.join(d, "**", "libnvrtc.so*"), recursive=True)]
print(sorted(hits)[0] if hits else "")
PYEOF
)
  jobs=$(nproc)
  stamp "configure (CUDA toolkit $cuda_root, nvrtc ${nvrtc:-from the toolkit})"
  TORCH_CUDA_ARCH_LIST="9.0" cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPYLOOKAHEAD_BUILD_PYTHON=ON -DPYLOOKAHEAD_INSTALL=OFF -DPython_EXECUTABLE="$(command -v "$PY")" \
    -DCMAKE_PREFIX_PATH="$prefix" -DCUDA_TOOLKIT_ROOT_DIR="$cuda_root" \
    -DCMAKE_CUDA_COMPILER="$cuda_root/bin/nvcc" -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_STANDARD=17 \
    ${nvrtc:+-DCUDA_nvrtc_LIBRARY="$nvrtc" -DCUDA_NVRTC_LIB="$nvrtc"} ${PYLA_CMAKE_ARGS:-} || return 1
  stamp "build ($jobs jobs)"
  cmake --build build/gpu -j "$jobs" --target _core || return 1
  cp build/gpu/bindings/_core*.so pylookahead/
  stamp "built"
}

run_tests() {
  stamp "pytest -m cuda"
  PYTHONPATH="$PWD:$PWD/tests/python" timeout 270 "$PY" -m pytest tests/python/test_cuda.py -q -p no:cacheprovider \
    -o addopts="" --junitxml="$OUT/cuda_tests.xml" --maxfail=8 --durations=8 -rfE
}

bench() {
  stamp "benchmark"
  PYTHONPATH="$PWD" timeout 270 "$PY" benchmarks/gpu_steps.py --out "$OUT/gpu_steps.json"
}

rc=0
for s in "${steps[@]}"; do
  case "$s" in
    build) build || { rc=1; break; } ;;
    test) run_tests || rc=1 ;;
    bench) bench || rc=1 ;;
    *) echo "unknown step $s"; rc=2 ;;
  esac
done
stamp "done rc=$rc"
exit $rc
