#!/usr/bin/env bash
# Installs everything pylookahead needs on a fresh Debian machine, into ./.venv:
# Debian packages for the C++ build, torch pinned to the CPU wheel, and the package itself.
# Usage: bash scripts/setup.sh [EXTRAS]   (EXTRAS e.g. "convert" or "test,bench")
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-convert}"

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
python -m pip install -q --no-build-isolation ".[${extras}]"
